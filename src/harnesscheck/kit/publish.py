"""What makes the generated matrix fit to publish: no machine path, a severity per check, history.

Requirements (issue 32, item 3):

- No machine path in any generated file (backends.md/.json/.html): a message that quotes the
  CLI cache, a temp dir, the user's home or the kit's checkout is rewritten to
  `$HARNESSCHECK_CACHE/...`, `$TMPDIR/...`, `$HOME/...` or `$HARNESSCHECK_DATA/...` (`scrub`),
  with a run's random temp-folder suffix made stable (`harnesscheck-verify-*`), so two runs
  of the same verdict write the same text. What else differs between two such runs is made
  stable too (`_RUN_SPECIFIC`): the xdist worker a cell ran on (`popen-gw*`), pytest's
  number for a test's temp dir (`test_<name>*`) and the pids the kit ended (`[pids]`, their
  count kept); a figure the check measured (a duration) is evidence and stays.
- A severity on every check (kit/guidance.py, conformance/guidance.toml): the matrix shows it.
- History: each cell says since which kit version and date its outcome holds, and the matrix
  lists what changed since the previous one (`history`: the previous backends.json, e.g. the
  committed doc/backends.json when the lead regenerates doc/).
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path


def _roots() -> list[tuple[str, str]]:
    """(machine path, its placeholder), longest first, for the machine this runs on."""
    from harnesscheck.core.paths import cli_cache_dir, data_root

    pairs: list[tuple[str, str]] = []
    cache = cli_cache_dir().parent
    for form in {str(cache), os.path.realpath(cache)}:
        pairs.append((form, "$HARNESSCHECK_CACHE"))
    pairs.append(("~/.cache/harnesscheck", "$HARNESSCHECK_CACHE"))
    try:
        root = data_root()
        for form in {str(root), os.path.realpath(root)}:
            pairs.append((form, "$HARNESSCHECK_DATA"))
    except FileNotFoundError:
        pass
    for tmp in {tempfile.gettempdir(), os.environ.get("TMPDIR") or "", "/tmp", "/var/tmp"}:
        if tmp and tmp != "/":
            pairs.append((tmp.rstrip("/"), "$TMPDIR"))
    home = os.path.expanduser("~")
    if home not in ("/", "~"):
        pairs.append((home.rstrip("/"), "$HOME"))
    return sorted(set(pairs), key=lambda p: -len(p[0]))


#: a path boundary after a root: the end, a separator, or what ends a quoted or listed path
_AFTER = r"(?=$|[/\s'\",;:)\]}>])"
_GENERIC = [
    (re.compile(r"(?<![\w$./-])/home/[^/\s'\",;:)\]]+" + _AFTER), "$HOME"),
    (re.compile(r"(?<![\w$./-])/Users/[^/\s'\",;:)\]]+" + _AFTER), "$HOME"),
    (re.compile(r"(?<![\w$./-])/root" + _AFTER), "$HOME"),
    (re.compile(r"(?<![\w$./-])~(?=/)"), "$HOME"),
]
#: a run's random temp folder names (tempfile.mkdtemp suffixes), made stable
_RANDOM = re.compile(r"((?:\.?harnesscheck-[a-z]+(?:-[a-z0-9_]+)?-|pytest-of-|tmp))[a-z0-9_]{6,12}(?=$|[/\s'\",;:)\]])")


#: what differs between two runs of the same verdict besides paths: the xdist worker's temp
#: dir, pytest's numbered temp dir of a test (its name cut at 30 characters, then a number)
#: and the pids the kit's watchdog ended (kit/watchdog.py)
_RUN_SPECIFIC = [
    (re.compile(r"(/popen-gw)\d+" + _AFTER), r"\1*"),
    (re.compile(r"(/(?:pytest|popen-gw\*)/test_[^/\s'\",;:)\]]*?)\d+" + _AFTER), r"\1*"),
    (re.compile(r"(known process\(es\)) \[\d+(?:, \d+)*\]"), r"\1 [pids]"),
]


def scrub(text: str | None) -> str | None:
    """`text` with every machine path replaced by its placeholder, and what else differs
    between two runs of the same verdict made stable (module docstring)."""
    if not text:
        return text
    for path, placeholder in _roots():
        text = re.sub(r"(?<![\w$./-])" + re.escape(path) + _AFTER, lambda _m, p=placeholder: p, text)
    for pattern, placeholder in _GENERIC:
        text = pattern.sub(lambda _m, p=placeholder: p, text)
    text = _RANDOM.sub(lambda m: m[1] + "*", text)
    for pattern, replacement in _RUN_SPECIFIC:
        text = pattern.sub(replacement, text)
    return text


#: Where a machine path may still hide in generated text (tests and the docs check use it).
MACHINE_PATH = re.compile(r"(?<![\w$./-])(?:/home/|/Users/|/root(?=[/'\"\s,]|$)|/tmp/|/var/tmp/|~/\.cache)")


def machine_paths(text: str) -> list[str]:
    """The machine paths left in `text` (none in a publishable file)."""
    return [text[max(0, m.start() - 20) : m.end() + 40] for m in MACHINE_PATH.finditer(text)]


# ---------------------------------------------------------------------------------------
# Severity


def severity_of(check_id: str) -> str:
    from harnesscheck.kit.guidance import guidance_for

    guide = guidance_for(check_id)
    return guide.severity if guide is not None else "unrated"


# ---------------------------------------------------------------------------------------
# History: since when a cell holds, what changed since the previous matrix


def history(cells: dict, backends: dict, kit_version: str, previous: dict | None) -> tuple[dict, list[dict]]:
    """(since, changes). `cells`: (backend, level, check) -> cell (with .outcome);
    `backends`: id -> {run_at: {level: iso}}; `previous`: the previous backends.json or None.
    since[(b, lv, check)] = "KIT DATE": the first matrix in the chain with this outcome;
    changes: one entry per cell whose outcome differs from the previous matrix, or is new."""
    since: dict = {}
    changes: list[dict] = []
    prev_cells = (previous or {}).get("cells", {})
    prev_kit = (previous or {}).get("kit_version", "")
    for key, cell in sorted(cells.items()):
        backend, level, check = key
        now = f"{kit_version} {str(backends.get(backend, {}).get('run_at', {}).get(level) or '')[:10]}".strip()
        before = prev_cells.get(backend, {}).get(level, {}).get(check)
        if before and before.get("outcome") == cell.outcome:
            prev_date = str((previous or {}).get("backends", {}).get(backend, {}).get("run_at", {}).get(level) or "")[:10]
            since[key] = before.get("since") or f"{prev_kit} {prev_date}".strip()
            continue
        since[key] = now
        if previous is not None:
            changes.append({"backend": backend, "level": level, "check": check, "before": before.get("outcome") if before else None, "now": cell.outcome})
    return since, changes


def read_previous(path: Path | None) -> dict | None:
    """The previous matrix (a backends.json) or None when there is none or it is unreadable:
    history then starts here."""
    if path is None:
        return None
    import json

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    from harnesscheck.kit.matrix import MATRIX_SCHEMA

    return data if isinstance(data, dict) and data.get("schema") == MATRIX_SCHEMA else None
