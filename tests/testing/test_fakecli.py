"""The fake-CLI engine keeps its documented scenario format (fake_clis/_fakecli.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from harnesscheck.core.paths import fake_clis_dir
from harnesscheck.testing.fakes import install_fake_cli


def _run(fake, *args, stdin=subprocess.DEVNULL, input=None, timeout=30):
    kwargs = {"input": input} if input is not None else {"stdin": stdin}
    return subprocess.run([str(fake.path), *args], capture_output=True, timeout=timeout, **kwargs)


@pytest.mark.parametrize(
    "cli,expected",
    [("claude", "2.1.332 (Claude Code)"), ("codex", "codex-cli 0.171.0"), ("cursor-agent", "2026.08.11-e8db854")],
)
def test_version_answers_like_the_real_cli(cli, expected, tmp_path):
    shipped = subprocess.run([str(fake_clis_dir() / cli), "--version"], capture_output=True, timeout=30)
    assert shipped.stdout.decode().strip() == expected
    fake = install_fake_cli(cli, {"steps": []}, tmp_path)
    assert _run(fake, "--version").stdout.decode().strip() == expected
    assert fake.records() == []  # --version is not an invocation worth recording


def test_scenario_version_overrides(tmp_path):
    fake = install_fake_cli("claude", {"version": "1.0.0 (Claude Code)", "steps": []}, tmp_path)
    assert _run(fake, "-v").stdout.decode().strip() == "1.0.0 (Claude Code)"


def test_emit_placeholders_and_split(tmp_path):
    scenario = {
        "default_model": "claude-opus-4-8",
        "steps": [
            {
                "emit": {
                    "type": "system",
                    "model": "{{model}}",
                    "tools": "{{allowed_tools}}",
                    "cwd": "{{cwd}}",
                    "session_id": "{{session_id}}",
                    "p": "{{prompt}}",
                },
                "split": [1, 7, 30],
                "gap": 0.01,
            },
            {"emit": "plain string line"},
        ],
    }
    fake = install_fake_cli("claude", scenario, tmp_path)
    proc = _run(fake, "-p", "--allowedTools", "mcp__bridge__read_file,mcp__bridge__grep", input=b"the prompt")
    lines = proc.stdout.decode().splitlines()
    first = json.loads(lines[0])
    assert first["model"] == "claude-opus-4-8"
    assert first["tools"] == ["mcp__bridge__read_file", "mcp__bridge__grep"]
    assert first["p"] == "the prompt"
    assert len(first["session_id"]) == 36
    assert lines[1] == "plain string line"
    proc = _run(fake, "--model", "sonnet")
    assert json.loads(proc.stdout.decode().splitlines()[0])["model"] == "sonnet"


def test_noise_oversize_raw_invalid_utf8(tmp_path):
    scenario = {
        "steps": [
            {"noise": "[SandboxDebug] hello"},
            {"oversize": 5000},
            {"invalid_utf8": True},
            {"raw": '{"type":"result","subt'},
        ]
    }
    fake = install_fake_cli("claude", scenario, tmp_path)
    out = _run(fake, "-p").stdout
    lines = out.split(b"\n")
    assert lines[0] == b"[SandboxDebug] hello"
    assert len(lines[1]) == 5000 and json.loads(lines[1])["type"] == "user"
    with pytest.raises(UnicodeDecodeError):
        lines[2].decode("utf-8")
    assert lines[3] == b'{"type":"result","subt'  # no trailing newline
    assert not out.endswith(b"\n")


def test_stderr_flood_and_exit_code(tmp_path):
    fake = install_fake_cli("codex", {"steps": [{"stderr": "x" * 1000, "repeat": 1000, "newline": False}, {"exit": 7}]}, tmp_path)
    proc = _run(fake, "exec")
    assert proc.returncode == 7
    assert len(proc.stderr) == 1_000_000 and b"\n" not in proc.stderr


def test_records_argv_env_cwd_stdin(tmp_path):
    fake = install_fake_cli("claude", {"stdin": "read", "steps": []}, tmp_path / "bin")
    work = tmp_path / "cwd"
    work.mkdir()
    env = {"PATH": os.environ["PATH"], "CANARY": "c1"}
    subprocess.run([str(fake.path), "-p", "--", "x"], input=b"hello", cwd=work, env=env, capture_output=True, timeout=30)
    subprocess.run([str(fake.path), "-p"], stdin=subprocess.DEVNULL, cwd=work, env=env, capture_output=True, timeout=30)
    with open(tmp_path / "in.txt", "wb") as fh:
        fh.write(b"from a file")
    with open(tmp_path / "in.txt", "rb") as fh:
        subprocess.run([str(fake.path)], stdin=fh, cwd=work, env=env, capture_output=True, timeout=30)
    first, second, third = fake.records()
    assert first["argv"][1:] == ["-p", "--", "x"]
    assert first["env"]["CANARY"] == "c1"
    assert first["cwd"] == str(work)
    assert (first["stdin_type"], first["stdin"], first["stdin_bytes"]) == ("pipe", "hello", 5)
    assert second["stdin_type"] == "devnull"
    assert (third["stdin_type"], third["stdin"]) == ("file", "from a file")


def test_stdin_ignore_does_not_read(tmp_path):
    fake = install_fake_cli("claude", {"stdin": "ignore", "steps": []}, tmp_path)
    proc = subprocess.Popen([str(fake.path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.wait(timeout=30) == 0  # stdin never closed, yet the fake ended
    finally:
        proc.stdin.close()
        proc.stdout.close()
    assert fake.last()["stdin_type"] == "pipe" and fake.last()["stdin_bytes"] == 0


def test_mcp_config_is_copied_into_the_record(tmp_path):
    cfg = tmp_path / "mcp.json"
    cfg.write_text(json.dumps({"mcpServers": {"bridge": {"command": "/bin/true"}}}))
    fake = install_fake_cli("claude", {"steps": [{"emit": {"mcp_servers": "{{mcp_server_names}}"}}]}, tmp_path / "bin")
    out = _run(fake, "-p", "--mcp-config", str(cfg)).stdout
    assert json.loads(out)["mcp_servers"] == [{"name": "bridge", "status": "connected"}]
    assert json.loads(fake.last()["mcp_configs"][str(cfg)])["mcpServers"]["bridge"]["command"] == "/bin/true"


def test_inline_mcp_config_is_recorded_as_given(tmp_path):
    """claude's `--mcp-config` takes the JSON itself too: the record keeps it (a kit reading the
    record sees the servers a backend configured either way)."""
    inline = json.dumps({"mcpServers": {"tools": {"command": "/bin/true"}}})
    fake = install_fake_cli("claude", {"steps": [{"emit": {"mcp_servers": "{{mcp_server_names}}"}}]}, tmp_path / "bin")
    _run(fake, "-p", "--mcp-config", inline)
    assert list(fake.last()["mcp_configs"].values()) == [inline]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is not alive
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_spawn_records_grandchildren_and_setsid(tmp_path):
    scenario = {"steps": [{"spawn": "sleep 1000"}, {"spawn": "sleep 1000", "setsid": True}, {"emit": {"type": "x"}}, {"hang": True}]}
    fake = install_fake_cli("claude", scenario, tmp_path)
    proc = subprocess.Popen([str(fake.path)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, start_new_session=True)
    kids = []
    try:
        assert json.loads(proc.stdout.readline()) == {"type": "x"}
        kids = fake.last()["grandchildren"]
        assert [k["setsid"] for k in kids] == [False, True]
        assert os.getpgid(kids[0]["pid"]) == proc.pid
        assert os.getpgid(kids[1]["pid"]) == kids[1]["pid"]  # escaped into its own session
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        for k in kids:
            try:
                os.kill(k["pid"], signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait(timeout=30)
        proc.stdout.close()


def test_sigterm_exits_143_unless_ignored(tmp_path):
    fake = install_fake_cli("claude", {"steps": [{"emit": {"type": "ready"}}, {"hang": True}]}, tmp_path / "a")
    proc = subprocess.Popen([str(fake.path)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
    proc.stdout.readline()
    proc.terminate()
    assert proc.wait(timeout=30) == 143
    proc.stdout.close()

    stubborn = install_fake_cli("claude", {"steps": [{"ignore_sigterm": True}, {"emit": {"type": "ready"}}, {"hang": True}]}, tmp_path / "b")
    proc = subprocess.Popen([str(stubborn.path)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
    proc.stdout.readline()
    proc.terminate()
    time.sleep(0.3)
    assert proc.poll() is None  # still alive after SIGTERM
    proc.kill()
    assert proc.wait(timeout=30) == -signal.SIGKILL
    proc.stdout.close()


def test_delay_orders_output(tmp_path):
    fake = install_fake_cli("claude", {"steps": [{"emit": {"n": 1}}, {"delay": 0.05}, {"emit": {"n": 2}}]}, tmp_path)
    assert [json.loads(x)["n"] for x in _run(fake).stdout.splitlines()] == [1, 2]


def test_unknown_step_fails_loudly(tmp_path):
    fake = install_fake_cli("claude", {"steps": [{"frobnicate": 1}]}, tmp_path)
    proc = _run(fake)
    assert proc.returncode != 0 and b"unknown scenario step" in proc.stderr


def test_fixture_name_resolves(tmp_path):
    from harnesscheck.testing.fakes import fixture_path

    if not fixture_path("claude", "success").is_file():
        pytest.skip("claude fixtures not present yet")
    fake = install_fake_cli("claude", "success", tmp_path)
    assert fake.scenario_path == fixture_path("claude", "success")


def test_render_replays_output_steps_without_side_effects():
    import sys

    sys.path.insert(0, str(fake_clis_dir()))
    import _fakecli

    scenario = {
        "default_model": "m-1[1m]",
        "steps": [
            {"spawn": "sleep 1000"},
            {"delay": 100},
            {"stderr": "x"},
            {"emit": {"model": "{{model}}", "base": "{{model_base}}"}},
            {"noise": "n"},
            {"hang": True},
            {"emit": {"never": 1}},
        ],
    }
    data, code = _fakecli.render("claude", scenario)
    assert code is None  # it hangs
    assert data.splitlines() == [b'{"model":"m-1[1m]","base":"m-1"}', b"n"]
    assert _fakecli.render("claude", {"steps": [{"emit": "a"}, {"exit": 3}]}) == (b"a\n", 3)


def test_records_list_config_homes_by_name_only(tmp_path):
    fake = install_fake_cli("claude", {"steps": []}, tmp_path / "bin")
    home = tmp_path / "cfg"
    home.mkdir()
    (home / "secret.json").write_text("TOP-SECRET")
    (home / "link").symlink_to(tmp_path / "elsewhere")
    env = {"PATH": os.environ["PATH"], "CLAUDE_CONFIG_DIR": str(home)}
    subprocess.run([str(fake.path)], stdin=subprocess.DEVNULL, env=env, cwd=tmp_path, capture_output=True, timeout=30)
    rec = fake.last()
    assert rec["config_dirs"]["CLAUDE_CONFIG_DIR"] == {"link": "link:" + str(tmp_path / "elsewhere"), "secret.json": "file"}
    assert "TOP-SECRET" not in json.dumps(rec)


def _steps(fake) -> list[dict]:
    if not fake.record_path.is_file():
        return []
    recs = [json.loads(line) for line in fake.record_path.read_text().splitlines() if line.strip()]
    return [r for r in recs if r["kind"] == "step"]


def _wait_for(predicate, timeout=30.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def test_progress_is_recorded_after_each_step_and_before_a_hang(tmp_path):
    scenario = {"steps": [{"emit": {"n": 1}}, {"spawn": "sleep 1000"}, {"noise": "banner"}, {"hang": True}, {"emit": {"never": 1}}]}
    fake = install_fake_cli("claude", scenario, tmp_path)
    before = time.monotonic()
    proc = subprocess.Popen([str(fake.path)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert _wait_for(lambda: any(s["action"] == "hang" for s in _steps(fake))), "the fake never recorded its hang"
        steps = _steps(fake)
        assert [(s["index"], s["action"]) for s in steps] == [(0, "emit"), (1, "spawn"), (2, "noise"), (3, "hang")]
        assert all(s["pid"] == proc.pid for s in steps)
        monos = [s["mono"] for s in steps]
        assert before <= monos[0] and monos == sorted(monos) and monos[-1] <= time.monotonic()  # one clock with ours
        # "hang" means every earlier step is done: its lines are in the pipe, its grandchild exists
        assert json.loads(proc.stdout.readline()) == {"n": 1}
        assert proc.stdout.readline() == b"banner\n"
        assert _alive(fake.last()["grandchildren"][0]["pid"])
        assert proc.poll() is None  # and the fake really stalls
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        proc.stdout.close()


def test_progress_exit_is_recorded_before_exiting_and_none_without_a_record(tmp_path):
    fake = install_fake_cli("codex", {"steps": [{"emit": "a"}, {"exit": 4}, {"emit": "never"}]}, tmp_path / "a")
    assert _run(fake, "exec").returncode == 4
    assert [(s["index"], s["action"]) for s in _steps(fake)] == [(0, "emit"), (1, "exit")]
    # the shipped fake (no sidecar) records nothing, progress included
    proc = subprocess.run([str(fake_clis_dir() / "claude"), "--version"], capture_output=True, timeout=30)
    assert proc.returncode == 0
    version_only = install_fake_cli("claude", {"steps": [{"emit": "a"}]}, tmp_path / "b")
    _run(version_only, "--version")
    assert _steps(version_only) == []  # a version probe runs no step


# -- start-up: the suite starts a fake ~170 times per run (bench/bench_fake.py) -----------

#: Modules a fake must not import on its common paths (--version, a replay, an MCP session,
#: spawn / ignore-SIGTERM / hang): each costs milliseconds of start-up. json is replaced by
#: its C half (_json), re by str methods, signal by _signal, subprocess by os.posix_spawn, os
#: itself by posix.
HEAVY_MODULES = {
    "json",
    "re",
    "enum",
    "functools",
    "collections",
    "subprocess",
    "signal",
    "selectors",
    "threading",
    "shlex",
    "uuid",
    "pathlib",
    "tomllib",
    "platform",
    "__future__",
    "os",
    "posixpath",
    "_collections_abc",
}


def _imported(fake, *args, env=None, cwd=None, pass_fds=()) -> tuple[set[str], subprocess.CompletedProcess]:
    """Modules imported by one run of the fake (`-X importtime`), started as its shebang does."""
    first = fake.path.read_text(encoding="utf-8").splitlines()[0]
    interpreter, *flags = first[2:].split()
    proc = subprocess.run(
        [interpreter, *flags, "-X", "importtime", str(fake.path), *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        env=env,
        cwd=cwd,
        timeout=60,
        pass_fds=pass_fds,
    )
    names = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.decode().splitlines() if line.startswith("import time:")}
    return names, proc


def test_the_wrapper_runs_the_engine_isolated_and_without_site(tmp_path):
    fake = install_fake_cli("claude", {"steps": []}, tmp_path)
    assert fake.path.read_text(encoding="utf-8").splitlines()[0].split()[1:] == ["-IS"]


def test_version_imports_only_what_it_needs(tmp_path):
    fake = install_fake_cli("claude", {"steps": []}, tmp_path)
    names, proc = _imported(fake, "--version")
    assert proc.stdout == b"2.1.332 (Claude Code)\n"
    assert {"_fakecli", "_json"} <= names  # the probe sees the engine's imports
    assert not names & (HEAVY_MODULES | {"select", "site"})


def test_a_replay_imports_no_process_or_toml_machinery(tmp_path):
    """A codex run with its per-run config.toml, replaying every step that neither spawns nor
    speaks MCP, placeholders included: no json, re, signal, subprocess, tomllib, uuid."""
    codex_home = tmp_path / "codex-home"
    codex_home.mkdir()
    (codex_home / "config.toml").write_text('[mcp_servers.bridge]\ncommand = "/bin/true"\n')
    scenario = {
        "default_model": "gpt-5",
        "steps": [
            {"emit": {"id": "{{session_id}}", "model": "{{model}}", "cwd": "{{cwd}}", "pid": "{{pid}}", "p": "{{prompt}}"}, "split": [3]},
            {"noise": "banner"},
            {"oversize": 300},
            {"raw": '{"cut', "newline": True},
            {"invalid_utf8": True},
            {"stderr": "warn", "repeat": 2},
            {"delay": 0},
            {"ignore_sigterm": False},
            {"exit": 0},
        ],
    }
    fake = install_fake_cli("codex", scenario, tmp_path / "bin")
    env = {"PATH": os.environ["PATH"], "CODEX_HOME": str(codex_home), "HOME": str(tmp_path)}
    names, proc = _imported(fake, "exec", "--json", "-", env=env, cwd=tmp_path)
    assert proc.returncode == 0 and json.loads(proc.stdout.splitlines()[0])["model"] == "gpt-5"
    assert len(proc.stdout.splitlines()) == 5  # emit, noise, oversize, raw, invalid_utf8
    assert "_json" in names
    assert not names & (HEAVY_MODULES | {"select"})
    assert fake.last()["env"]["CODEX_HOME"] == str(codex_home)


def test_a_success_replay_imports_nothing_heavy(tmp_path):
    fake = install_fake_cli("claude", "success", tmp_path)
    names, proc = _imported(fake, "-p", "--output-format", "stream-json", "--verbose")
    assert proc.returncode == 0 and json.loads(proc.stdout.splitlines()[-1])["type"] == "result"
    assert not names & (HEAVY_MODULES | {"select"})
    assert fake.last()["stdin_type"] == "devnull"


#: A stdio MCP server for the tests: answers initialize, tools/list and tools/call of `probe`
#: with what it sees of itself (fds, stdin and stderr targets, env, cwd, args).
PROBE_SERVER = r"""
import json, os, sys
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    method, result = msg["method"], {}
    if method == "initialize":
        result = {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "probe", "version": "0"}}
    elif method == "tools/list":
        result = {"tools": [{"name": "probe", "inputSchema": {"type": "object"}}]}
    elif method == "tools/call":
        fds = sorted(int(n) for n in os.listdir("/proc/self/fd"))
        status = dict(l.split(":	", 1) for l in open("/proc/self/status").read().splitlines() if ":	" in l)
        seen = {"fds": fds, "stderr": os.readlink("/proc/self/fd/2"), "stdin": os.readlink("/proc/self/fd/0"),
                "canary": os.environ.get("CANARY"), "extra": os.environ.get("EXTRA"),
                "cwd": os.getcwd(), "args": sys.argv[1:]}
        result = {"content": [{"type": "text", "text": json.dumps(seen)}], "isError": False}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}) + "\n")
    sys.stdout.flush()
"""


def _probe_config(tmp_path) -> str:
    server = tmp_path / "probe_server.py"
    server.write_text(PROBE_SERVER)
    cfg = tmp_path / "mcp.json"
    cfg.write_text(json.dumps({"mcpServers": {"bridge": {"command": sys.executable, "args": [str(server), "a b"], "env": {"EXTRA": "from-config"}}}}))
    return str(cfg)


def test_an_mcp_session_starts_the_server_like_popen_and_imports_nothing_heavy(tmp_path):
    """The server gets the fake's env plus the config's, the fake's cwd, pipes on 0/1, stderr
    on /dev/null, no other fd of the fake (not even one the fake inherited); the fake imports no subprocess, json, re, signal or threading to do it."""
    cfg = _probe_config(tmp_path)
    scenario = {
        "mcp": "connect",
        "steps": [
            {"emit": {"servers": "{{mcp_server_names}}", "tools": "{{mcp_tools}}"}},
            {"mcp_call": {"server": "bridge", "tool": "probe", "arguments": {}}},
            {"emit": {"seen": "{{mcp_result_text}}"}},
            {"mcp_calls": [{"name": "probe", "arguments": {"x": 1}}]},
        ],
    }
    fake = install_fake_cli("claude", scenario, tmp_path / "bin")
    work = tmp_path / "work"
    work.mkdir()
    stray_r, stray_w = os.pipe()
    os.set_inheritable(stray_w, True)
    try:
        env = {"PATH": os.environ["PATH"], "CANARY": "c1"}
        names, proc = _imported(fake, "-p", "--mcp-config", cfg, env=env, cwd=work, pass_fds=(stray_w,))
    finally:
        os.close(stray_r)
        os.close(stray_w)
    assert proc.returncode == 0, proc.stderr[-2000:]
    first, second = (json.loads(line) for line in proc.stdout.splitlines())
    assert first == {"servers": [{"name": "bridge", "status": "connected"}], "tools": ["mcp__bridge__probe"]}
    seen = json.loads(second["seen"])
    assert seen["canary"] == "c1" and seen["extra"] == "from-config" and seen["cwd"] == str(work)
    assert seen["args"] == ["a b"] and seen["stderr"] == "/dev/null" and seen["stdin"].startswith("pipe:")
    assert stray_w not in seen["fds"] and len(seen["fds"]) <= 4  # 0-2 and the listing's own fd
    result = next(r for r in _records(fake) if r["kind"] == "mcp_result")
    assert result["name"] == "probe" and result["is_error"] is False and json.loads(result["text"])["extra"] == "from-config"
    assert not names & HEAVY_MODULES


def test_an_mcp_server_that_cannot_start_is_recorded_as_before(tmp_path):
    """Popen's errors, kept: a missing path or a name on no PATH entry."""
    for command in (str(tmp_path / "missing"), "no-such-mcp-server-here"):
        cfg = tmp_path / "mcp.json"
        cfg.write_text(json.dumps({"mcpServers": {"bridge": {"command": command}}}))
        fake = install_fake_cli("claude", {"steps": [{"mcp_calls": [{"name": "x"}]}]}, tmp_path / command.replace("/", "_"))
        assert _run(fake, "-p", "--mcp-config", str(cfg)).returncode == 0
        results = [r for r in _records(fake) if r["kind"] == "mcp_result"]
        assert results == [{"kind": "mcp_result", "error": f"cannot start {command}: No such file or directory"}]
    fake = install_fake_cli("claude", {"mcp": "connect", "steps": [{"emit": {"s": "{{mcp_server_names}}"}}]}, tmp_path / "c")
    assert json.loads(_run(fake, "-p", "--mcp-config", str(cfg)).stdout) == {"s": [{"name": "bridge", "status": "failed"}]}


def _settled_fds(pid: int, timeout: float = 10.0) -> dict[int, str]:
    """fd -> target of a process that has just been spawned: while its program starts, the
    loader opens and closes library files (a transient fd 3), so the table is read until it
    holds only 0, 1 and 2, or until `timeout`; an inherited fd never goes and is returned."""
    deadline = time.monotonic() + timeout
    while True:
        fds = {}
        for name in os.listdir(f"/proc/{pid}/fd"):
            try:
                fds[int(name)] = os.readlink(f"/proc/{pid}/fd/{name}")
            except FileNotFoundError:
                continue  # closed between the listing and the read
        if sorted(fds) == [0, 1, 2] or time.monotonic() > deadline:
            return fds
        time.sleep(0.01)


def test_a_spawned_grandchild_gets_dev_null_stdin_and_no_other_fd(tmp_path):
    scenario = {"steps": [{"spawn": "sleep 1000"}, {"emit": {"type": "x"}}, {"hang": True}]}
    fake = install_fake_cli("claude", scenario, tmp_path)
    stray_r, stray_w = os.pipe()
    os.set_inheritable(stray_w, True)
    proc = subprocess.Popen([str(fake.path)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, start_new_session=True, pass_fds=(stray_w,))
    try:
        assert json.loads(proc.stdout.readline()) == {"type": "x"}
        kid = fake.last()["grandchildren"][0]["pid"]
        fds = _settled_fds(kid)
        assert sorted(fds) == [0, 1, 2] and fds[0] == "/dev/null" and fds[1].startswith("pipe:"), fds
        status = dict(l.split(":\t", 1) for l in open(f"/proc/{kid}/status").read().splitlines() if ":\t" in l)
        assert not int(status["SigIgn"], 16) & (1 << (signal.SIGPIPE - 1))
    finally:
        os.close(stray_r)
        os.close(stray_w)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        proc.stdout.close()


def test_stall_scenarios_import_nothing_heavy(tmp_path):
    """spawn (with and without setsid), ignore_sigterm, then a hang: what the timeout-tree,
    term-grace and linger checks replay. SIGKILL ends it; -X importtime has written by then."""
    scenario = {
        "steps": [
            {"spawn": "sleep 1000"},
            {"spawn": "sleep 1000", "setsid": True},
            {"ignore_sigterm": True},
            {"emit": {"type": "x"}},
            {"delay": 0.01},
            {"hang": True},
        ]
    }
    fake = install_fake_cli("claude", scenario, tmp_path)
    first = fake.path.read_text(encoding="utf-8").splitlines()[0]
    interpreter, *flags = first[2:].split()
    proc = subprocess.Popen(
        [interpreter, *flags, "-X", "importtime", str(fake.path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert json.loads(proc.stdout.readline()) == {"type": "x"}
        assert _wait_for(lambda: any(s["action"] == "hang" for s in _steps(fake)))
        proc.terminate()  # ignored
        time.sleep(0.2)
        assert proc.poll() is None
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        for kid in fake.last()["grandchildren"]:
            try:
                os.kill(kid["pid"], signal.SIGKILL)
            except ProcessLookupError:
                pass
        _, err = proc.communicate(timeout=30)
    names = {line.rsplit("|", 1)[1].strip() for line in err.decode().splitlines() if line.startswith("import time:")}
    assert "_fakecli" in names and not names & (HEAVY_MODULES | {"select"})


def _records(fake) -> list[dict]:
    return [json.loads(line) for line in fake.record_path.read_text().splitlines() if line.strip()]


def test_codex_config_toml_servers_are_shown_when_the_scenario_asks(tmp_path):
    codex_home = tmp_path / "codex-home"
    codex_home.mkdir()
    (codex_home / "config.toml").write_text('[mcp_servers.bridge]\ncommand = "/bin/true"\n')
    fake = install_fake_cli("codex", {"steps": [{"emit": {"servers": "{{mcp_server_names}}"}}]}, tmp_path / "bin")
    env = {"PATH": os.environ["PATH"], "CODEX_HOME": str(codex_home)}
    proc = subprocess.run([str(fake.path), "exec"], stdin=subprocess.DEVNULL, capture_output=True, env=env, timeout=30)
    assert json.loads(proc.stdout) == {"servers": [{"name": "bridge", "status": "connected"}]}


def test_session_id_is_a_fresh_uuid4(tmp_path):
    import uuid

    fake = install_fake_cli("claude", {"steps": [{"emit": "{{session_id}}"}]}, tmp_path)
    ids = [_run(fake).stdout.decode().strip() for _ in range(2)]
    for sid in ids:
        parsed = uuid.UUID(sid)
        assert str(parsed) == sid and parsed.version == 4 and parsed.variant == uuid.RFC_4122
    assert ids[0] != ids[1]


# -- the engine's stand-ins for json, re and shlex say exactly what those modules say ------


def _engine():
    sys.path.insert(0, str(fake_clis_dir()))
    import _fakecli

    return _fakecli


_json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True) | st.text()
_json_values = st.recursive(
    _json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text() | st.integers() | st.booleans() | st.none() | st.floats(), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(value=_json_values)
def test_json_dumps_writes_what_the_json_module_writes(value):
    engine = _engine()
    assert engine.json_dumps(value) == json.dumps(value)  # records, MCP messages
    assert engine.json_dumps(value, separators=(",", ":"), ensure_ascii=False) == json.dumps(value, separators=(",", ":"), ensure_ascii=False)  # emit lines
    assert engine.json_dumps(value, separators=(",", ":")) == json.dumps(value, separators=(",", ":"))  # oversize


def test_json_dumps_refuses_what_the_json_module_refuses():
    engine = _engine()
    for bad in ({1, 2}, {"k": object()}, {(1, 2): 3}):
        with pytest.raises(TypeError) as ours:
            engine.json_dumps(bad)
        with pytest.raises(TypeError) as theirs:
            json.dumps(bad)
        assert str(ours.value) == str(theirs.value)
    loop: list = []
    loop.append(loop)
    with pytest.raises(ValueError):
        engine.json_dumps(loop)


def _same_json(text):
    """json_loads(text) and json.loads(text): the same value (NaN included), or both ValueError."""
    engine = _engine()
    try:
        expected = json.loads(text)
    except ValueError:
        with pytest.raises(ValueError):
            engine.json_loads(text)
        return
    got = engine.json_loads(text)
    assert type(got) is type(expected) and json.dumps(got) == json.dumps(expected)


_whitespace = st.text(alphabet=" \t\n\r\x0b\x0c\u00a0\u2028", max_size=3)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(value=_json_values, before=_whitespace, after=_whitespace, compact=st.booleans())
def test_json_loads_parses_what_the_json_module_parses(value, before, after, compact):
    text = before + json.dumps(value, separators=(",", ":") if compact else None, ensure_ascii=compact) + after
    _same_json(text)
    _same_json(text.encode("utf-8", "surrogatepass"))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(text=st.text(alphabet='{}[]":,. \t\n\\u0123456789abeflnrstuNIaEe-+\ufeff\x00', max_size=20) | st.binary(max_size=12))
def test_json_loads_rejects_what_the_json_module_rejects(text):
    _same_json(text)


@settings(max_examples=500, deadline=None, derandomize=True)
@example(text="{{{a}}", values={"a": "Z"})  # no name at 0 ("{a"): the match starts at 1
@example(text="{{a}}{{x}}", values={"a": [1], "x": "Z"})  # a list value stays as written, the next fills
@given(
    text=st.lists(st.sampled_from(["{{", "}}", "{", "}", "{{a}}", "{{x}}", "a", "_", "1", "é", "٣", "x", " ", "-"]), max_size=10).map("".join),
    values=st.dictionaries(st.sampled_from(["a", "_", "a_1", "é", "٣", "1", "x"]), st.text(alphabet="{}ab", max_size=3) | st.lists(st.integers())),
)
def test_placeholders_are_filled_as_the_former_regex_filled_them(text, values):
    import re

    engine = _engine()
    pattern = re.compile(r"\{\{(\w+)\}\}")
    expected = pattern.sub(lambda m: str(values[m.group(1)]) if isinstance(values.get(m.group(1)), str) else m.group(0), text)
    assert engine._fill_text(text, values) == expected
    whole = pattern.fullmatch(text)
    assert engine._whole_placeholder(text) == (whole.group(1) if whole else None)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(command=st.text(alphabet="ab1 \t\r\n\x0b\x0c\u00a0'\"\\#$", max_size=16))
def test_spawn_commands_split_as_shlex_splits_them(command):
    import shlex

    engine = _engine()
    try:
        expected = shlex.split(command)
    except ValueError:
        with pytest.raises(ValueError):
            engine._split_command(command)
        return
    assert engine._split_command(command) == expected


_toml_tokens = st.sampled_from(
    [
        "[",
        "]",
        "[[",
        "a",
        "b",
        ".",
        " = ",
        "=",
        " ",
        '"',
        "'",
        "1",
        "0",
        "-",
        "+",
        "true",
        "false",
        "{",
        "}",
        ",",
        "#",
        "\n",
        "\t",
        "x y",
        "é",
        "\\",
        '"s"',
        "'s'",
        "[a]\n",
        "a = ",
        "b = ",
        "1_0",
        "1.5",
    ]
)


@settings(max_examples=1000, deadline=None, derandomize=True)
@example(text="a = {b = 1,}")  # TOML forbids a trailing comma in an inline table
@example(text="a = {b = 1}\n[a.c]")  # nor extends one
@example(text="[a]\nb = 1\n[a]")
@given(text=st.lists(_toml_tokens, max_size=14).map("".join))
def test_the_toml_subset_reads_what_tomllib_reads(text):
    """Whatever `_simple_toml` accepts, tomllib accepts with the same value; the rest goes to tomllib."""
    import tomllib

    engine = _engine()
    try:
        ours = engine._simple_toml(text)
    except engine._NotSimpleToml:
        return
    assert ours == tomllib.loads(text)


_config_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    argv=st.lists(_config_text, min_size=1, max_size=4), env=st.dictionaries(_config_text, _config_text, max_size=3), tools=st.lists(_config_text, max_size=3)
)
def test_a_codex_config_toml_reads_as_tomllib_reads_it_without_tomllib(argv, env, tools):
    """The config.toml the codex transport writes: the same servers as tomllib, and tomllib
    is not needed unless a string needs escapes."""
    import tomllib

    from harnesscheck.backends.codex import render_config, toml_string

    text = render_config(bridge=(argv, env), bridge_tools=tuple(tools))
    engine = _engine()
    expected = tomllib.loads(text)  # the transport writes valid TOML for any text
    assert engine.toml_loads(text) == expected
    if not any("\\" in toml_string(s) for s in [*argv, *env, *env.values(), *tools]):
        assert engine._simple_toml(text) == expected


def test_a_codex_mcp_session_imports_no_toml_or_process_machinery(tmp_path):
    """A codex run whose bridge comes from its per-run config.toml, as the transport writes it."""
    from harnesscheck.backends.codex import render_config

    server = tmp_path / "probe_server.py"
    server.write_text(PROBE_SERVER)
    codex_home = tmp_path / "codex-home"
    codex_home.mkdir()
    (codex_home / "config.toml").write_text(render_config(bridge=([sys.executable, str(server)], {"EXTRA": "toml"}), bridge_tools=("probe",)))
    fake = install_fake_cli("codex", {"steps": [{"mcp_calls": [{"name": "probe", "arguments": {}}]}]}, tmp_path / "bin")
    env = {"PATH": os.environ["PATH"], "CODEX_HOME": str(codex_home), "HOME": str(tmp_path)}
    names, proc = _imported(fake, "exec", "--json", "-", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = next(r for r in _records(fake) if r["kind"] == "mcp_result")
    assert result["is_error"] is False and json.loads(result["text"])["extra"] == "toml"
    assert not names & HEAVY_MODULES


def test_the_recorded_env_is_os_environ_even_for_undecodable_bytes(tmp_path):
    """ENVIRON (posix.environ decoded) is what os.environ would hold in the fake."""
    fake = install_fake_cli("claude", {"steps": []}, tmp_path)
    env = {b"PATH": os.environb[b"PATH"], b"RAW": b"caf\xe9 \xff", b"PLAIN": "é".encode()}
    subprocess.run([str(fake.path)], stdin=subprocess.DEVNULL, env=env, capture_output=True, timeout=30, check=True)
    probe = "import json, os; print(json.dumps(dict(os.environ)))"  # the same interpreter, flags and env
    expected = json.loads(subprocess.run([sys.executable, "-I", "-S", "-c", probe], env=env, capture_output=True, timeout=30, check=True).stdout)
    assert fake.last()["env"] == expected and expected["RAW"] == os.fsdecode(b"caf\xe9 \xff")


@settings(max_examples=300, deadline=None, derandomize=True)
@given(base=st.text(alphabet="/a.", max_size=4), name=st.text(alphabet="/a.", max_size=4), path=st.none() | st.text(alphabet="/a:", max_size=6))
def test_the_path_helpers_answer_as_os_path(base, name, path):
    engine = _engine()
    assert engine._join(base, name) == os.path.join(base, name)
    env = {} if path is None else {"PATH": path}
    assert engine._exec_path(env) == os.get_exec_path(env)


def test_the_file_kind_helpers_answer_as_os_path(tmp_path):
    engine = _engine()
    (tmp_path / "file").write_text("x")
    (tmp_path / "dir").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "dir")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    for name in ("file", "dir", "link", "dangling", "missing", "file/below"):
        path = str(tmp_path / name)
        assert (engine._isfile(path), engine._isdir(path), engine._islink(path)) == (os.path.isfile(path), os.path.isdir(path), os.path.islink(path)), name
    assert not engine._isfile("nul\0byte") and not engine._isdir("nul\0byte")


def test_an_mcp_server_gets_its_pipes_even_when_the_fake_has_no_stdin(tmp_path):
    """With fd 0 closed a new pipe lands on it; the server must still get pipes on 0 and 1."""
    cfg = _probe_config(tmp_path)
    scenario = {"mcp": "connect", "steps": [{"mcp_call": {"server": "bridge", "tool": "probe", "arguments": {}}}, {"emit": {"seen": "{{mcp_result_text}}"}}]}
    fake = install_fake_cli("claude", scenario, tmp_path / "bin")
    proc = subprocess.run(["/bin/sh", "-c", 'exec "$0" "$@" <&-', str(fake.path), "-p", "--mcp-config", cfg], capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = json.loads(json.loads(proc.stdout)["seen"])
    assert seen["stdin"].startswith("pipe:") and seen["args"] == ["a b"]
    assert fake.last()["stdin_type"] == "closed"


# -- every documented way the real CLIs are driven (issue 19) ------------------------------


def _two_servers(tmp_path, first="infermatrix-tools", second="docs") -> tuple[str, str]:
    server = tmp_path / "probe_server.py"
    server.write_text(PROBE_SERVER)
    servers = {
        first: {"command": sys.executable, "args": [str(server)], "env": {"EXTRA": first}},
        second: {"command": sys.executable, "args": [str(server)], "env": {"EXTRA": second}},
    }
    return json.dumps({"mcpServers": servers}), str(server)


def test_mcp_calls_reach_a_server_of_any_name_given_inline(tmp_path):
    """`--mcp-config` as inline JSON, servers of any name: the call goes to a server that lists
    the tool, and the pid of every server the fake started is recorded (the session's tree)."""
    inline, _ = _two_servers(tmp_path)
    fake = install_fake_cli("claude", {"steps": [{"mcp_calls": [{"name": "probe", "arguments": {}}]}]}, tmp_path / "bin")
    proc = _run(fake, "-p", "--mcp-config", inline)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = next(r for r in _records(fake) if r["kind"] == "mcp_result")
    assert result["is_error"] is False and result["server"] == "infermatrix-tools"
    assert json.loads(result["text"])["extra"] == "infermatrix-tools"
    rec = fake.last()
    assert len(rec["mcp_server_pids"]) == 2 and all(not _alive(p) for p in rec["mcp_server_pids"])


def test_claude_output_format_json_prints_only_the_result_object(tmp_path):
    """`claude -p --output-format json` prints one JSON object, the result, not the event stream."""
    scenario = {
        "steps": [
            {"emit": {"type": "system", "subtype": "init"}},
            {"emit": {"type": "assistant", "message": {"content": []}}},
            {"emit": {"type": "result", "subtype": "success", "is_error": False, "result": "hi"}},
        ]
    }
    fake = install_fake_cli("claude", scenario, tmp_path / "bin")
    out = _run(fake, "-p", "--output-format", "json").stdout.decode()
    assert [json.loads(line)["type"] for line in out.splitlines()] == ["result"]
    out = _run(fake, "-p", "--output-format", "stream-json").stdout.decode()
    assert [json.loads(line)["type"] for line in out.splitlines()] == ["system", "assistant", "result"]


def test_claude_stream_json_input_speaks_the_control_protocol_without_reading_to_eof(tmp_path):
    """`--input-format stream-json`: the fake answers `initialize`, starts on the first user
    message while stdin stays open, and exits only once stdin closes, as the real CLI does."""
    scenario = {"steps": [{"emit": {"type": "result", "subtype": "success", "is_error": False, "result": "{{prompt}}"}}]}
    fake = install_fake_cli("claude", scenario, tmp_path / "bin")
    proc = subprocess.Popen(
        [str(fake.path), "-p", "--input-format", "stream-json", "--output-format", "stream-json"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        proc.stdin.write(b'{"type":"control_request","request_id":"r1","request":{"subtype":"initialize"}}\n')
        proc.stdin.flush()
        answer = json.loads(proc.stdout.readline())
        assert answer["type"] == "control_response" and answer["response"]["request_id"] == "r1"
        proc.stdin.write(json.dumps({"type": "user", "message": {"role": "user", "content": "hello there"}}).encode() + b"\n")
        proc.stdin.flush()
        result = json.loads(proc.stdout.readline())
        assert result["type"] == "result" and result["result"] == "hello there"
        assert proc.poll() is None  # stdin still open: the CLI waits for more
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
        proc.wait()
    rec = fake.last()
    assert rec["stdin"] == "hello there" and rec["stdin_eof_mono"] is not None


def _sdk_style_session(fake, mcp_config: str) -> list[dict]:
    """Drive a fake claude as the Claude Agent SDK does: `--output-format stream-json --verbose
    --input-format stream-json`, an inline `--mcp-config`, `initialize` over the control
    protocol, one user message, read to the result, then close stdin. Every stdout event."""
    proc = subprocess.Popen(
        [str(fake.path), "--output-format", "stream-json", "--verbose", "--mcp-config", mcp_config, "--strict-mcp-config", "--input-format", "stream-json"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    events = []
    try:
        proc.stdin.write(b'{"type":"control_request","request_id":"req_1","request":{"subtype":"initialize"}}\n')
        proc.stdin.write(
            json.dumps({"type": "user", "message": {"role": "user", "content": "read it"}, "parent_tool_use_id": None, "session_id": "default"}).encode()
            + b"\n"
        )
        proc.stdin.flush()
        while not events or events[-1].get("type") != "result":
            line = proc.stdout.readline()
            assert line, f"the fake ended before its result: {events}"
            events.append(json.loads(line))
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
        proc.wait()
    return events


def test_claude_prints_tool_use_and_tool_result_around_its_mcp_calls(tmp_path):
    """With `--output-format stream-json` (here driven as the SDK drives it), each MCP call the fake
    makes is announced as the real CLI does (fixtures/claude/tool_calls.json): an assistant
    `tool_use` block named `mcp__<server>__<tool>` with the arguments, then a user `tool_result`
    with the same id carrying the server's text, in the session the CLI's own events name."""
    server = tmp_path / "probe_server.py"
    server.write_text(PROBE_SERVER)
    config = json.dumps({"mcpServers": {"workspace": {"type": "stdio", "command": sys.executable, "args": [str(server)]}}})
    scenario = {
        "default_model": "claude-sonnet-5-5",
        "steps": [
            {"emit": {"type": "system", "subtype": "init", "session_id": "s-recorded"}},
            {"mcp_calls": [{"name": "probe", "arguments": {"x": 1}}]},
            {"emit": {"type": "result", "subtype": "success", "is_error": False, "result": "done", "session_id": "s-recorded"}},
        ],
    }
    fake = install_fake_cli("claude", scenario, tmp_path / "bin")
    events = _sdk_style_session(fake, config)
    kinds = [e["type"] for e in events]
    assert kinds == ["control_response", "system", "assistant", "user", "result"], kinds
    use = events[2]["message"]["content"][0]
    assert use["type"] == "tool_use" and use["name"] == "mcp__workspace__probe" and use["input"] == {"x": 1}
    assert events[2]["message"]["model"] == "claude-sonnet-5-5" and events[2]["parent_tool_use_id"] is None
    result = events[3]["message"]["content"][0]
    assert result["type"] == "tool_result" and result["tool_use_id"] == use["id"] and not result.get("is_error")
    assert '"canary"' in result["content"][0]["text"]
    assert {e.get("session_id") for e in events[1:]} == {"s-recorded"}
    # a tool error is a tool_result with is_error
    failing = {
        "steps": [
            {"mcp_calls": [{"name": "no_such_tool", "arguments": {}}]},
            {"emit": {"type": "result", "subtype": "success", "is_error": False, "result": "done"}},
        ]
    }
    fake = install_fake_cli("claude", failing, tmp_path / "bin2")
    events = _sdk_style_session(fake, config)
    assert [e["type"] for e in events] == ["control_response", "assistant", "user", "result"]


def test_claude_tool_events_parse_with_the_sdk(tmp_path):
    """The events parse as claude-agent-sdk's own message parser reads the real CLI's: a
    ToolUseBlock in an AssistantMessage, then a ToolResultBlock (skipped without the SDK)."""
    parser = pytest.importorskip("claude_agent_sdk._internal.message_parser", reason="claude-agent-sdk is not installed")
    from claude_agent_sdk import AssistantMessage, ToolResultBlock, ToolUseBlock, UserMessage

    server = tmp_path / "probe_server.py"
    server.write_text(PROBE_SERVER)
    config = json.dumps({"mcpServers": {"workspace": {"type": "stdio", "command": sys.executable, "args": [str(server)]}}})
    fake = install_fake_cli("claude", "tool_calls", tmp_path / "bin")
    data = json.loads(fake.scenario_path.read_text())
    data["steps"].insert(1, {"mcp_calls": [{"name": "probe", "arguments": {}}]})
    fake = install_fake_cli("claude", data, tmp_path / "bin2")
    messages = [parser.parse_message(e) for e in _sdk_style_session(fake, config)[1:]]
    uses = [b for m in messages if isinstance(m, AssistantMessage) for b in m.content if isinstance(b, ToolUseBlock)]
    results = [b for m in messages if isinstance(m, UserMessage) and isinstance(m.content, list) for b in m.content if isinstance(b, ToolResultBlock)]
    assert "mcp__workspace__probe" in [u.name for u in uses]
    assert any(r.tool_use_id == uses[0].id for r in results)


def test_claude_stream_json_interrupt_ends_a_stalled_turn(tmp_path):
    """An `interrupt` control request during a stall is answered and ends the turn with an error result."""
    fake = install_fake_cli("claude", {"steps": [{"hang": True}]}, tmp_path / "bin")
    proc = subprocess.Popen(
        [str(fake.path), "-p", "--input-format", "stream-json", "--output-format", "stream-json"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        proc.stdin.write(b'{"type":"user","message":{"role":"user","content":"go"}}\n')
        proc.stdin.write(b'{"type":"control_request","request_id":"r2","request":{"subtype":"interrupt"}}\n')
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["response"]["request_id"] == "r2"
        assert json.loads(proc.stdout.readline())["subtype"] == "error_during_execution"
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
        proc.wait()


def test_codex_dash_c_overrides_configure_mcp_servers(tmp_path):
    """codex `-c mcp_servers.<name>.command=...` overrides (values parsed as TOML) configure servers
    on top of config.toml, as `codex exec` merges them."""
    server = tmp_path / "probe_server.py"
    server.write_text(PROBE_SERVER)
    fake = install_fake_cli("codex", {"steps": [{"mcp_calls": [{"name": "probe", "arguments": {}}]}]}, tmp_path / "bin")
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    argv = [
        str(fake.path),
        "exec",
        "--json",
        "-c",
        f'mcp_servers.infermatrix-tools.command="{sys.executable}"',
        "-c",
        f"mcp_servers.infermatrix-tools.args={json.dumps([str(server)])}",
        "-c",
        'mcp_servers.infermatrix-tools.env={EXTRA = "override"}',
        "-",
    ]
    proc = subprocess.run(argv, env=env, cwd=tmp_path, stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = next(r for r in _records(fake) if r["kind"] == "mcp_result")
    assert result["server"] == "infermatrix-tools" and json.loads(result["text"])["extra"] == "override"


def test_a_server_slow_to_start_is_told_apart_from_one_that_failed(tmp_path):
    """An MCP server still running, unanswered, when the `mcp_calls` wait runs out is recorded
    `starting` (a loaded machine; the kit retries, then skips `budget`), one that exits is not;
    an inline `--mcp-config` is recorded as given."""
    # silent until its stdin closes, then gone: the fake's close() need not wait out its 5 s for it
    slow = json.dumps({"mcpServers": {"slow": {"command": sys.executable, "args": ["-c", "import sys; sys.stdin.read()"]}}})
    dead = json.dumps({"mcpServers": {"dead": {"command": sys.executable, "args": ["-c", "pass"]}}})
    step = {"steps": [{"mcp_calls": [{"name": "read_file", "arguments": {}}], "timeout": 1}]}
    for config, starting in ((slow, True), (dead, False)):
        fake = install_fake_cli("claude", step, tmp_path / f"bin-{starting}")
        proc = _run(fake, "-p", "--mcp-config", config)
        assert proc.returncode == 0, proc.stderr[-2000:]
        result = next(r for r in _records(fake) if r["kind"] == "mcp_result")
        assert "never answered initialize" in result["error"] and bool(result.get("starting")) is starting
        assert list(fake.last()["mcp_configs"].values()) == [config]


def test_the_kit_retries_a_session_whose_server_was_still_starting():
    """HarnessAdapter.tools_unfinished: a server still starting is the machine's speed (the
    session is repeated, then skipped `budget`); a failed or a connected server is judged."""
    from types import SimpleNamespace

    from harnesscheck.kit.harness_adapter import HarnessAdapter

    offline = SimpleNamespace(level="offline")
    tl = SimpleNamespace(started=0.0, ended=5.0, timeout_s=30.0)
    starting = SimpleNamespace(extra_tools_connected=False, extra_tools_starting=True, extra_tools_done=True, timeline=tl)
    failed = SimpleNamespace(extra_tools_connected=False, extra_tools_starting=False, extra_tools_done=True, timeline=tl)
    connected = SimpleNamespace(extra_tools_connected=True, extra_tools_starting=True, extra_tools_done=True, timeline=tl)
    assert HarnessAdapter.tools_unfinished(offline, starting) is True
    assert HarnessAdapter.tools_unfinished(offline, failed) is False
    assert HarnessAdapter.tools_unfinished(offline, connected) is False
    assert HarnessAdapter.tools_unfinished(SimpleNamespace(level="loopback"), starting) is False


def _planted_tree(tmp_path, names):
    """<tmp>/repo/.git, and each of `names` in repo/, repo/run/ and repo/run/cwd/ (the cwd)."""
    cwd = tmp_path / "repo" / "run" / "cwd"
    cwd.mkdir(parents=True)
    (tmp_path / "repo" / ".git").mkdir()
    for directory in (tmp_path / "repo", tmp_path / "repo" / "run", cwd):
        for name in names:
            (directory / name).write_text(f"from {directory.name}\n")
    return cwd


def _loaded(fake, cwd, *args, env):
    subprocess.run([str(fake.path), *args], cwd=cwd, env=env, capture_output=True, input=b"hi", timeout=30)
    return sorted(os.path.relpath(p, cwd.parent.parent.parent) for p in fake.last()["instructions"])


def test_codex_loads_agents_md_from_the_git_root_down_unless_the_budget_is_zero(tmp_path):
    """codex-rs agents_md.rs: AGENTS.override.md / AGENTS.md from the nearest `.git` down to the cwd,
    none with project_doc_max_bytes = 0 (config.toml or -c); $CODEX_HOME/AGENTS.md is global."""
    cwd = _planted_tree(tmp_path, ["AGENTS.md"])
    (cwd / "AGENTS.override.md").write_text("override\n")
    home = tmp_path / "codex-home"
    home.mkdir()
    env = {"PATH": os.environ["PATH"], "CODEX_HOME": str(home), "HOME": str(tmp_path / "h")}
    fake = install_fake_cli("codex", {"steps": []}, tmp_path / "bin")
    assert _loaded(fake, cwd, "exec", "-", env=env) == ["repo/AGENTS.md", "repo/run/AGENTS.md", "repo/run/cwd/AGENTS.override.md"]
    assert _loaded(fake, cwd, "exec", "-c", "project_doc_max_bytes=0", "-", env=env) == []
    (home / "config.toml").write_text("project_doc_max_bytes = 0\n")
    (home / "AGENTS.md").write_text("global\n")
    assert _loaded(fake, cwd, "exec", "-", env=env) == ["codex-home/AGENTS.md"]
    os.rmdir(tmp_path / "repo" / ".git")
    (home / "config.toml").write_text("")
    assert _loaded(fake, cwd, "exec", "-", env=env) == ["codex-home/AGENTS.md", "repo/run/cwd/AGENTS.override.md"]


def test_gemini_loads_gemini_md_up_to_the_git_root_unless_the_markers_are_empty(tmp_path):
    """gemini-cli memoryDiscovery.ts (0.61.0): ~/.gemini/GEMINI.md, then GEMINI.md from the cwd up to
    the nearest `.git`; `context.memoryBoundaryMarkers: []` leaves the cwd alone."""
    cwd = _planted_tree(tmp_path, ["GEMINI.md"])
    home = tmp_path / "h"
    (home / ".gemini").mkdir(parents=True)
    env = {"PATH": os.environ["PATH"], "HOME": str(home)}
    fake = install_fake_cli("gemini", {"steps": []}, tmp_path / "bin")
    args = ("-p", "", "--skip-trust", "-m", "gemini-2.5-flash")
    assert _loaded(fake, cwd, *args, env=env) == ["repo/GEMINI.md", "repo/run/GEMINI.md", "repo/run/cwd/GEMINI.md"]
    (home / ".gemini" / "settings.json").write_text(json.dumps({"context": {"memoryBoundaryMarkers": []}}))
    (home / ".gemini" / "GEMINI.md").write_text("global\n")
    assert _loaded(fake, cwd, *args, env=env) == ["h/.gemini/GEMINI.md", "repo/run/cwd/GEMINI.md"]


def test_cursor_reads_the_projects_mcp_json_which_wins_over_the_users(tmp_path):
    """cursor-agent: `~/.cursor/mcp.json`, then the project's `.cursor/mcp.json` (`--workspace`,
    else the cwd), which wins for a same-named server (issue 32 item 6): a backend that runs the
    CLI in a worktree whose own file names a server like the bridge has it replaced, and the
    fake starts (and records) the replacement the real CLI would."""
    server = tmp_path / "probe_server.py"
    server.write_text(PROBE_SERVER)
    home, project = tmp_path / "home", tmp_path / "project"
    for base, extra in ((home, "from-home"), (project, "from-project")):
        (base / ".cursor").mkdir(parents=True)
        (base / ".cursor" / "mcp.json").write_text(
            json.dumps({"mcpServers": {"bridge": {"command": sys.executable, "args": [str(server)], "env": {"EXTRA": extra}}}})
        )
    fake = install_fake_cli("cursor-agent", {"steps": [{"mcp_calls": [{"name": "probe", "arguments": {}}]}]}, tmp_path / "bin")
    env = {"PATH": os.environ["PATH"], "HOME": str(home)}
    for cwd, argv in ((project, []), (tmp_path, ["--workspace", str(project)])):
        proc = subprocess.run(
            [str(fake.path), "--print", "--output-format", "stream-json", *argv], env=env, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, timeout=30
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        result = [r for r in _records(fake) if r["kind"] == "mcp_result"][-1]
        assert result["server"] == "bridge" and json.loads(result["text"])["extra"] == "from-project", argv
