"""Root-cause precedence (issue #20 item 6): where several failure signals appear in one
session, the root cause wins over its consequences. The shared tiers
(backends/_rootcause.py), then each harness transport's decision, on recordings: real
ones from the real CLIs at loopback where they produce the combination, hand-derived from
real recordings otherwise (the test says which)."""

from __future__ import annotations

import json

import pytest

from harnesscheck.backends._rootcause import TIERS, root_cause, tail_cause, tier
from harnesscheck.contain.process import Ending, ProcessResult
from harnesscheck.core.contracts import ErrorClass, OutcomeStatus
from harnesscheck.testing.fakes import load_fixture

C = ErrorClass

#: A stderr tail where a login failure comes first and the bridge's failure it caused
#: after it (the words of codex's and claude's recorded 401 / bridge lines).
AUTH_THEN_BRIDGE = (
    "Error: 401 Unauthorized: authentication_failed (Missing bearer or basic authentication in header)\n"
    "MCP client for `bridge` failed to start: the session ended before it connected\n"
)


def _ended(stderr: str = "", *, ending: Ending = Ending.exited, code: int | None = 1) -> ProcessResult:
    return ProcessResult(ending=ending, exit_code=code, signal=None, stderr_tail=stderr, duration_s=1.0)


def _emits(cli: str, name: str) -> list[str]:
    """The stdout lines of a fixture, for a parser fed directly."""
    return [json.dumps(step["emit"]) for step in load_fixture(cli, name)["steps"] if "emit" in step]


# -- the shared tiers ---------------------------------------------------------------------


def test_every_error_class_has_exactly_one_tier():
    listed = [cls for members in TIERS for cls in members]
    assert sorted(listed) == sorted(set(listed))
    assert set(C) - set(listed) <= {C.cli_missing, C.cli_unsupported}  # pre-session errors, never a session signal


@pytest.mark.parametrize(
    ("root", "consequence"),
    [
        (C.auth, C.mcp_unavailable),
        (C.rate_limit, C.timeout),
        (C.auth, C.cli_crash),
        (C.quota, C.rate_limit),
        (C.overloaded, C.protocol),
        (C.policy_violation, C.mcp_unavailable),
        (C.mcp_unavailable, C.timeout),
    ],
)
def test_the_root_wins_in_either_order(root, consequence):
    assert tier(root) < tier(consequence)
    assert root_cause([(consequence, "later"), (root, "root")]) == (root, "root")
    assert root_cause([(root, "root"), (consequence, "later")]) == (root, "root")


def test_among_equals_the_first_seen_wins_and_unclassified_signals_are_no_cause():
    assert root_cause([(C.rate_limit, "first"), (C.overloaded, "second")]) == (C.rate_limit, "first")
    assert root_cause([None, (None, "a warning")]) is None


def test_a_tail_is_judged_line_by_line():
    """Read as one text, the bridge rule matched first; line by line the 401 is the root."""
    from harnesscheck.backends._errortext import classify_text

    assert classify_text(AUTH_THEN_BRIDGE) is C.mcp_unavailable  # what a whole-text read said
    cls, line = tail_cause(AUTH_THEN_BRIDGE)
    assert cls is C.auth and line.startswith("Error: 401")
    assert tail_cause("WARNING: proceeding\nthread 'main' panicked") is None


# -- claude-code ----------------------------------------------------------------------------


def _claude(lines, result, **kw):
    from harnesscheck.backends.claude_code import ClaudeStreamParser

    parser = ClaudeStreamParser(expected_tools=["mcp__bridge__read_file"], **kw)
    for line in lines:
        if parser.feed(line) is not None and parser.early is not None:
            break
    return parser.outcome(result)


def test_claude_a_429_ladder_cut_by_the_deadline_is_a_rate_limit():
    """Real (2.1.332, loopback): the 429 ladder ran (retry_stop_after=None) until the host's
    45 s deadline; three api_retry notices, no answer. Root: the rate limit, retryable,
    with the CLI's retry delay, not truncated/timeout."""
    fx = load_fixture("claude", "rate_limit_429_deadline")
    assert fx["provenance"]["source"] == "loopback-recording" and fx["provenance"]["live_outcome"]["error_class"] == "rate_limit"
    lines = [
        line.replace('"{{mcp_server_names}}"', '[{"name": "bridge", "status": "connected"}]').replace('"{{allowed_tools}}"', '["mcp__bridge__read_file"]')
        for line in _emits("claude", "rate_limit_429_deadline")
    ]
    out = _claude(lines, _ended(ending=Ending.deadline, code=None), retry_stop_after=None)
    assert (out.status, out.error_class, out.retryable) == (OutcomeStatus.error, C.rate_limit, True)
    assert "still retrying" in out.message and "deadline" in out.message and out.retry_after_s


def test_claude_a_retry_the_api_answered_later_is_no_cause_of_a_later_stall():
    """Hand-derived from the real rate_limit_429_deadline and timeout_mid_stream recordings:
    one 429 notice, then the model answered, then stalled until the deadline: a timeout."""
    retry = {"type": "system", "subtype": "api_retry", "attempt": 1, "retry_delay_ms": 7663, "error_status": 429, "error": "rate_limit"}
    answer = {
        "type": "assistant",
        "parent_tool_use_id": None,
        "message": {"id": "m1", "model": "claude-sonnet-5-5", "content": [{"type": "text", "text": "Reading the files first."}]},
    }
    init = {"type": "system", "subtype": "init", "tools": ["mcp__bridge__read_file"], "mcp_servers": [{"name": "bridge", "status": "connected"}]}
    out = _claude([json.dumps(e) for e in (init, retry, answer)], _ended(ending=Ending.deadline, code=None), retry_stop_after=None)
    assert (out.status, out.error_class) == (OutcomeStatus.truncated, C.timeout)


def test_claude_a_crash_says_why_in_its_stderr():
    """Hand-derived from the real auth_401 recording (its init; the 401 words as the crash's
    stderr): no result event, exit 1: the stderr's root (auth) over the missing result and
    over the bridge line it caused."""
    init = _emits("claude", "auth_401")[0].replace('"{{mcp_server_names}}"', '[{"name": "bridge", "status": "connected"}]')
    init = init.replace('"{{allowed_tools}}"', '["mcp__bridge__read_file"]')
    out = _claude([init], _ended(AUTH_THEN_BRIDGE))
    assert (out.status, out.error_class) == (OutcomeStatus.blocked, C.auth), out.message
    bare = _claude([init], _ended("Error: something went wrong in the CLI"))
    assert (bare.status, bare.error_class) == (OutcomeStatus.error, C.cli_crash)


def test_claude_reports_its_bridge_before_any_request():
    """Real (2.1.332, loopback): the bridge cannot start and the server would answer 401.
    claude says `failed` at init, before any request; the transport stops there, so no
    auth failure exists to be the root: mcp_unavailable (SPEC-claude-code.md)."""
    fx = load_fixture("claude", "auth_401_bridge_failed")
    assert fx["provenance"]["source"] == "loopback-recording"
    assert fx["provenance"]["live_outcome"]["error_class"] == "mcp_unavailable"
    out = _claude(_emits("claude", "auth_401_bridge_failed"), _ended(ending=Ending.early_stop, code=None))
    assert (out.status, out.error_class) == (OutcomeStatus.blocked, C.mcp_unavailable)


# -- codex ------------------------------------------------------------------------------------


def _codex(lines, result, **kw):
    from harnesscheck.backends.codex import CodexParser

    parser = CodexParser(**kw)
    for line in lines:
        parser.feed(line)
    return parser.outcome(result)


def test_codex_a_reconnect_ladder_cut_by_the_deadline_is_a_rate_limit():
    """Real (0.171.0, loopback): the 429 ladder run out (retry_stop_after=None) with a 12 s
    deadline: one `Reconnecting... 1/5` notice, then the host's deadline: rate_limit, as live.
    And hand-derived from the real full-ladder rate_limit_429: up to its second notice."""
    fx = load_fixture("codex", "rate_limit_429_deadline")
    assert fx["provenance"]["source"] == "loopback-recording" and fx["provenance"]["live_outcome"]["error_class"] == "rate_limit"
    real = _codex(_emits("codex", "rate_limit_429_deadline"), _ended(ending=Ending.deadline, code=None), retry_stop_after=None)
    assert (real.status, real.error_class, real.retryable) == (OutcomeStatus.error, C.rate_limit, True)
    lines = _emits("codex", "rate_limit_429")[:4]
    assert "Reconnecting... 2/5" in lines[-1]
    out = _codex(lines, _ended(ending=Ending.deadline, code=None), retry_stop_after=None)
    assert (out.status, out.error_class, out.retryable) == (OutcomeStatus.error, C.rate_limit, True)
    assert "still retrying" in out.message


def test_codex_without_a_terminal_event_the_root_error_wins():
    """Hand-derived from the real auth_401_bridge_failed recording: its stderr, a 401 line
    put before it: auth, not the bridge it kept from connecting; the recording alone
    (the bridge cannot start, nothing else) stays mcp_unavailable."""
    stderr = next(s["stderr"] for s in load_fixture("codex", "auth_401_bridge_failed")["steps"] if "stderr" in s)
    assert _codex([], _ended(stderr)).error_class is C.mcp_unavailable
    out = _codex([], _ended("Error: unexpected status 401 Unauthorized: Missing bearer\n" + stderr))
    assert (out.status, out.error_class) == (OutcomeStatus.blocked, C.auth), out.message


# -- the CLIs whose bridge readiness is read from the bridge's trace -------------------------


def test_gemini_real_401_with_a_bridge_that_cannot_start_is_auth(tmp_path):
    """Real (gemini 0.61.0, loopback): the bridge cannot start ("MCP issues detected" on
    stderr) and the server answers 401: the replay through the transport is blocked/auth,
    as it was live, not mcp_unavailable."""
    from test_gemini import session

    fx = load_fixture("gemini", "auth_401_bridge_failed")
    assert fx["provenance"]["source"] == "loopback-recording" and fx["provenance"]["live_outcome"]["error_class"] == "auth"
    assert any("MCP issues detected" in s.get("stderr", "") for s in fx["steps"])
    out, _fake, _wt = session(tmp_path, "auth_401_bridge_failed")
    assert (out.status, out.error_class) == (OutcomeStatus.blocked, C.auth), out.message


@pytest.mark.parametrize(("scenario", "cls"), [("auth_401", C.auth), ("success", C.mcp_unavailable)])
def test_gemini_auth_wins_over_the_bridge_that_never_started(tmp_path, scenario, cls):
    """Hand-derived from the real auth_401 and success recordings (gemini 0.61.0), replayed
    without starting the bridge (no `"mcp": "connect"`): the bridge never listed its tools.
    The 401 session is blocked/auth (readiness is judged on an ok session only); the
    success one, with no failure of its own, is mcp_unavailable (the control)."""
    from test_gemini import session

    fx = load_fixture("gemini", scenario)
    assert fx["provenance"]["source"] == "loopback-recording"
    fx.pop("mcp", None), fx.pop("mcp_timeout", None)
    out, _fake, _wt = session(tmp_path, fx)
    assert (out.status, out.error_class) == (OutcomeStatus.blocked, cls), out.message


@pytest.mark.parametrize("backend", ["cursor", "gemini", "opencode", "deepseek", "zcode"])
def test_a_crash_tail_names_the_root(backend):
    """Hand-derived (the 401 and bridge lines above) for a CLI that ended with no terminal
    event: each transport's parser names auth, not the bridge line that followed."""
    from harnesscheck.backends import cursor, deepseek, gemini, opencode, zcode

    parser = {
        "cursor": cursor.CursorParser,
        "gemini": gemini.GeminiParser,
        "opencode": opencode.OpencodeParser,
        "deepseek": deepseek.DeepSeekParser,
        "zcode": zcode.ZcodeParser,
    }[backend]()
    out = parser.outcome(_ended(AUTH_THEN_BRIDGE))
    assert (out.status, out.error_class) == (OutcomeStatus.blocked, C.auth), out.message
    assert "401" in out.message


@pytest.mark.parametrize("bridge", ["pending", "failed", "absent"])
def test_claude_never_logged_in_is_auth_whatever_the_bridge_state_at_init(bridge):
    """Issue 32 item 6, on the real not_logged_in recording (2.1.332, loopback) with the bridge
    reported pending, failed or not at all at system/init: the CLI gives up with "Not logged
    in" before any model request, so the root is auth (blocked), not the bridge. The same
    bridge states in a session that goes on with the model end mcp_unavailable (the control)."""

    def with_bridge(name: str) -> list[str]:
        lines = []
        for step in load_fixture("claude", name)["steps"]:
            if "emit" not in step:
                continue
            event = dict(step["emit"])
            if event.get("type") == "system" and event.get("subtype") == "init":
                event["mcp_servers"] = [] if bridge == "absent" else [{"name": "bridge", "status": bridge}]
                event["tools"] = []
            lines.append(json.dumps(event))
        return lines

    out = _claude(with_bridge("not_logged_in"), _ended(code=1))
    assert (out.status, out.error_class) == (OutcomeStatus.blocked, C.auth), out.message
    control = _claude(with_bridge("success"), _ended(ending=Ending.early_stop, code=None))
    assert (control.status, control.error_class) == (OutcomeStatus.blocked, C.mcp_unavailable), control.message
