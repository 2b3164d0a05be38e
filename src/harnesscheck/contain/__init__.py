"""contain: what keeps a backend's child processes inside the session (doc/ARCHITECTURE.md).

The child environment and redaction (envpolicy.py), the run dir (rundir.py), the process
lifecycle (process.py, _procguard.py) and the bubblewrap sandbox (sandbox.py). Imports only
core/; the choke point (choke/) is above it, since its trace and its tool results are
redacted with envpolicy. Layer order: tests/test_layers.py.
"""
