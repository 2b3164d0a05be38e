"""Run dirs are private to the host (issue 17 findings 2 and 3; src/harnesscheck/contain/rundir.py).

- Never inside the worktree, checked after resolving `..` and symlinks, in the library
  (a harness transport's session context) and in `harnesscheck run --run-dir` alike.
- Created fresh (0700, ours) or verified: another user's dir, a dir others can write, a
  run dir under a parent others can write (not sticky) are refused.
- Every file the host writes there is created O_EXCL|O_NOFOLLOW beneath its parent's fd
  (a planted symlink is removed, never followed); atomic replacements use random temp names.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from harnesscheck.backends._harness import new_session_context
from harnesscheck.choke.trace import Trace
from harnesscheck.contain.rundir import RunDirError, create_private, prepare_run_dir, replace_private, write_private
from harnesscheck.core.contracts import AgentSessionRequest
from harnesscheck.core.scope import ToolScope

CANARY = "CANARY-victim-content-7b1e"
HARNESSCHECK = [sys.executable, "-c", "from harnesscheck.apps.cli import main; main()"]


@pytest.fixture
def wt(tmp_path: Path) -> Path:
    root = tmp_path / "wt"
    root.mkdir()
    (root / "README.md").write_text("# Project\n")
    return root


def _request(root: Path, run_dir: Path | None) -> AgentSessionRequest:
    return AgentSessionRequest(prompt="hi", scope=ToolScope(root=root, read_only=True), timeout_s=30, run_dir=run_dir)


def _aliases(tmp_path: Path, wt: Path, cwd: Path | None = None) -> list[Path]:
    (tmp_path / "x").mkdir(exist_ok=True)
    if not (tmp_path / "alias").is_symlink():
        os.symlink(wt, tmp_path / "alias")
    return [
        wt / "run",
        wt,
        tmp_path / "x" / ".." / "wt" / "run",  # `..` resolves into the worktree
        tmp_path / "alias" / "run",  # a symlinked alias of the worktree
        Path(os.path.relpath(wt / "sub" / "run", cwd)),  # relative to the cwd
    ]


def test_library_refuses_a_run_dir_inside_the_worktree(tmp_path: Path, wt: Path) -> None:
    for run_dir in _aliases(tmp_path, wt):
        with pytest.raises(RunDirError, match="inside the worktree"):
            new_session_context(_request(wt, run_dir), "codex")
    assert sorted(p.name for p in wt.iterdir()) == ["README.md"]  # nothing was created there


def test_library_run_dir_outside_is_private_and_resolved(tmp_path: Path, wt: Path) -> None:
    os.symlink(tmp_path, tmp_path / "link-to-base")
    ctx = new_session_context(_request(wt, tmp_path / "link-to-base" / "runs" / "r1"), "codex")
    assert ctx.run_dir == (tmp_path / "runs" / "r1").resolve()
    assert stat.S_IMODE(ctx.run_dir.stat().st_mode) == 0o700 and ctx.run_dir.stat().st_uid == os.getuid()
    spec = ctx.spec_path
    assert spec is not None and stat.S_IMODE(spec.stat().st_mode) == 0o600
    assert [p.name for p in ctx.run_dir.iterdir() if p.name.endswith(".tmp")] == []


def test_cli_refuses_run_dir_inside_the_worktree_after_resolving(tmp_path: Path, wt: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_")}
    env["HOME"] = str(tmp_path / "home")
    env["TMPDIR"] = str(tmp_path / "tmp")
    (tmp_path / "home").mkdir()
    (tmp_path / "tmp").mkdir()
    for run_dir in _aliases(tmp_path, wt, cwd=tmp_path):
        proc = subprocess.run(
            [*HARNESSCHECK, "run", "--backend", "codex", "--root", str(wt), "--prompt", "hi", "--run-dir", str(run_dir)],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
        assert proc.returncode == 2 and "inside the worktree" in proc.stderr, (run_dir, proc.stderr[-500:])
    assert sorted(p.name for p in wt.iterdir()) == ["README.md"]


def test_existing_run_dir_must_be_ours_and_not_writable_by_others(tmp_path: Path) -> None:
    loose = tmp_path / "loose"
    loose.mkdir()
    loose.chmod(0o777)
    with pytest.raises(RunDirError, match="writable by other users"):
        prepare_run_dir(loose)
    readable = tmp_path / "readable"
    readable.mkdir()
    readable.chmod(0o755)
    assert prepare_run_dir(readable) == readable.resolve()
    assert stat.S_IMODE(readable.stat().st_mode) == 0o700  # tightened: it will hold config homes
    (tmp_path / "real").mkdir(mode=0o700)
    os.symlink(tmp_path / "real", tmp_path / "sym")
    assert prepare_run_dir(tmp_path / "sym") == (tmp_path / "real").resolve()  # resolved, then checked
    (tmp_path / "file").write_text("x")
    with pytest.raises(RunDirError):
        prepare_run_dir(tmp_path / "file")


def test_run_dir_under_a_parent_others_can_write_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # not sticky: anyone could rename the run dir away and put their own
    with pytest.raises(RunDirError, match="writable by other users and not sticky"):
        prepare_run_dir(shared / "run")
    shared.chmod(0o1777)  # sticky, like /tmp: only the owner can rename its entries
    assert prepare_run_dir(shared / "run").is_dir()


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to create a dir owned by another user")
def test_run_dir_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir(mode=0o700)
    os.chown(other, 65534, 65534)
    with pytest.raises(RunDirError, match="another user"):
        prepare_run_dir(other)
    with pytest.raises(RunDirError, match="another user"):
        prepare_run_dir(other / "run")


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "victim.txt"
    victim.write_text(CANARY + "\n")
    return victim


def test_files_are_created_fresh_never_through_a_planted_symlink(tmp_path: Path) -> None:
    run = prepare_run_dir(tmp_path / "run")
    victim = _victim(tmp_path)
    for name in ("claude-mcp.json", "system-prompt.md", "events.jsonl"):
        os.symlink(victim, run / name)
    write_private(run / "claude-mcp.json", "{}")
    write_private(run / "system-prompt.md", "be brief")
    os.close(create_private(run / "events.jsonl", append=True))
    assert victim.read_text() == CANARY + "\n"
    for name in ("claude-mcp.json", "system-prompt.md", "events.jsonl"):
        st = os.lstat(run / name)
        assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600


def test_a_trace_never_appends_through_a_symlink(tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    os.symlink(victim, tmp_path / "bridge-trace.jsonl")
    with pytest.raises(OSError):
        Trace(tmp_path / "bridge-trace.jsonl", session_id="s").record("tool", path="x")
    assert victim.read_text() == CANARY + "\n"


def test_atomic_replacements_use_no_predictable_temp_name(tmp_path: Path, monkeypatch) -> None:
    """The spec's temp file was `.<name>.<pid>.tmp`: a planted symlink there was followed."""
    from harnesscheck.apps.report import _atomic_write
    from harnesscheck.bridge.spec import BridgeSpec, write_spec

    run = prepare_run_dir(tmp_path / "run")
    victim = _victim(tmp_path)
    for name in ("bridge-spec.json", "RUN_REPORT.md"):
        os.symlink(victim, run / f".{name}.{os.getpid()}.tmp")
    spec = BridgeSpec(scope=ToolScope(root=tmp_path), run_dir=run, trace_path=run / "t.jsonl", session_id="s")
    write_spec(spec, run / "bridge-spec.json")
    _atomic_write(run / "RUN_REPORT.md", "# report\n")
    replace_private(run / "other.json", "{}")
    assert victim.read_text() == CANARY + "\n"
    assert (run / "RUN_REPORT.md").read_text() == "# report\n"
    assert stat.S_IMODE((run / "bridge-spec.json").stat().st_mode) == 0o600


def test_transport_files_in_a_reused_run_dir_with_planted_symlinks(tmp_path: Path, wt: Path) -> None:
    """A claude session context in a run dir where every file name is a symlink to a victim:
    nothing the host writes reaches the victim."""
    from harnesscheck.backends.claude_code import _write_private

    run = prepare_run_dir(tmp_path / "run")
    victim = _victim(tmp_path)
    for name in ("claude-mcp.json", "system-prompt.md", "session-trace.jsonl", "bridge-trace.jsonl"):
        os.symlink(victim, run / name)
    ctx = new_session_context(_request(wt, run), "claude-code")
    _write_private(ctx.run_dir / "claude-mcp.json", "{}")
    _write_private(ctx.run_dir / "system-prompt.md", "sys")
    with pytest.raises(OSError):
        Trace(ctx.session_trace, ctx.session_id)
    assert victim.read_text() == CANARY + "\n"


def test_forget_cli_state_keeps_only_what_the_host_put_there(tmp_path):
    """The CLI's transcripts, logs and databases in its config homes go after the session;
    the host's configs and a planted symlink's target stay (the link is unlinked, not followed)."""
    from harnesscheck.contain.rundir import config_home_entries, forget_cli_state

    homes = tmp_path / "run" / "config-homes"
    (homes / "codex_home").mkdir(parents=True)
    (homes / "codex_home" / "config.toml").write_text("model = 'm'\n")
    kept = config_home_entries(tmp_path / "run")
    (homes / "codex_home" / "sessions" / "2026").mkdir(parents=True)
    (homes / "codex_home" / "sessions" / "2026" / "rollout-1.jsonl").write_text('{"arguments": "ghp_secret"}\n')
    (homes / "codex_home" / "thread_history_1.sqlite").write_bytes(b"SQLite format 3\0ghp_secret")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("not the session's\n")
    (homes / "home").mkdir()
    (homes / "home" / "link").symlink_to(outside)
    removed = forget_cli_state(tmp_path / "run", kept)
    left = sorted(str(p.relative_to(homes)) for p in homes.rglob("*"))
    assert left == ["codex_home", "codex_home/config.toml"]
    assert (outside / "keep.txt").read_text() == "not the session's\n"
    assert "config-homes/codex_home/sessions/2026/rollout-1.jsonl" in removed and "config-homes/home/link" in removed


def _secret_files(run: Path, secret: bytes) -> list[str]:
    return sorted(str(p.relative_to(run)) for p in run.rglob("*") if p.is_file() and not p.is_symlink() and secret in p.read_bytes())


def test_forget_cli_state_covers_the_private_home_and_the_scratch_cwd(tmp_path):
    """opencode, zcode, deepseek (and cursor, codex's user HOME) keep a private HOME at
    `<run>/home`, outside the config homes: opencode 1.18.33's sqlite store
    `home/.local/share/opencode/opencode.db-wal` kept a host secret used as a tool argument.
    What the CLI wrote there and in its scratch cwd goes; the host's pre-fill (config, plugin
    manifest, the link to its node_modules) and the host's own files in the run dir stay."""
    from harnesscheck.contain.rundir import config_home_entries, forget_cli_state

    run = tmp_path / "run"
    secret = b"ghp_0123456789abcdefZq9"
    deps = tmp_path / "deps" / "node_modules"
    deps.mkdir(parents=True)
    cfg = run / "home" / ".config" / "opencode"
    cfg.mkdir(parents=True)
    (cfg / "package.json").write_text('{"dependencies": {}}\n')
    (cfg / "node_modules").symlink_to(deps)
    (run / "home" / ".local" / "share").mkdir(parents=True)
    (run / "cwd" / ".gemini").mkdir(parents=True)
    (run / "cwd" / ".gemini" / "settings.json").write_text("{}\n")
    (run / "bridge-trace.jsonl").write_text("{}\n")  # the host's: never a CLI state dir
    kept = config_home_entries(run)
    store = run / "home" / ".local" / "share" / "opencode"
    store.mkdir()
    (store / "opencode.db").write_bytes(b"SQLite format 3\0")
    (store / "opencode.db-wal").write_bytes(b"WAL\0" + secret)
    (store / "log").mkdir()
    (store / "log" / "2026.log").write_bytes(b"tool read_file " + secret)
    (run / "home" / ".npm" / "_cacache").mkdir(parents=True)
    (run / "cwd" / "notes.md").write_bytes(secret)
    (run / "cwd" / ".gemini" / "tmp").mkdir()
    (run / "cwd" / ".gemini" / "tmp" / "chat.json").write_bytes(secret)
    assert _secret_files(run, secret)
    removed = forget_cli_state(run, kept)
    assert not _secret_files(run, secret)
    assert "home/.local/share/opencode/opencode.db-wal" in removed and "home/.npm" in removed
    assert (cfg / "package.json").is_file() and (cfg / "node_modules").is_symlink() and deps.is_dir()
    assert (run / "cwd" / ".gemini" / "settings.json").is_file() and (run / "bridge-trace.jsonl").is_file()
    assert not (run / "home" / ".local" / "share" / "opencode").exists()


def test_forget_cli_state_walks_only_the_dirs_named_and_never_a_symlinked_one(tmp_path):
    """A transport names its own state dirs (deepseek: `dsh-home`); a state dir that is a
    symlink (planted in a reused run dir) is not walked: its target keeps everything."""
    from harnesscheck.contain.rundir import CLI_STATE_DIRS, config_home_entries, forget_cli_state

    run = tmp_path / "run"
    (run / "dsh-home").mkdir(parents=True)
    target = tmp_path / "elsewhere"
    target.mkdir()
    (run / "home").symlink_to(target)
    dirs = (*CLI_STATE_DIRS, "dsh-home")
    kept = config_home_entries(run, dirs)
    assert kept == {"dsh-home"}
    (run / "dsh-home" / "sessions.jsonl").write_text("secret\n")
    (target / "mine.txt").write_text("not the session's\n")
    assert forget_cli_state(run, kept, CLI_STATE_DIRS) == []  # dsh-home not named: left alone
    assert forget_cli_state(run, kept, dirs) == ["dsh-home/sessions.jsonl"]
    assert (target / "mine.txt").is_file() and (run / "home").is_symlink()


def test_place_private_never_follows_a_link_a_cli_left_in_its_home(tmp_path):
    """rundir.place_private: files 0600, folders 0700, links made beneath the root's fd; a link
    or a file where a folder belongs, and anything at the leaf, are replaced, never followed."""
    import os

    from harnesscheck.contain.rundir import place_private

    home, outside = tmp_path / "home", tmp_path / "outside"
    home.mkdir(mode=0o700)
    outside.mkdir()
    (outside / "victim.json").write_text("keep")
    place_private(home, ".config/agent/package.json", data=b"{}")
    place_private(home, ".config/agent/node_modules", link_to=str(tmp_path / "deps"))
    agent = home / ".config" / "agent"
    assert (agent / "package.json").read_bytes() == b"{}" and (agent / "package.json").stat().st_mode & 0o777 == 0o600
    assert agent.stat().st_mode & 0o777 == 0o700 and os.readlink(agent / "node_modules") == str(tmp_path / "deps")
    place_private(home, ".config/agent/node_modules", link_to=str(tmp_path / "deps"))  # again: the old link replaced
    # what a CLI may leave between sessions: the leaf a link out, then a folder on the way a link out
    (agent / "package.json").unlink()
    (agent / "package.json").symlink_to(outside / "victim.json")
    place_private(home, ".config/agent/package.json", data=b"new")
    assert (outside / "victim.json").read_text() == "keep" and not (agent / "package.json").is_symlink()
    import shutil

    shutil.rmtree(home / ".config")
    (home / ".config").symlink_to(outside, target_is_directory=True)
    place_private(home, ".config/agent/package.json", data=b"new")
    assert sorted(p.name for p in outside.iterdir()) == ["victim.json"], "nothing written through the link"
    assert (home / ".config").is_dir() and not (home / ".config").is_symlink()
    (home / ".config" / "agent" / "node_modules" / "pkg").mkdir(parents=True)  # a real folder at the leaf: removed as a tree
    place_private(home, ".config/agent/node_modules", link_to=str(tmp_path / "deps"))
    assert (home / ".config" / "agent" / "node_modules").is_symlink()
    for bad in ("../out", "/abs", ""):
        with pytest.raises(ValueError):
            place_private(home, bad, data=b"x")
