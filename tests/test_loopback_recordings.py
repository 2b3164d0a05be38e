"""The loopback recordings (fixtures/<cli>/loopback/*.json): real CLI output, scrubbed, with
provenance; replayed offline through the fake engine and the real transport, each gives
the outcome the transport gave live (so the offline parse of real output is the live one)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from harnesscheck.config import Settings
from harnesscheck.contracts import AgentSessionRequest
from harnesscheck.paths import fixtures_dir
from harnesscheck.registry import build_transport, get_spec
from harnesscheck.scope import ToolScope

BACKEND = {"claude": "claude-code", "codex": "codex"}
RECORDINGS = sorted(p for cli in BACKEND for p in (fixtures_dir() / cli / "loopback").glob("*.json"))


def _id(path: Path) -> str:
    return f"{path.parent.parent.name}-{path.stem}"


def test_recordings_exist_for_both_clis():
    clis = {p.parent.parent.name for p in RECORDINGS}
    assert clis == {"claude", "codex"}, f"recordings found for {clis}"


@pytest.mark.parametrize("path", RECORDINGS, ids=_id)
def test_recording_has_provenance_and_is_scrubbed(path):
    text = path.read_text(encoding="utf-8")
    data = json.loads(text)
    prov = data["provenance"]
    assert prov["source"] == "loopback-recording" and prov["level"] == "loopback"
    assert prov["scenario"] == path.stem and prov["cli"] == path.parent.parent.name
    assert re.fullmatch(r"\d+\.\d+\.\d+", prov["cli_version"])
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", prov["date"])
    assert prov["live_outcome"]["status"]
    assert data["steps"] and ("exit" in data["steps"][-1] or "hang" in data["steps"][-1])
    # no machine paths, no port, no credential
    assert "/root" not in text and "/home/" not in text.replace("/home/user", "")
    assert not re.search(r"harnesscheck-record-[A-Za-z0-9_]{6,}", text), "a temp dir name survived"
    assert not re.search(r"127\.0\.0\.1:\d", text), "a port survived"
    assert "sk-loopback" not in text


@pytest.mark.parametrize("path", RECORDINGS, ids=_id)
def test_replay_gives_the_live_outcome(path, tmp_path):
    from harnesscheck.fakes import install_fake_cli

    cli = path.parent.parent.name
    data = json.loads(path.read_text(encoding="utf-8"))
    live = data["provenance"]["live_outcome"]
    fake = install_fake_cli(cli, data, tmp_path / "bin")
    spec = get_spec(BACKEND[cli])
    transport = build_transport(spec, Settings(backend=spec.id, cli=fake.path))
    root = tmp_path / "work"
    root.mkdir()
    (root / "README.md").write_text("hello from the worktree\n")
    hangs = "hang" in data["steps"][-1]
    request = AgentSessionRequest(
        prompt="Say hello.",
        scope=ToolScope(name="replay", root=root, read_only=True),
        max_iters=2 if path.stem == "max_turns" else 8,
        timeout_s=3.0 if hangs else 60.0,
        run_dir=tmp_path / "run",
    )
    o = transport.run_session(request)
    got = {
        "status": o.status.value,
        "error_class": o.error_class.value if o.error_class else None,
        "usage": {"input": o.usage.input, "output": o.usage.output, "cache_read": o.usage.cache_read, "cache_write": o.usage.cache_write},
        "served_model": o.served_model,
        "model_verdict": o.model_verdict.value,
        "native_tool_calls": list(o.native_tool_calls),
    }
    want = {k: live[k] for k in got}
    if hangs and live["error_class"] == "timeout":
        want["usage"] = got["usage"]  # a deadline keeps what was seen; timing decides how much
    assert got == want
