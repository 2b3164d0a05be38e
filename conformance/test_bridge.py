"""Tool bridge readiness (harness-anchors G1–G8): a harness session never proceeds toolless, and
the CLI is configured with exactly one MCP server, the bridge, by absolute interpreter path."""

from __future__ import annotations

import json
import os

from harnesscheck.core.contracts import Capability as C
from harnesscheck.core.contracts import ErrorClass as E
from harnesscheck.core.contracts import Kind, OutcomeStatus
from harnesscheck.kit.catalog import check


@check("bridge.failed-load-ends-session", requires=[C.mcp_tools], kinds=[Kind.harness], incident=["G2", "I6"])
def test_failed_load_ends_session(but):
    """When the CLI reports the bridge failed to load, the session ends mcp_unavailable — never runs on toolless."""
    run = but.run("mcp_failed")
    o = run.outcome
    assert o.status != OutcomeStatus.ok, f"the session ran on without its tools: {o.text!r}"
    assert o.error_class == E.mcp_unavailable, f"error_class {o.error_class}"


@check("bridge.slow-start-not-toolless", requires=[C.mcp_tools], kinds=[Kind.harness], incident="G1", paced=True)
def test_slow_start_not_toolless(but):
    """A bridge slow to start either is waited for or errors: the session is never ok without its tools."""
    run = but.run("mcp_slow", timeout_s=120)
    o = run.outcome
    assert o.status == OutcomeStatus.ok or o.error_class == E.mcp_unavailable, f"{o.status}/{o.error_class}"
    if o.status == OutcomeStatus.ok:
        assert but.bridge_loaded(run), (
            "the session ended ok, but the bridge's own trace shows no client ever listed its tools: it ran without them (a slow bridge was not waited for)"
        )


@check("bridge.only-bridge-configured", requires=[C.mcp_tools], kinds=[Kind.harness], incident=["B3", "G6", "G8", "A11"])
def test_only_bridge_configured(but):
    """The CLI's MCP config names exactly one server, the host's tool bridge (whatever it is called),
    started by an absolute interpreter, with no secrets."""
    run = but.shared_run("success", canaries=True)
    canaries = run.canaries
    configs = but.mcp_servers(run)
    assert configs, "no MCP configuration reached the CLI"
    assert len(configs) == 1, f"MCP servers configured: {sorted(configs)}: the CLI must get exactly one, the bridge"
    ((name, server),) = configs.items()
    command = server.get("command", "")
    assert os.path.isabs(command), f"bridge {name!r} command {command!r} is not an absolute path"
    blob = json.dumps(server)
    assert not [k for k, v in canaries.items() if v in blob], "a secret was written into the MCP config"


def _answer_fault(kind: str, answer) -> str | None:
    """Why `answer` does not meet what a probe of `kind` requires (harness_adapter.BRIDGE_PROBES)."""
    if isinstance(answer, list):  # a batch's answer
        return None if kind in ("error", "any") else f"a JSON array {json.dumps(answer)[:200]}"
    error = answer.get("error")
    result = answer.get("result")
    if kind == "error":
        return None if error is not None else f"not an error: {json.dumps(answer)[:200]}"
    if kind == "any":
        return None
    if kind == "tool-error":
        if error is not None or (isinstance(result, dict) and result.get("isError") is True):
            return None
        return f"a result that is not an error: {json.dumps(answer)[:200]}"
    if kind == "listed":
        return None if isinstance(result, dict) and result.get("tools") else f"no tools listed: {json.dumps(answer)[:200]}"
    if kind == "served":
        if isinstance(result, dict) and result.get("isError") is not True and error is None:
            return None
        return f"the valid call failed: {json.dumps(answer)[:200]}"
    raise AssertionError(f"unknown probe kind {kind!r}")


@check("bridge.answers-every-request", requires=[C.mcp_tools], kinds=[Kind.harness], levels=["offline"])
def test_answers_every_request(but):
    """Every MCP server the backend configures for its CLI (its bridge, whatever it is called)
    answers every request within a bound: a malformed request gets a JSON-RPC error, a
    tools/call with a bad name or bad arguments gets an error (a tool error or a JSON-RPC
    error), never silence; and it still answers valid requests afterwards. A CLI waits for
    an answer that never comes until its own timeout: the session hangs, toolless.

    Evidence: the fake CLI starts the configured servers exactly as the CLI would (command,
    args, the config's env over the CLI's, its cwd) and sends each request of
    harness_adapter.BRIDGE_PROBES one at a time (lines that are not JSON, not an object, an
    empty batch, nesting 200 deep, unusable ids, no method, a non-object `arguments`, a
    non-string or unknown tool name, a lone surrogate in a name), waiting PROBE_BOUND_S for each
    answer; then tools/list and a tools/call of list_dir."""
    from harnesscheck.kit.harness_adapter import BRIDGE_PROBES, PROBE_BOUND_S

    run = but.run("bridge_probe", timeout_s=60 + 3 * PROBE_BOUND_S)
    records = run.bridge_probes
    assert records, f"the CLI could probe no MCP server (session {run.outcome.status}: {run.outcome.message!r})"
    broken = [r for r in records if r.get("error")]
    assert not broken, "; ".join(f"MCP server {r.get('server')!r}: {r['error']}" for r in broken)
    for server in dict.fromkeys(r.get("server") for r in records):
        got = {r.get("label"): r for r in records if r.get("server") == server}
        for probe in BRIDGE_PROBES:
            rec = got.get(probe["label"])
            assert rec is not None, f"MCP server {server!r}: {probe['label']!r} was never sent (the session ended first)"
            assert rec.get("answer") is not None, (
                f"MCP server {server!r} gave no answer within {PROBE_BOUND_S:g} s to {probe['label']} "
                f"({probe['line'][:120]}): a CLI waits on it until its own timeout"
            )
            fault = _answer_fault(probe["kind"], rec["answer"])
            assert fault is None, f"MCP server {server!r}, {probe['label']}: {fault}"
