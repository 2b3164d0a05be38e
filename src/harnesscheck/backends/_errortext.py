"""Error classes read from CLI message text, for CLIs that give no structured error code.

Codex `exec --json` keeps only message strings (cli-formats §2.E.8); cursor reports failures
as `result.result` text or stderr (§3.C). `classify_text` is the one place those strings are
mapped to an ErrorClass, with a fixed precedence: the first rule in `RULES` that matches
wins, and rules are ordered from the most specific (a required MCP server failed, auth) to
the most generic (network). A transport calls it only on failure text (a failed turn, a
top-level error, an `is_error` result, the stderr tail of a crash), never on warnings.
"""

from __future__ import annotations

import re

from harnesscheck.core.contracts import ErrorClass

# (class, pattern) in precedence order. Patterns are case-insensitive.
RULES: tuple[tuple[ErrorClass, re.Pattern[str]], ...] = tuple(
    (cls, re.compile(pat, re.IGNORECASE))
    for cls, pat in (
        (
            ErrorClass.mcp_unavailable,
            r"required MCP servers? failed to initiali[sz]e|MCP startup failed|"
            r"MCP client for [`'\"]?bridge[`'\"]? failed|MCP server [`'\"]?bridge[`'\"]? (?:failed|not connected)",
        ),
        (
            ErrorClass.auth,
            r"\b401\b|\bunauthori[sz]ed\b|missing bearer|incorrect api key|invalid[_ ]api[_ ]key|"
            r"not logged in|not authenticated|authentication (?:required|failed)|authentication_failed|"
            r"please (?:run )?/?login|log ?in again|token (?:has )?expired|refresh token|"
            r"failed to open browser for login",
        ),
        (
            ErrorClass.quota,
            r"(?<!not your )usage limit|insufficient_quota|quota exceeded|exceeded your current quota|"
            r"no credits remaining|credit balance is too low|purchase more credits|usage_not_included",
        ),
        (
            ErrorClass.context_overflow,
            r"context_length_exceeded|context window|maximum context length|prompt is too long|"
            r"input (?:is )?too long|too many tokens|\b413\b",
        ),
        (
            ErrorClass.model_unavailable,
            r"model_not_found|does not exist or you do not have access|cannot use this model|"
            r"unsupported model|model (?:is )?not (?:found|supported|available)|invalid model|unknown model",
        ),
        (ErrorClass.budget, r"rollout token budget exhausted|budget exhausted|max[_ ]budget"),
        (ErrorClass.rate_limit, r"\b429\b|too many requests|rate[ _-]?limit"),
        (ErrorClass.overloaded, r"\b529\b|\b503\b|overloaded|at capacity|service unavailable"),
        (
            ErrorClass.server_error,
            r"\b50[0248]\b|internal server error|bad gateway|gateway time-?out|server_error",
        ),
        (
            ErrorClass.network,
            r"waiting for network|error sending request|connection (?:refused|reset|closed)|"
            r"stream disconnected|dns error|failed to lookup address|network is unreachable|"
            r"ssl_error|tls handshake|curl: \(\d+\)|econnrefused|unable to connect|cannot connect to api",
        ),
    )
)


def classify_text(text: str | None) -> ErrorClass | None:
    """The error class a failure message names, or None when no rule matches."""
    if not text:
        return None
    for cls, pattern in RULES:
        if pattern.search(text):
            return cls
    return None
