"""The loopback recordings ARE the offline fixtures: every fixtures/<cli>/<scenario>.json whose
provenance says `loopback-recording` is real CLI output, scrubbed, with provenance; replayed
offline through the fake engine and the real transport, each gives the outcome the
transport gave live (so the offline parse of real output is the live one).

Every fixture (recorded or hand-written) is scanned for secrets, machine paths and ports."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from harnesscheck.backends.registry import build_transport, get_spec
from harnesscheck.core.config import Settings
from harnesscheck.core.contracts import AgentSessionRequest
from harnesscheck.core.paths import fixtures_dir
from harnesscheck.core.scope import ToolScope
from harnesscheck.loopback.record import RECORDABLE, default_out, is_recording

BACKEND = {"claude": "claude-code", "codex": "codex", "gemini": "gemini"}
RECORDINGS = sorted(p for cli in BACKEND for p in (fixtures_dir() / cli).glob("*.json") if is_recording(p))
ALL_FIXTURES = sorted(fixtures_dir().glob("*/*.json"))


def _id(path: Path) -> str:
    return f"{path.parent.name}-{path.stem}"


def test_every_recordable_scenario_is_the_offline_fixture_itself():
    """One source of truth: what `record` writes is the file the fakes replay, and it is there."""
    for cli, names in RECORDABLE.items():
        for name in names:
            path = default_out(cli, name)
            assert path == fixtures_dir() / cli / f"{name}.json"
            assert path.is_file() and is_recording(path), f"{cli}/{name}.json is not a loopback recording"
    assert not list(fixtures_dir().glob("*/loopback")), "a second copy of the recordings exists"
    recorded = {(p.parent.name, p.stem) for p in RECORDINGS}
    assert recorded == {(cli, n) for cli, names in RECORDABLE.items() for n in names}, "a recording `record` cannot remake"


@pytest.mark.parametrize("path", RECORDINGS, ids=_id)
def test_recording_has_provenance(path):
    data = json.loads(path.read_text(encoding="utf-8"))
    prov = data["provenance"]
    assert prov["source"] == "loopback-recording" and prov["level"] == "loopback"
    assert prov["scenario"] == path.stem and prov["cli"] == path.parent.name
    assert re.fullmatch(r"\d+\.\d+\.\d+", prov["cli_version"])
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", prov["date"])
    assert prov["live_outcome"]["status"] and isinstance(prov["transport"], dict)
    assert data["steps"] and ("exit" in data["steps"][-1] or "hang" in data["steps"][-1])


#: Machine paths: a temp dir, a home, this checkout, the interpreter (placeholders instead).
_MACHINE_PATH = re.compile(r"(?<![\w.{<-])/(?:tmp|var/tmp|home|root|work|Users|private|opt/hostedtoolcache)/[\w.~-]")
_PORT = re.compile(r"(?:127\.0\.0\.1|localhost|\[::1\]):(\d+)")
_SECRET = re.compile(
    r"sk-ant-[\w-]{6,}|sk-(?:proj-)?[A-Za-z0-9]{16,}|gh[pousr]_[A-Za-z0-9]{12,}|xox[bpas]-[\w-]{8,}|AKIA[0-9A-Z]{16}|"
    r"AIza[\w-]{20,}|eyJ[\w-]{10,}\.[\w-]{10,}\.|Bearer\s+[A-Za-z0-9._~+/-]{12,}"
)


@pytest.mark.parametrize("path", ALL_FIXTURES, ids=_id)
def test_fixture_holds_no_secret_machine_path_or_run_port(path):
    from harnesscheck.backends.loopback_endpoint import DUMMY_KEY

    text = path.read_text(encoding="utf-8")
    assert DUMMY_KEY not in text and "sk-loopback" not in text, "the loopback dummy key survived"
    assert not _SECRET.search(text), f"a secret-looking value: {_SECRET.search(text).group(0)[:12]}…"
    hit = _MACHINE_PATH.search(text)
    assert not hit, f"a machine path: {text[max(0, hit.start() - 40) : hit.end() + 40]!r}"
    assert not re.search(r"harnesscheck-(?:record|run)-[A-Za-z0-9_]{6,}", text), "a temp dir name survived"
    ports = [int(m.group(1)) for m in _PORT.finditer(text)]
    assert not [p for p in ports if p >= 1024], f"a run's port survived: {ports}"


def test_the_scan_catches_what_it_is_for(tmp_path):
    """The patterns above are not vacuous: each catches a sample of what it forbids."""
    assert _MACHINE_PATH.search('"cwd": "/tmp/harnesscheck-record-x/run"') and _MACHINE_PATH.search("at /home/me/x")
    assert _MACHINE_PATH.search("/work/main/src") and not _MACHINE_PATH.search("<run-dir>/run/cwd")
    assert _SECRET.search("key sk-ant-api03-abcdefghij") and _SECRET.search("Bearer abcdefghijklmnop")
    assert [int(m.group(1)) for m in _PORT.finditer("http://127.0.0.1:41234/v1")] == [41234]
    assert not _PORT.search("http://127.0.0.1:PORT/v1")


def _transport(cli: str, prov: dict, fake_path: Path):
    spec = get_spec(BACKEND[cli])
    setup = prov.get("transport") or {}
    settings = Settings(backend=spec.id, cli=fake_path)
    options = {}
    if "retry_stop_after" in setup:
        options["retry_stop_after"] = setup["retry_stop_after"]
    if setup.get("auth_mode"):
        options["auth_mode"] = setup["auth_mode"]
    if not options:
        return build_transport(spec, settings)
    import importlib

    module, _, attr = spec.factory.partition(":")
    cls = getattr(importlib.import_module(module), attr)
    return cls(spec, settings, cli_path=fake_path, **options)


@pytest.mark.parametrize("path", RECORDINGS, ids=_id)
def test_replay_gives_the_live_outcome(path, tmp_path):
    from harnesscheck.testing.fakes import install_fake_cli

    cli = path.parent.name
    data = json.loads(path.read_text(encoding="utf-8"))
    prov = data["provenance"]
    live = prov["live_outcome"]
    setup = prov.get("transport") or {}
    root = tmp_path / "work"
    root.mkdir()
    (root / "README.md").write_text("hello from the worktree\n")
    hangs = "hang" in data["steps"][-1]
    # A recording that ends in a hang is ended by its deadline: a short one, repeated longer
    # when the fake had not got to its hang by then (a loaded machine), so every line it
    # replays before the hang was written first.
    for deadline in (0.5, 2.0, 8.0) if hangs else (60.0,):
        fake = install_fake_cli(cli, data, tmp_path / f"bin-{deadline:g}")
        transport = _transport(cli, prov, fake.path)
        request = AgentSessionRequest(
            prompt="Say hello.",
            scope=ToolScope(name="replay", root=root, read_only=True),
            max_iters=setup.get("max_iters", 8),
            model=setup.get("model"),
            timeout_s=deadline,
            run_dir=tmp_path / f"run-{deadline:g}",
        )
        o = transport.run_session(request)
        if not hangs or _reached_its_hang(fake):
            break
    got = {
        "status": o.status.value,
        "error_class": o.error_class.value if o.error_class else None,
        "usage": {"input": o.usage.input, "output": o.usage.output, "cache_read": o.usage.cache_read, "cache_write": o.usage.cache_write},
        "served_model": o.served_model,
        "model_verdict": o.model_verdict.value,
        "tools_used": list(o.tools_used),
        "native_tool_calls": list(o.native_tool_calls),
    }
    want = {k: live[k] for k in got}
    assert got == want


def _reached_its_hang(fake) -> bool:
    """Whether the fake CLI got to its `hang` step (recorded as it begins)."""
    text = fake.record_path.read_text(encoding="utf-8") if fake.record_path.is_file() else ""
    for line in text.split("\n"):
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("kind") == "step" and rec.get("action") == "hang":
            return True
    return False


def test_every_recording_profile_holds_together():
    """What `record` reads of each CLI's recording profile (backends/<backend>/recording.py) is
    consistent: RECIPES is the profiles' recipes by CLI name; an error answer is served for a
    fixture the profile records; `model_not_found` asks for the profile's missing model, which
    an error answer may name; an API-key recipe has the variable to put the key in; a recipe
    that breaks or slows the bridge has a module whose `bridge_command` can be replaced; a
    recipe without a credential has variables to take away."""
    import importlib

    from harnesscheck.backends.registry import kit_profile_of_cli
    from harnesscheck.loopback.record import PROFILES, RECIPES

    assert set(RECIPES) == set(PROFILES) and {"claude", "codex", "gemini"} <= set(RECIPES)
    for cli, profile in PROFILES.items():
        assert kit_profile_of_cli(cli).recording is profile
        assert RECIPES[cli] == dict(profile.recipes), cli
        assert set(profile.error_answers) <= set(profile.recipes), (cli, set(profile.error_answers) - set(profile.recipes))
        if "model_not_found" in profile.recipes:
            assert profile.recipes["model_not_found"].model == profile.missing_model, cli
        credentials = {r.credential for r in profile.recipes.values()}
        assert credentials <= {"token", "none", "api_key"}, (cli, credentials)
        assert profile.api_key_var or "api_key" not in credentials, f"{cli}: an api_key recipe without api_key_var"
        assert profile.credential_vars or "none" not in credentials, f"{cli}: a recipe without a credential, but no credential_vars"
        if any(r.broken_bridge or r.slow_bridge_s for r in profile.recipes.values()):
            assert callable(getattr(importlib.import_module(profile.bridge_module), "bridge_command", None)), cli


def test_record_never_overwrites_a_hand_written_fixture():
    from harnesscheck.loopback.record import recipe_for

    for cli, name in [
        ("claude", "malformed_line"),
        ("claude", "usage_limit"),
        ("claude", "helper_model"),
        ("codex", "native_tool_use"),
        ("codex", "exit0_is_error"),
    ]:
        with pytest.raises(ValueError, match="cannot be recorded"):
            recipe_for(cli, name)
        assert not is_recording(fixtures_dir() / cli / f"{name}.json")


def test_to_fixture_scrubs_and_keeps_what_the_cli_said(tmp_path):
    """Placeholders only where init echoes the transport's request; a failed bridge stays
    literal; stderr is kept, scrubbed; a host-ended session replays as a hang."""
    from types import SimpleNamespace

    from harnesscheck.backends.loopback_endpoint import DUMMY_KEY
    from harnesscheck.loopback.record import Recipe, Recording, to_fixture

    run = tmp_path / "harnesscheck-record-abc123"
    init = {"type": "system", "subtype": "init", "cwd": f"{run}/run/cwd", "tools": [], "model": "m-1", "mcp_servers": [{"name": "bridge", "status": "failed"}]}
    ok_init = dict(init, tools=["mcp__bridge__read_file"], mcp_servers=[{"name": "bridge", "status": "connected"}])
    outcome = SimpleNamespace(
        status=SimpleNamespace(value="blocked"),
        error_class=SimpleNamespace(value="mcp_unavailable"),
        usage=SimpleNamespace(input=0, output=0, cache_read=0, cache_write=0),
        served_model=None,
        model_verdict=SimpleNamespace(value="unverified"),
        tools_used=[],
        native_tool_calls=[],
        refusals=[],
    )
    rec = Recording(
        backend="claude-code",
        cli="claude",
        scenario="mcp_failed",
        cli_version="2.1.197",
        lines=[json.dumps(init), json.dumps(ok_init)],
        exit_code=None,
        ended_by_host=True,
        outcome=outcome,
        machine_paths=[(f"{run}/run/cwd", "{{cwd}}"), (str(run), "<run-dir>")],
        stderr_tail=f"key {DUMMY_KEY} at http://127.0.0.1:45678/v1 in {run}/x\n",
        recipe=Recipe(broken_bridge=True),
    )
    fx = to_fixture(rec)
    text = json.dumps(fx)
    first, second = fx["steps"][0]["emit"], fx["steps"][1]["emit"]
    assert first["mcp_servers"] == [{"name": "bridge", "status": "failed"}] and first["tools"] == []
    assert second["mcp_servers"] == "{{mcp_server_names}}" and second["tools"] == "{{allowed_tools}}"
    assert first["cwd"] == "{{cwd}}" and first["model"] == "{{model}}" and fx["default_model"] == "m-1"
    assert fx["steps"][-2]["stderr"] == "key [REDACTED] at http://127.0.0.1:PORT/v1 in <run-dir>/x"
    assert fx["steps"][-1] == {"hang": True}
    assert DUMMY_KEY not in text and "45678" not in text and str(tmp_path) not in text
    assert fx["provenance"]["source"] == "loopback-recording" and "cannot start" in fx["provenance"]["notes"]


def test_recordings_keep_every_fact_a_classification_reads(tmp_path):
    """A server status other than connected (2.1.332's `pending`) survives recording
    literally; connected servers become the placeholder, the field beside name and status
    (`source`) kept in `mcp_server_fields` for the replay; a messaging socket path in a
    short private runtime dir is scrubbed like the run dir."""
    from types import SimpleNamespace

    from harnesscheck.loopback.record import Recipe, Recording, to_fixture

    run = tmp_path / "harnesscheck-record-xyz"
    pending = {
        "type": "system",
        "subtype": "init",
        "cwd": f"{run}/run/cwd",
        "tools": ["mcp__bridge__read_file"],
        "model": "m-1",
        "mcp_servers": [{"name": "bridge", "status": "pending", "source": "dynamic"}],
        "messaging_socket_path": "/tmp/hc-rt-a1b2c3/cc-socks/4242.sock",
    }
    connected = dict(
        pending, mcp_servers=[{"name": "bridge", "status": "connected", "source": "dynamic"}], messaging_socket_path=f"{run}/run/runtime/cc-socks/4242.sock"
    )
    outcome = SimpleNamespace(
        status=SimpleNamespace(value="ok"),
        error_class=None,
        usage=SimpleNamespace(input=0, output=0, cache_read=0, cache_write=0),
        served_model=None,
        model_verdict=SimpleNamespace(value="unverified"),
        tools_used=[],
        native_tool_calls=[],
        refusals=[],
    )
    rec = Recording(
        backend="claude-code",
        cli="claude",
        scenario="success",
        cli_version="2.1.332",
        lines=[json.dumps(pending), json.dumps(connected)],
        exit_code=0,
        ended_by_host=False,
        outcome=outcome,
        machine_paths=[(f"{run}/run/cwd", "{{cwd}}"), (str(run), "<run-dir>")],
        recipe=Recipe(),
    )
    fx = to_fixture(rec)
    first, second = fx["steps"][0]["emit"], fx["steps"][1]["emit"]
    assert first["mcp_servers"] == [{"name": "bridge", "status": "pending", "source": "dynamic"}]
    # connected everywhere: the placeholder, with the shared field kept for the replay
    assert second["mcp_servers"] == "{{mcp_server_names}}" and fx["mcp_server_fields"] == {"source": "dynamic"}
    assert first["messaging_socket_path"] == "<runtime-dir>/cc-socks/4242.sock"
    assert second["messaging_socket_path"] == "<run-dir>/run/runtime/cc-socks/4242.sock"
    assert "/tmp/" not in json.dumps(fx)
