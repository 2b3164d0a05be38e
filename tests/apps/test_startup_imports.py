"""Start-up stays light: `harnesscheck --help` never imports anthropic, openai or mcp, and the
top-level help (served without typer) lists exactly the typer app's commands."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SRC = str(Path(__file__).resolve().parents[2] / "src")
HEAVY = ("anthropic", "openai", "mcp")


def _run_and_list_modules(entry: str, args: list[str]) -> dict:
    """Call `entry` (module:function) with argv in a fresh interpreter; report exit code and
    the top-level modules imported by then."""
    module, func = entry.split(":")
    code = textwrap.dedent(
        f"""
        import json, sys
        sys.argv = ["harnesscheck", *{args!r}]
        import io, contextlib
        out = io.StringIO()
        code = 0
        with contextlib.redirect_stdout(out):
            try:
                from {module} import {func}
                {func}()
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        print(json.dumps({{"code": code, "out": out.getvalue(),
                           "modules": sorted({{m.split(".")[0] for m in sys.modules}})}}))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": SRC, "COLUMNS": "200"},
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("entry", ["harnesscheck.apps.cli:main", "harnesscheck.apps.launcher:main"])
def test_help_does_not_import_heavy_sdks(entry: str) -> None:
    result = _run_and_list_modules(entry, ["--help"])
    assert result["code"] == 0
    assert "verify" in result["out"]
    assert [m for m in HEAVY if m in result["modules"]] == []


def test_version_does_not_import_heavy_sdks() -> None:
    result = _run_and_list_modules("harnesscheck.apps.launcher:main", ["--version"])
    assert result["code"] == 0 and result["out"].startswith("harnesscheck ")
    assert [m for m in HEAVY if m in result["modules"]] == []


def test_fast_help_skips_typer_and_rich() -> None:
    result = _run_and_list_modules("harnesscheck.apps.launcher:main", ["--help"])
    assert "typer" not in result["modules"] and "rich" not in result["modules"]
    assert "pydantic" not in result["modules"]


def test_fast_help_lists_exactly_the_typer_commands() -> None:
    import typer.main

    from harnesscheck.apps.cli import app
    from harnesscheck.apps.launcher import commands_from_source, fast_help

    group = typer.main.get_command(app)
    expected = [
        (name, (cmd.help or "").strip().split("\n")[0])
        for name, cmd in group.commands.items()  # type: ignore[attr-defined]
        if not cmd.hidden
    ]
    source = (Path(SRC) / "harnesscheck" / "apps" / "cli.py").read_text()
    app_help, commands = commands_from_source(source)
    assert sorted(commands) == sorted(expected)
    assert app_help == app.info.help
    text = fast_help()
    for name, line in expected:
        assert f"  {name}" in text and line in text


def test_one_top_level_help_whichever_entry_point() -> None:
    """The console script (launcher, no typer) and `python -m harnesscheck.apps.cli` print the very
    same top-level help, root options included: one help style, not two."""
    import typer.main

    from harnesscheck.apps.cli import app

    fast = _run_and_list_modules("harnesscheck.apps.launcher:main", ["--help"])
    slow = _run_and_list_modules("harnesscheck.apps.cli:main", ["--help"])
    assert fast["out"] == slow["out"] and fast["code"] == slow["code"] == 0
    group = typer.main.get_command(app)
    for param in group.params:  # type: ignore[attr-defined]
        if param.opts[0] != "--help":
            assert f"  {param.opts[0]}" in fast["out"] and (param.help or "") in fast["out"], param.opts


def test_no_arguments_is_a_usage_error_with_help() -> None:
    fast = _run_and_list_modules("harnesscheck.apps.launcher:main", [])
    slow = _run_and_list_modules("harnesscheck.apps.cli:main", [])
    assert fast["code"] == slow["code"] == 2
    assert "Commands:" in fast["out"] and fast["out"] == slow["out"]


def test_other_arguments_reach_the_typer_app() -> None:
    result = _run_and_list_modules("harnesscheck.apps.launcher:main", ["schema"])
    assert result["code"] == 0
    assert json.loads(result["out"])["title"] == "AgentOutcome"
