"""The pinned real CLIs against the scripted servers, through the real transports.

Skipped with the exact reason when `harnesscheck install-clis` has not run; when the
binaries are present these must pass (CI installs them first)."""

from __future__ import annotations

import pytest

from harnesscheck.backends.loopback_endpoint import DUMMY_KEY, LoopbackEndpoint
from harnesscheck.backends.registry import get_spec, kit_profile
from harnesscheck.core.config import Settings
from harnesscheck.core.contracts import AgentSessionRequest, ErrorClass, OutcomeStatus
from harnesscheck.core.scope import ToolScope
from harnesscheck.loopback.adapter import loopback_scenario, loopback_transport, wire_to_scope_name
from harnesscheck.loopback.clis import require_pinned_cli
from harnesscheck.loopback.server import ScriptedModelServer

BACKENDS = ["claude-code", "codex"]


def _pinned(backend: str):
    binary, why = require_pinned_cli(backend)
    if binary is None:
        pytest.skip(why)
    return binary


class _Ws:
    def __init__(self, base):
        self.root = base / "work"
        self.root.mkdir()
        (self.root / "README.md").write_text("hello from the worktree\n")
        (base / "outside").mkdir()
        self.secret = base / "outside" / "secret.txt"
        self.secret.write_text("sentinel-outside-7f3a\n")
        self.canary = "sentinel-outside-7f3a"


def _session(backend, scenario, tmp_path, *, timeout_s=60.0, max_iters=8):
    binary = _pinned(backend)
    spec = get_spec(backend)
    ws = _Ws(tmp_path)
    script = loopback_scenario(spec.cli_name, scenario, ws, profile=kit_profile(spec))
    with ScriptedModelServer(script, expected_key=DUMMY_KEY) as srv:
        transport = loopback_transport(spec, Settings(backend=backend), cli_path=binary.path, endpoint=LoopbackEndpoint(srv.base_url))
        request = AgentSessionRequest(
            prompt="Say hello.",
            scope=ToolScope(name="t", root=ws.root, read_only=True),
            timeout_s=timeout_s,
            max_iters=max_iters,
            run_dir=tmp_path / "run",
        )
        outcome = transport.run_session(request)
        return outcome, srv.turn_requests(), ws


@pytest.mark.parametrize("backend", BACKENDS)
def test_tool_call_reaches_the_bridge_through_the_real_cli(backend, tmp_path):
    o, reqs, _ = _session(backend, "tool_calls", tmp_path)
    assert o.status is OutcomeStatus.ok, o.message
    assert o.tools_used == ["read_file"] and o.tool_calls == 1
    assert any("hello from the worktree" in tr["text"] for r in reqs for tr in r.tool_results)
    assert all(r.credentials_present and r.credential_matches for r in reqs), "the dummy credential was not the one sent"


def test_claude_offers_exactly_the_bridge_tools(tmp_path):
    o, reqs, _ = _session("claude-code", "success", tmp_path)
    assert o.status is OutcomeStatus.ok
    offered = {wire_to_scope_name(t) for r in reqs for t in r.tools}
    # 2.1.332 also offers DeferredToolPlaceholder (defer_loading), a tool the CLI refuses to run:
    # the conformance suite judges it by behaviour (audit.builtins-off-at-wire calls it once)
    assert offered - {"DeferredToolPlaceholder"} == {"read_file", "list_dir", "grep"}


def test_codex_wire_tools_are_the_measured_set(tmp_path):
    """codex 0.171.0 with BUILTINS_OFF_TOML and its default model offers only code-mode
    tools (doc/SPEC-loopback.md); a change here is drift to look at, not noise."""
    o, reqs, _ = _session("codex", "success", tmp_path)
    assert o.status is OutcomeStatus.ok
    offered = {t for r in reqs for t in r.tools}
    assert offered == {"exec", "wait", "send_message_to_user_async"}
    assert not offered & {"exec_command", "write_stdin", "apply_patch", "view_image", "web_search", "shell"}


@pytest.mark.parametrize("backend", BACKENDS)
def test_disabled_builtin_reads_nothing(backend, tmp_path):
    o, reqs, ws = _session(backend, "native_tool_use", tmp_path)
    results = [tr["text"] for r in reqs for tr in r.tool_results]
    assert results, "the CLI did not answer the built-in call"
    assert not any(ws.canary in text for text in results), "the disabled built-in read the file"
    assert any("No such tool available" in t or "unsupported call" in t for t in results), results


@pytest.mark.parametrize("backend", BACKENDS)
def test_401_blocks_with_auth(backend, tmp_path):
    o, reqs, _ = _session(backend, "auth_401", tmp_path, timeout_s=120)
    assert (o.status, o.error_class) == (OutcomeStatus.blocked, ErrorClass.auth), o.message


@pytest.mark.parametrize("backend", BACKENDS)
def test_hang_ends_truncated_by_the_deadline(backend, tmp_path):
    o, _, _ = _session(backend, "timeout_mid_stream", tmp_path, timeout_s=4)
    assert (o.status, o.error_class) == (OutcomeStatus.truncated, ErrorClass.timeout)
    assert not o.orphan_suspected


@pytest.mark.parametrize("backend", BACKENDS)
def test_drift_against_stored_recordings(backend, capsys):
    """Fresh recordings of the fast scenarios have the stored event shapes (pinned versions)."""
    from harnesscheck.loopback.drift import FAST_SCENARIOS, drift_for

    _pinned(backend)
    code, drifts = drift_for(backend, scenarios=FAST_SCENARIOS)
    report = capsys.readouterr().out
    assert drifts, "no stored recording was compared"
    assert code == 0, report


def test_the_real_codex_tree_is_judged_no_survivors_catches_a_backend_that_kills_only_the_cli(tmp_path):
    """At the loopback level the no-survivors check watches the real CLI's own tree: the
    reference ends it; a backend that kills only the CLI leaves codex's native binary (the
    child of its node launcher) running, and the check says so. A backend from
    `module:factory` naming the pinned CLI runs at this level too."""
    from kit_support import cells, run_suite

    _pinned("codex")
    mutant = "tests.mutants.harness:codex_kills_only_the_direct_child"
    _, report, out = run_suite(
        tmp_path,
        "--backend",
        "codex",
        "--backend",
        mutant,
        "--level",
        "loopback",
        "--hc-baseline",
        "none",
        "--hc-check",
        "time.no-survivors-after-timeout",  # its only check: the mutant's abandoned stream would wait out a 24 s bound
        files=("conformance/test_time.py",),
    )
    assert report is not None, out[-3000:]
    reference = cells(report, "codex")["time.no-survivors-after-timeout"]
    broken = cells(report, "mutant-harness-CodexKillsOnlyTheDirectChild")["time.no-survivors-after-timeout"]
    assert reference["outcome"] == "passed", reference
    assert broken["outcome"] == "failed" and "survived" in broken["message"], broken
