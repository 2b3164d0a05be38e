"""The tool bridge: the host's scoped tools served to a harness CLI as a stdio MCP server.

`python -m harnesscheck.bridge --spec FILE` (see doc/SPEC-bridge.md). This package imports
nothing heavy: the names below resolve lazily, and `mcp` is imported only by the server,
after it has taken stdout for the protocol and scrubbed its own environment.
"""

from __future__ import annotations

__all__ = [
    "SERVER_NAME",
    "BridgeSpec",
    "BridgeSummary",
    "bridge_argv",
    "bridge_env",
    "load_spec",
    "summarize_trace",
    "write_spec",
]


def __getattr__(name: str):
    if name not in __all__:
        raise AttributeError(f"module 'harnesscheck.bridge' has no attribute {name!r}")
    from harnesscheck.bridge import spec

    value = getattr(spec, name)
    globals()[name] = value
    return value
