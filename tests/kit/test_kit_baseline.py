"""The baseline is strict both ways: a listed failure is xfailed, a listed pass fails the run,
an expired entry fails the run, an unknown id is a usage error; --hc-write-baseline writes one."""

from __future__ import annotations

import json
from datetime import date, timedelta

import pytest
from kit_support import preload_the_kit, run_inline

from harnesscheck.kit.baseline import BaselineError, load_baseline, write_baseline

pytest_plugins = ["pytester"]
preload_the_kit()

MUTANT = "tests.mutants.scripted:sums_usage_per_streamed_line"
CHECK = "usage.counted-once-per-message"
SELECT = ("-k", "counted_once")


def _baseline(tmp_path, entries, name="baseline.json"):
    path = tmp_path / name
    path.write_text(json.dumps({"version": 1, "known_failing": entries}))
    return path


def test_unlisted_failure_fails_the_run(tmp_path, pytester):
    code, report, out = run_inline(pytester, "--backend", MUTANT, *SELECT)
    assert code == 1, out
    assert [c["outcome"] for c in report["cells"]] == ["failed"]


def test_listed_failure_is_xfailed(tmp_path, pytester):
    path = _baseline(tmp_path, [{"id": CHECK, "backend": "mutant-scripted-SumsUsagePerStreamedLine", "reason": "upstream-bug"}])
    code, report, out = run_inline(pytester, "--backend", MUTANT, "--hc-baseline", str(path), *SELECT)
    assert code == 0, out
    assert [(c["outcome"], c["reason"]) for c in report["cells"]] == [("xfailed", "upstream-bug")]


def test_listed_pass_fails_the_run(tmp_path, pytester):
    path = _baseline(tmp_path, [{"id": CHECK, "reason": "upstream-bug"}])
    code, report, out = run_inline(pytester, "--backend", "fake", "--hc-baseline", str(path), *SELECT)
    assert code == 1, out
    assert report["cells"][0]["outcome"] == "failed" and "passed" in report["cells"][0]["message"]


def test_a_flaky_upstream_entry_takes_a_pass_and_a_failure(tmp_path, pytester):
    """`upstream-flaky`: a vendor defect seen in some runs only. Its failure is xfailed, its pass
    stands (never a stale entry); any other reason stays strict both ways."""
    path = _baseline(tmp_path, [{"id": CHECK, "reason": "upstream-flaky"}])
    code, report, out = run_inline(pytester, "--backend", "fake", "--hc-baseline", str(path), *SELECT)
    assert code == 0, out
    assert [(c["outcome"], c["reason"]) for c in report["cells"]] == [("passed", None)]
    code, report, out = run_inline(pytester, "--backend", MUTANT, "--hc-baseline", str(path), *SELECT)
    assert code == 0, out
    assert [(c["outcome"], c["reason"]) for c in report["cells"]] == [("xfailed", "upstream-flaky")]


def test_expired_entry_fails_the_run(tmp_path, pytester):
    yesterday = (date.today() - timedelta(days=1)).isoformat()
    path = _baseline(tmp_path, [{"id": CHECK, "backend": "mutant-scripted-SumsUsagePerStreamedLine", "reason": "upstream-bug", "expires": yesterday}])
    code, report, out = run_inline(pytester, "--backend", MUTANT, "--hc-baseline", str(path), *SELECT)
    assert code == 1, out
    assert any("expired" in p for p in report["problems"])


def test_unknown_id_is_a_usage_error(tmp_path, pytester):
    path = _baseline(tmp_path, [{"id": "usage.no-such-check", "reason": "upstream-bug"}])
    code, _, out = run_inline(pytester, "--backend", "fake", "--hc-baseline", str(path), *SELECT)
    assert code == 4, out  # pytest's usage-error exit; `harnesscheck verify` maps it to 2
    assert "unknown check id" in out


def test_write_baseline_round_trips(tmp_path, pytester):
    written = tmp_path / "new-baseline.toml"
    code, _, out = run_inline(pytester, "--backend", MUTANT, "--hc-write-baseline", str(written), *SELECT)
    assert code == 1, out
    baseline = load_baseline(written)
    assert [(e.id, e.backend, e.level) for e in baseline.entries] == [(CHECK, "mutant-scripted-SumsUsagePerStreamedLine", "offline")]
    code, report, out = run_inline(pytester, "--backend", MUTANT, "--hc-baseline", str(written), *SELECT)
    assert code == 0, out


def test_malformed_baselines_are_refused(tmp_path):
    for entries in (
        [{"id": CHECK}],
        [{"id": CHECK, "reason": "because"}],
        [{"id": "usage.*", "reason": "kit-bug"}],
        [{"id": CHECK, "reason": "kit-bug", "color": "red"}],
        [{"id": CHECK, "reason": "kit-bug", "expires": "soon"}],
    ):
        with pytest.raises(BaselineError):
            load_baseline(_baseline(tmp_path, entries))
    bad = tmp_path / "v2.json"
    bad.write_text(json.dumps({"version": 2, "known_failing": []}))
    with pytest.raises(BaselineError):
        load_baseline(bad)


def test_writer_and_reader_agree_in_json_and_toml(tmp_path):
    failing = [(CHECK, "fake", "offline", "usage 240/60 != 120/30\nmore")]
    for name in ("b.json", "b.toml"):
        assert write_baseline(tmp_path / name, failing) == 1
        entry = load_baseline(tmp_path / name).entries[0]
        assert (entry.id, entry.backend, entry.level, entry.reason) == (CHECK, "fake", "offline", "upstream-bug")
        assert entry.note == "usage 240/60 != 120/30"
