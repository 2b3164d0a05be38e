"""Docs generated from the checks themselves: doc/catalog.md and doc/traceability.md.

    python -m harnesscheck.kit.docs [DOC_DIR]     # rewrite both (tests fail when they are stale)

Traceability maps every case of harness-anchors.md §3 (A1–J5) and §4 (P1–P15) to the checks
whose ``incident=`` names it, or to a written exclusion below. A case with neither is a kit
bug (tests/kit/test_kit_catalog.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

from harnesscheck.kit.catalog import AREAS, CheckInfo, catalog_hash, load_catalog

#: Every case of harness-anchors.md §3 and §4, in order.
CASES: tuple[str, ...] = (
    *(f"A{i}" for i in range(1, 12)),
    *(f"B{i}" for i in range(1, 4)),
    *(f"C{i}" for i in range(1, 13)),
    *(f"D{i}" for i in range(1, 13)),
    *(f"E{i}" for i in range(1, 13)),
    *(f"F{i}" for i in range(1, 10)),
    *(f"G{i}" for i in range(1, 9)),
    *(f"I{i}" for i in range(1, 7)),
    *(f"J{i}" for i in range(1, 6)),
    *(f"P{i}" for i in range(1, 16)),
)

#: Cases no check covers, and why. Each names where the requirement is enforced instead.
EXCLUSIONS: dict[str, str] = {
    "C7": "needs the host itself killed mid-run; proven by tests/contain/test_process.py (parent-death signal) and the "
    "bridge's parent-death tests, not expressible as a per-backend cell",
    "C10": "grace before SIGTERM on normal completion is a process-runner property (process.py linger_s), pinned "
    "by tests/contain/test_process.py; the kit sees only the outcome",
    "C11": "no registered backend runs its CLI in a container; becomes a check when one does",
    "E6": "no backend declares a dollar budget (max_budget_usd); the error class exists in contracts but nothing can provoke it offline",
    "E7": "no fixture of a safety refusal exists for any CLI yet and the outcome schema has no refusal class; tracked for the loopback level",
    "E10": "invalid flags are prevented before spawn (selection.flag-values-validated); a vendor 400 without a "
    "recognized marker is covered by each parser's own tests",
    "E12": "classification precedence is per-parser logic pinned by the transports' snapshot tests over every "
    "fixture; the root cause over its consequences (backends/_rootcause.py, each transport SPEC's table) "
    "by tests/backends/test_rootcause.py on recordings; the kit checks each class separately",
    "F3": "no backend resumes or continues sessions; every session is a fresh invocation with the restrictions re-applied",
    "F4": "'ask' rules come from settings files the harnesses never load (--setting-sources ''); a hang is only reproducible live",
    "F5": "the host registers no permission callback: every call goes through dispatch, which is checked directly",
    "F6": "no backend exposes a shell; audit.only-scope-tools-offered and audit.native-tool-use-flagged cover a vendor shell",
    "F7": "@file attachments are a vendor UI feature reachable only live; the prompt reaches the CLI on stdin (selection.prompt-never-a-flag)",
    "G3": "stdout purity is a property of the bridge process, proven by tests/bridge/test_bridge_stdio.py (a tool that prints does not break the session)",
    "G7": "bridge exit on stdin EOF and parent death is proven by the bridge's stdio tests (needs killing the host)",
    "P7": "case-insensitive volumes cannot be reproduced on the Linux filesystems this kit runs on; dispatch resolves by inode, not by spelling",
    "P8": "on Linux NFC and NFD spellings are distinct names, so there is nothing to escape to; dispatch refuses control characters (scope.nul-byte-refused)",
}


def cases_for(check: CheckInfo) -> tuple[str, ...]:
    return tuple(c for c in check.incidents if c in CASES)


def traceability(catalog: dict[str, CheckInfo]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {case: [] for case in CASES}
    for check in catalog.values():
        for case in cases_for(check):
            out[case].append(check.id)
    return {case: sorted(ids) for case, ids in out.items()}


def _requirement(cap, kinds) -> str:
    """`cancellation` as the catalog shows it: `cancellation *(required)*` when every kind the
    check applies to must meet it, `mcp_tools *(required of harness)*` when some must."""
    from harnesscheck.kit.requirements import REQUIRED

    must = sorted(str(k) for k in kinds if cap in REQUIRED.get(k, ()))
    if not must:
        return str(cap)
    return f"{cap} *(required)*" if len(must) == len(kinds) else f"{cap} *(required of {', '.join(must)})*"


def catalog_markdown(catalog: dict[str, CheckInfo]) -> str:
    lines = [
        "# Check catalog",
        "",
        "Generated from the checks themselves by `python -m harnesscheck.kit.docs` — do not edit by hand.",
        f"{len(catalog)} checks, catalog hash `{catalog_hash(catalog)}`. Ids are stable: never renamed, never reused.",
        "",
        "Columns: **requires** — capabilities the check needs: an optional one must be declared (else the cell is "
        "skipped `unsupported-by-backend`); one marked *required* is judged whatever the backend declares "
        '(kit/requirements.py, doc/AUTHORS.md "The minimum"); *declines* — the check runs only for backends that do '
        "not declare the capability and judges that they decline honestly; **kinds** — backend kinds it applies to "
        "(*api with a CLI model*: also an api backend whose model is a CLI call per turn, reasoning-only, whose CLI "
        "is judged as a harness's); "
        "**cases** — harness-anchors.md cases it covers; **severity** and **fix** — how much a failure matters and "
        "what the backend must do (conformance/guidance.toml; a failing cell prints its fix).",
    ]
    from harnesscheck.kit.guidance import guidance_for

    for area, title in AREAS.items():
        checks = [c for c in catalog.values() if c.area == area]
        if not checks:
            continue
        lines += [
            "",
            f"## {title} (`{area}`)",
            "",
            "| id | requirement | requires | kinds | levels | cases | severity | fix |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for c in sorted(checks, key=lambda c: c.id):
            requires = ", ".join(_requirement(cap, c.kinds) for cap in sorted(c.requires)) or "—"
            if c.declines:
                requires = f"declines `{c.declines}`"
            kinds = ", ".join(sorted(c.kinds)) if len(c.kinds) == 1 else "all"
            if c.cli_model and len(c.kinds) == 1:
                kinds += ", api with a CLI model"
            guide = guidance_for(c.id)
            severity, fix = (guide.severity, guide.fix.replace("|", "\\|")) if guide else ("—", "—")
            lines.append(
                f"| `{c.id}` | {c.requirement} | {requires} | {kinds} | {', '.join(c.levels)} | {', '.join(c.incidents) or '—'} | {severity} | {fix} |"
            )
    tables = _mutant_tables()
    if tables is not None:  # a checkout (the mutants are not in the wheel)
        lines += kill_rate_markdown(catalog, *tables)
    return "\n".join(lines) + "\n"


def _mutant_tables():
    """(MUTANTS, UNCAUGHT) from the checkout's tests/mutants, or None where it is absent (a wheel)."""
    import importlib

    repo = Path(__file__).resolve().parents[3]
    if not (repo / "tests" / "mutants" / "__init__.py").is_file():
        return None
    if str(repo) not in sys.path:
        sys.path.insert(0, str(repo))
    module = importlib.import_module("tests.mutants")
    return module.MUTANTS, module.UNCAUGHT


def kill_rate_markdown(catalog: dict[str, CheckInfo], mutants: dict[str, frozenset[str]], uncaught: dict[str, str]) -> list[str]:
    """Per area: the known-bad backends aimed at it and how many the suite catches, and which
    of its checks catch at least one (else why not). A mutant's area is that of most of the
    checks it must fail; it counts as caught when it fails at least one check
    (tests/kit/test_kit_mutants.py proves each fails exactly its listed checks, at its level:
    most offline, some at loopback against the real CLIs). A check caught by a mutant at
    any level counts as catching; one no mutant fails is listed with why: an offline check's
    reason from `uncaught`, else the levels it runs at, which no mutant of its area reaches."""
    home: dict[str, str] = {}
    for ref, ids in mutants.items():
        areas = sorted(catalog[i].area for i in ids if i in catalog)
        home[ref] = max(sorted(set(areas)), key=areas.count) if areas else "?"
    killing = set().union(*mutants.values()) if mutants else set()
    lines = [
        "",
        "## Mutant kill-rate",
        "",
        f"Generated from `tests/mutants` ({len(mutants)} known-bad backends; `tests/kit/test_kit_mutants.py` proves each "
        "fails exactly the checks listed for it, most offline, some at loopback against the real CLIs). **mutants**: "
        "caught / aimed at the area (a mutant's area is that of most of the checks it fails); **checks**: checks that "
        "catch at least one mutant, at any level / checks of the area. A check that runs only at the loopback or live "
        "level is out of the offline mutants' reach by construction; it is listed as not caught unless a loopback "
        "mutant fails it.",
        "",
        "| area | mutants caught | kill-rate | checks catching a mutant | not caught, and why |",
        "|---|---|---|---|---|",
    ]
    for area in AREAS:
        checks = [c for c in catalog.values() if c.area == area]
        if not checks:
            continue
        aimed = [r for r in mutants if home[r] == area]
        caught = [r for r in aimed if mutants[r]]
        offline = [c.id for c in checks if "offline" in c.levels]
        hit = [c for c in checks if c.id in killing]
        rate = f"{100 * len(caught) / len(aimed):.0f}%" if aimed else "—"
        why = [f"`{c}`: {uncaught.get(c, 'NOT LISTED (a kit bug)')}" for c in sorted(set(offline) - killing)]
        why += [
            f"`{c.id}`: runs only at {', '.join(c.levels)}, where no mutant fails it"
            for c in sorted(checks, key=lambda c: c.id)
            if "offline" not in c.levels and c.id not in killing
        ]
        lines.append(f"| `{area}` | {len(caught)} / {len(aimed)} | {rate} | {len(hit)} / {len(checks)} | {'<br>'.join(why) or '—'} |")
    total = [r for r in mutants if mutants[r]]
    lines += ["", f"In all: {len(total)} of {len(mutants)} mutants caught."]
    return lines


def traceability_markdown(catalog: dict[str, CheckInfo]) -> str:
    trace = traceability(catalog)
    lines = [
        "# Traceability: harness-anchors.md cases → checks",
        "",
        "Generated by `python -m harnesscheck.kit.docs` from each check's `incident=` and the written",
        "exclusions in `harnesscheck/kit/docs.py` — do not edit by hand. Every case of §3 (A1–J5; H is §4)",
        "and §4 (P1–P15) is covered by at least one check or excluded with its reason.",
        "",
        "| case | checks | exclusion |",
        "|---|---|---|",
    ]
    for case in CASES:
        ids = ", ".join(f"`{i}`" for i in trace[case]) or "—"
        lines.append(f"| {case} | {ids} | {EXCLUSIONS.get(case, '')} |")
    covered = sum(1 for c in CASES if trace[c])
    lines += ["", f"{covered} of {len(CASES)} cases covered by checks; {len(EXCLUSIONS)} excluded with reasons."]
    return "\n".join(lines) + "\n"


def write_docs(doc_dir: Path) -> list[Path]:
    """doc/catalog.md and doc/traceability.md from the checks, after issuing the catalog's
    new ids in conformance/check_ids.txt (refused while an id is reused or has vanished)."""
    from harnesscheck.kit.catalog import issue_new_ids

    catalog = load_catalog()
    for check_id in issue_new_ids(catalog):
        print(f"issued {check_id}")
    files = {doc_dir / "catalog.md": catalog_markdown(catalog), doc_dir / "traceability.md": traceability_markdown(catalog)}
    for path, text in files.items():
        path.write_text(text, encoding="utf-8")
    return list(files)


if __name__ == "__main__":  # pragma: no cover
    for written in write_docs(Path(sys.argv[1] if len(sys.argv) > 1 else "doc")):
        print(f"wrote {written}")
