"""dispatch: tool set, argument checking, refusal shape and codes, result bounds, the five
tools' behaviour, grep budgets (no regex can hang the caller), and the trace of every
decision. Escape techniques themselves are in test_scope.py."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

import harnesscheck.choke.dispatch as dispatch_mod
from harnesscheck.choke.dispatch import ToolResult, bound_text, dispatch, tool_definitions
from harnesscheck.choke.trace import Trace, read_trace
from harnesscheck.core.scope import REASON_CODES, ToolScope


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "ws"
    r.mkdir()
    (r / "a.txt").write_text("alpha\nbeta\ngamma\n")
    (r / "src").mkdir()
    (r / "src" / "m.py").write_text("def main():\n    return 42\n")
    (r / "src" / "bin.dat").write_bytes(b"\x00\x01def main\x00")
    return r


def rw(root: Path, **kw) -> ToolScope:
    return ToolScope(root=root, read_only=False, **kw)


def refused(result: ToolResult, code: str) -> None:
    assert not result.ok and result.code == code, result
    assert result.text.startswith(f"refused: {code}: ")


# -- tool set and definitions


def test_definitions_have_json_schemas(root):
    defs = {d.name: d for d in tool_definitions(rw(root))}
    assert list(defs) == ["read_file", "list_dir", "grep", "write_file", "edit_file"]
    assert defs["read_file"].input_schema["required"] == ["path"]
    assert defs["grep"].input_schema["required"] == ["pattern"]
    assert defs["edit_file"].input_schema["required"] == ["path", "old", "new"]
    for d in defs.values():
        schema = d.input_schema
        assert schema["type"] == "object" and schema["additionalProperties"] is False
        assert all(p["type"] == "string" for p in schema["properties"].values())
        json.dumps(d.to_anthropic()), json.dumps(d.to_openai_chat()), json.dumps(d.to_openai_responses())
    assert defs["grep"].to_openai_chat()["function"]["parameters"] is defs["grep"].input_schema


def test_allowed_tools_filter_and_not_allowed(root):
    scope = rw(root, allowed_tools=("read_file", "write_file"))
    assert [d.name for d in tool_definitions(scope)] == ["read_file", "write_file"]
    refused(dispatch("grep", {"pattern": "a", "path": "."}, scope), "not_allowed")
    refused(dispatch("edit_file", {"path": "a.txt", "old": "a", "new": "b"}, scope), "not_allowed")
    assert dispatch("read_file", {"path": "a.txt"}, scope).ok


def test_read_only_scope_refuses_writers_with_read_only(root):
    scope = ToolScope(root=root)
    refused(dispatch("write_file", {"path": "n", "content": ""}, scope), "read_only")
    refused(dispatch("edit_file", {"path": "a.txt", "old": "a", "new": "b"}, scope), "read_only")
    assert not (root / "n").exists()


@pytest.mark.parametrize("name", ["bash", "READ_FILE", "", "read_file ", None, 3, "mcp__bridge__read_file"])
def test_unknown_tools(root, name):
    refused(dispatch(name, {"path": "a.txt"}, rw(root)), "unknown_tool")


@pytest.mark.parametrize(
    "tool,args",
    [
        ("read_file", {}),
        ("read_file", {"path": 3}),
        ("read_file", {"path": None}),
        ("read_file", {"path": "a.txt", "extra": 1}),
        ("read_file", ["a.txt"]),
        ("read_file", "a.txt"),
        ("grep", {"path": "."}),
        ("grep", {"pattern": ["x"]}),
        ("grep", {"pattern": "("}),
        ("grep", {"pattern": ""}),
        ("grep", {"pattern": "a" * 1001}),
        ("write_file", {"path": "x"}),
        ("write_file", {"path": "x", "content": b"bytes"}),
        ("write_file", {"path": "x", "content": "\ud800"}),
        ("edit_file", {"path": "a.txt", "old": "", "new": "x"}),
        ("edit_file", {"path": "a.txt", "old": "alpha"}),
    ],
)
def test_bad_arguments(root, tool, args):
    refused(dispatch(tool, args, rw(root)), "bad_arguments")
    assert not (root / "x").exists()


def test_optional_path_defaults_to_root(root):
    assert "a.txt" in dispatch("list_dir", {}, rw(root)).text
    assert "a.txt:2: beta" in dispatch("grep", {"pattern": "beta"}, rw(root)).text
    assert "a.txt" in dispatch("list_dir", None, rw(root)).text


# -- refusal text never echoes file contents or outside paths


def test_refusal_detail_is_the_callers_input_only(root, tmp_path):
    (tmp_path / "outside.txt").write_text("TOPSECRET")
    os.symlink(str(tmp_path / "outside.txt"), root / "link")
    for tool, args in [
        ("read_file", {"path": "link"}),
        ("edit_file", {"path": "a.txt", "old": "nope", "new": "x"}),
        ("read_file", {"path": "src"}),
        ("list_dir", {"path": "a.txt"}),
    ]:
        result = dispatch(tool, args, rw(root))
        assert not result.ok
        assert "TOPSECRET" not in result.text and str(tmp_path) not in result.text
        assert "alpha" not in result.text


# -- reason codes named in the SPEC


def test_every_reason_code_is_documented():
    spec = (Path(__file__).resolve().parents[2] / "doc" / "SPEC-scope.md").read_text()
    for code in REASON_CODES:
        assert f"`{code}`" in spec, code


def test_not_found_is_directory_not_directory(root):
    s = rw(root)
    refused(dispatch("read_file", {"path": "missing.txt"}, s), "not_found")
    refused(dispatch("read_file", {"path": "nodir/x"}, s), "not_found")
    refused(dispatch("edit_file", {"path": "missing.txt", "old": "a", "new": "b"}, s), "not_found")
    refused(dispatch("read_file", {"path": "src"}, s), "is_directory")
    refused(dispatch("write_file", {"path": "src", "content": "x"}, s), "is_directory")
    refused(dispatch("list_dir", {"path": "a.txt"}, s), "not_directory")
    refused(dispatch("read_file", {"path": "a.txt/x"}, s), "not_directory")
    refused(dispatch("write_file", {"path": "a.txt/x", "content": "x"}, s), "not_directory")
    refused(dispatch("read_file", {"path": "a.txt/"}, s), "not_directory")
    refused(dispatch("read_file", {"path": ""}, s), "invalid_path")
    refused(dispatch("write_file", {"path": "new/dir/", "content": "x"}, s), "not_found")
    refused(dispatch("write_file", {"path": "newfile/", "content": "x"}, s), "not_found")
    assert not (root / "new").exists() and not (root / "newfile").exists()


def test_missing_root_is_refused(tmp_path):
    refused(dispatch("read_file", {"path": "a"}, ToolScope(root=tmp_path / "gone")), "not_found")


# -- bounds


def test_bound_text_marker_and_utf8_boundary():
    text, cut = bound_text(b"hello", 5, 100)
    assert (text, cut) == ("hello", False)
    body = ("\u00e9" * 500).encode()
    text, cut = bound_text(body, len(body), 200)
    assert cut and len(text.encode()) <= 200
    assert text.endswith(f"of {len(body)} bytes]") and "\ufffd" not in text
    text, cut = bound_text(body, len(body), 5)  # cap smaller than the marker: marker still present
    assert cut and text.startswith("\n[truncated: showing 0 of")


def test_read_file_truncation_marker(root):
    (root / "big.txt").write_text("z" * 10_000)
    result = dispatch("read_file", {"path": "big.txt"}, rw(root, max_result_bytes=512))
    assert result.ok and result.truncated
    head, marker = result.text.rsplit("\n", 1)
    assert set(head) == {"z"} and marker == f"[truncated: showing {len(head)} of 10000 bytes]"
    assert len(result.text.encode()) <= 512


def test_read_file_small_and_binary(root):
    assert dispatch("read_file", {"path": "a.txt"}, rw(root)) == ToolResult(True, "alpha\nbeta\ngamma\n", None, False)
    assert dispatch("read_file", {"path": "src/bin.dat"}, rw(root)).ok


def test_list_dir_format_and_bounds(root):
    os.symlink("a.txt", root / "ln")
    os.mkfifo(root / "pipe")
    (root / "bad\nname").write_text("")
    text = dispatch("list_dir", {"path": "."}, rw(root)).text
    assert text.splitlines() == ["a.txt", "bad\\x0aname", "ln@", "pipe [special]", "src/"]
    (root / "many").mkdir()
    for i in range(300):
        (root / "many" / f"file-{i:04d}.txt").write_text("")
    result = dispatch("list_dir", {"path": "many"}, rw(root, max_result_bytes=1000))
    assert result.truncated and "[truncated: showing" in result.text and len(result.text.encode()) <= 1000
    (root / "empty").mkdir()
    assert dispatch("list_dir", {"path": "empty"}, rw(root)).text == "(empty directory)"


def test_list_dir_entry_cap(root, monkeypatch):
    monkeypatch.setattr(dispatch_mod, "MAX_LIST_ENTRIES", 10)
    (root / "many").mkdir()
    for i in range(25):
        (root / "many" / f"f{i:02d}").write_text("")
    result = dispatch("list_dir", {"path": "many"}, rw(root))
    assert result.truncated and result.text.splitlines()[-1] == "[15 more entries not shown]"


# -- grep


def test_grep_recursive_skips_binary_symlinks_and_git(root, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "o.py").write_text("def main(): pass\n")
    os.symlink(str(tmp_path / "out"), root / "src" / "outlink")
    os.symlink("m.py", root / "src" / "inlink.py")
    (root / ".git").mkdir()
    (root / ".git" / "x.py").write_text("def main\n")
    result = dispatch("grep", {"pattern": r"def \w+\(", "path": "."}, rw(root))
    assert result.ok
    assert result.text == "src/m.py:1: def main():"


def test_grep_single_file_and_no_matches(root):
    assert dispatch("grep", {"pattern": "^b", "path": "a.txt"}, rw(root)).text == "a.txt:2: beta"
    no = dispatch("grep", {"pattern": "zzz", "path": "."}, rw(root))
    assert no.ok and no.text == "(no matches)" and not no.truncated


def test_grep_output_bounded_with_marker(root):
    (root / "many.txt").write_text("match line\n" * 5000)
    result = dispatch("grep", {"pattern": "match", "path": "many.txt"}, rw(root, max_result_bytes=2000))
    assert result.ok and result.truncated
    assert "[truncated: showing" in result.text and len(result.text.encode()) <= 2000


def test_grep_long_lines_shown_cut(root):
    (root / "min.js").write_text("x" * 100_000 + "needle\n")
    (root / "short.js").write_text("y" * 10 + "needle" + "z" * 1000 + "\n")
    text = dispatch("grep", {"pattern": "needle", "path": "."}, rw(root)).text
    assert "min.js" not in text  # beyond the matched prefix of a line
    line = [ln for ln in text.splitlines() if ln.startswith("short.js")][0]
    assert line.endswith(" [...]") and len(line) < 400


def test_grep_catastrophic_regex_does_not_hang(root, monkeypatch):
    monkeypatch.setattr(dispatch_mod, "GREP_TIME_BUDGET_S", 1.0)
    (root / "evil.txt").write_text(("a" * 40 + "!\n") * 3)
    start = time.monotonic()
    result = dispatch("grep", {"pattern": r"(a+)+$", "path": "."}, rw(root))
    elapsed = time.monotonic() - start
    assert elapsed < 1.0 + 10  # upper bound only: the budget plus generous grace
    assert result.ok and result.truncated
    assert result.text.endswith("[stopped: time budget of 1 s used up]")
    tiny = dispatch("grep", {"pattern": r"(a+)+$", "path": "."}, rw(root, max_result_bytes=200))
    assert len(tiny.text.encode()) <= 200


def test_grep_file_count_budget(root, monkeypatch):
    monkeypatch.setattr(dispatch_mod, "GREP_MAX_FILES", 3)
    for i in range(6):
        (root / f"f{i}.txt").write_text("hit\n")
    result = dispatch("grep", {"pattern": "hit", "path": "."}, rw(root))
    assert result.truncated and result.text.endswith("[stopped: more than 3 files]")
    assert result.text.count("hit") == 2  # a.txt, f0.txt, f1.txt are the three files searched


def test_grep_in_process_fallback_matches_forked(root, monkeypatch):
    forked = dispatch("grep", {"pattern": "a", "path": "."}, rw(root))
    monkeypatch.delattr(os, "fork")
    local = dispatch("grep", {"pattern": "a", "path": "."}, rw(root))
    assert forked == local and forked.ok


# -- write_file and edit_file


def test_write_file_create_overwrite_and_size_cap(root, monkeypatch):
    s = rw(root)
    assert dispatch("write_file", {"path": "n/new.txt", "content": "one"}, s).text == "created n/new.txt (3 bytes)"
    assert dispatch("write_file", {"path": "a.txt", "content": "short"}, s).text == "overwrote a.txt (5 bytes)"
    assert (root / "a.txt").read_text() == "short"
    monkeypatch.setattr(dispatch_mod, "MAX_WRITE_BYTES", 10)
    refused(dispatch("write_file", {"path": "a.txt", "content": "x" * 11}, s), "too_large")
    assert (root / "a.txt").read_text() == "short"


def test_edit_file_exactly_once(root):
    s = rw(root)
    result = dispatch("edit_file", {"path": "a.txt", "old": "beta", "new": "BETA"}, s)
    assert result.ok and (root / "a.txt").read_text() == "alpha\nBETA\ngamma\n"
    refused(dispatch("edit_file", {"path": "a.txt", "old": "delta", "new": "x"}, s), "no_match")
    (root / "dup.txt").write_text("x x x")
    dup = dispatch("edit_file", {"path": "dup.txt", "old": "x", "new": "y"}, s)
    refused(dup, "no_match")
    assert "3 times" in dup.text and (root / "dup.txt").read_text() == "x x x"
    dispatch("edit_file", {"path": "a.txt", "old": "alpha\nBETA\ngamma\n", "new": ""}, s)
    assert (root / "a.txt").read_text() == ""


def test_edit_file_not_text_and_too_large(root, monkeypatch):
    s = rw(root)
    (root / "latin1.txt").write_bytes(b"caf\xe9")
    refused(dispatch("edit_file", {"path": "latin1.txt", "old": "caf", "new": "x"}, s), "not_text")
    monkeypatch.setattr(dispatch_mod, "MAX_EDIT_BYTES", 4)
    refused(dispatch("edit_file", {"path": "a.txt", "old": "alpha", "new": "x"}, s), "too_large")


def test_io_errors_become_refusals_not_exceptions(root, monkeypatch):
    def boom(fd, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(dispatch_mod, "_write_all", boom)
    result = dispatch("write_file", {"path": "x.txt", "content": "abc"}, rw(root))
    refused(result, "io_error")
    assert "ENOSPC" in result.text


# -- every decision traced


def test_every_decision_is_traced(root, tmp_path):
    trace_path = tmp_path / "t.jsonl"
    s = rw(root)
    with Trace(trace_path, session_id="s1") as trace:
        dispatch("read_file", {"path": "a.txt"}, s, trace)
        dispatch("read_file", {"path": "../x"}, s, trace)
        dispatch("bash", {"cmd": "id"}, s, trace)
        dispatch("write_file", {"path": "n.txt", "content": "SECRET-CONTENT"}, s, trace, session_id="s2")
        dispatch("grep", {"pattern": "alpha"}, s, trace)
    recs = list(read_trace(trace_path))
    assert [(r["tool"], r["decision"], r["code"]) for r in recs] == [
        ("read_file", "allow", None),
        ("read_file", "refuse", "path_outside_scope"),
        ("bash", "refuse", "unknown_tool"),
        ("write_file", "allow", None),
        ("grep", "allow", None),
    ]
    assert recs[0]["path"] == "a.txt" and recs[0]["bytes"] == 17
    assert recs[1]["path"] == "../x"
    assert [r["session"] for r in recs] == ["s1", "s1", "s1", "s2", "s1"]
    assert all(r["event"] == "tool" and isinstance(r["ts"], float) for r in recs)
    assert "SECRET-CONTENT" not in trace_path.read_text() and "alpha" not in trace_path.read_text()


def test_no_trace_is_fine(root):
    assert dispatch("read_file", {"path": "a.txt"}, rw(root), None).ok
    assert dispatch("read_file", {"path": "a.txt"}, rw(root), Trace(None)).ok


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX only")
def test_grep_child_holds_no_inherited_fds(tmp_path):
    keep = os.open(tmp_path, os.O_RDONLY)
    r, w = os.pipe()  # stands in for another session's pipe held by this process
    try:

        def child_view():
            yield " ".join(sorted(os.listdir("/proc/self/fd"), key=int))
            yield "\x00done"

        kept, _, status = dispatch_mod._grep_in_child(child_view(), 10.0, 10_000, {keep})
    finally:
        for fd in (keep, r, w):
            os.close(fd)
    assert status == "done"
    fds = {int(x) for x in kept[0].split()}
    assert keep in fds and r not in fds and w not in fds
    assert len(fds - {0, 1, 2, keep}) <= 2  # only the child's result pipe and listdir's own fd


# -- issue 17 findings 6 and 9: names that are not UTF-8, and grep's line numbers


@pytest.mark.parametrize("sep", [b"\x0c", b"\x0b", b"\r", "\x85".encode(), "\u2028".encode(), "\u2029".encode(), b"\x1c"])
def test_grep_counts_lines_on_newline_only(root: Path, sep: bytes) -> None:
    (root / "f.txt").write_bytes(b"one" + sep + b"two\nTARGET here\nthree" + sep + b"TARGET again\n")
    result = dispatch("grep", {"pattern": "TARGET", "path": "f.txt"}, ToolScope(root=root))
    assert result.ok
    lines = result.text.split("\n")
    assert lines[0] == "f.txt:2: TARGET here"
    assert lines[1].startswith("f.txt:3: three") and lines[1].endswith("TARGET again")


def test_grep_crlf_and_last_line_without_newline(root: Path) -> None:
    (root / "f.txt").write_bytes(b"a\r\nTARGET\r\nb\r\nTARGET")
    result = dispatch("grep", {"pattern": "TARGET$", "path": "f.txt"}, ToolScope(root=root))
    assert result.text == "f.txt:2: TARGET\nf.txt:4: TARGET"
    empty = dispatch("grep", {"pattern": "^$", "path": "a.txt"}, ToolScope(root=root))
    assert empty.text == "(no matches)"  # the final newline ends a line; it does not start one


@pytest.fixture
def undecodable(root: Path) -> Path:
    """An in-tree symlink `link` to a file whose name is not UTF-8, and a dir likewise."""
    raw = os.fsencode(str(root)) + b"/caf\xe9.txt"
    with open(raw, "wb") as fh:
        fh.write(b"old text\n")
    os.mkdir(os.fsencode(str(root)) + b"/d\xff")
    with open(os.fsencode(str(root)) + b"/d\xff/inner.txt", "wb") as fh:
        fh.write(b"inner old\n")
    os.symlink(b"caf\xe9.txt", os.fsencode(str(root)) + b"/link")
    os.symlink(b"d\xff", os.fsencode(str(root)) + b"/dlink")
    return root


@pytest.mark.parametrize(
    "tool, args",
    [
        ("read_file", {"path": "link"}),
        ("edit_file", {"path": "link", "old": "old", "new": "new"}),
        ("write_file", {"path": "link", "content": "fresh\n"}),
        ("edit_file", {"path": "link", "old": "absent", "new": "x"}),
        ("edit_file", {"path": "dlink/inner.txt", "old": "old", "new": "new"}),
        ("write_file", {"path": "dlink/new.txt", "content": "x"}),
        ("list_dir", {"path": "dlink"}),
        ("list_dir", {"path": "."}),
        ("grep", {"pattern": "old|inner", "path": "."}),
        ("grep", {"pattern": "old", "path": "dlink"}),
    ],
)
def test_undecodable_names_give_valid_utf8_results(undecodable: Path, tmp_path: Path, tool: str, args: dict) -> None:
    trace_path = tmp_path / "t.jsonl"
    with Trace(trace_path, session_id="s") as trace:
        result = dispatch(tool, args, rw(undecodable), trace)
    result.text.encode("utf-8")  # no lone surrogate: an SDK's JSON writer would raise on it
    json.dumps({"text": result.text}, ensure_ascii=False).encode("utf-8")
    if result.ok and tool in ("edit_file", "write_file"):
        assert "\\xe9" in result.text or "\\xff" in result.text  # the on-disk bytes, escaped
    records = list(read_trace(trace_path, strict=True))
    assert len(records) == 1 and records[0]["tool"] == tool
