"""The linter is the rule: `ruff check` (configured in pyproject.toml: pyflakes, import order, a
hard line bound) passes on every Python file of the project, so line length and import order
are never a matter of taste in review."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_check_passes():
    pytest.importorskip("ruff", reason="ruff is a test dependency: pip install -c constraints.txt -e '.[test]'")
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "."],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"ruff check found:\n{done.stdout[-4000:]}{done.stderr[-2000:]}\nfix: ruff check --fix ."
