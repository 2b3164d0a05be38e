"""Console entry point: answers `harnesscheck --help` and `--version` without importing typer.

Requirement: `harnesscheck --help` within 3x of `python -c pass`. Importing typer alone
costs far more than that (measured: typer's own `--help` 16x a bare interpreter start on
this machine, the fast path 1.8x; bench/bench_startup.py), so the top-level help is printed
from the command table and the root options read out of cli.py's source (with `ast`: no
drift, nothing to keep in sync by hand). There is one top-level help, not two styles:
cli.main answers `--help` (and no arguments) with this same fast_help(), whichever entry
point runs (tests/apps/test_startup_imports.py compares them byte for byte). Everything else,
including `harnesscheck COMMAND --help`, goes to the typer app in harnesscheck.apps.cli.
"""

from __future__ import annotations

import _ast as ast  # the C module: the `ast` wrapper's own imports cost more than the parse
import os
import sys

_CLI_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cli.py")


def _literal(node: object) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _parse(source: str):
    return compile(source, _CLI_SOURCE, "exec", ast.PyCF_ONLY_AST)


def root_options_from_source(source: str, tree=None) -> list[tuple[str, str]]:
    """[(option, help)] of the `@app.callback()` function's typer.Option parameters."""
    tree = tree if tree is not None else _parse(source)
    out: list[tuple[str, str]] = []
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef) or not any(
            isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute) and d.func.attr == "callback" for d in node.decorator_list
        ):
            continue
        for arg in node.args.args + node.args.kwonlyargs:
            for call in _option_calls(arg.annotation):
                name = _literal(call.args[0]) if call.args else None
                text = next((_literal(k.value) for k in call.keywords if k.arg == "help"), "") or ""
                if name:
                    out.append((name, text))
    return out


def _option_calls(annotation: object) -> list:
    """The `typer.Option(...)` calls inside an `Annotated[...]` annotation."""
    found = []
    stack = [annotation]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "Option":
            found.append(node)
        elif isinstance(node, ast.Subscript):
            stack.append(node.slice)
        elif isinstance(node, ast.Tuple):
            stack.extend(reversed(node.elts))
    return found


def commands_from_source(source: str, tree=None) -> tuple[str, list[tuple[str, str]]]:
    """(app help, [(command name, one-line help)]) for every visible `@app.command`."""
    tree = tree if tree is not None else _parse(source)
    app_help = ""
    commands: list[tuple[str, str]] = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            for kw in node.value.keywords:
                if kw.arg == "help" and any(isinstance(t, ast.Name) and t.id == "app" for t in node.targets):
                    app_help = _literal(kw.value) or ""
        group = _added_group(node)
        if group is not None:
            commands.append(group)
        if not isinstance(node, ast.FunctionDef):
            continue
        for deco in node.decorator_list:
            if not (
                isinstance(deco, ast.Call)
                and isinstance(deco.func, ast.Attribute)
                and deco.func.attr == "command"
                and isinstance(deco.func.value, ast.Name)
                and deco.func.value.id == "app"
            ):
                continue
            name = _literal(deco.args[0]) if deco.args else None
            help_text = None
            hidden = False
            for kw in deco.keywords:
                if kw.arg == "name":
                    name = _literal(kw.value) or name
                elif kw.arg == "help":
                    help_text = _literal(kw.value)
                elif kw.arg == "hidden":
                    hidden = isinstance(kw.value, ast.Constant) and kw.value.value is True
            if hidden:
                continue
            doc = help_text or _docstring(node)
            commands.append((name or node.name.replace("_", "-"), doc.strip().split("\n")[0]))
    return app_help, commands


def _added_group(node: object) -> tuple[str, str] | None:
    """(name, help) of a module-level `app.add_typer(sub_app, name="...", help="...")`."""
    call = node.value if isinstance(node, ast.Expr) else None
    if not (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr == "add_typer"
        and isinstance(call.func.value, ast.Name)
        and call.func.value.id == "app"
    ):
        return None
    found = {kw.arg: _literal(kw.value) for kw in call.keywords}
    if not found.get("name"):
        return None
    return found["name"], (found.get("help") or "").strip().split("\n")[0]


def _docstring(node: ast.FunctionDef) -> str:
    first = node.body[0] if node.body else None
    if isinstance(first, ast.Expr):
        return _literal(first.value) or ""
    return ""


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def fast_help() -> str:
    """The top-level help (every entry point prints this one)."""
    source = _read(_CLI_SOURCE)
    tree = _parse(source)  # once: the parse is most of this function's cost
    app_help, commands = commands_from_source(source, tree)
    options = root_options_from_source(source, tree) + [("--help", "Show this message and exit.")]
    width = max([len(name) for name, _ in commands + options]) + 2
    out = ["Usage: harnesscheck [OPTIONS] COMMAND [ARGS]...", ""]
    if app_help:
        out += [f"  {app_help}", ""]
    out += ["Options:"] + [f"  {name:<{width}}{text}" for name, text in options] + [""]
    out += ["Commands:"] + [f"  {name:<{width}}{text}" for name, text in commands]
    out += ["", "Run 'harnesscheck COMMAND --help' for a command's options."]
    return "\n".join(out) + "\n"


def main() -> None:
    args = sys.argv[1:]
    if args == ["--help"] or not args:
        try:
            text = fast_help()
        except (OSError, SyntaxError, ValueError):
            text = None  # source not readable (e.g. a zipped install): let typer answer
        if text is not None:
            sys.stdout.write(text)
            sys.stdout.flush()
            # No arguments is a usage error (exit 2), as the typer app's no_args_is_help.
            raise SystemExit(0 if args else 2)
    if args == ["--version"]:
        from harnesscheck import __version__

        sys.stdout.write(f"harnesscheck {__version__}\n")
        raise SystemExit(0)
    from harnesscheck.apps.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
