"""The sandbox (sandbox.py, doc/SPEC-sandbox.md): what a sandboxed process can and cannot
reach, that every ending still ends its whole tree, the fallback where no sandbox can be had,
and the real CLIs at loopback still working inside one.

Every test that needs bubblewrap skips with the reason when this machine cannot give a
sandbox. Time is only ever an upper bound."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from harnesscheck.contain import process, sandbox
from harnesscheck.contain.process import Ending, run_process
from harnesscheck.contain.sandbox import Sandbox
from harnesscheck.core.config import Settings
from harnesscheck.core.contracts import AgentSessionRequest, ConfigError, OutcomeStatus
from harnesscheck.core.scope import ToolScope

pytestmark = pytest.mark.skipif(not sandbox.status().available, reason=f"no sandbox here: {sandbox.status().reason}")

ENV = {"PATH": "/usr/bin:/bin"}


def _run(shell: str, tmp_path: Path, *, timeout_s: float = 20.0, box: Sandbox | None = None, **kwargs):
    lines: list[str] = []
    work = tmp_path / "w"
    work.mkdir(exist_ok=True)
    result = run_process(
        ["/bin/sh", "-c", shell], env=ENV, cwd=work, on_line=lines.append, timeout_s=timeout_s, sandbox=box or Sandbox(writable=(str(work),)), **kwargs
    )
    return result, lines


def _pidns_alive(link: str) -> list[int]:
    """Host pids of live processes in the pid namespace `link` ("pid:[N]")."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.readlink(f"/proc/{entry}/ns/pid") == link:
                    out.append(int(entry))
            except OSError:
                continue
    return out


def test_the_sandbox_sees_no_host_process_no_home_and_writes_only_its_binds(tmp_path):
    host_home = os.path.expanduser("~")
    outside = tmp_path / "outside.txt"
    outside.write_text("host file\n")
    result, lines = _run(
        f"echo pid=$$; ls /proc | grep -c '^[0-9]'; ls {host_home} >/dev/null 2>&1 && echo home-visible;"
        f" cat {outside} 2>/dev/null && echo outside-visible;"
        f" cat /proc/{os.getpid()}/environ >/dev/null 2>&1 && echo host-environ;"
        f" echo ok > written.txt && echo wrote; touch /usr/x 2>/dev/null && echo usr-writable;"
        " grep -E '^(NoNewPrivs|CapEff)' /proc/self/status",
        tmp_path,
    )
    assert result.containment == "bwrap" and result.exit_code == 0, result
    assert lines[0] == "pid=2"  # the namespace's init is 1, the command 2
    assert int(lines[1]) <= 4, lines  # bwrap's init, sh, ls, grep: nothing of the host
    text = "\n".join(lines)
    for leak in ("home-visible", "outside-visible", "host-environ", "usr-writable"):
        assert leak not in text, text
    assert "wrote" in text and (tmp_path / "w" / "written.txt").read_text() == "ok\n"
    assert "NoNewPrivs:\t1" in text and "CapEff:\t0000000000000000" in text


@pytest.mark.parametrize("guard", [True, False], ids=["supervisor", "direct"])
def test_a_deadline_terms_the_cli_not_bwrap_and_leaves_no_process_of_the_namespace(tmp_path, monkeypatch, guard):
    if not guard:
        monkeypatch.setattr(process, "_use_guard", lambda: False)
    result, lines = _run(
        "trap 'echo got-term; exit 7' TERM; readlink /proc/self/ns/pid; (setsid sleep 300 &); sleep 300 & wait",
        tmp_path,
        timeout_s=2.0,
        term_grace_s=5.0,
    )
    assert result.ending is Ending.deadline and result.containment == "bwrap"
    assert "got-term" in lines, lines  # SIGTERM reached the CLI (bwrap forwards none: the group is the namespace's)
    assert result.exit_code == 7
    link = lines[0]
    assert link.startswith("pid:[")
    end = time.monotonic() + 10
    while _pidns_alive(link) and time.monotonic() < end:
        time.sleep(0.05)
    assert _pidns_alive(link) == []  # the setsid sleeper went with the namespace
    assert not result.orphan_suspected or guard is False


def test_an_unavailable_sandbox_runs_with_the_guards_and_says_why(tmp_path, monkeypatch):
    monkeypatch.setattr(sandbox, "status", lambda: sandbox.SandboxStatus(False, None, False, "bubblewrap (bwrap) is not installed"))
    result, lines = _run("echo pid=$$", tmp_path)
    assert result.containment == "guards" and "not installed" in result.containment_note
    assert lines[0] != "pid=2"
    with pytest.raises(RuntimeError, match="required"):
        _run("true", tmp_path, box=Sandbox(required=True))


def test_bwrap_argv_binds_parents_before_children_and_hides_nothing_else(tmp_path):
    ro, rw = tmp_path / "run", tmp_path / "run" / "home"
    rw.mkdir(parents=True)
    argv = sandbox.bwrap_argv(Sandbox(read_only=(str(ro),), writable=(str(rw), str(tmp_path / "absent"))), ["/bin/true"], cwd=str(rw), info_fd=3)
    assert argv.index(str(ro)) < argv.index(str(rw))
    assert str(tmp_path / "absent") not in argv  # a missing path is left out, never created
    for flag in ("--unshare-pid", "--die-with-parent", "--new-session", "--proc", "--info-fd"):
        assert flag in argv
    assert "--unshare-net" not in argv  # the loopback model server is on the host's 127.0.0.1
    assert os.path.expanduser("~") not in argv or os.path.expanduser("~") == "/"


def test_a_scratch_dir_is_the_sandboxs_own_tmpfs_and_nothing_of_it_reaches_the_disk(tmp_path):
    """Sandbox.scratch: a dir inside a writable bind is an empty writable tmpfs in the sandbox
    (what the host had there is not seen; what the process writes there is not kept), while
    the rest of the bind is the host's dir as before."""
    work = tmp_path / "w"
    scratch = work / "home" / ".cache" / "pkg"
    scratch.mkdir(parents=True)
    (scratch / "host.txt").write_text("the host's\n")
    box = Sandbox(writable=(str(work),), scratch=(str(scratch),))
    result, lines = _run(
        f"ls -A {scratch}; echo unpacked > {scratch}/lib.js && cat {scratch}/lib.js; echo kept > kept.txt;"
        f" grep -F ' {scratch} ' /proc/self/mountinfo | grep -c tmpfs",
        tmp_path,
        box=box,
    )
    assert result.containment == "bwrap" and result.exit_code == 0, (result, lines)
    assert lines == ["unpacked", "1"], lines  # empty at the start, written, a tmpfs
    assert sorted(p.name for p in scratch.iterdir()) == ["host.txt"]  # nothing written reached the host
    assert (work / "kept.txt").read_text() == "kept\n"


def test_a_transports_sandbox_scratch_is_made_in_the_run_dir_and_given_to_its_sandbox(tmp_path):
    """HarnessTransport.sandbox_scratch (the deepseek runtime's unpacked packages): each path,
    relative to the run dir, is made there (0700) and is the sandbox's scratch."""
    from types import SimpleNamespace

    from harnesscheck.backends.deepseek import DeepSeekTransport
    from harnesscheck.backends.registry import get_spec

    assert DeepSeekTransport.sandbox_scratch == ("home/.cache/pkg",)
    transport = DeepSeekTransport(get_spec("deepseek"), Settings())
    run_dir = tmp_path / "run"
    (run_dir / "cwd").mkdir(parents=True)
    ctx = SimpleNamespace(run_dir=run_dir, cleanup=[], cwd=run_dir / "cwd", spec_path=None)
    box, why = transport.session_sandbox(ctx, Path("/bin/true"), None, None, tool_less=True)
    assert why == "" and box.scratch == (str(run_dir / "home" / ".cache" / "pkg"),)
    assert (run_dir / "home" / ".cache" / "pkg").stat().st_mode & 0o777 == 0o700


def test_etc_links_into_the_system_stay_links(tmp_path):
    """/etc/localtime -> /usr/share/zoneinfo/<zone> names the zone by its link: a bound copy
    would not (codex then read /etc/timezone, a path its strace check does not allow)."""
    if not (os.path.islink("/etc/localtime") and os.path.realpath("/etc/localtime").startswith("/usr/")):
        pytest.skip("this host's /etc/localtime is no link into /usr")
    result, lines = _run("readlink /etc/localtime", tmp_path)
    assert result.exit_code == 0 and lines == [os.readlink("/etc/localtime")], (lines, result.stderr_tail)


# --- a transport's session ----------------------------------------------------------------------


def _fake_session(tmp_path: Path, mode: str, scenario: str = "tool_calls"):
    from harnesscheck.backends.claude_code import ClaudeCodeTransport
    from harnesscheck.backends.registry import get_spec
    from harnesscheck.testing.fakes import install_fake_cli

    root = tmp_path / "worktree"
    root.mkdir()
    (root / "README.md").write_text("hello\n")
    fake = install_fake_cli("claude", scenario, tmp_path / "bin")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "no-home"), "LANG": "C.UTF-8"}
    transport = ClaudeCodeTransport(get_spec("claude-code"), Settings(sandbox=mode), cli_path=fake.path, parent_env=env)
    request = AgentSessionRequest(prompt="Summarize README.md", scope=ToolScope(root=root), timeout_s=30, run_dir=tmp_path / "run")
    return transport.run_session(request), fake


def test_a_sandboxed_fake_session_reaches_the_worktree_only_through_the_bridge(tmp_path):
    outcome, fake = _fake_session(tmp_path, "require")
    assert outcome.status is OutcomeStatus.ok, outcome.message
    assert outcome.containment == "bwrap" and outcome.containment_note is None
    assert outcome.tools_used == ["read_file"] and outcome.tool_calls == 1
    assert fake.last()["pidns"] != sandbox.own_pidns()  # it ran in its own pid namespace


def test_sandbox_off_and_unavailable_say_guards(tmp_path, monkeypatch):
    (tmp_path / "a").mkdir()
    outcome, _ = _fake_session(tmp_path / "a", "off")
    assert outcome.containment == "guards" and "HARNESS_BACKEND_SANDBOX=off" in (outcome.containment_note or "")
    monkeypatch.setattr(sandbox, "status", lambda: sandbox.SandboxStatus(False, None, False, "not Linux"))
    (tmp_path / "b").mkdir()
    outcome, _ = _fake_session(tmp_path / "b", "auto")
    assert outcome.containment == "guards" and "not Linux" in (outcome.containment_note or "")
    (tmp_path / "c").mkdir()
    with pytest.raises(ConfigError, match="required"):
        _fake_session(tmp_path / "c", "require")


# --- the kit's loopback exec wrapper inside a sandbox ----------------------------------------------


def test_the_kits_exec_wrapper_records_inside_a_sandbox_and_the_kit_sees_host_pids(tmp_path):
    """The wrapper's directory is read-only in the session's sandbox and the real CLI lies
    outside it: wrapper_binds gives the sandbox the real install (read-only) and the record
    (writable). The record names the namespace's pid; the DescendantWatcher finds the host's
    pid of it while it runs and sees its child, and host_records gives the host's pid (the
    namespace's kept as ns_pid). Off, the same record is the host's own pid."""
    from harnesscheck.contain.process import LineAction
    from harnesscheck.loopback.adapter import (
        DescendantWatcher,
        host_records,
        read_records,
        wrapper_binds,
        write_wrapper,
    )

    real_dir = tmp_path / "real"
    real_dir.mkdir()
    real = real_dir / "cli"
    real.write_text("#!/bin/sh\nsleep 60 &\necho ready\nwait\n")
    real.chmod(0o755)
    work = tmp_path / "w"
    work.mkdir()
    for mode in ("bwrap", "guards"):
        wrapper, record = write_wrapper(tmp_path / f"bin-{mode}", real, "cli")
        read_only, writable = wrapper_binds(wrapper, real)
        box = Sandbox(read_only=(str(wrapper.parent), *read_only, *sandbox.python_paths()), writable=(str(work), *writable))
        watcher = DescendantWatcher(record, interval_s=0.05).start()
        seen: dict = {}

        def on_line(line: str, watcher=watcher, seen=seen, record=record):
            if line != "ready":
                return None
            # The shell forked the sleep before it echoed, but under load the child may still be
            # the shell's copy (not yet exec'd) at the watcher's first polls: wait for the sleep
            # itself. An upper bound: it is seen at the poll after its exec.
            end = time.monotonic() + 30
            while time.monotonic() < end and not any(c["argv"][:1] == ["sleep"] for c in dict(watcher.seen).values()):
                time.sleep(0.05)
            seen["records"] = host_records(read_records(record), dict(watcher.host_pids))
            [raw] = read_records(record)
            if raw.get("pidns") != sandbox.own_pidns():
                assert isinstance(raw["pidns_born"], int)
                seen["born_match"] = sandbox.find_host_pid(raw["pid"], raw["pidns"], raw["pidns_born"])
                seen["born_other"] = sandbox.find_host_pid(raw["pid"], raw["pidns"], raw["pidns_born"] + 1)
            seen["children"] = dict(watcher.seen)
            return LineAction.STOP

        try:
            result = run_process([str(wrapper), "--task"], env=ENV, cwd=work, on_line=on_line, timeout_s=60, sandbox=box if mode == "bwrap" else None)
        finally:
            watcher.stop()
        assert result.ending is Ending.early_stop and result.containment == mode, (result, result.stderr_tail)
        [rec] = seen["records"]
        assert rec["argv"][1:] == ["--task"]
        if mode == "bwrap":
            assert rec["pidns"] != sandbox.own_pidns() and rec["ns_pid"] != rec["pid"]
            assert seen["born_match"] == rec["pid"], "the live namespace with its recorded birth maps to the wrapper"
            # A later namespace given the same inode number (the kernel reuses them) is not the
            # record's: a pid mapped through it would be another session's process.
            assert seen["born_other"] is None
        else:
            assert "ns_pid" not in rec
        assert rec["pid"] in watcher.host_pids.values() or mode == "guards"
        [child] = [c for c in seen["children"].values() if c["argv"][:1] == ["sleep"]]
        assert child["pid"] != rec["pid"]  # the host's pids: the sleep is a descendant of the wrapper's host pid
        assert not os.path.exists(f"/proc/{child['pid']}") or open(f"/proc/{child['pid']}/stat").read().split(") ")[1][:1] == "Z"


# --- the real CLIs at loopback ------------------------------------------------------------------

REAL = ["claude-code", "codex", "gemini", "opencode", "deepseek"]


@pytest.mark.parametrize("backend", REAL)
def test_the_real_cli_works_sandboxed_at_loopback(backend, tmp_path):
    from harnesscheck.backends.loopback_endpoint import DUMMY_KEY, LoopbackEndpoint
    from harnesscheck.backends.registry import get_spec, kit_profile
    from harnesscheck.loopback.adapter import loopback_scenario, loopback_transport
    from harnesscheck.loopback.clis import require_pinned_cli
    from harnesscheck.loopback.server import ScriptedModelServer

    binary, why = require_pinned_cli(backend)
    if binary is None:
        pytest.skip(why)
    spec = get_spec(backend)

    class Ws:
        root = tmp_path / "work"
        secret = tmp_path / "outside" / "secret.txt"
        canary = "sentinel-outside-5c1d"

    Ws.root.mkdir()
    (Ws.root / "README.md").write_text("hello from the worktree\n")
    Ws.secret.parent.mkdir()
    Ws.secret.write_text(Ws.canary + "\n")
    script = loopback_scenario(spec.cli_name, "tool_calls", Ws, profile=kit_profile(spec))
    with ScriptedModelServer(script, expected_key=DUMMY_KEY) as srv:
        transport = loopback_transport(spec, Settings(backend=backend, sandbox="require"), cli_path=binary.path, endpoint=LoopbackEndpoint(srv.base_url))
        outcome = transport.run_session(
            AgentSessionRequest(
                prompt="Say hello.", scope=ToolScope(name="t", root=Ws.root, read_only=True), timeout_s=120, max_iters=8, run_dir=tmp_path / "run"
            )
        )
        requests = srv.turn_requests()
    assert outcome.status is OutcomeStatus.ok, (outcome.message, outcome.stderr_tail[-2000:])
    assert outcome.containment == "bwrap"
    assert outcome.tools_used == ["read_file"] and outcome.tool_calls == 1
    assert any("hello from the worktree" in t["text"] for r in requests for t in r.tool_results)


ACP_AGENTS = ["claude-agent-acp", "codex-acp", "gemini", "opencode"]


@pytest.mark.parametrize("agent", ACP_AGENTS)
def test_the_real_acp_agent_works_sandboxed_at_loopback(agent, tmp_path):
    """An ACP agent run through an interpreter (`node <cache>/.../index.js`) and pointed at
    another cached CLI by its environment (claude-agent-acp's CLAUDE_CODE_EXECUTABLE) gets those
    installs bound read-only (sandbox.cache_installs); a bridge read reaches the model."""
    from harnesscheck.backends.acp import AcpTransport
    from harnesscheck.backends.acp.profile import profile_for
    from harnesscheck.backends.loopback_endpoint import LoopbackEndpoint
    from harnesscheck.backends.registry import get_spec
    from harnesscheck.core.contracts import CliNotFound
    from harnesscheck.loopback.scenario import Scenario, ToolCall, Turn
    from harnesscheck.loopback.server import ScriptedModelServer

    spec = get_spec(f"acp-{agent}")
    root = tmp_path / "root"
    root.mkdir()
    (root / "hello.txt").write_text("hello from the acp worktree\n")
    turns = (Turn(tool_calls=(ToolCall("read_file", {"path": "hello.txt"}),)), Turn(text="the file says hello"))
    with ScriptedModelServer(Scenario("acp", turns)) as srv:
        transport = AcpTransport(spec, Settings(sandbox="require"), profile=profile_for(spec.id), loopback=LoopbackEndpoint(base_url=srv.base_url))
        try:
            transport.cli()
            for word in transport.profile.command[1:2]:
                if "{clis}" in word and not Path(transport._fill(word, transport._values({}))).exists():
                    raise CliNotFound(spec.id, word, [word], None)
        except CliNotFound as exc:
            pytest.skip(f"the pinned {agent} is not installed: {exc}")
        outcome = transport.run_session(
            AgentSessionRequest(prompt="Read hello.txt.", scope=ToolScope(name="t", root=root), timeout_s=120, run_dir=tmp_path / "run")
        )
        bodies = [r.body_text for r in srv.requests]
    assert outcome.status is OutcomeStatus.ok, (outcome.message, outcome.stderr_tail[-2000:])
    assert outcome.containment == "bwrap" and "read_file" in outcome.tools_used
    assert any("hello from the acp worktree" in b for b in bodies)


def test_cache_installs_names_only_the_cli_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("HARNESSCHECK_CACHE", str(tmp_path / "cache"))
    script = tmp_path / "cache" / "clis" / "agent@1.0" / "node_modules" / "agent" / "index.js"
    script.parent.mkdir(parents=True)
    script.write_text("")
    outside = tmp_path / "elsewhere.js"
    outside.write_text("")
    found = sandbox.cache_installs([str(script), str(outside), "--flag", "relative/x.js", str(tmp_path / "none")])
    assert found == [str(tmp_path / "cache" / "clis" / "agent@1.0")]


def test_the_probe_runs_bwrap_from_the_system_path_only(monkeypatch, tmp_path):
    """A bwrap planted on the user's PATH is never the one run."""
    planted = tmp_path / "bwrap"
    planted.write_text("#!/bin/sh\nexit 0\n")
    planted.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ.get('PATH', '')}")
    assert sandbox._find_bwrap() != str(planted)


def test_a_probe_that_hangs_leaves_nothing_when_it_times_out(monkeypatch, tmp_path):
    """A bwrap that hangs during its set-up (its clone waits for a uid map that never comes) is
    ended whole at the probe's timeout: the clone too, not only bwrap."""
    pid_file = tmp_path / "clone.pid"
    stuck = tmp_path / "bwrap"
    stuck.write_text(f"#!/bin/sh\nsleep 300 &\necho $! > {pid_file}\nexec sleep 300\n")
    stuck.chmod(0o755)
    monkeypatch.setattr(sandbox, "_PROBE_TIMEOUT_S", 0.5)  # the behaviour, not a measure of speed
    ok, why = sandbox._trial(str(stuck), True)
    assert not ok and "did not run" in why
    # empty too when the probe's kill fell between the shell's open of the file and its write
    written = pid_file.read_text().strip() if pid_file.exists() else ""
    if not written:
        pytest.skip("the stand-in bwrap had not started its clone by the probe's timeout (a loaded machine): nothing to judge")
    clone = int(written)

    def state() -> str | None:
        try:
            return Path(f"/proc/{clone}/stat").read_text().rsplit(") ", 1)[1][:1]
        except OSError:
            return None

    # A SIGKILL is delivered asynchronously: on a loaded machine the killed clone may still be
    # running (R) for a moment after the probe returned (seen once in a whole-suite run at load
    # 5). A clone the probe never killed is a `sleep 300`: still there seconds later.
    deadline = time.monotonic() + 10
    while state() not in (None, "Z") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert state() in (None, "Z"), f"the probe's clone {clone} outlived its timeout by 10 s (state {state()})"


def test_a_cli_that_kills_what_it_sees_and_outlives_its_host_leaves_nothing(tmp_path):
    """Round-2 finding: a CLI that SIGKILLs its host's process guard, then its supervisor when
    it sees its host die, outlived both under the guards alone. In the sandbox it sees
    neither (nor its host): it can signal only its own namespace, and the namespace ends with
    the bwrap process its supervisor started."""
    import signal
    import subprocess
    import sys
    import textwrap

    token = f"hc-sandbox-survivor-{os.getpid()}"
    cli = tmp_path / "cli.sh"
    cli.write_text(
        textwrap.dedent(f"""\
        #!/bin/sh
        for p in $(ls /proc | grep '^[0-9]*$'); do [ "$p" != "$$" ] && kill -9 "$p" 2>/dev/null; done
        setsid sh -c 'sleep 300; echo {token}' </dev/null >/dev/null 2>&1 &
        echo ready
        exec sleep 301
    """)
    )
    cli.chmod(0o755)
    host = tmp_path / "host.py"
    host.write_text(
        textwrap.dedent(f"""\
        from harnesscheck.contain.process import run_process
        from harnesscheck.contain.sandbox import Sandbox
        run_process([{str(cli)!r}], env={{"PATH": "/usr/bin:/bin"}}, cwd={str(tmp_path)!r},
                    on_line=lambda line: open({str(tmp_path / "ready")!r}, "w").close(), timeout_s=600,
                    sandbox=Sandbox(read_only=({str(tmp_path)!r},), required=True))
    """)
    )
    proc = subprocess.Popen([sys.executable, str(host)])
    try:
        end = time.monotonic() + 60
        while not (tmp_path / "ready").exists() and time.monotonic() < end:
            time.sleep(0.05)
        assert (tmp_path / "ready").exists()
        end = time.monotonic() + 30
        while not _by_token(token) and time.monotonic() < end:
            time.sleep(0.05)
        assert _by_token(token), "the CLI's setsid grandchild never ran"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        end = time.monotonic() + 30
        while _by_token(token) and time.monotonic() < end:
            time.sleep(0.05)
        assert _by_token(token) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in _by_token(token):
            os.kill(pid, 9)


def _by_token(token: str) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    if token.encode() in fh.read():
                        with open(f"/proc/{entry}/stat", "rb") as st:
                            if st.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X"):
                                out.append(int(entry))
            except OSError:
                continue
    return out
