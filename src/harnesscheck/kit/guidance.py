"""What a backend must do to pass each check, and how much a failure of it matters.

Requirement: every check of the catalog has, as data beside it (conformance/guidance.toml,
keyed by check id), a `fix` naming what the backend must do and the library function or SPEC
section that does it, and a `severity` (critical, high, medium, low) so that a
security-relevant failure never reads like a cosmetic one. A failing cell prints its fix
(kit/progress.py, the plugin's failure text); the matrix shows the severity (kit/matrix.py).
tests/kit/test_kit_guidance.py holds the catalog to having both for every check.
"""

from __future__ import annotations

import functools
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path

GUIDANCE_NAME = "guidance.toml"

#: most severe first; `critical`: a secret, a credential or an outside file can leak, or a
#: denied action can run; `high`: the host loses control of the session; `medium`: the outcome
#: is misreported; `low`: bookkeeping.
SEVERITIES: tuple[str, ...] = ("critical", "high", "medium", "low")


@dataclass(frozen=True)
class Guidance:
    severity: str
    fix: str


class GuidanceError(Exception):
    """guidance.toml is malformed (a kit bug)."""


def guidance_path(directory: Path | None = None) -> Path:
    from harnesscheck.core.paths import conformance_dir

    return (directory or conformance_dir()) / GUIDANCE_NAME


@functools.lru_cache(maxsize=4)
def load_guidance(directory: Path | None = None) -> dict[str, Guidance]:
    """check id -> Guidance; {} when the file is not there (an old suite)."""
    try:
        data = tomllib.loads(guidance_path(directory).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    out = {}
    for check_id, entry in data.items():
        severity, fix = entry.get("severity"), " ".join(str(entry.get("fix", "")).split())
        if severity not in SEVERITIES or not fix or set(entry) - {"severity", "fix"}:
            raise GuidanceError(f"{GUIDANCE_NAME}: [{check_id}] needs severity (one of {', '.join(SEVERITIES)}) and fix, and nothing else; got {sorted(entry)}")
        out[check_id] = Guidance(severity, fix)
    return out


def guidance_for(check_id: str) -> Guidance | None:
    try:
        return load_guidance().get(check_id)
    except (GuidanceError, OSError):
        return None


def rerun_command(backend: str, level: str, check_id: str) -> str:
    """The command that reruns one cell. `backend` is what the run was given (a registered
    id, or the `module:attr` reference of a third-party backend: its spec id alone would be
    an unknown backend)."""
    return shlex.join(["harnesscheck", "verify", "--backend", backend, "--level", level, "--check", check_id])


#: Messages that are pytest's own introspection, not a check's statement of effect.
_RAW_PREFIXES = ("assert ", "DID NOT RAISE", "AssertionError")


def author_message(message: str, requirement: str) -> str:
    """A failure message fit for a backend author: a check's own message unchanged; pytest's
    bare introspection (`assert (0 >= 1)`, `DID NOT RAISE ...`) replaced by the requirement
    that was not met, with the raw text kept (one line, bounded) as evidence."""
    text = (message or "").strip()
    first = text.splitlines()[0] if text else ""
    if not text or first.startswith(_RAW_PREFIXES) or first.startswith("Failed: DID NOT RAISE"):
        evidence = " ".join(first.split())[:200]
        return f"requirement not met: {requirement}" + (f" (evidence: {evidence})" if evidence else "")
    # the check's own message, without pytest's introspection of the assert that carried it
    # (everything from the first `assert ...` line on)
    kept: list[str] = []
    for line in text.splitlines():
        if line.lstrip().startswith("assert "):
            break
        kept.append(line)
    return "\n".join(kept).strip() or text


def failure_text(*, check_id: str, backend: str, selector: str, level: str, requirement: str, message: str, max_lines: int = 4) -> list[str]:
    """The lines a failing cell shows: what failed, the requirement, the evidence (bounded),
    the fix with its severity, and a rerun command that works."""
    what = author_message(message, requirement)
    lines = [f"FAILED {check_id} on {backend} ({level})"]
    if requirement and not what.startswith("requirement not met"):
        lines.append(f"  requirement: {requirement}")
    body = [line for line in what.splitlines() if line.strip()]
    lines += [f"  {line[:300]}" for line in body[:max_lines]]
    if len(body) > max_lines:
        lines.append(f"  ... ({len(body) - max_lines} more lines in the report)")
    guide = guidance_for(check_id)
    if guide is not None:
        lines.append(f"  fix ({guide.severity}): {guide.fix}")
    lines.append(f"  rerun: {rerun_command(selector or backend, level, check_id)}")
    return lines
