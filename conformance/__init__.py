"""The harnesscheck conformance suite: one module per area. Run it with `pytest -m conformance --hc-backend ID`."""
