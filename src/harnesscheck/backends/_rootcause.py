"""Root-cause precedence: where several failure signals appear in one session, the root
cause wins over its consequences (issue #20 item 6; each transport's SPEC has the table).

A session that fails often shows more than one signal: a 401 and then a bridge that never
listed its tools, a 429 retry ladder and then the host's deadline, a crash's stderr and
then no terminal event. The outcome names the cause a host can act on, never the symptom
that followed it. Signals are ranked in tiers, the root first:

| tier | classes | why it is the root |
|---|---|---|
| 1 access | policy_violation, auth, quota | nothing after it can succeed: no request is served |
| 2 upstream | rate_limit, overloaded, server_error, network, model_unavailable, context_overflow, invalid_request | the model API refused or failed this request |
| 3 bridge | mcp_unavailable | the host's tools were not there (a failed login or API can keep a CLI from starting them) |
| 4 limits | max_turns, budget | the session's own caps |
| 5 consequence | timeout, cli_crash, protocol, unknown | how a session ends when something above went wrong, or nothing known did |

Within a tier the first signal seen wins (the earlier one caused the later ones). A
transport calls these functions only on failure signals; a terminal event that says the
session succeeded is not a signal.
"""

from __future__ import annotations

from typing import Iterable

from harnesscheck.backends._errortext import classify_text
from harnesscheck.core.contracts import ErrorClass

C = ErrorClass

TIERS: tuple[frozenset[ErrorClass], ...] = (
    frozenset({C.policy_violation, C.auth, C.quota}),
    frozenset({C.rate_limit, C.overloaded, C.server_error, C.network, C.model_unavailable, C.context_overflow, C.invalid_request}),
    frozenset({C.mcp_unavailable}),
    frozenset({C.max_turns, C.budget}),
    frozenset({C.timeout, C.cli_crash, C.protocol, C.unknown}),
)


def tier(cls: ErrorClass | None) -> int:
    """The tier of a class, 0 the root (unlisted classes rank with the consequences)."""
    for i, members in enumerate(TIERS):
        if cls in members:
            return i
    return len(TIERS) - 1


def root_cause(signals: Iterable[tuple[ErrorClass | None, str] | None]) -> tuple[ErrorClass, str] | None:
    """The root among `(class, text)` signals given in the order the session showed them:
    the lowest tier wins, the first seen among equals; None when no signal has a class."""
    best: tuple[ErrorClass, str] | None = None
    for signal in signals:
        if signal is None or signal[0] is None:
            continue
        if best is None or tier(signal[0]) < tier(best[0]):
            best = (signal[0], signal[1])
    return best


def text_signals(text: str | None) -> list[tuple[ErrorClass | None, str]]:
    """One signal per non-blank line of a message or stderr tail, in order, each line
    classified on its own (`_errortext.classify_text`)."""
    return [(classify_text(line), line.strip()) for line in (text or "").splitlines() if line.strip()]


def tail_cause(text: str | None) -> tuple[ErrorClass, str] | None:
    """The root cause a stderr tail (or any multi-line failure text) names, and the line
    that names it: a "401 Unauthorized" line wins over a later "MCP client for bridge
    failed" line; None when no line names a class."""
    return root_cause(text_signals(text))
