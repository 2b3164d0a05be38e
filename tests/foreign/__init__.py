"""Bindings that let the conformance suite judge backends harnesscheck did not write."""
