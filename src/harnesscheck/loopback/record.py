"""`harnesscheck record --backend ID --scenario NAME [--out FILE]`: run one loopback
scenario through the backend's real transport and the pinned real CLI, and store the CLI's
raw stdout as a fake-CLI scenario (fake_clis/_fakecli.py format) with provenance.

Scrubbing (before anything is written): the dummy key and every secret the env policy
knows are redacted; the session's temp dirs become `/tmp/harnesscheck-run`, the CLI's cwd
`{{cwd}}`, the home dir `/home/user`, the server port `PORT`; claude's init `tools` /
`mcp_servers` / `model` and the echoed model become the fake's placeholders, so the
recording replays under any argv the transport builds.

Default output: fixtures/<cli>/loopback/<scenario>.json (next to the hand-written
fixtures, never over them; promote one by copying it when the transport tests pass).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

#: Scenarios the real CLIs can be made to show by a scripted model server.
RECORDABLE: dict[str, tuple[str, ...]] = {
    "claude": (
        "success",
        "tool_calls",
        "max_turns",
        "auth_401",
        "rate_limit_429",
        "overloaded_529",
        "served_model_mismatch",
        "timeout_mid_stream",
        "native_tool_use",
    ),
    "codex": (
        "success",
        "tool_calls",
        "auth_401",
        "rate_limit_429",
        "overloaded_529",
        "served_model_mismatch",
        "timeout_mid_stream",
        "native_tool_use",
    ),
}

#: Wall clock per recorded session: enough for a retry ladder to show, bounded for hangs.
RECORD_TIMEOUT_S = {"timeout_mid_stream": 6.0, "max_turns": 60.0}
DEFAULT_TIMEOUT_S = 60.0


@dataclass
class Recording:
    """One loopback session: the CLI's raw stdout lines, how it ended, and where it ran."""

    backend: str
    cli: str
    scenario: str
    cli_version: str
    lines: list[str]
    exit_code: int | None
    ended_by_host: bool
    outcome: Any
    requests: list = field(default_factory=list)
    machine_paths: list[tuple[str, str]] = field(default_factory=list)
    port: int | None = None


class _Tee:
    def __init__(self, inner: Any, lines: list[str], box: dict):
        self._inner, self._lines, self._box = inner, lines, box

    def feed(self, line: str):
        self._lines.append(line)
        return self._inner.feed(line)

    def outcome(self, result: Any):
        self._box["result"] = result
        return self._inner.outcome(result)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _workspace(base: Path) -> Any:
    """A worktree like the kit's: README.md inside, a sentinel outside."""

    class Ws:
        pass

    ws = Ws()
    ws.root = base / "work"
    ws.root.mkdir(parents=True)
    (ws.root / "README.md").write_text("hello from the worktree\n", encoding="utf-8")
    outside = base / "outside"
    outside.mkdir()
    ws.secret = outside / "secret.txt"
    ws.secret.write_text("sentinel outside the worktree\n", encoding="utf-8")
    ws.canary = "HC-RECORD-SENTINEL"
    return ws


def run_loopback(backend: str, scenario: str, *, timeout_s: float | None = None) -> Recording:
    """Run `scenario` once through the real transport and the pinned CLI; keep stdout."""
    from harnesscheck.config import Settings
    from harnesscheck.contracts import AgentSessionRequest
    from harnesscheck.loopback.adapter import loopback_scenario, loopback_transport
    from harnesscheck.loopback.clis import require_pinned_cli
    from harnesscheck.loopback.endpoint import DUMMY_KEY, LoopbackEndpoint
    from harnesscheck.loopback.server import ScriptedModelServer
    from harnesscheck.process import Ending
    from harnesscheck.registry import get_spec
    from harnesscheck.scope import ToolScope

    spec = get_spec(backend)
    binary, why = require_pinned_cli(backend)
    if binary is None:
        raise RuntimeError(why)
    cli = spec.cli_name or backend
    if scenario not in RECORDABLE.get(cli, ()):
        known = ", ".join(RECORDABLE.get(cli, ())) or "none"
        raise ValueError(f"{scenario!r} cannot be recorded for {cli} at the loopback level (recordable: {known})")
    base = Path(tempfile.mkdtemp(prefix="harnesscheck-record-"))
    try:
        ws = _workspace(base)
        script = loopback_scenario(cli, scenario, ws)
        with ScriptedModelServer(script, expected_key=DUMMY_KEY) as server:
            transport = loopback_transport(
                spec, Settings(backend=backend), cli_path=binary.path, endpoint=LoopbackEndpoint(server.base_url)
            )
            lines: list[str] = []
            box: dict = {}
            make_parser = transport.make_parser
            transport.make_parser = lambda *a, **k: _Tee(make_parser(*a, **k), lines, box)
            request = AgentSessionRequest(
                prompt="Say hello.",
                scope=ToolScope(name="record", root=ws.root, read_only=True),
                max_iters=2 if scenario == "max_turns" else 8,
                timeout_s=timeout_s or RECORD_TIMEOUT_S.get(scenario, DEFAULT_TIMEOUT_S),
                run_dir=base / "run",
            )
            outcome = transport.run_session(request)
            requests = server.turn_requests()
            port = server.port
        result = box.get("result")
        ended_by_host = result is not None and result.ending not in (Ending.exited, Ending.linger)
        return Recording(
            backend=backend,
            cli=cli,
            scenario=scenario,
            cli_version=binary.version,
            lines=lines,
            exit_code=None if result is None else result.exit_code,
            ended_by_host=ended_by_host,
            outcome=outcome,
            requests=requests,
            machine_paths=[
                (_mangled(base / "run" / "cwd"), "-tmp-harnesscheck-run-run-cwd"),  # claude's project dir name
                (str(base / "run" / "cwd"), "{{cwd}}"),
                (str(base), "/tmp/harnesscheck-run"),
                (os.path.realpath(str(base)), "/tmp/harnesscheck-run"),
                (os.path.expanduser("~"), "/home/user"),
            ],
            port=port,
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _mangled(path: Path) -> str:
    """Claude names a project's state dir after its cwd with every other char as `-`."""
    return re.sub(r"[^A-Za-z0-9]", "-", str(path))


def outcome_summary(outcome: Any) -> dict:
    """What the transport made of the live session: replaying the recording offline must
    give the same (tests/test_loopback_recordings.py)."""
    u = outcome.usage
    return {
        "status": outcome.status.value,
        "error_class": outcome.error_class.value if outcome.error_class else None,
        "usage": {"input": u.input, "output": u.output, "cache_read": u.cache_read, "cache_write": u.cache_write},
        "served_model": outcome.served_model,
        "model_verdict": outcome.model_verdict.value,
        "tools_used": list(outcome.tools_used),
        "native_tool_calls": list(outcome.native_tool_calls),
        "refusals": len(outcome.refusals),
    }


# ---------------------------------------------------------------------------------------
# Scrubbing and the fixture format

_PORT_RE = re.compile(r"(127\.0\.0\.1|localhost):\d{2,5}")


def scrub_line(line: str, machine_paths: list[tuple[str, str]]) -> str:
    """Secrets redacted, machine paths and the port replaced by stable placeholders."""
    from harnesscheck.envpolicy import redact
    from harnesscheck.loopback.endpoint import DUMMY_KEY

    out = line
    for value, placeholder in machine_paths:
        if value and value not in ("/", "."):
            out = out.replace(value, placeholder)
    out = _PORT_RE.sub(r"\1:PORT", out)
    return redact(out, extra_secrets=[DUMMY_KEY])


def _claude_placeholders(event: dict, default_model: str | None) -> dict:
    """init echoes argv (tools, MCP servers, model): make it the fake's placeholders."""
    if event.get("type") == "system" and event.get("subtype") == "init":
        event = dict(event)
        if "tools" in event:
            event["tools"] = "{{allowed_tools}}"
        if "mcp_servers" in event:
            event["mcp_servers"] = "{{mcp_server_names}}"
        if event.get("model") == default_model:
            event["model"] = "{{model}}"
    if event.get("type") == "result" and isinstance(event.get("modelUsage"), dict) and default_model:
        event = dict(event)
        event["modelUsage"] = {("{{model}}" if k == default_model else k): v for k, v in event["modelUsage"].items()}
    if event.get("type") == "assistant" and default_model:
        msg = event.get("message")
        if isinstance(msg, dict) and msg.get("model") == default_model.split("[", 1)[0]:
            event = dict(event, message=dict(msg, model="{{model_base}}"))
    return event


def _default_model(cli: str, lines: list[str]) -> str | None:
    if cli != "claude":
        return None
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("subtype") == "init":
            return event.get("model")
    return None


def to_fixture(rec: Recording) -> dict:
    """The recording as a fake-CLI scenario with provenance."""
    from harnesscheck import __version__

    default_model = _default_model(rec.cli, rec.lines)
    steps: list[dict] = []
    for raw in rec.lines:
        line = scrub_line(raw, rec.machine_paths)
        try:
            event = json.loads(line)
        except ValueError:
            steps.append({"noise": line})
            continue
        if not isinstance(event, dict):
            steps.append({"raw": line, "newline": True})
            continue
        if rec.cli == "claude":
            event = _claude_placeholders(event, default_model)
        steps.append({"emit": event})
    if rec.ended_by_host:
        steps.append({"hang": True})  # the real CLI was still running when the host ended it
    else:
        steps.append({"exit": rec.exit_code if rec.exit_code is not None else 0})
    fixture: dict = {
        "provenance": {
            "cli": rec.cli,
            "cli_version": rec.cli_version,
            "source": "loopback-recording",
            "level": "loopback",
            "scenario": rec.scenario,
            "date": date.today().isoformat(),
            "recorded_by": f"harnesscheck {__version__} record (scripted model server on 127.0.0.1)",
            "live_outcome": outcome_summary(rec.outcome),
            "notes": (
                "raw stdout of the real CLI, scrubbed (secrets, temp paths, home, port)"
                + ("; the host ended the session (deadline or early stop): replay ends in a hang" if rec.ended_by_host else "")
            ),
        },
        "version": _printed_version(rec),
        "stdin": "read",
        "steps": steps,
    }
    if default_model:
        fixture["default_model"] = default_model
    return fixture


def _printed_version(rec: Recording) -> str:
    return {"claude": f"{rec.cli_version} (Claude Code)", "codex": f"codex-cli {rec.cli_version}"}.get(rec.cli, rec.cli_version)


def default_out(cli: str, scenario: str) -> Path:
    from harnesscheck.paths import fixtures_dir

    return fixtures_dir() / cli / "loopback" / f"{scenario}.json"


def write_fixture(fixture: dict, out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(fixture, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return out


def record_command(backend: str, scenario: str, out: Path | None) -> int:
    """Entry point of `harnesscheck record`. Exit 0 written, 2 usage, 3 environment."""
    from harnesscheck.registry import get_spec

    try:
        spec = get_spec(backend)
    except Exception as exc:  # UnknownBackend names the known ids
        print(f"record: {exc}", file=sys.stderr)
        return 2
    cli = spec.cli_name or backend
    names = list(RECORDABLE.get(cli, ())) if scenario == "all" else [scenario]
    if not names:
        print(f"record: {backend} has no loopback scenarios", file=sys.stderr)
        return 2
    if out is not None and len(names) > 1:
        print("record: --out names one file; record one scenario at a time with it", file=sys.stderr)
        return 2
    for name in names:
        try:
            rec = run_loopback(backend, name)
        except ValueError as exc:
            print(f"record: {exc}", file=sys.stderr)
            return 2
        except RuntimeError as exc:
            print(f"record: {exc}", file=sys.stderr)
            return 3
        path = write_fixture(to_fixture(rec), out or default_out(cli, name))
        print(f"{backend} {name}: {len(rec.lines)} lines, {rec.outcome.status.value}"
              f"{'/' + rec.outcome.error_class.value if rec.outcome.error_class else ''} -> {path}")
    return 0
