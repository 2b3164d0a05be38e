"""The linter and the formatter are the rule: `ruff check` (configured in pyproject.toml:
pyflakes, import order, a hard line bound) passes on every Python file of the project and
`ruff format --check` finds nothing to change, so layout, line length and import order are
never a matter of taste in review."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_check_passes():
    pytest.importorskip("ruff", reason="ruff is a test dependency: pip install -c constraints.txt -e '.[test]'")
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "."], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"ruff check found:\n{done.stdout[-4000:]}{done.stderr[-2000:]}\nfix: ruff check --fix ."


def test_ruff_format_leaves_the_tree_as_it_is():
    """The formatter is the rule for layout: `ruff format --check` finds nothing to change."""
    pytest.importorskip("ruff", reason="ruff is a test dependency: pip install -c constraints.txt -e '.[test]'")
    done = subprocess.run([sys.executable, "-m", "ruff", "format", "--no-cache", "--check", "."], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"ruff format would change:\n{done.stdout[-4000:]}{done.stderr[-2000:]}\nfix: ruff format ."
