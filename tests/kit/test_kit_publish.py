"""A matrix fit to publish (issue 32, item 3): the generator scrubs machine paths from every
file it writes, shows each check's severity, leaves out columns where no check ran, keeps
nothing behind hover, bounds the page's size, and records history (since when a cell holds,
what changed since the previous matrix)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from harnesscheck.core.paths import cli_cache_dir, data_root
from harnesscheck.kit.catalog import load_catalog
from harnesscheck.kit.matrix import combine, matrix_command, to_html, write_matrix
from harnesscheck.kit.publish import machine_paths, scrub
from harnesscheck.kit.results import BackendInfo, CellResult, Report, write_json

HOME = os.path.expanduser("~")
TMP = tempfile.gettempdir()


def _report(cells, *, finished="2026-12-01T10:00:00+00:00", kit="0.1.0", levels=("offline",), backends=("codex", "fake")) -> Report:
    return Report(
        kit_version=kit,
        catalog_hash="h",
        levels=list(levels),
        backends=[BackendInfo(id=b, label=f"{b} backend", kind="harness", levels=list(levels)) for b in backends],
        started_at=finished,
        finished_at=finished,
        cells=[
            CellResult(check=c, backend=b, level=lv, outcome=o, reason=r, message=msg, area=c.split(".")[0], provenance=prov)
            for c, b, lv, o, r, msg, prov in cells
        ],
    )


LEAKY = [
    (
        "scope.cli-reads-inside-sandbox",
        "codex",
        "offline",
        "xfailed",
        "upstream-bug",
        f"the CLI opened paths outside its sandbox: ['/', '{HOME}', '{cli_cache_dir()}/gemini@0.61.0/node_modules/x', "
        f"'{TMP}/harnesscheck-verify-5s_e41su/pytest', '/home/alice/.ssh/id_rsa', '~/.cache/harnesscheck/clis/x']",
        f"fake codex replaying {data_root()}/fixtures/codex/native_tool_use.json",
    ),
    ("env.provider-keys-stripped", "codex", "offline", "failed", None, "parent variables reached the child: ['A']", ""),
    ("scope.dotdot-refused", "codex", "offline", "passed", None, "", ""),
    ("scope.dotdot-refused", "fake", "offline", "passed", None, "", ""),
    ("scope.dotdot-refused", "fake", "loopback", "skipped", "env-missing", "fake is in-process: only the offline level exists", ""),
]


def test_scrub_replaces_every_kind_of_machine_path() -> None:
    text = scrub(LEAKY[0][5] + " " + LEAKY[0][6])
    assert machine_paths(text) == [], text
    assert "$HARNESSCHECK_CACHE/clis/gemini@0.61.0/node_modules/x" in text
    assert "$TMPDIR/harnesscheck-verify-*/pytest" in text and "$HOME/.ssh/id_rsa" in text
    assert "$HARNESSCHECK_DATA/fixtures/codex/native_tool_use.json" in text
    assert scrub("/") == "/" and scrub("a/tmpfile and /usr/lib/x") == "a/tmpfile and /usr/lib/x"


def test_no_generated_file_holds_a_machine_path(tmp_path: Path) -> None:
    files = write_matrix(combine([_report(LEAKY, levels=("offline", "loopback"))]), tmp_path)
    for path in files:
        assert machine_paths(path.read_text(encoding="utf-8")) == [], path.name


def test_every_check_shows_its_severity_and_a_security_failure_never_looks_cosmetic(tmp_path: Path) -> None:
    m = combine([_report(LEAKY)])
    page = to_html(m)
    assert "<span class='sev sev-critical'>critical</span> <code>env.provider-keys-stripped</code>" in page
    write_matrix(m, tmp_path)
    data = json.loads((tmp_path / "backends.json").read_text())
    assert data["severity"]["env.provider-keys-stripped"] == "critical"
    md = (tmp_path / "backends.md").read_text()
    assert "`scope.cli-reads-inside-sandbox` (critical) on codex (offline): xfailed" in md
    assert "scope.cli-reads-inside-sandbox (critical) on codex (offline)" in md.splitlines()[5], "the verdict names it"


def test_a_column_where_nothing_ran_is_one_line_not_a_zero_percent_card(tmp_path: Path) -> None:
    page = to_html(combine([_report(LEAKY, levels=("offline", "loopback"))]))
    assert "href='#col-fake-loopback'" not in page and "id=col-fake-loopback" not in page
    assert "<li>fake (loopback): fake is in-process: only the offline level exists</li>" in page


def test_nothing_is_reached_by_hover_alone() -> None:
    page = to_html(combine([_report(LEAKY)]))
    assert " title=" not in page, "a title attribute is hover-only on touch screens"
    assert "parent variables reached the child" in page and "from: fake codex replaying $HARNESSCHECK_DATA" in page


def test_the_page_size_is_bounded_for_a_big_matrix() -> None:
    """Every check of the catalog over 40 columns with long messages: the page stays small
    (each message is written once, in its column's section; the every-check table holds marks)."""
    checks = sorted(load_catalog())
    backends = [f"backend-{n:02d}" for n in range(20)]
    cells = [
        (c, b, lv, "passed" if (i + j) % 7 else "skipped", None if (i + j) % 7 else "unsupported-by-backend", "x" * 300, "fixtures of release 1.2.3")
        for i, c in enumerate(checks)
        for j, b in enumerate(backends)
        for lv in ("offline", "loopback")
    ]
    page = to_html(combine([_report(cells, backends=backends, levels=("offline", "loopback"))]))
    assert len(page.encode()) < 500_000, len(page.encode())  # 417 KB when written


def test_history_says_since_when_a_cell_holds_and_what_changed(tmp_path: Path) -> None:
    first = [("scope.dotdot-refused", "codex", "offline", "passed", None, "", ""), ("env.provider-keys-stripped", "codex", "offline", "passed", None, "", "")]
    (tmp_path / "r1.json").parent.mkdir(exist_ok=True)
    write_json(_report(first, finished="2026-11-01T10:00:00+00:00", kit="0.0.9", backends=("codex",)), tmp_path / "r1.json")
    assert matrix_command([tmp_path / "r1.json"], tmp_path / "doc") == 0
    second = [
        ("scope.dotdot-refused", "codex", "offline", "passed", None, "", ""),
        ("env.provider-keys-stripped", "codex", "offline", "failed", None, "parent variables reached the child: ['A']", ""),
        ("env.worktree-not-cwd", "codex", "offline", "passed", None, "", ""),
    ]
    write_json(_report(second, finished="2026-12-01T10:00:00+00:00", kit="0.1.0", backends=("codex",)), tmp_path / "r2.json")
    assert matrix_command([tmp_path / "r2.json"], tmp_path / "doc") == 0  # compares with the backends.json already there
    data = json.loads((tmp_path / "doc" / "backends.json").read_text())
    cells = data["cells"]["codex"]["offline"]
    assert cells["scope.dotdot-refused"]["since"] == "0.0.9 2026-11-01"
    assert cells["env.provider-keys-stripped"]["since"] == "0.1.0 2026-12-01"
    assert {(c["check"], c["before"], c["now"]) for c in data["changes"]} == {
        ("env.provider-keys-stripped", "passed", "failed"),
        ("env.worktree-not-cwd", None, "passed"),
    }
    md = (tmp_path / "doc" / "backends.md").read_text()
    assert "- `env.provider-keys-stripped` (critical) on codex (offline): passed → failed" in md
    page = (tmp_path / "doc" / "backends.html").read_text()
    assert "since 0.1.0 2026-12-01" in page
    # a third run with the same outcomes keeps the first date
    write_json(_report(second, finished="2026-12-05T10:00:00+00:00", kit="0.1.1", backends=("codex",)), tmp_path / "r3.json")
    assert matrix_command([tmp_path / "r3.json"], tmp_path / "doc") == 0
    data = json.loads((tmp_path / "doc" / "backends.json").read_text())
    assert data["cells"]["codex"]["offline"]["scope.dotdot-refused"]["since"] == "0.0.9 2026-11-01"
    assert data["changes"] == []


def test_two_runs_of_the_same_verdict_publish_the_same_text() -> None:
    """The worker a cell ran on, pytest's number for its temp dir and the pids the kit ended
    differ from run to run; the matrix says the same either way (a measured duration stays)."""
    base = tempfile.gettempdir()

    def message(worker: int, number: int, pids: str) -> str:
        root = f"{base}/harnesscheck-verify-ab12cd34/pytest/popen-gw{worker}"
        return (
            f"the CLI opened ['{root}/test_cli_reads_inside_sandbox_{number}/ws1/run/.mcp.json', "
            f"'{root}/test_declines_builtins_honestl{number}/ws1/outside/secret.txt', '{root}', "
            f"'{root}/test_cli_reads_inside_sandbox_{number}']; "
            f"the kit ended its 4 known process(es) [{pids}] after 18.5 s"
        )

    one, two = scrub(message(0, 9, "2568, 2578, 2649, 2696")), scrub(message(2, 13, "1199, 1245, 1333, 1438"))
    assert one == two, (one, two)
    assert "$TMPDIR/harnesscheck-verify-*/pytest/popen-gw*/test_cli_reads_inside_sandbox_*/ws1/run/.mcp.json" in one
    assert "popen-gw*/test_declines_builtins_honestl*/ws1" in one
    assert "pytest/popen-gw*', '$TMPDIR/harnesscheck-verify-*/pytest/popen-gw*/test_cli_reads_inside_sandbox_*']" in one
    assert "its 4 known process(es) [pids] after 18.5 s" in one
    alone = scrub(f"{base}/harnesscheck-verify-ab12cd34/pytest/test_auth_401_blocks0/ws1 and test_x_3 and pid [42]")
    assert alone.endswith("pytest/test_auth_401_blocks*/ws1 and test_x_3 and pid [42]"), alone
