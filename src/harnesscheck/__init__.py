"""harnesscheck: a conformance kit for coding-agent backends, and its reference implementation.

Heavy SDKs (anthropic, openai, mcp) are never imported here: the public names below are
resolved lazily so that `import harnesscheck` and the command line stay fast.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "AgentOutcome",
    "AgentSessionRequest",
    "ToolScope",
    "resolve_provider",
    "run_session",
    "warm_up",
]

_LAZY = {
    "AgentOutcome": "harnesscheck.core.contracts",
    "AgentSessionRequest": "harnesscheck.core.contracts",
    "ToolScope": "harnesscheck.core.scope",
    "resolve_provider": "harnesscheck.backends.registry",
    "run_session": "harnesscheck.backends.registry",
    "warm_up": "harnesscheck.backends._harness",
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'harnesscheck' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
