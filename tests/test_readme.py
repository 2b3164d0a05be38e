"""The README's two set-up commands exist, and .ci/run runs the README's test command."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _commands() -> list[str]:
    text = (REPO / "README.md").read_text()
    return re.findall(r"^    (python3 -m venv .*)$", text, flags=re.M)


def test_readme_has_the_two_setup_commands() -> None:
    cmds = _commands()
    assert any("harnesscheck verify" in c for c in cmds), cmds
    assert any("pytest" in c for c in cmds), cmds


def test_ci_runs_the_readme_test_command() -> None:
    test_cmd = next(c for c in _commands() if "pytest" in c)
    assert test_cmd in (REPO / ".ci" / "run").read_text()


def test_upgrade_pins_runs_the_readme_test_command() -> None:
    """tools/upgrade-pins judges new pins with the README's test command, ratchet included (it
    ran without it: a published passing cell that skips on the new pins went unnoticed)."""
    import importlib.machinery
    import importlib.util

    loader = importlib.machinery.SourceFileLoader("upgrade_pins", str(REPO / "tools" / "upgrade-pins"))
    tool = importlib.util.module_from_spec(importlib.util.spec_from_loader("upgrade_pins", loader))
    loader.exec_module(tool)
    test_cmd = next(c for c in _commands() if "pytest" in c)
    readme_args = re.search(r"pytest -n \d+ (.*)$", test_cmd).group(1).split()
    assert tool.SUITE_ARGS == readme_args, (tool.SUITE_ARGS, readme_args)


def test_readme_names_the_cli_pins_and_second_columns() -> None:
    """The README says which CLI releases the pins are (a bump that forgets it fails here)."""
    from harnesscheck.backends.registry import BUILTIN_SPECS, SECOND_COLUMNS, get_spec

    text = (REPO / "README.md").read_text()
    for spec in BUILTIN_SPECS.values():
        if spec.cli_package and spec.pinned_version:
            assert f"{spec.pinned_version}" in text, spec.id
    for backend, versions in SECOND_COLUMNS.items():
        for version in versions:
            if version != get_spec(backend).pinned_version:
                assert f"`{backend}=={version}`" in text, (backend, version)
