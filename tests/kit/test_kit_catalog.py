"""The catalog: well-formed checks, stable ids, and generated docs that are never stale."""

from __future__ import annotations

from pathlib import Path

import pytest

from harnesscheck.core.contracts import Capability
from harnesscheck.kit import catalog as cat
from harnesscheck.kit.docs import CASES, EXCLUSIONS, catalog_markdown, traceability, traceability_markdown

DOC = Path(__file__).resolve().parents[2] / "doc"


@pytest.fixture(scope="module")
def catalog():
    return cat.load_catalog()


def test_every_check_is_well_formed(catalog):
    assert len(catalog) >= 60
    for check in catalog.values():
        assert cat._ID_RE.match(check.id), check.id
        assert check.area in cat.AREAS and check.id.startswith(check.area + ".")
        assert check.requirement and not check.requirement[0].islower() and check.requirement.endswith("."), check.id
        assert check.levels, check.id


def test_every_area_has_checks(catalog):
    areas = {c.area for c in catalog.values()}
    assert areas >= set(cat.AREAS) - {"live"}, f"areas without a check: {set(cat.AREAS) - areas}"


def test_decorator_rejects_malformed_checks():
    with pytest.raises(cat.CatalogError):
        cat.check("NotAnId")
    with pytest.raises(cat.CatalogError):
        cat.check("nosucharea.thing")
    with pytest.raises(cat.CatalogError):
        cat.check("scope.x-y", incident="Z9")
    with pytest.raises(cat.CatalogError):
        cat.check("scope.no-docstring")(lambda but: None)


def test_duplicate_ids_are_refused(catalog):
    some = next(iter(catalog.values()))

    def other(but):
        """Another function claiming an existing id."""

    with pytest.raises(cat.CatalogError, match="duplicate"):
        cat.check(some.id)(other)


def test_catalog_hash_changes_with_meaning(catalog):
    base = cat.catalog_hash(catalog)
    assert base == cat.catalog_hash(dict(catalog))
    first = next(iter(catalog))
    changed = dict(catalog)
    changed[first] = cat.CheckInfo(**{**catalog[first].__dict__, "requirement": "Something else."})
    assert cat.catalog_hash(changed) != base


def test_catalog_md_is_generated_and_current(catalog):
    assert (DOC / "catalog.md").read_text(encoding="utf-8") == catalog_markdown(catalog), "doc/catalog.md is stale: run `python -m harnesscheck.kit.docs doc`"


def test_traceability_md_is_generated_and_current(catalog):
    assert (DOC / "traceability.md").read_text(encoding="utf-8") == traceability_markdown(catalog), (
        "doc/traceability.md is stale: run `python -m harnesscheck.kit.docs doc`"
    )


def test_every_case_is_covered_or_excluded(catalog):
    trace = traceability(catalog)
    unmapped = [case for case in CASES if not trace[case] and case not in EXCLUSIONS]
    assert not unmapped, f"cases with neither a check nor an exclusion: {unmapped}"
    assert set(EXCLUSIONS) <= set(CASES), "an exclusion names a case that does not exist"
    both = [case for case in EXCLUSIONS if trace[case]]
    assert not both, f"cases both covered and excluded (drop the exclusion): {both}"
    for ids in trace.values():
        assert set(ids) <= set(catalog), "a mapped id does not exist"


def test_every_incident_is_a_known_case(catalog):
    unknown = {(c.id, i) for c in catalog.values() for i in c.incidents if i not in CASES}
    assert not unknown, unknown


def test_every_capability_is_named_by_some_check(catalog):
    named = {cap for c in catalog.values() for cap in c.requires} | {c.declines for c in catalog.values() if c.declines}
    declared = {cap for spec in __import__("harnesscheck.backends.registry", fromlist=["x"]).BUILTIN_SPECS.values() for cap in spec.capabilities}
    missing = declared - named
    assert not missing, f"declared capabilities no check requires: {sorted(missing)}"
    assert all(isinstance(c, Capability) for c in named)


def test_check_ids_are_never_renamed_or_reused(catalog):
    """conformance/check_ids.txt holds every id ever issued: each check's id is in it and not
    retired, and every id in it is a check or retired (a rename shows as both)."""
    problems = cat.ledger_problems(catalog, cat.issued_ids())
    assert not problems, "\n".join(problems)


def test_the_ledger_catches_a_rename_a_reuse_and_issues_new_ids(catalog, tmp_path):
    some, other = sorted(catalog)[:2]
    issued = {check_id: None for check_id in catalog}
    renamed = {**{k: v for k, v in catalog.items() if k != some}, some + "-v2": catalog[some]}
    found = cat.ledger_problems(renamed, issued)
    assert any(f"{some} disappeared without being retired" in p for p in found)
    assert any(f"{some}-v2 is not in" in p for p in found)
    retired = {**issued, other: "2026-12-01: merged"}
    assert [p for p in cat.ledger_problems(catalog, retired) if "reuses a retired id" in p] == [
        f"{other} reuses a retired id (2026-12-01: merged): give the check a new id"
    ]
    assert cat.ledger_problems({k: v for k, v in catalog.items() if k != other}, retired) == []
    # the docs generator's step: new ids appended, a vanished one refused
    (tmp_path / cat.LEDGER_NAME).write_text(f"{some}\n{other} retired 2026-12-01 merged into {some}\n")
    assert cat.issued_ids(tmp_path) == {some: None, other: "2026-12-01: merged into " + some}
    assert cat.issue_new_ids({some: catalog[some], "scope.brand-new": catalog[some]}, tmp_path) == ["scope.brand-new"]
    assert cat.issued_ids(tmp_path)["scope.brand-new"] is None
    with pytest.raises(cat.CatalogError, match="disappeared"):
        cat.issue_new_ids({}, tmp_path)
    (tmp_path / cat.LEDGER_NAME).write_text(f"{some}\n{some}\n")
    with pytest.raises(cat.CatalogError, match="twice"):
        cat.issued_ids(tmp_path)


def test_kill_rate_lists_only_checks_no_mutant_fails():
    """A loopback-only check a loopback mutant fails is counted as catching, never listed as not
    caught; one no mutant fails is listed with the levels it runs at; an offline one with its reason."""
    from harnesscheck.kit.docs import kill_rate_markdown

    def info(check_id, levels):
        return cat.CheckInfo(id=check_id, requirement="R.", area="usage", levels=levels)

    catalog = {
        "usage.a": info("usage.a", ("offline", "loopback")),
        "usage.b": info("usage.b", ("offline",)),
        "usage.wire": info("usage.wire", ("loopback",)),
        "usage.other-wire": info("usage.other-wire", ("loopback",)),
    }
    mutants = {"m:offline": frozenset({"usage.a"}), "m:loopback": frozenset({"usage.wire"})}
    row = next(line for line in kill_rate_markdown(catalog, mutants, {"usage.b": "a reason"}) if line.startswith("| `usage`"))
    assert "| 2 / 2 | 100% | 2 / 4 |" in row
    assert "`usage.b`: a reason" in row and "`usage.other-wire`: runs only at loopback, where no mutant fails it" in row
    assert "usage.wire" not in row and "`usage.a`" not in row
