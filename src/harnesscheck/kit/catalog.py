"""The check catalog: every conformance check, its stable id and what it requires.

A check is a pytest function in ``conformance/test_<area>.py`` decorated with ``@check``::

    @check("scope.dotdot-refused", requires=[C.host_tool_loop], incident="P1")
    def test_dotdot_refused(but):
        '''A `..` path is refused with path_outside_scope and its bytes never reach the model.'''

Ids are ``<area>.<behaviour>`` slugs, append-only: never renamed, never reused. The
docstring's first paragraph is the requirement. ``requires`` lists capabilities the backend
must declare (else the cell is skipped ``unsupported-by-backend``); ``declines`` marks a
"declines correctly" check that runs only when the capability is NOT declared. ``kinds``
restricts a check to api or harness backends (other kinds get no cell at all).
See doc/SPEC-kit.md.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from harnesscheck.core.contracts import Capability, Kind

LEVELS: tuple[str, ...] = ("offline", "loopback", "live")

#: Why a cell did not pass. Every skip, baseline entry and kit error carries one.
REASON_CODES: dict[str, str] = {
    "unsupported-by-backend": "the backend does not declare the capability (an upstream product limitation)",
    "adapter-not-implemented": "the kit cannot yet set this scenario up for this backend at this level",
    "upstream-bug": "a known defect of the vendor CLI or API",
    "upstream-flaky": "a defect of the vendor CLI or agent that shows in some runs and not in others "
    "(a baseline entry with it is not stale when the cell passes)",
    "env-missing": "a binary, login or credential needed at this level is not present here",
    "budget": "the live budget (turns, seconds) does not allow this check",
    "kit-bug": "a defect in the kit itself, not in the backend",
}

AREAS: dict[str, str] = {
    "selection": "Selection and preflight",
    "env": "Child environment and secrets",
    "scope": "Path scope and exfiltration guards",
    "time": "Timeouts, cancellation, process trees",
    "parse": "Stream parsing",
    "errors": "Error classification",
    "usage": "Usage, cost and served model",
    "bridge": "Tool bridge readiness",
    "audit": "Post-run audit",
    "concurrency": "Concurrency",
    "parity": "Parity ratchets",
    "policy": "The host's tool policy",
    "events": "The typed event stream",
    "acp": "ACP agents, judged by effect",
    "live": "Live smokes",
    "contain": "Containment of the CLI (its sandbox)",
}

_ID_RE = re.compile(r"^[a-z]+\.[a-z0-9]+(?:-[a-z0-9]+)*$")
_INCIDENT_RE = re.compile(r"^(?:[A-J]\d{1,2}|P\d{1,2})$")


class CatalogError(Exception):
    """A malformed or duplicate check definition (a kit bug)."""


@dataclass(frozen=True)
class CheckInfo:
    """One catalog entry: everything but the test body."""

    id: str
    requirement: str
    area: str
    requires: frozenset[Capability] = frozenset()
    declines: Capability | None = None
    incidents: tuple[str, ...] = ()
    kinds: frozenset[Kind] = frozenset(Kind)
    levels: tuple[str, ...] = ("offline", "loopback")
    module: str = ""
    function: str = ""
    details: str = ""
    #: The check waits on purpose (a session deadline, a term grace, a linger, a replayed
    #: fixture delay). Not part of its meaning: the parallel run spreads these cells so that
    #: one worker's wait overlaps another's work.
    paced: bool = False
    #: The check judges the CLI a backend starts (its env, argv, cwd), so it also applies to an
    #: api backend whose model is a CLI call per host turn (reasoning-only: its kit profile's
    #: `reasoning`), which starts that CLI as a harness does. Decided per backend by the plugin.
    cli_model: bool = False

    def applies_to_kind(self, kind: Kind) -> bool:
        return kind in self.kinds

    def fingerprint(self) -> dict:
        """What defines the check's meaning (hashed into the catalog hash)."""
        return {
            "id": self.id,
            "requirement": self.requirement,
            "requires": sorted(self.requires),
            "declines": self.declines,
            "kinds": sorted(self.kinds),
            "levels": list(self.levels),
            **({"cli_model": True} if self.cli_model else {}),
        }


#: id -> CheckInfo, filled by @check as the conformance modules are imported.
CATALOG: dict[str, CheckInfo] = {}

ATTR = "__harnesscheck_check__"


def check(
    check_id: str,
    *,
    requires: Iterable[Capability | str] = (),
    incident: str | Iterable[str] = (),
    kinds: Iterable[Kind | str] | None = None,
    levels: Iterable[str] = ("offline", "loopback"),
    declines: Capability | str | None = None,
    paced: bool = False,
    cli_model: bool = False,
) -> Callable:
    """Declare a conformance check. The function's docstring is its requirement; `paced`:
    its cells wait on purpose for a noticeable time (CheckInfo.paced); `cli_model`: it also
    applies to an api backend whose model is a CLI call (CheckInfo.cli_model)."""
    if not _ID_RE.match(check_id):
        raise CatalogError(f"check id {check_id!r} is not '<area>.<slug>' in lower kebab case")
    area = check_id.split(".", 1)[0]
    if area not in AREAS:
        raise CatalogError(f"check {check_id!r}: unknown area {area!r} (known: {', '.join(AREAS)})")
    incidents = (incident,) if isinstance(incident, str) else tuple(incident)
    for inc in incidents:
        if not _INCIDENT_RE.match(inc):
            raise CatalogError(f"check {check_id!r}: incident {inc!r} is not a case id like A1 or P4")
    levels = tuple(levels)
    for level in levels:
        if level not in LEVELS:
            raise CatalogError(f"check {check_id!r}: unknown level {level!r}")

    def decorate(fn: Callable) -> Callable:
        doc = (fn.__doc__ or "").strip()
        if not doc:
            raise CatalogError(f"check {check_id!r} ({fn.__name__}) has no requirement docstring")
        first, _, rest = doc.partition("\n\n")
        info = CheckInfo(
            id=check_id,
            requirement=" ".join(first.split()),
            area=area,
            requires=frozenset(Capability(c) for c in requires),
            declines=Capability(declines) if declines else None,
            incidents=incidents,
            kinds=frozenset(Kind(k) for k in kinds) if kinds is not None else frozenset(Kind),
            levels=levels,
            module=Path(fn.__code__.co_filename).name,
            function=fn.__name__,
            details=" ".join(rest.split()),
            paced=bool(paced),
            cli_model=bool(cli_model),
        )
        _register(info)
        setattr(fn, ATTR, info)
        import pytest

        marks = [pytest.mark.conformance]
        if "live" in levels:
            marks.append(pytest.mark.live)
        if "loopback" in levels:
            marks.append(pytest.mark.loopback)
        for mark in marks:
            fn = mark(fn)
        return fn

    return decorate


def _register(info: CheckInfo) -> None:
    known = CATALOG.get(info.id)
    if known is not None and (known.module, known.function) != (info.module, info.function):
        raise CatalogError(f"duplicate check id {info.id!r}: {known.module}::{known.function} and {info.module}::{info.function}")
    CATALOG[info.id] = info


def info_of(fn: Callable) -> CheckInfo | None:
    return getattr(fn, ATTR, None)


def conformance_modules(directory: Path | None = None) -> list[Path]:
    from harnesscheck.core.paths import conformance_dir

    directory = directory or conformance_dir()
    return sorted(directory.glob("test_*.py"))


def load_catalog(directory: Path | None = None) -> dict[str, CheckInfo]:
    """Import every conformance module (as the package ``conformance``) and return the catalog."""
    from harnesscheck.core.paths import conformance_dir

    directory = (directory or conformance_dir()).resolve()
    parent = str(directory.parent)
    if parent not in sys.path:
        sys.path.insert(0, parent)
    for path in conformance_modules(directory):
        importlib.import_module(f"{directory.name}.{path.stem}")
    return dict(sorted(CATALOG.items()))


def catalog_hash(checks: dict[str, CheckInfo] | None = None) -> str:
    """A short content hash of the catalog: reports of different catalogs never combine."""
    checks = checks if checks is not None else CATALOG
    body = json.dumps([checks[k].fingerprint() for k in sorted(checks)], sort_keys=True)
    return hashlib.sha256(body.encode()).hexdigest()[:16]


# ---------------------------------------------------------------------------------------
# The ledger of issued ids: ids are never renamed or reused

#: conformance/check_ids.txt: every check id ever issued, in order, one a line; a retired id
#: stays, followed by ``retired YYYY-MM-DD why``. Append-only.
LEDGER_NAME = "check_ids.txt"
_RETIRED_RE = re.compile(r"^(?P<id>\S+)\s+retired\s+(?P<date>\d{4}-\d{2}-\d{2})\s+(?P<why>\S.*)$")


def ledger_path(directory: Path | None = None) -> Path:
    from harnesscheck.core.paths import conformance_dir

    return (directory or conformance_dir()) / LEDGER_NAME


def issued_ids(directory: Path | None = None) -> dict[str, str | None]:
    """Every check id ever issued (the ledger), mapped to why it was retired ("2026-12-01:
    merged into x.y"), or None while it is in use. No ledger: {}."""
    try:
        text = ledger_path(directory).read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    out: dict[str, str | None] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        retired = _RETIRED_RE.match(line)
        check_id = retired["id"] if retired else line
        if not _ID_RE.match(check_id) or (" " in line and not retired):
            raise CatalogError(f"{LEDGER_NAME}:{number}: {line!r} is neither an id nor '<id> retired YYYY-MM-DD why'")
        if check_id in out:
            raise CatalogError(f"{LEDGER_NAME}:{number}: {check_id} is listed twice (an id is issued once)")
        out[check_id] = f"{retired['date']}: {retired['why']}" if retired else None
    return out


def ledger_problems(checks: dict[str, CheckInfo], issued: dict[str, str | None]) -> list[str]:
    """How the catalog breaks "ids are never renamed or reused", against the ledger."""
    problems = []
    for check_id in sorted(checks):
        if check_id not in issued:
            problems.append(f"{check_id} is not in {LEDGER_NAME}: run `python -m harnesscheck.kit.docs doc` to issue it")
        elif issued[check_id] is not None:
            problems.append(f"{check_id} reuses a retired id ({issued[check_id]}): give the check a new id")
    for check_id, retired in issued.items():
        if retired is None and check_id not in checks:
            problems.append(
                f"{check_id} disappeared without being retired: a check is never renamed; if it is gone "
                f"for good, write `{check_id} retired YYYY-MM-DD why` in its line of {LEDGER_NAME}"
            )
    return problems


def issue_new_ids(checks: dict[str, CheckInfo], directory: Path | None = None) -> list[str]:
    """Append the catalog's ids the ledger does not hold yet (the docs generator does this).
    Refuses (CatalogError, nothing written) while an id is reused or has disappeared."""
    issued = issued_ids(directory)
    problems = [p for p in ledger_problems(checks, issued) if f"is not in {LEDGER_NAME}" not in p]
    if problems:
        raise CatalogError("; ".join(problems))
    new = [check_id for check_id in sorted(checks) if check_id not in issued]
    if new:
        path = ledger_path(directory)
        head = "" if path.exists() else LEDGER_HEADER
        with path.open("a", encoding="utf-8") as out:
            out.write(head + "".join(f"{check_id}\n" for check_id in new))
    return new


LEDGER_HEADER = """\
# Every conformance check id ever issued, one a line, in the order issued. Append-only:
# an id is never renamed or reused (tests/kit/test_kit_catalog.py holds the catalog to this).
# `python -m harnesscheck.kit.docs doc` appends new ids. A check removed for good keeps its
# line, followed by `retired YYYY-MM-DD why`, e.g.
#   scope.old-slug retired 2026-12-01 merged into scope.new-slug
"""
