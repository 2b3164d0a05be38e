"""kit/cliwatch.py: which binary a session ran (selection.runs-the-given-cli)."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from harnesscheck.kit.cliwatch import NamedProcessWatcher, names_cli, program_path, ran_as


def test_names_cli_reads_argv0_the_script_of_an_interpreter_or_the_executable():
    assert names_cli(["/opt/x/claude", "-p"], "/opt/x/claude", "claude")
    assert names_cli(["/usr/bin/python3", "-IS", "/tmp/w1/claude", "-p"], "/usr/bin/python3.11", "claude")
    assert names_cli(["node", "/lib/gemini/dist/index.js"], "/usr/bin/node", "gemini") is False
    assert names_cli(["claude-helper"], "/usr/bin/claude", "claude")  # the executable counts
    assert not names_cli(["/usr/bin/python3", "-m", "harnesscheck.bridge", "--spec", "/x/claude"], "/usr/bin/python3", "claude")


def test_ran_as_resolves_argv0_against_the_recorded_cwd(tmp_path):
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "claude").write_text("")
    (tmp_path / "link").symlink_to(tmp_path / "bin")
    real = os.path.realpath(tmp_path / "bin" / "claude")
    assert ran_as({"argv": ["./bin/claude"], "cwd": str(tmp_path)}) == real
    assert ran_as({"argv": [str(tmp_path / "link" / "claude")], "cwd": "/"}) == real
    assert program_path(["/usr/bin/python3", "-IS", "bin/claude"], "/usr/bin/python3.11", str(tmp_path)) == real


def test_strays_are_named_processes_outside_the_named_cli_and_its_tree():
    w = NamedProcessWatcher("claude", root=1)
    w.parents = {10: 1, 11: 10, 12: 1, 13: 12}
    w.named = {
        10: {"pid": 10, "path": "/named/claude", "argv": ["/named/claude"]},  # a version probe of the named path
        11: {"pid": 11, "path": "/elsewhere/claude", "argv": ["/elsewhere/claude"]},  # started by a recorded CLI
        13: {"pid": 13, "path": "/bundled/claude", "argv": ["/bundled/claude"]},  # the backend's own
    }
    assert [s["pid"] for s in w.strays("/named/claude", allowed=[10])] == [13]
    assert [s["pid"] for s in w.strays("/named/claude", allowed=[])] == [11, 13]


def test_the_watcher_sees_a_child_named_like_the_cli(tmp_path):
    prog = tmp_path / "claude"
    prog.write_text("#!/bin/sh\nsleep 60\n")
    prog.chmod(0o755)
    with NamedProcessWatcher("claude") as watch:
        child = subprocess.Popen([str(prog)])
        try:  # it lives until the watcher has seen it (a poll can be late under load; never a race)
            end = time.monotonic() + 30
            while watch.available and not watch.named and time.monotonic() < end:
                time.sleep(0.01)
        finally:
            child.kill()
            child.wait()
    if not watch.available:
        pytest.skip("no /proc here")
    assert [s["path"] for s in watch.strays("/nowhere/claude", allowed=[])] == [os.path.realpath(prog)]
    assert watch.strays(str(prog), allowed=[]) == []
