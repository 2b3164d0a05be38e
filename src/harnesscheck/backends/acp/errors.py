"""An ACP agent's errors and stop reasons as our outcome classes (doc/SPEC-acp.md, "Errors").

Requirements kept here:
- The profile's error table decides first (agent-specific `data` keys: claude-agent-acp's
  `errorKind`, codex-acp's `codex_error_info`, opencode's `errorName`); then the generic rules:
  `-32000` with an auth message -> auth; an HTTP status used as the JSON-RPC code (gemini:
  401/403 -> auth, 429 -> rate_limit, 400 naming the context -> context_overflow, 529/503 ->
  overloaded, other 5xx -> server_error); then the shared message rules (_errortext).
- A stopReason maps as the contract says: end_turn -> ok; max_turn_requests and max_tokens ->
  truncated/max_turns; refusal -> error/policy_violation; cancelled -> cancelled.
"""

from __future__ import annotations

import re

from harnesscheck.backends._errortext import classify_text
from harnesscheck.backends.acp.profile import ErrorRule
from harnesscheck.core.contracts import BLOCKING, ErrorClass, OutcomeStatus

#: JSON-RPC's code for "Authentication required" in ACP.
AUTH_REQUIRED = -32000

#: Auth words the shared text rules miss in agents' messages (opencode: "invalid x-api-key").
_AUTH_TEXT = re.compile(r"invalid x-api-key|\bUNAUTHENTICATED\b", re.IGNORECASE)

_CONTEXT = re.compile(r"context|too long|token count|too large|exceeds", re.IGNORECASE)

#: stopReason -> (status, class); an unknown stopReason is a protocol error.
STOP_REASONS: dict[str, tuple[OutcomeStatus, ErrorClass | None]] = {
    "end_turn": (OutcomeStatus.ok, None),
    "max_turn_requests": (OutcomeStatus.truncated, ErrorClass.max_turns),
    "max_tokens": (OutcomeStatus.truncated, ErrorClass.max_turns),
    "refusal": (OutcomeStatus.error, ErrorClass.policy_violation),
    "cancelled": (OutcomeStatus.cancelled, None),
}


def _rule_matches(rule: ErrorRule, code: object, message: str, data: object) -> bool:
    if rule.code is not None and rule.code != code:
        return False
    if rule.message_contains is not None and rule.message_contains.lower() not in message.lower():
        return False
    if rule.data_key is not None:
        if not isinstance(data, dict) or rule.data_key not in data:
            return False
        if rule.data_value is not None:
            value = data[rule.data_key]
            if isinstance(value, dict):
                return rule.data_value in value
            return str(value) == rule.data_value
    return True


def classify_error(error: dict, rules: list[ErrorRule]) -> ErrorClass:
    """The class of one JSON-RPC error object an agent answered `session/prompt` (or a setup call) with."""
    code = error.get("code")
    message = str(error.get("message") or "")
    data = error.get("data")
    for rule in rules:
        if _rule_matches(rule, code, message, data):
            return rule.error_class
    detail = message + " " + (str(data.get("message") or "") if isinstance(data, dict) else "")
    if code == AUTH_REQUIRED and re.search(r"auth|log ?in|api key|credential", detail, re.IGNORECASE):
        return ErrorClass.auth
    if isinstance(code, int) and 400 <= code <= 599:
        if code in (401, 403):
            return ErrorClass.auth
        if code == 429:
            return ErrorClass.rate_limit
        if code == 400 and _CONTEXT.search(detail):
            return ErrorClass.context_overflow
        if code in (503, 529):
            return ErrorClass.overloaded
        if code >= 500:
            return ErrorClass.server_error
    if _AUTH_TEXT.search(detail):
        return ErrorClass.auth
    return classify_text(detail) or ErrorClass.unknown


def failed_status(cls: ErrorClass) -> OutcomeStatus:
    return OutcomeStatus.blocked if cls in BLOCKING else OutcomeStatus.error
