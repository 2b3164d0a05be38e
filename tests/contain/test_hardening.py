"""Hardening beside the sandbox (issue 30): `verify` and the kit's pytest processes are
non-dumpable hosts; clean-up that a CLI cannot refuse; the CLI cache's integrity; the loopback
model server serves its session's credential only; a 70 MiB line without a newline is
answered at the bridge's bound (round-2 finding)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

from harnesscheck.contain import process


def test_verify_hardens_itself_before_anything_runs(monkeypatch, tmp_path):
    from harnesscheck.kit import verify

    called = []
    monkeypatch.setattr(process, "harden_host", lambda: called.append(True))
    code = verify.verify_command(["no-such-backend"], ["offline"], tmp_path / "r", None, None, ratchet=None)
    assert called and code != 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_GET_DUMPABLE is Linux")
def test_a_kit_pytest_process_is_not_dumpable(tmp_path):
    (tmp_path / "test_probe.py").write_text(
        textwrap.dedent("""
        import ctypes
        def test_probe():
            assert ctypes.CDLL(None).prctl(3, 0, 0, 0, 0) == 0, "dumpable"
    """)
    )
    env = {k: v for k, v in os.environ.items() if k != process.HOST_DUMPABLE_VAR}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider", "--hc-backend", "fake", str(tmp_path / "test_probe.py")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


# --- clean-up that cannot be refused ----------------------------------------------------------


def test_a_private_dir_is_removed_whatever_modes_the_cli_left(tmp_path):
    from harnesscheck.contain.rundir import remove_private_tree

    top = tmp_path / "tmp"
    (top / "locked" / "deeper").mkdir(parents=True)
    (top / "locked" / "deeper" / "f").write_text("x")
    (top / "ro-file").write_text("x")
    os.chmod(top / "ro-file", 0)
    os.chmod(top / "locked" / "deeper", 0)
    os.chmod(top / "locked", 0)
    os.chmod(top, 0o777)
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "keep").write_text("keep")
    os.symlink(tmp_path / "target", top / "link")  # unlinked, never followed
    assert remove_private_tree(top) is None
    assert not top.exists() and (tmp_path / "target" / "keep").read_text() == "keep"


def test_recheck_restores_and_reports_what_the_cli_opened_up(tmp_path):
    from harnesscheck.contain.rundir import recheck_private

    run = tmp_path / "run"
    (run / "home").mkdir(parents=True)
    os.chmod(run, 0o777)
    os.chmod(run / "home", 0o777)
    found = recheck_private(run)
    assert any("run dir was mode 777" in f for f in found) and any(f.startswith("home was mode 777") for f in found)
    assert (run.stat().st_mode & 0o777) == 0o700 and not (run / "home").stat().st_mode & 0o022
    assert recheck_private(run) == []


def _fake_session(tmp_path, scenario, sandbox="auto"):
    from harnesscheck.backends.claude_code import ClaudeCodeTransport
    from harnesscheck.backends.registry import get_spec
    from harnesscheck.core.config import Settings
    from harnesscheck.core.contracts import AgentSessionRequest
    from harnesscheck.core.scope import ToolScope
    from harnesscheck.testing.fakes import install_fake_cli

    root = tmp_path / "worktree"
    root.mkdir()
    fake = install_fake_cli("claude", scenario, tmp_path / "bin")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "no-home"), "LANG": "C.UTF-8"}
    transport = ClaudeCodeTransport(get_spec("claude-code"), Settings(sandbox=sandbox), cli_path=fake.path, parent_env=env)
    request = AgentSessionRequest(prompt="hi", scope=ToolScope(root=root), timeout_s=30, run_dir=tmp_path / "run")
    return transport.run_session(request)


def test_a_cli_that_opens_up_its_dirs_leaves_nothing_world_writable_and_the_outcome_says_so(tmp_path):
    """A hostile CLI (guards only) chmods its TMPDIR and the run dir 0777 and leaves a mode-0
    subdir: the temp dir still goes, the run dir is 0700 again, and the outcome is an error."""
    from harnesscheck.testing.fakes import load_fixture

    scenario = load_fixture("claude", "success")
    script = 'mkdir -p "$TMPDIR/x/y"; chmod 0 "$TMPDIR/x"; chmod 777 "$TMPDIR" "$TMPDIR/.."'
    # the grandchild does it at once; the fake waits (an upper bound, generous for a loaded box)
    scenario["steps"] = [{"spawn": f"/bin/sh -c '{script}'"}, {"delay": 5}] + scenario["steps"]
    outcome = _fake_session(tmp_path, scenario, sandbox="off")
    run = tmp_path / "run"
    assert not (run / "tmp").exists()
    assert (run.stat().st_mode & 0o777) == 0o700
    assert outcome.status == "error" and outcome.error_class == "policy_violation", outcome
    assert "run dir was mode 777" in outcome.message


def test_in_its_sandbox_a_cli_cannot_open_up_the_run_dir_and_its_temp_dir_still_goes(tmp_path):
    """The same hostile CLI sandboxed: the run dir is read-only in its namespace (the chmod
    fails), its TMPDIR (writable, opened up, a mode-0 subdir left) is removed all the same."""
    from harnesscheck.contain import sandbox
    from harnesscheck.testing.fakes import load_fixture

    if not sandbox.status().available:
        pytest.skip(f"no sandbox here: {sandbox.status().reason}")
    scenario = load_fixture("claude", "success")
    script = 'mkdir -p "$TMPDIR/x/y"; chmod 0 "$TMPDIR/x"; chmod 777 "$TMPDIR" "$TMPDIR/.."'
    scenario["steps"] = [{"spawn": f"/bin/sh -c '{script}'"}, {"delay": 5}] + scenario["steps"]
    outcome = _fake_session(tmp_path, scenario, sandbox="require")
    run = tmp_path / "run"
    assert outcome.containment == "bwrap"
    assert not (run / "tmp").exists()
    assert (run.stat().st_mode & 0o777) == 0o700
    assert "run dir was mode 777" not in (outcome.message or ""), "the run dir was opened up from inside the sandbox"


# --- the CLI cache's integrity ------------------------------------------------------------------


def _cached_cli(monkeypatch, tmp_path):
    from harnesscheck.backends import climanifest

    monkeypatch.setenv("HARNESSCHECK_CACHE", str(tmp_path / "cache"))
    pkg = tmp_path / "cache" / "clis" / "tool@1.0"
    (pkg / "node_modules" / "tool").mkdir(parents=True)
    entry = pkg / "node_modules" / "tool" / "cli.sh"
    entry.write_text("#!/bin/sh\necho 1.0\n")
    entry.chmod(0o755)
    (pkg / "node_modules" / ".bin").mkdir()
    os.symlink("../tool/cli.sh", pkg / "node_modules" / ".bin" / "tool")
    return climanifest, pkg, pkg / "node_modules" / ".bin" / "tool"


def test_a_cached_cli_without_a_recorded_digest_is_refused_with_the_fix(monkeypatch, tmp_path):
    climanifest, _pkg, cli = _cached_cli(monkeypatch, tmp_path)
    with pytest.raises(climanifest.CliInstallChanged) as err:
        climanifest.verify(cli)
    assert "install-clis" in err.value.fix


@pytest.mark.parametrize("attack", ["rewrite", "plant", "relink", "remove"])
def test_a_cached_cli_changed_after_install_is_refused(monkeypatch, tmp_path, attack):
    climanifest, pkg, cli = _cached_cli(monkeypatch, tmp_path)
    climanifest.record(pkg)
    climanifest.verify(cli)  # as installed: fine
    entry = pkg / "node_modules" / "tool" / "cli.sh"
    if attack == "rewrite":  # same size, content changed, mtime put back
        st = entry.stat()
        entry.write_text("#!/bin/sh\necho 6.6\n")
        os.utime(entry, ns=(st.st_atime_ns, st.st_mtime_ns))
    elif attack == "plant":
        (pkg / "node_modules" / "tool" / "evil.js").write_text("x")
    elif attack == "relink":
        (pkg / "node_modules" / ".bin" / "tool").unlink()
        os.symlink("/bin/sh", pkg / "node_modules" / ".bin" / "tool")
    else:
        entry.unlink()
    with pytest.raises(climanifest.CliInstallChanged, match="not what install-clis installed"):
        climanifest.verify(cli)


def test_find_cli_refuses_a_changed_cached_cli_before_running_it(monkeypatch, tmp_path):
    from harnesscheck.backends.registry import find_cli, get_spec
    from harnesscheck.core.config import Settings

    climanifest, pkg, cli = _cached_cli(monkeypatch, tmp_path)
    climanifest.record(pkg)
    ran = tmp_path / "ran"
    (pkg / "node_modules" / "tool" / "cli.sh").write_text(f"#!/bin/sh\ntouch {ran}\necho 1.0\n")
    with pytest.raises(climanifest.CliInstallChanged):
        find_cli(get_spec("claude-code"), Settings(cli=cli), check_version=False)
    assert not ran.exists()


def test_a_cli_outside_the_cache_is_not_judged(monkeypatch, tmp_path):
    climanifest, _pkg, _cli = _cached_cli(monkeypatch, tmp_path)
    elsewhere = tmp_path / "bin" / "tool"
    elsewhere.parent.mkdir()
    elsewhere.write_text("#!/bin/sh\n")
    climanifest.verify(elsewhere)


# --- the loopback model server serves its session's credential only ---------------------------


@pytest.mark.parametrize("key", [None, "sk-loopback-dummy-0000", "sk-someone-else"])
def test_the_model_server_refuses_every_other_credential_and_counts_it_as_foreign(key):
    import json
    import urllib.error
    import urllib.request

    from harnesscheck.backends.loopback_endpoint import session_key
    from harnesscheck.loopback.scenario import named_scenario
    from harnesscheck.loopback.server import ScriptedModelServer

    mine = session_key()
    body = json.dumps({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}).encode()
    with ScriptedModelServer(named_scenario("success"), expected_key=mine) as srv:
        headers = {"content-type": "application/json", **({"x-api-key": key} if key else {})}
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(urllib.request.Request(srv.base_url + "/v1/messages", body, headers), timeout=30)
        assert err.value.code == 401
        ok = urllib.request.urlopen(
            urllib.request.Request(srv.base_url + "/v1/messages", body, {"content-type": "application/json", "x-api-key": mine}), timeout=30
        )
        assert ok.status == 200
        assert len(srv.foreign_requests()) == 1 and srv.foreign_requests()[0].status == 401
        assert len(srv.turn_requests()) == 1 and srv.turn_requests()[0].credential_matches


# --- round-2 finding: a 70 MiB line with no newline -------------------------------------------


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the forkserver relay is Linux")
def test_a_70_mib_line_without_newline_is_answered_at_the_bound_through_the_relay(tmp_path):
    """The bridge a CLI reaches (relay -> forkserver child) answers a request line past its
    memory bound (32 MiB) with a JSON-RPC error while the line is still open (no newline was
    ever sent), and serves the next request once the line ends."""
    import json
    import select
    import threading

    from harnesscheck.bridge import forkserver
    from harnesscheck.bridge.spec import BridgeSpec, write_spec
    from harnesscheck.core.scope import ToolScope

    if not forkserver.enabled():
        pytest.skip("no forkserver here")
    root, run = tmp_path / "wt", tmp_path / "run"
    root.mkdir()
    run.mkdir()
    spec = write_spec(
        BridgeSpec(scope=ToolScope(root=root), run_dir=run, trace_path=run / "t.jsonl", session_id="s", parent_pid=os.getpid()), run / "spec.json"
    )
    argv, env = forkserver.relay_command(spec)
    assert forkserver.bind_session(spec, os.getpid())
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    try:
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
        }
        proc.stdin.write((json.dumps(init) + "\n").encode())
        proc.stdin.flush()
        assert b'"id":1' in proc.stdout.readline()
        lines: list[bytes] = []
        reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, b"")), daemon=True)
        reader.start()
        chunk = b"a" * (1 << 20)
        for _ in range(70):  # 70 MiB, never a newline
            proc.stdin.write(chunk)
        proc.stdin.flush()
        end = time.monotonic() + 120  # an upper bound for a loaded machine, not a measure
        while not lines and time.monotonic() < end:
            select.select([], [], [], 0.05)
        assert lines and b"longer than" in lines[0] and b'"id":null' in lines[0], lines[:1]
        proc.stdin.write(b"\n" + (json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}) + "\n").encode())
        proc.stdin.flush()
        while len(lines) < 2 and time.monotonic() < end:
            select.select([], [], [], 0.05)
        assert len(lines) >= 2 and b'"id":2' in lines[1]
    finally:
        proc.kill()
        proc.wait()
        forkserver.release_session(spec)
