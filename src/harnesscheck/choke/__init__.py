"""choke: the one path every tool call takes (doc/ARCHITECTURE.md, "Choke point").

dispatch.py runs a tool call: it resolves every path through core/scope.py's `resolve_path`,
asks the session's PolicyEngine (core/policy.py), does the I/O on the resolved fd and
records the call in the trace (trace.py). Imports core/ and contain/ only.
Layer order: tests/test_layers.py.
"""
