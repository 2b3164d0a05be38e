"""Path scope: one test per escape technique P1-P15 (harness-anchors.md §4), each over the
relevant ops {read, list, grep, write, create} and existing / non-existent targets, with
benign controls beside them. Everything goes through the real resolve_path and dispatch:
no mocks except the TOCTOU interleavings, which only wrap `os` to swap at a chosen moment.

Every test runs inside an `outside` guard: a sibling directory `proj-secrets` (a prefix
sibling of the root, P3) holding canary files; after each test their contents and mtimes
must be unchanged, nothing new may appear there, and no result may contain the canary.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import harnesscheck.core.scope as scope_mod
from harnesscheck.choke.dispatch import dispatch, tool_definitions
from harnesscheck.core.scope import REASON_CODES, Refused, ToolScope, resolve_path

CANARY = "CANARY-7f3a9c-outside-the-root"
HL_CONTENT = "HARDLINKED-outside-content"


def snapshot(directory: Path) -> dict[str, tuple[bytes, int, int]]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(directory):
        for name in dirnames + filenames:
            p = Path(dirpath, name)
            st_ = p.lstat()
            data = p.read_bytes() if stat.S_ISREG(st_.st_mode) else b""
            out[str(p.relative_to(directory))] = (data, st_.st_mtime_ns, st_.st_mode)
    return out


class Tree:
    def __init__(self, base: Path):
        self.base = base
        self.root = base / "proj"
        self.outside = base / "proj-secrets"
        self.root.mkdir()
        self.outside.mkdir()
        (self.outside / "secret.txt").write_text(CANARY + "\n")
        (self.outside / "victim.txt").write_text(CANARY + " victim\n")
        (self.outside / "hl.txt").write_text(HL_CONTENT + "\n")
        (self.outside / "dir").mkdir()
        (self.outside / "dir" / "secret.txt").write_text(CANARY + " nested\n")
        (self.root / "a.txt").write_text("hello inside\n")
        (self.root / "sub").mkdir()
        (self.root / "sub" / "b.txt").write_text("bee inside\n")
        (self.root / "1.0..2.0").write_text("version range\n")
        (self.root / ".git").mkdir()
        (self.root / ".git" / "config").write_text("[core]\n")
        self.before = snapshot(self.outside)

    def scope(self, **kw) -> ToolScope:
        kw.setdefault("read_only", False)
        return ToolScope(root=self.root, **kw)

    def check_outside(self) -> None:
        assert snapshot(self.outside) == self.before, "something outside the root changed"
        assert sorted(p.name for p in self.base.iterdir()) == ["proj", "proj-secrets"]


@pytest.fixture
def tree(tmp_path: Path):
    t = Tree(tmp_path)
    yield t
    t.check_outside()


def call(scope: ToolScope, tool: str, **args):
    result = dispatch(tool, args, scope)
    assert CANARY not in result.text
    assert HL_CONTENT not in result.text or tool in ("read_file", "grep")  # reading a hard link is allowed
    if not result.ok:
        assert result.text.startswith(f"refused: {result.code}: ")
        assert result.code in REASON_CODES
    return result


# op -> how to run it against `path` (existing vs non-existent target decided by the path)
OPS = {
    "read": lambda s, p: call(s, "read_file", path=p),
    "list": lambda s, p: call(s, "list_dir", path=p),
    "grep": lambda s, p: call(s, "grep", pattern="CANARY|inside|e", path=p),
    "write": lambda s, p: call(s, "write_file", path=p, content="overwritten"),
    "create": lambda s, p: call(s, "write_file", path=p, content="created"),
    "edit": lambda s, p: call(s, "edit_file", path=p, old="CANARY", new="X"),
}


def refused(result, *codes: str) -> None:
    assert not result.ok, result.text
    assert result.code in codes, result.text


def run_bounded(fn, timeout: float = 20.0):
    """Run fn in a thread; fail (instead of hanging the suite) if it does not return."""
    box: dict = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as err:  # pragma: no cover - surfaced below
            box["error"] = err

    th = threading.Thread(target=target, daemon=True)
    th.start()
    th.join(timeout)
    assert not th.is_alive(), f"call did not return within {timeout} s (a hang)"
    if "error" in box:
        raise box["error"]
    return box["value"]


# ---------------------------------------------------------------------------------------
# P1 .. traversal


@pytest.mark.parametrize("op", ["read", "list", "grep", "write", "create", "edit"])
@pytest.mark.parametrize(
    "path",
    ["../proj-secrets/secret.txt", "a/../../proj-secrets/secret.txt", "sub/../../proj-secrets/new.txt", "..", "../", "sub/../.."],
)
def test_p1_dotdot_traversal_refused(tree, op, path):
    refused(OPS[op](tree.scope(), path), "path_outside_scope")


def test_p1_benign_dotdot_inside_and_dotted_names(tree):
    s = tree.scope()
    assert call(s, "read_file", path="sub/../a.txt").text == "hello inside\n"
    assert call(s, "read_file", path="1.0..2.0").text == "version range\n"
    assert call(s, "read_file", path="sub/./b.txt").text == "bee inside\n"
    assert "a.txt" in call(s, "list_dir", path="sub/..").text
    assert call(s, "write_file", path="sub/../2.0..3.0", content="x").ok
    assert (tree.root / "2.0..3.0").read_text() == "x"


# ---------------------------------------------------------------------------------------
# P2 absolute, drive, UNC, home


@pytest.mark.parametrize("op", ["read", "list", "grep", "write", "create"])
@pytest.mark.parametrize(
    "path",
    [
        "/etc/passwd",
        "{outside}/secret.txt",
        "{outside}/new.txt",
        "\\\\server\\share\\x",
        "C:\\x",
        "C:foo",
        "c:/x",
        "\\etc\\passwd",
        "~/.ssh/id_rsa",
        "~root/x",
        "//etc/passwd",
    ],
)
def test_p2_absolute_forms_refused(tree, op, path):
    refused(OPS[op](tree.scope(), path.format(outside=tree.outside)), "absolute_path")


def test_p2_absolute_path_of_the_root_itself_is_refused(tree):
    refused(call(tree.scope(), "read_file", path=str(tree.root / "a.txt")), "absolute_path")


# ---------------------------------------------------------------------------------------
# P3 sibling prefix: proj vs proj-secrets, by `..`, by a relative and an absolute link


@pytest.mark.parametrize("op", ["read", "list", "grep", "write", "create"])
def test_p3_sibling_prefix_refused(tree, op):
    os.symlink(str(tree.outside), tree.root / "sib_abs")  # absolute text that startswith(root)
    os.symlink("../proj-secrets", tree.root / "sib_rel")
    target = "secret.txt" if op != "create" else "new.txt"
    for link in ("sib_abs", "sib_rel"):
        path = link if op in ("list", "grep") else f"{link}/{target}"
        refused(OPS[op](tree.scope(), path), "symlink_escape")
    refused(OPS[op](tree.scope(), f"../proj-secrets/{target}"), "path_outside_scope")


# ---------------------------------------------------------------------------------------
# P4 leaf symlink pointing out


@pytest.mark.parametrize("op", ["read", "grep", "write", "edit", "list"])
@pytest.mark.parametrize("kind", ["absolute", "relative"])
def test_p4_leaf_symlink_out_refused(tree, op, kind):
    target = tree.outside / ("dir" if op == "list" else "secret.txt")
    text = str(target) if kind == "absolute" else os.path.relpath(target, tree.root)
    os.symlink(text, tree.root / "leak")
    refused(OPS[op](tree.scope(), "leak"), "symlink_escape")


def test_p4_dangling_leaf_symlink_out_create_refused(tree):
    os.symlink("../proj-secrets/new.txt", tree.root / "dangling")
    os.symlink(str(tree.outside / "new2.txt"), tree.root / "dangling_abs")
    refused(OPS["create"](tree.scope(), "dangling"), "symlink_escape")
    refused(OPS["create"](tree.scope(), "dangling_abs"), "symlink_escape")


def test_p4_benign_in_tree_symlinks_work(tree):
    os.symlink("a.txt", tree.root / "rel_link")
    os.symlink(str(tree.root / "sub" / "b.txt"), tree.root / "abs_link")
    os.symlink("../a.txt", tree.root / "sub" / "up_link")
    os.symlink("rel_link", tree.root / "chain")
    s = tree.scope()
    assert call(s, "read_file", path="rel_link").text == "hello inside\n"
    assert call(s, "read_file", path="abs_link").text == "bee inside\n"
    assert call(s, "read_file", path="sub/up_link").text == "hello inside\n"
    assert call(s, "read_file", path="chain").text == "hello inside\n"
    assert "a.txt:1: hello inside" in call(s, "grep", pattern="hello", path="rel_link").text
    # Writing through an in-tree link writes its in-tree target.
    result = call(s, "write_file", path="rel_link", content="via link")
    assert result.ok and "a.txt" in result.text
    assert (tree.root / "a.txt").read_text() == "via link"
    assert (tree.root / "rel_link").is_symlink()
    # A dangling in-tree link may be created through.
    os.symlink("sub/fresh.txt", tree.root / "to_fresh")
    assert call(s, "write_file", path="to_fresh", content="new").ok
    assert (tree.root / "sub" / "fresh.txt").read_text() == "new"


# ---------------------------------------------------------------------------------------
# P5 symlinked parent directory, existing and not-yet-existing targets


@pytest.mark.parametrize("op", ["read", "list", "grep", "write", "create", "edit"])
@pytest.mark.parametrize("kind", ["absolute", "relative", "nested"])
def test_p5_parent_dir_symlink_out_refused(tree, op, kind):
    if kind == "absolute":
        os.symlink(str(tree.outside), tree.root / "outbox")
    elif kind == "relative":
        os.symlink("../proj-secrets", tree.root / "outbox")
    else:
        os.symlink("../../proj-secrets", tree.root / "sub" / "up")
        os.symlink("sub/up", tree.root / "outbox")
    leaf = {"read": "secret.txt", "list": "dir", "grep": "dir", "write": "victim.txt", "edit": "victim.txt", "create": "deep/er/new.conf"}[op]
    refused(OPS[op](tree.scope(), f"outbox/{leaf}"), "symlink_escape")


def test_p5_benign_in_tree_dir_symlink(tree):
    os.symlink("sub", tree.root / "inlink")
    s = tree.scope()
    assert call(s, "read_file", path="inlink/b.txt").text == "bee inside\n"
    assert "b.txt" in call(s, "list_dir", path="inlink").text
    result = call(s, "write_file", path="inlink/new/deeper.txt", content="made")
    assert result.ok and "sub/new/deeper.txt" in result.text
    assert (tree.root / "sub" / "new" / "deeper.txt").read_text() == "made"


# ---------------------------------------------------------------------------------------
# P6 procfs, sysfs, /dev and magic links


@pytest.mark.parametrize(
    "path",
    ["proc/self/environ", "proc/self/root/etc/hostname", "proc/1/environ", "sys/kernel/hostname", "dev/zero", "dev/fd/0", "proc", "PROC/../proc/self/environ"],
)
@pytest.mark.parametrize("op", ["read", "list", "grep"])
def test_p6_proc_sys_dev_never_served_even_with_root_slash(op, path):
    scope = ToolScope(root=Path("/"), read_only=True)
    result = run_bounded(lambda: OPS[op](scope, path))
    refused(result, "denied_path", "not_found")
    if "proc" in path.lower().split("/")[:1] or path.startswith(("sys", "dev")):
        assert result.code == "denied_path" or path.startswith("PROC")


def test_p6_root_slash_still_reads_ordinary_files():
    scope = ToolScope(root=Path("/"), read_only=True)
    assert call(scope, "list_dir", path="etc").ok


@pytest.mark.parametrize("root", ["/proc/self", "/proc", "/sys/kernel", "/dev"])
def test_p6_root_inside_special_fs_refused(root):
    refused(call(ToolScope(root=Path(root)), "read_file", path="environ"), "denied_path")
    refused(call(ToolScope(root=Path(root)), "list_dir", path="."), "denied_path")


@pytest.mark.parametrize("text", ["/proc/self/environ", "/proc/self/root/etc/passwd", "/proc/self/cwd", "/dev/fd/0", "/dev/zero"])
@pytest.mark.parametrize("op", ["read", "list", "grep", "write", "create"])
def test_p6_magic_links_behind_in_tree_symlinks_refused(tree, text, op):
    os.symlink(text, tree.root / "magic")
    path = "magic/x" if op == "create" else "magic"
    result = run_bounded(lambda: OPS[op](tree.scope(), path))
    refused(result, "symlink_escape")
    assert "PATH=" not in result.text and "HOME=" not in result.text


# ---------------------------------------------------------------------------------------
# P7 case variants of deny-listed names (and Windows trailing-dot / stream spellings)


@pytest.mark.parametrize(
    "path",
    [
        ".git/config",
        ".GIT/config",
        ".Git/hooks/pre-commit",
        ".git./config",
        ".git /config",
        ".git::$INDEX_ALLOCATION/config",
        ".claude/settings.json",
        ".CLAUDE/settings.json",
        ".Codex/config.toml",
        ".CURSOR/mcp.json",
        ".gemini/settings.json",
        ".opencode/x",
        "sub/.git/hooks/post-checkout",
        ".MCP.json",
        "sub/.GiT",
    ],
)
@pytest.mark.parametrize("op", ["write", "create", "edit"])
def test_p7_case_variant_deny_list_for_writes(tree, path, op):
    (tree.root / ".claude").mkdir(exist_ok=True)
    (tree.root / ".claude" / "settings.json").write_text("{}")
    before = snapshot(tree.root)
    refused(OPS[op](tree.scope(), path), "denied_path")
    assert snapshot(tree.root) == before


@pytest.mark.parametrize("path", [".git/config", ".GIT/config", ".git", "sub/../.Git/config"])
@pytest.mark.parametrize("op", ["read", "list", "grep"])
def test_p7_git_internals_not_readable(tree, path, op):
    refused(OPS[op](tree.scope(), path), "denied_path", "not_directory")


def test_p7_symlink_to_denied_path_refused(tree):
    os.symlink(".git/config", tree.root / "cfg")
    os.symlink(".git", tree.root / "g")
    s = tree.scope()
    refused(call(s, "write_file", path="cfg", content="[core]\nhooksPath=/tmp\n"), "denied_path")
    refused(call(s, "read_file", path="g/config"), "denied_path")
    assert (tree.root / ".git" / "config").read_text() == "[core]\n"


def test_p7_benign_similar_names_allowed(tree):
    s = tree.scope()
    for path in (".gitignore", ".github/workflows/ci.yml", "git/config", ".gitx/y", "claude/notes.md", "docs/.codex.md"):
        assert call(s, "write_file", path=path, content="ok").ok, path
    (tree.root / ".claude").mkdir()
    (tree.root / ".claude" / "settings.json").write_text("{}")
    assert call(s, "read_file", path=".claude/settings.json").text == "{}"
    listing = call(s, "list_dir", path=".").text
    assert ".git/" in listing  # listed, but its contents are not served
    assert ".git" not in call(s, "grep", pattern="core", path=".").text


# ---------------------------------------------------------------------------------------
# P8 Unicode normalization: non-NFC input is refused; NFC names work


@pytest.mark.parametrize("op", ["read", "list", "grep", "write", "create"])
def test_p8_nfd_input_refused(tree, op):
    (tree.root / "caf\u00e9.txt").write_text("nfc file\n")
    refused(OPS[op](tree.scope(), "cafe\u0301.txt"), "invalid_path")
    refused(OPS[op](tree.scope(), "cafe\u0301/new.txt"), "invalid_path")
    assert not (tree.root / "cafe\u0301.txt").exists()


def test_p8_nfc_names_and_deny_key(tree):
    (tree.root / "caf\u00e9.txt").write_text("nfc file\n")
    s = tree.scope()
    assert call(s, "read_file", path="caf\u00e9.txt").text == "nfc file\n"
    assert call(s, "write_file", path="\u65e5\u672c/\u00fcber.txt", content="u").ok
    assert scope_mod.deny_key(".GIT") == scope_mod.deny_key(".git")
    assert scope_mod.deny_key("\uff0egit") != ".git"  # fullwidth dot is a different name
    # An NFD link text naming a deny-listed dir is compared after NFC.
    assert scope_mod.is_denied_name(".CL\u0041UDE", mutating=True)


# ---------------------------------------------------------------------------------------
# P9 NUL and control characters


@pytest.mark.parametrize("path", ["a.txt\x00.png", "\x00", "sub/\x00/b.txt", "a\nb", "a\rb", "a\tb", "a\x1bb", "a\x7f", "a.txt\x00"])
@pytest.mark.parametrize("op", ["read", "list", "grep", "write", "create"])
def test_p9_nul_and_control_characters_refused(tree, path, op):
    refused(OPS[op](tree.scope(), path), "invalid_path")


def test_p9_benign_spaces_and_punctuation(tree):
    s = tree.scope()
    for name in ("a b.txt", "x#y$z.txt", "-dash.txt", "semi;colon.txt", "quote'd.txt"):
        assert call(s, "write_file", path=name, content=name).ok, name
        assert call(s, "read_file", path=name).text == name


# ---------------------------------------------------------------------------------------
# P10 very long paths, too many components, \\?\ and \\.\ prefixes, symlink loops


@pytest.mark.parametrize(
    "path",
    ["a/" * 2100, "x" * 4097, "x" * 256, "sub/" + "y" * 300, "/".join(["d"] * 257), "\\\\?\\C:\\x", "\\\\.\\pipe\\x", "\\\\?\\UNC\\server\\share"],
)
@pytest.mark.parametrize("op", ["read", "list", "grep", "write", "create"])
def test_p10_long_and_device_namespace_paths_refused(tree, path, op):
    refused(OPS[op](tree.scope(), path), "invalid_path", "absolute_path")


@pytest.mark.parametrize("op", ["read", "list", "grep", "write", "create"])
def test_p10_symlink_loops_refused_not_crashing(tree, op):
    os.symlink("loop2", tree.root / "loop1")
    os.symlink("loop1", tree.root / "loop2")
    os.symlink("self", tree.root / "self")
    os.symlink("deep/../deep", tree.root / "sub" / "deep")
    for path in ("loop1", "self", "self/x", "sub/deep"):
        refused(OPS[op](tree.scope(), path), "symlink_loop")


def test_p10_benign_long_but_valid(tree):
    s = tree.scope()
    name = "n" * 200
    deep = "/".join(["d"] * 60) + "/" + name
    assert call(s, "write_file", path=deep, content="deep").ok
    assert call(s, "read_file", path=deep).text == "deep"


# ---------------------------------------------------------------------------------------
# P11 TOCTOU: swaps between calls, mid-resolution, and a racing thread


def _prepare_race(tree: Tree) -> None:
    (tree.root / "race").mkdir()
    (tree.root / "race" / "secret.txt").write_text("inside race\n")
    (tree.root / "race" / "victim.txt").write_text("inside victim\n")


def _swap_to_link(tree: Tree) -> None:
    os.rename(tree.root / "race", tree.root / "race_hold")
    os.symlink(str(tree.outside), tree.root / "race")


def test_p11_swap_between_calls(tree):
    _prepare_race(tree)
    s = tree.scope()
    assert call(s, "read_file", path="race/secret.txt").text == "inside race\n"
    _swap_to_link(tree)
    refused(call(s, "read_file", path="race/secret.txt"), "symlink_escape")
    refused(call(s, "write_file", path="race/victim.txt", content="pwned"), "symlink_escape")
    refused(call(s, "write_file", path="race/new.txt", content="pwned"), "symlink_escape")
    refused(call(s, "list_dir", path="race"), "symlink_escape")


class _SwapOnOpen:
    """Stands in for `os` inside scope.py: swaps the tree right after a chosen call."""

    def __init__(self, when: str, name: str, action):
        self.when, self.name, self.action, self.fired = when, name, action, False

    def __getattr__(self, attr):
        return getattr(os, attr)

    def _maybe(self, attr, name):
        if attr == self.when and name == self.name and not self.fired:
            self.fired = True
            self.action()

    def open(self, name, *a, **kw):
        fd = os.open(name, *a, **kw)
        self._maybe("open", name)
        return fd

    def stat(self, name, *a, **kw):
        st_ = os.stat(name, *a, **kw)
        self._maybe("stat", name)
        return st_


@pytest.mark.parametrize("op", ["read", "write", "edit"])
def test_p11_intermediate_swapped_after_it_was_opened(tree, monkeypatch, op):
    _prepare_race(tree)
    proxy = _SwapOnOpen("open", "race", lambda: _swap_to_link(tree))
    monkeypatch.setattr(scope_mod, "os", proxy)
    leaf = "secret.txt" if op == "read" else "victim.txt"
    if op == "edit":
        result = call(tree.scope(), "edit_file", path=f"race/{leaf}", old="inside", new="edited")
    else:
        result = OPS[op](tree.scope(), f"race/{leaf}")
    monkeypatch.undo()
    assert proxy.fired
    # The walk holds the directory fd: the I/O happened on the in-tree dir (now race_hold).
    assert result.ok, result.text
    if op == "read":
        assert result.text == "inside race\n"
    else:
        assert (tree.root / "race_hold" / "victim.txt").read_text() in ("overwritten", "edited victim\n")


@pytest.mark.parametrize("op", ["read", "write", "edit"])
def test_p11_leaf_swapped_between_lstat_and_open(tree, monkeypatch, op):
    _prepare_race(tree)
    leaf = "secret.txt" if op == "read" else "victim.txt"

    def swap_leaf():
        os.rename(tree.root / "race" / leaf, tree.root / "race" / "held")
        os.symlink(str(tree.outside / leaf), tree.root / "race" / leaf)

    proxy = _SwapOnOpen("stat", leaf, swap_leaf)
    monkeypatch.setattr(scope_mod, "os", proxy)
    if op == "edit":
        result = call(tree.scope(), "edit_file", path=f"race/{leaf}", old="CANARY", new="X")
    else:
        result = OPS[op](tree.scope(), f"race/{leaf}")
    monkeypatch.undo()
    assert proxy.fired
    refused(result, "symlink_escape")


def test_p11_fd_keeps_reading_inside_after_swap(tree):
    _prepare_race(tree)
    with resolve_path(tree.scope(), "race/secret.txt", "read") as rp:
        _swap_to_link(tree)
        assert os.read(rp.fd, 100) == b"inside race\n"
        assert rp.rel == "race/secret.txt"


def test_p11_racing_thread_never_leaks(tree):
    _prepare_race(tree)
    (tree.root / "race_link_src").mkdir()
    stop = threading.Event()
    flips = [0]

    def flipper():
        hold, race = tree.root / "race_hold", tree.root / "race"
        while not stop.is_set():
            try:
                if race.is_symlink():
                    os.unlink(race)
                elif race.is_dir() and hold.exists():
                    shutil.rmtree(race, ignore_errors=True)  # a create made it (mkdir -p) while missing
                    continue
                if hold.exists():
                    os.rename(hold, race)
                time.sleep(0)
                os.rename(race, hold)
                os.symlink(str(tree.outside), race)
                flips[0] += 1
                time.sleep(0)
            except OSError:
                continue

    th = threading.Thread(target=flipper, daemon=True)
    th.start()
    s = tree.scope()
    codes: dict[str, int] = {}
    try:
        deadline = time.monotonic() + 30
        i = 0
        while (i < 1500 or flips[0] < 20) and time.monotonic() < deadline:
            i += 1
            op = ("read", "write", "create", "grep")[i % 4]
            path = {"read": "race/secret.txt", "write": "race/victim.txt", "create": f"race/new{i}.txt", "grep": "race"}[op]
            result = OPS[op](s, path)
            codes[result.code or "ok"] = codes.get(result.code or "ok", 0) + 1
            if result.ok and op == "read":
                assert result.text == "inside race\n"
    finally:
        stop.set()
        th.join(10)
    assert flips[0] >= 20
    assert set(codes) <= {"ok", "symlink_escape", "not_found", "exists"}, codes


# ---------------------------------------------------------------------------------------
# P12 hard links


def test_p12_hardlink_to_outside_refused_for_read_and_write(tree):
    """A hard link is the outside file: reading it would return outside bytes (issue 19)."""
    os.link(tree.outside / "hl.txt", tree.root / "hl.txt")
    s = tree.scope()
    refused(call(s, "read_file", path="hl.txt"), "hardlink_outside")
    refused(call(s, "grep", pattern="HARD", path="hl.txt"), "hardlink_outside")
    assert HL_CONTENT not in call(s, "grep", pattern="HARD", path=".").text  # recursion never searches it
    refused(call(s, "write_file", path="hl.txt", content="pwned"), "hardlink_write")
    refused(call(s, "edit_file", path="hl.txt", old="HARD", new="soft"), "hardlink_write")
    assert (tree.outside / "hl.txt").read_text() == HL_CONTENT + "\n"


def test_p12_in_tree_hardlink_pair_write_refused_and_not_truncated(tree):
    os.link(tree.root / "a.txt", tree.root / "a2.txt")
    s = tree.scope()
    assert call(s, "read_file", path="a2.txt").text == "hello inside\n"  # benign control: both names inside
    refused(call(s, "write_file", path="a.txt", content=""), "hardlink_write")
    assert (tree.root / "a.txt").read_text() == "hello inside\n"  # truncation only after checks


def test_p12_no_link_tool_exists(tree):
    refused(call(tree.scope(), "link", src="x", dst="y"), "unknown_tool")


# ---------------------------------------------------------------------------------------
# P13 special files: FIFO, socket, devices; never hang


@pytest.fixture
def specials(tree):
    os.mkfifo(tree.root / "fifo")
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(tree.root / "sock"))
    except OSError:
        pass
    made_dev = True
    try:
        os.mknod(tree.root / "zero", 0o666 | stat.S_IFCHR, os.makedev(1, 5))
    except (PermissionError, OSError):
        made_dev = False
    os.symlink("/dev/zero", tree.root / "zero_link")
    yield made_dev
    sock.close()


@pytest.mark.parametrize("name", ["fifo", "sock", "zero"])
@pytest.mark.parametrize("op", ["read", "grep", "write", "edit", "list"])
def test_p13_special_files_refused_without_hanging(tree, specials, name, op):
    if name == "zero" and not specials:
        pytest.skip("cannot mknod here")
    result = run_bounded(lambda: OPS[op](tree.scope(), name))
    refused(result, "special_file")


def test_p13_zero_link_and_grep_skip_specials(tree, specials):
    s = tree.scope()
    refused(run_bounded(lambda: call(s, "read_file", path="zero_link")), "symlink_escape")
    result = run_bounded(lambda: call(s, "grep", pattern="inside", path="."))
    assert result.ok and "a.txt:1: hello inside" in result.text
    listing = call(s, "list_dir", path=".").text
    assert "fifo [special]" in listing


def test_p13_fifo_swapped_in_after_lstat_does_not_block(tree, monkeypatch):
    (tree.root / "f.txt").write_text("regular\n")

    def swap():
        os.unlink(tree.root / "f.txt")
        os.mkfifo(tree.root / "f.txt")

    monkeypatch.setattr(scope_mod, "os", _SwapOnOpen("stat", "f.txt", swap))
    result = run_bounded(lambda: call(tree.scope(), "read_file", path="f.txt"))
    monkeypatch.undo()
    refused(result, "special_file")


def test_p13_read_cap_enforced_while_reading(tree):
    (tree.root / "big.txt").write_bytes(b"x" * 100_000)
    result = call(tree.scope(max_result_bytes=1000), "read_file", path="big.txt")
    assert result.ok and result.truncated
    assert len(result.text.encode()) <= 1000
    assert result.text.endswith("of 100000 bytes]")


# ---------------------------------------------------------------------------------------
# P14 no other route to the bytes: no shell, every path-taking tool goes through resolve_path


def test_p14_tool_set_is_exactly_the_five(tree):
    assert [d.name for d in tool_definitions(tree.scope())] == ["read_file", "list_dir", "grep", "write_file", "edit_file"]
    assert [d.name for d in tool_definitions(tree.scope(read_only=True))] == ["read_file", "list_dir", "grep"]
    for name in ("bash", "run_shell", "shell", "exec", "python", "rename", "delete_file", "chmod", "symlink", "mkdir", "Read"):
        refused(call(tree.scope(), name, path="a.txt"), "unknown_tool")


@pytest.mark.parametrize(
    "tool,args,op",
    [
        ("read_file", {"path": "a.txt"}, "read"),
        ("list_dir", {"path": "sub"}, "list"),
        ("grep", {"pattern": "x", "path": "sub"}, "grep"),
        ("write_file", {"path": "n.txt", "content": "c"}, "write"),
        ("edit_file", {"path": "a.txt", "old": "hello", "new": "bye"}, "edit"),
    ],
)
def test_p14_every_path_taking_tool_goes_through_resolve_path(tree, monkeypatch, tool, args, op):
    import harnesscheck.choke.dispatch as dispatch_mod

    seen = []
    real = dispatch_mod.resolve_path

    def spy(scope, path, op_):
        seen.append((path, op_))
        return real(scope, path, op_)

    monkeypatch.setattr(dispatch_mod, "resolve_path", spy)
    assert dispatch(tool, args, tree.scope()).ok
    assert seen == [(args["path"], op)]


# ---------------------------------------------------------------------------------------
# P15 read-only denies every mutating op


@pytest.mark.parametrize(
    "tool,args",
    [
        ("write_file", {"path": "a.txt", "content": "x"}),
        ("write_file", {"path": "new.txt", "content": "x"}),
        ("edit_file", {"path": "a.txt", "old": "hello", "new": "bye"}),
        ("write_file", {"path": "d/e/new.txt", "content": "x"}),
    ],
)
def test_p15_read_only_refuses_every_mutation(tree, tool, args):
    before = snapshot(tree.root)
    refused(call(tree.scope(read_only=True), tool, **args), "read_only")
    assert snapshot(tree.root) == before


@pytest.mark.parametrize("op", ["write", "edit"])
def test_p15_resolve_path_itself_refuses_mutating_ops_under_read_only(tree, op):
    with pytest.raises(Refused) as info:
        resolve_path(tree.scope(read_only=True), "new.txt", op)
    assert info.value.code == "read_only"


def test_p15_read_only_reads_do_not_touch_the_tree(tree):
    os.symlink("a.txt", tree.root / "ln")
    before = snapshot(tree.root)
    s = tree.scope(read_only=True)
    for tool, args in [("read_file", {"path": "ln"}), ("list_dir", {"path": "."}), ("grep", {"pattern": "e", "path": "."})]:
        assert call(s, tool, **args).ok
    assert snapshot(tree.root) == before
    assert not {"rename", "chmod", "utime", "unlink", "link", "symlink", "mkdir", "rmdir"} & {d.name for d in tool_definitions(s)}


# ---------------------------------------------------------------------------------------
# path_patterns


def test_path_patterns_limit_every_op(tree):
    (tree.root / "src").mkdir()
    (tree.root / "src" / "m.py").write_text("import os\n")
    (tree.root / "src" / "data.bin").write_text("import x\n")
    os.symlink("../a.txt", tree.root / "src" / "alias.py")
    s = tree.scope(path_patterns=("src/**/*.py", "docs"))
    assert call(s, "read_file", path="src/m.py").ok
    refused(call(s, "read_file", path="a.txt"), "path_outside_scope")
    refused(call(s, "read_file", path="src/data.bin"), "path_outside_scope")
    refused(call(s, "read_file", path="src/alias.py"), "path_outside_scope")  # resolved path counts
    assert call(s, "list_dir", path=".").text.splitlines() == ["src/"]
    assert call(s, "list_dir", path="src").text.splitlines() == ["alias.py@", "m.py"]
    grep = call(s, "grep", pattern="import", path=".").text
    assert "src/m.py:1:" in grep and "data.bin" not in grep
    assert call(s, "write_file", path="docs/new/x.md", content="d").ok
    refused(call(s, "write_file", path="other/x.md", content="d"), "path_outside_scope")
    assert not (tree.root / "other").exists()


# ---------------------------------------------------------------------------------------
# Property: no generated path ever reads or writes outside the root

_STRUCTURAL = st.sampled_from(
    [
        "..",
        ".",
        "",
        "a.txt",
        "sub",
        "b.txt",
        "in_link",
        "out_link",
        "out_file",
        "abs_out",
        "abs_in",
        "loop",
        "up",
        "proj-secrets",
        "secret.txt",
        "victim.txt",
        "hl.txt",
        "fifo",
        "1.0..2.0",
        "new.txt",
        "dir",
    ]
)
_HOSTILE = st.sampled_from(
    [".git", ".GIT", "config", "C:", "~", "\x00", "\n", "caf\u00e9", "cafe\u0301", "x" * 300, "proc", "self", "environ", "\\..\\..", ".claude"]
)
# Structural names dominate so that most generated paths get past input validation and
# exercise the walk (links in, out, loops, `..` through links, creates under them).
_COMPONENTS = st.one_of(
    _STRUCTURAL,
    _STRUCTURAL,
    _STRUCTURAL,
    _HOSTILE,
    st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=6),
)
_PATHS = st.builds(
    lambda lead, comps, sep: lead + sep.join(comps),
    st.sampled_from(["", "", "", "", "", "/", "\\", "./", "../"]),
    st.lists(_COMPONENTS, min_size=1, max_size=6),
    st.sampled_from(["/", "/", "/", "\\", "//"]),
)


@pytest.fixture(scope="module")
def prop_tree(tmp_path_factory):
    t = Tree(tmp_path_factory.mktemp("prop"))
    r = t.root
    os.symlink("sub", r / "in_link")
    os.symlink("../proj-secrets", r / "out_link")
    os.symlink("../proj-secrets/secret.txt", r / "out_file")
    os.symlink(str(t.outside), r / "abs_out")
    os.symlink(str(r / "sub"), r / "abs_in")
    os.symlink("loop", r / "loop")
    os.symlink("../..", r / "sub" / "up")
    os.symlink("../../proj-secrets", r / "sub" / "out_link")
    os.mkfifo(r / "fifo")
    os.link(t.outside / "hl.txt", r / "hl.txt")
    yield t
    t.check_outside()


@settings(max_examples=int(os.environ.get("SCOPE_PROPERTY_EXAMPLES", "400")), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=_PATHS, tool=st.sampled_from(["read_file", "list_dir", "grep", "write_file", "edit_file"]))
def test_property_nothing_outside_the_root_is_read_or_written(prop_tree, path, tool):
    t = prop_tree
    args = {"path": path}
    if tool == "grep":
        args["pattern"] = "CANARY|inside"
    elif tool == "write_file":
        args["content"] = "generated"
    elif tool == "edit_file":
        args.update(old="CANARY", new="X")
    result = run_bounded(lambda: dispatch(tool, args, t.scope()))
    assert CANARY not in result.text
    if tool != "read_file" and tool != "grep":
        assert HL_CONTENT not in result.text
    if not result.ok:
        assert result.code in REASON_CODES and result.text.startswith(f"refused: {result.code}: ")
    assert snapshot(t.outside) == t.before
    assert sorted(p.name for p in t.base.iterdir()) == ["proj", "proj-secrets"]


# ---------------------------------------------------------------------------------------
# Issue 17 finding 4: the root is opened once per session; a rename or swap of the root or
# of a parent cannot redirect the session (root_changed, for good).


def _swap_tree(tmp_path: Path) -> tuple[Path, Path, ToolScope]:
    parent = tmp_path / "parent"
    root = parent / "proj"
    root.mkdir(parents=True)
    (root / "a.txt").write_text("hello inside\n")
    (tmp_path / "decoy").mkdir()
    (tmp_path / "decoy" / "a.txt").write_text(CANARY + " decoy\n")
    return parent, root, ToolScope(root=root, read_only=False)


def _assert_root_changed(scope: ToolScope) -> None:
    for tool, args in (
        ("read_file", {"path": "a.txt"}),
        ("list_dir", {"path": "."}),
        ("grep", {"pattern": "CANARY", "path": "."}),
        ("write_file", {"path": "new.txt", "content": "x"}),
        ("edit_file", {"path": "a.txt", "old": "CANARY", "new": "X"}),
    ):
        result = call(scope, tool, **args)
        refused(result, "root_changed")


def test_root_renamed_and_replaced_refuses_root_changed(tmp_path):
    parent, root, scope = _swap_tree(tmp_path)
    assert call(scope, "read_file", path="a.txt").text == "hello inside\n"
    os.rename(root, parent / "proj.old")
    os.rename(tmp_path / "decoy", root)  # the path now names another directory
    _assert_root_changed(scope)
    os.rename(root, tmp_path / "decoy")
    os.rename(parent / "proj.old", root)  # even put back: the session stays refused
    _assert_root_changed(scope)
    assert (tmp_path / "decoy" / "a.txt").read_text() == CANARY + " decoy\n"
    assert not (tmp_path / "decoy" / "new.txt").exists()


def test_root_replaced_by_symlink_to_slash_refuses_root_changed(tmp_path):
    parent, root, scope = _swap_tree(tmp_path)
    assert call(scope, "list_dir", path=".").ok
    os.rename(root, parent / "proj.old")
    os.symlink("/", root)
    _assert_root_changed(scope)
    refused(call(scope, "read_file", path="etc/hostname"), "root_changed")


def test_parent_renamed_and_replaced_refuses_root_changed(tmp_path):
    parent, root, scope = _swap_tree(tmp_path)
    assert call(scope, "read_file", path="a.txt").ok
    os.rename(parent, tmp_path / "parent.old")
    parent.mkdir()
    os.symlink(tmp_path / "decoy", root)
    _assert_root_changed(scope)


def test_root_removed_refuses_root_changed(tmp_path):
    _, root, scope = _swap_tree(tmp_path)
    assert call(scope, "read_file", path="a.txt").ok
    shutil.rmtree(root)
    refused(call(scope, "read_file", path="a.txt"), "root_changed")


def test_root_swapped_before_the_bridge_opened_it_refuses(tmp_path):
    """The spec pins the identity the host saw: a bridge opening another dir refuses."""
    parent, root, host_scope = _swap_tree(tmp_path)
    identity = host_scope.open_root().identity
    os.rename(root, parent / "proj.old")
    os.rename(tmp_path / "decoy", root)
    bridge_scope = ToolScope(root=root, read_only=False)  # a fresh process's copy of the spec
    bridge_scope.open_root(expect=identity)
    _assert_root_changed(bridge_scope)


def test_root_opened_once_not_by_path_per_call(tmp_path, monkeypatch):
    """No call opens the root by its path again (one stat of it per call, no open)."""
    _, root, scope = _swap_tree(tmp_path)
    assert call(scope, "read_file", path="a.txt").ok
    real_open = os.open
    opened: list[str] = []

    def spy(path, *args, **kwargs):
        if kwargs.get("dir_fd") is None:
            opened.append(str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(scope_mod.os, "open", spy)
    for _ in range(3):
        assert call(scope, "read_file", path="a.txt").ok
    assert opened == []


def test_benign_same_root_many_scopes_and_copies(tmp_path):
    """Equal scopes still compare equal and hash alike with a root opened; a copy works."""
    _, root, scope = _swap_tree(tmp_path)
    other = ToolScope(root=root, read_only=False)
    scope.open_root()
    assert scope == other and hash(scope) == hash(other)
    assert call(scope.model_copy(update={"max_result_bytes": 100}), "read_file", path="a.txt").ok


# ---------------------------------------------------------------------------------------
# Issue 17 finding 5: pseudo-filesystems refused by TYPE wherever mounted (a second procfs
# beneath the root serves self/environ).


def _mount(kind: str, target: Path) -> None:
    import subprocess

    target.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["mount", "-t", kind, kind, str(target)], capture_output=True)
    if proc.returncode != 0:
        pytest.skip(f"mount -t {kind} not permitted here: {proc.stderr.decode(errors='replace').strip()[:120]}")


def _umount(target: Path) -> None:
    import subprocess

    subprocess.run(["umount", "-l", str(target)], capture_output=True)


@pytest.fixture
def mounted(tmp_path):
    made: list[Path] = []

    def mount(kind: str, rel: str) -> Path:
        target = tmp_path / "proj" / rel
        _mount(kind, target)
        made.append(target)
        return target

    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "a.txt").write_text("hello inside\n")
    yield tmp_path / "proj", mount
    for target in reversed(made):
        _umount(target)


pytestmark_mount = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mount needs Linux")


@pytestmark_mount
def test_second_procfs_beneath_the_root_is_refused_by_type(mounted):
    root, mount = mounted
    mount("proc", "hostproc")
    scope = ToolScope(root=root, read_only=False)
    for path in ("hostproc/self/environ", "hostproc/1/environ", "hostproc/self/status", "hostproc/version"):
        result = call(scope, "read_file", path=path)
        refused(result, "denied_path")
        assert "PATH=" not in result.text
    refused(call(scope, "list_dir", path="hostproc"), "denied_path")
    refused(call(scope, "list_dir", path="hostproc/self"), "denied_path")
    refused(call(scope, "grep", pattern="PATH", path="hostproc/self"), "denied_path")
    refused(call(scope, "write_file", path="hostproc/sys/vm/drop_caches", content="3"), "denied_path")
    refused(call(scope, "write_file", path="hostproc/newfile", content="x"), "denied_path")
    grep = call(scope, "grep", pattern="PATH=|hello", path=".")
    assert grep.ok and "hostproc" not in grep.text and "a.txt:1: hello inside" in grep.text
    listing = call(scope, "list_dir", path=".")
    assert listing.ok and "hostproc/" in listing.text  # the name is listed, never entered


@pytestmark_mount
@pytest.mark.parametrize("kind", ["sysfs", "cgroup2"])
def test_other_pseudo_filesystems_beneath_the_root_are_refused(mounted, kind):
    root, mount = mounted
    mount(kind, "pseudo")
    scope = ToolScope(root=root, read_only=False)
    refused(call(scope, "list_dir", path="pseudo"), "denied_path")
    refused(call(scope, "grep", pattern=".", path="pseudo"), "denied_path")
    refused(call(scope, "write_file", path="pseudo/hc-new/x", content="x"), "denied_path")  # no mkdir in cgroupfs
    assert not (root / "pseudo" / "hc-new").exists()


@pytestmark_mount
def test_benign_tmpfs_mounted_beneath_the_root_is_served(mounted):
    root, mount = mounted
    target = mount("tmpfs", "scratch")
    (target / "note.txt").write_text("on tmpfs\n")
    scope = ToolScope(root=root, read_only=False)
    assert call(scope, "read_file", path="scratch/note.txt").text == "on tmpfs\n"
    assert call(scope, "write_file", path="scratch/sub/new.txt", content="x").ok
    assert "scratch/note.txt:1: on tmpfs" in call(scope, "grep", pattern="tmpfs", path=".").text


@pytestmark_mount
def test_root_on_a_pseudo_filesystem_is_refused(mounted):
    root, mount = mounted
    target = mount("proc", "hostproc")
    refused(call(ToolScope(root=target / "self"), "read_file", path="environ"), "denied_path")
    refused(call(ToolScope(root=target), "list_dir", path="."), "denied_path")
