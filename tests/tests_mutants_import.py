"""Import tests/mutants as `tests.mutants` (the name --backend references use) from any rootdir."""

from __future__ import annotations

import sys
from pathlib import Path

_REPO = str(Path(__file__).resolve().parent.parent)
if _REPO not in sys.path:
    sys.path.insert(0, _REPO)

from tests.mutants import AREAS, MUTANT_LEVELS, MUTANTS, UNCAUGHT  # noqa: E402

__all__ = ["AREAS", "MUTANT_LEVELS", "MUTANTS", "UNCAUGHT"]
