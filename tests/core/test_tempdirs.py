"""core/tempdirs.py: a temp dir names its maker, and one whose maker is gone is removed by the
next one made with its prefix; nothing else is touched."""

from __future__ import annotations

import os
import subprocess
import sys

from harnesscheck.core.tempdirs import make_temp_dir, maker_prefix, start_time, sweep_orphans

PREFIX = "hc-test-"


def test_a_dir_whose_maker_is_gone_is_removed_and_nothing_else(tmp_path):
    child = subprocess.run(
        [sys.executable, "-c", f"from harnesscheck.core.tempdirs import maker_prefix; print(maker_prefix({PREFIX!r}))"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    dead = tmp_path / (child.stdout.strip() + "abc123")  # its maker has exited
    (dead / "cc-socks").mkdir(parents=True)
    reused = tmp_path / f"{PREFIX}{os.getpid()}-1-ghi789"  # this pid, another start time: a maker that is gone
    reused.mkdir()
    alive = tmp_path / (maker_prefix(PREFIX) + "def456")  # this process
    alive.mkdir()
    others = [tmp_path / f"{PREFIX}abc123", tmp_path / f"{PREFIX}x-1-y", tmp_path / "hc-other-1-2-z", tmp_path / f"hc-rt-{os.getpid()}-1-z"]
    for path in others:
        path.mkdir()
    a_file = tmp_path / f"{PREFIX}999999999-1-file"
    a_file.write_text("")
    assert sorted(sweep_orphans(PREFIX, str(tmp_path))) == sorted([dead, reused])
    assert not dead.exists() and not reused.exists()
    assert alive.is_dir() and a_file.is_file() and all(path.is_dir() for path in others)
    assert sweep_orphans(PREFIX, str(tmp_path / "absent")) == []


def test_make_temp_dir_names_this_process_and_sweeps_first(tmp_path):
    orphan = tmp_path / f"{PREFIX}{os.getpid()}-1-old"
    orphan.mkdir()
    made = make_temp_dir(PREFIX, str(tmp_path))
    assert made.parent == tmp_path and made.name.startswith(f"{PREFIX}{os.getpid()}-{start_time(os.getpid())}-")
    assert oct(made.stat().st_mode & 0o777) == "0o700"
    assert not orphan.exists()
    assert sweep_orphans(PREFIX, str(tmp_path)) == [] and made.is_dir()  # its maker is alive
