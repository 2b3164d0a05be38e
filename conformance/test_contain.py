"""Containment of the CLI itself (issue 30): a session's CLI runs as the host's user, so
what guards its secrets, the worktree and the next session is what it cannot reach. These
checks play a hostile CLI (the offline fake's `contain_probe`: it tries each attack and
records what it could do, never what it read) and judge the effect.

They ask the host for its sandbox (`HARNESS_BACKEND_SANDBOX=auto`, as a host sets it); a
backend that contains its CLI another way is judged the same. Where this machine can give no
sandbox (no bubblewrap, no user namespaces, not Linux) they skip with the reason instead of
failing a correct backend: no user-space guard keeps a same-uid process out of /proc.

One check runs at loopback only, where the CLI is the real one: what it sends over the network
on its own (contain.network-loopback-only, seen with strace). It judges an api backend too
where one runs a real CLI as its model (a reasoning-only backend's loopback level)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

from harnesscheck.core.contracts import Kind
from harnesscheck.kit.catalog import check

SANDBOXED = {"sandbox": "auto"}


def _need_sandbox(but) -> None:
    from harnesscheck.contain import sandbox

    state = sandbox.status()
    if not state.available:
        but.skip("env-missing", f"no sandbox on this machine ({state.reason}); fix: {sandbox.INSTALL_FIX}")


def _probe(but, ws, *, other=None):
    run = but.run("contain_probe", workspace=ws, settings=dict(SANDBOXED))
    record = getattr(run, "record_path", None)
    probes = []
    if record is not None and os.path.exists(record):
        for line in open(record, encoding="utf-8").read().split("\n"):
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("kind") == "contain_probe":
                probes.append(rec)
    if not probes:
        but.skip("adapter-not-implemented", f"the {but.spec.id} CLI at {but.level} ran no containment probe")
    return run, probes


@check("contain.other-environ-unreadable", kinds=[Kind.harness], levels=["offline"], incident=["A1", "A8"])
def test_other_environ_unreadable(but):
    """A session's CLI cannot read the environment of any process outside its own session
    (/proc/<pid>/environ): not its host's, not another session's CLI with that CLI's token.
    A same-uid process can unless the CLI runs where those processes are not visible."""
    _need_sandbox(but)
    ws = but.workspace()
    # another session's CLI, holding its token in its environment (a plain same-uid process)
    other = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"],
        env={"HC_OTHER_TOKEN": ws.canary},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _run, probes = _probe(but, ws)
    finally:
        other.kill()
        other.wait()
    hits = sum(p.get("environ_hits", 0) for p in probes)
    assert hits == 0, (
        f"the CLI read another process's environment (/proc/<pid>/environ) holding a token "
        f"({hits} hit(s)): run the CLI in a PID namespace of its own (bubblewrap)"
    )


@check("contain.worktree-only-through-bridge", kinds=[Kind.harness], levels=["offline"], incident=["A4", "P1"])
def test_worktree_only_through_bridge(but):
    """The CLI reaches the worktree only through the bridge (whose every call is scoped,
    refused or traced): a direct read of a worktree file by the CLI's own process fails,
    because the worktree is not there for it."""
    _need_sandbox(but)
    _run, probes = _probe(but, but.workspace())
    assert not any(p.get("read_ok") for p in probes), (
        "the CLI read a worktree file directly, around the bridge: mount nothing of the worktree where the CLI runs"
    )


@check("contain.cli-install-unchangeable", kinds=[Kind.harness], levels=["offline"], incident=["A8"])
def test_cli_install_unchangeable(but):
    """A session's CLI cannot change the CLI a later session runs: its own executable is
    unchanged after the session (the install is read-only where it runs)."""
    _need_sandbox(but)
    ws = but.workspace()
    run, probes = _probe(but, ws)
    named = getattr(run, "cli_named", None)
    changed = any(p.get("tamper_ok") for p in probes)
    if named is not None and os.path.exists(named):
        with open(named, "rb") as fh:
            changed = changed or b"contain_probe: planted" in fh.read()
    assert not changed, "the CLI appended to its own executable: the next session would run what it planted"


@check("contain.nothing-world-writable-left", kinds=[Kind.harness], levels=["offline"], incident=["A8"])
def test_nothing_world_writable_left(but):
    """Whatever modes the CLI set on its private dirs (TMPDIR, the run dir: 0777, a mode-0
    subdir), nothing the session made is left writable by other users, and its temp dirs are
    gone."""
    ws = but.workspace()
    run, probes = _probe(but, ws)
    run_dir = getattr(run, "run_dir", None)
    children = getattr(run, "children", None) or []
    tmps = {c.get("env", {}).get("TMPDIR") for c in children} - {None, ""}
    left = sorted(t for t in tmps if os.path.lexists(t))
    assert not left, f"the session's temp dir is still there after it ended: {left}"
    opened = []
    if run_dir is not None and os.path.isdir(run_dir):
        for dirpath, dirnames, filenames in os.walk(run_dir):
            for name in [dirpath, *(os.path.join(dirpath, n) for n in dirnames + filenames)]:
                try:
                    st = os.lstat(name)
                except OSError:
                    continue
                if not stat.S_ISLNK(st.st_mode) and st.st_mode & stat.S_IWOTH:
                    opened.append(os.path.relpath(name, run_dir))
    assert not opened, f"left writable by every user after the session: {sorted(set(opened))[:5]}"
    del probes


@check("contain.network-loopback-only", kinds=[Kind.harness, Kind.api], levels=["loopback"])
def test_network_loopback_only(but):
    """The real CLI (or agent) and every process it starts make no network call but to
    127.0.0.1 in a whole session with tool calls (every CLI call of it, where an api backend
    reasons through a CLI), seen with strace: no connect or send to
    another address and no name lookup (DNS, wherever the resolver listens: the scripted
    server and the bridge are addressed by IP, so a session needs none). Telemetry, update
    checks, feature flags and error reports the host never asked for are the calls this
    catches. Skips when strace is missing."""
    import shutil

    import pytest

    from harnesscheck.loopback.adapter import outside_loopback

    if not hasattr(but, "trace_opens"):
        pytest.skip("this level cannot trace the calls its CLI makes")
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed (apt-get install strace): the CLI's network calls cannot be seen")
    but.trace_opens = True
    try:
        run = but.run("tool_calls")
    finally:
        but.trace_opens = False
    network = getattr(run, "network", None)
    assert getattr(run, "opened", None) and network is not None, "strace saw no call: the trace did not run"
    outside = [c for c in network if "address" in c and outside_loopback(c)]
    names = sorted({c["lookup"] for c in network if "lookup" in c})
    calls = sorted({f"{c['call']} {c['address']} port {c['port']}" for c in outside})
    found = ([f"made {len(outside)} network call(s) outside 127.0.0.1: {calls[:6]}"] if outside else []) + (
        [f"looked up {', '.join(names[:6])}"] if names else []
    )
    assert not found, "the CLI's tree " + "; it ".join(found)
