"""Every failing cell says how to fix it (issue 32, item 1): each check has a fix and a
severity as data (conformance/guidance.toml); a failure shows the check id, the check's own
message (never pytest's bare introspection), the fix and a rerun command that works, also for
a `module:attr` backend; a backend whose spec or factory is broken is one usage error."""

from __future__ import annotations

import re

import pytest
from kit_support import run_suite

from harnesscheck.kit.catalog import load_catalog
from harnesscheck.kit.guidance import SEVERITIES, author_message, failure_text, load_guidance, rerun_command

#: Benign controls and bounds among the security areas: they may be medium or low.
NOT_SECURITY = {
    "env.no-leftovers-outside-run-dir",
    "scope.in-tree-symlink-reads",
    "scope.writes-stay-inside",
    "scope.large-result-bounded",
    "scope.long-path-refused",
    "scope.refusal-visible-to-model",
}


def test_every_check_has_a_fix_and_a_severity_and_nothing_else_is_listed() -> None:
    catalog, guidance = load_catalog(), load_guidance()
    assert sorted(set(catalog) - set(guidance)) == [], "checks without an entry in conformance/guidance.toml"
    assert sorted(set(guidance) - set(catalog)) == [], "guidance for ids that are no check"
    for check_id, guide in guidance.items():
        assert guide.severity in SEVERITIES, check_id
        assert len(guide.fix) >= 40 and guide.fix[0].isupper(), f"{check_id}: a fix is a sentence saying what to do"


def test_security_relevant_checks_never_look_cosmetic() -> None:
    guidance = load_guidance()
    for check_id, guide in guidance.items():
        if check_id.split(".")[0] in ("env", "scope", "policy", "audit") and check_id not in NOT_SECURITY:
            assert guide.severity in ("critical", "high"), f"{check_id} is security-relevant but {guide.severity}"


def test_a_fix_names_where_the_work_is_done() -> None:
    """Most fixes name a library function or SPEC page; the others name the exact thing to do."""
    named = [g for g in load_guidance().values() if re.search(r"harnesscheck\.|doc/SPEC-|run_process|HarnessTransport", g.fix)]
    assert len(named) >= 0.75 * len(load_guidance())


def test_pytest_introspection_never_reaches_an_author() -> None:
    req = "Given tools, complete() raises CapabilityUnsupported at once."
    assert author_message("DID NOT RAISE <class 'CapabilityUnsupported'>", req) == (
        f"requirement not met: {req} (evidence: DID NOT RAISE <class 'CapabilityUnsupported'>)"
    )
    assert author_message("assert (0 >= 1)\n +  where 0 = AgentOutcome(...).tool_calls", "R.").startswith("requirement not met: R.")
    own = "an is_error result was reported ok: 'API Error: 500'\nassert 'ok' != 'ok'\n +  where 'ok' = x.status"
    assert author_message(own, "R.") == "an is_error result was reported ok: 'API Error: 500'"
    assert author_message("parent variables reached the child: ['A']", "R.") == "parent variables reached the child: ['A']"


def test_failure_text_reruns_the_backend_as_given_and_bounds_the_evidence() -> None:
    lines = failure_text(
        check_id="env.provider-keys-stripped",
        backend="hurried",
        selector="tests.foreign.hurried:spec",
        level="offline",
        requirement="R.",
        message="\n".join(f"line {n}" for n in range(50)),
        max_lines=4,
    )
    assert lines[-1] == "  rerun: " + rerun_command("tests.foreign.hurried:spec", "offline", "env.provider-keys-stripped")
    assert "--backend tests.foreign.hurried:spec" in lines[-1]
    assert any(line.startswith("  fix (critical): ") and "build_child_env" in line for line in lines)
    assert len(lines) <= 9 and "more lines in the report" in lines[-3]


def test_a_hurried_backend_gets_a_fix_for_each_failing_cell_and_bounded_output(tmp_path) -> None:
    code, report, out = run_suite(
        tmp_path,
        "-p",
        "no:xdist",
        "-m",
        "conformance",
        "--hc-backend",
        "tests.foreign.hurried:spec",
        "--hc-check",
        "env.provider-keys-stripped",
        "--hc-check",
        "parse.exit0-is-error",
        "--hc-check",
        "scope.bridge-reaches-dispatch",
        timeout=300,
    )
    assert code == 1, out
    failed = {c["check"] for c in report["cells"] if c["outcome"] == "failed"}
    assert failed == {"env.provider-keys-stripped", "parse.exit0-is-error", "scope.bridge-reaches-dispatch"}, out
    for check_id in failed:
        assert f"_ {check_id} [hurried@offline] _" in out, "the failure section is headed by the check id"
        assert f"rerun: harnesscheck verify --backend tests.foreign.hurried:spec --level offline --check {check_id}" in out
    # once per failing cell in the closing summary; under CI (the plain view) also as each cell fails
    assert out.count("  fix (") in (3, 6) and "harnesscheck: failing checks" in out
    assert "assert (0 >= 1)\n" not in out and "Traceback" not in out and "+  where" not in out
    assert len(out.splitlines()) < 80, "three failures print a bounded output"
    messages = {c["check"]: c["message"] for c in report["cells"]}
    assert messages["scope.bridge-reaches-dispatch"].startswith("requirement not met: ")
    assert not messages["parse.exit0-is-error"].startswith("assert")


@pytest.mark.parametrize(
    ("attr", "says"),
    [
        ("helper", "tests.foreign.hurried.helper gives a int, not a ProviderSpec"),
        ("nospec", "module 'tests.foreign.hurried' has no attribute 'nospec'"),
        ("broken_factory", "its factory 'nowhere_at_all:Nothing' does not import: ModuleNotFoundError"),
    ],
)
def test_a_broken_spec_is_one_usage_error_not_a_failed_cell_per_check(tmp_path, attr, says) -> None:
    code, report, out = run_suite(tmp_path, "-p", "no:xdist", "-m", "conformance", "--hc-backend", f"tests.foreign.hurried:{attr}", timeout=120)
    assert code == 4, out  # pytest's usage error
    assert says in out and "fix: " in out, out
    assert report is None and "FAILED" not in out


def test_a_backend_that_keeps_no_trace_is_skipped_not_failed_by_the_redaction_check(tmp_path) -> None:
    """doc/AUTHORS.md calls traces optional: env.session-files-redacted judges the files a
    session leaves, and skips (saying why) a backend that leaves no record of the call."""
    code, report, out = run_suite(
        tmp_path,
        "-p",
        "no:xdist",
        "-m",
        "conformance",
        "--hc-backend",
        "tests.foreign.hurried:traceless",
        "--hc-backend",
        "tests.foreign.hurried:spec",
        "--hc-check",
        "env.session-files-redacted",
        timeout=300,
    )
    cells = {c["backend"]: c for c in report["cells"]}
    assert cells["traceless"]["outcome"] == "skipped" and cells["traceless"]["reason"] == "unsupported-by-backend", out
    assert "traces are optional (doc/AUTHORS.md)" in cells["traceless"]["message"]
    assert cells["hurried"]["outcome"] in ("passed", "failed"), "a backend with a trace in its run dir is judged"
