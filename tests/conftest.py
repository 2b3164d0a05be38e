"""Test-wide guards: no test can reach a real vendor with the developer's credentials.

Provider variables are removed from the test process before anything runs (tests that
need them set their own canary values with monkeypatch), and HARNESS_* selection from
the developer's shell never leaks into a test.
"""

from __future__ import annotations

import os

_PROVIDER_PREFIXES = (
    "ANTHROPIC_",
    "OPENAI_",
    "CODEX_",
    "CURSOR_",
    "GEMINI_",
    "GOOGLE_",
    "CLAUDE_CODE_",
    "CLAUDE_AGENT_",
    "HARNESS_",
)
for _name in list(os.environ):
    if _name.startswith(_PROVIDER_PREFIXES) or _name in ("CLAUDECODE", "CLAUDE_CONFIG_DIR"):
        del os.environ[_name]
