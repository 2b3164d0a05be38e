"""Layers (doc/ARCHITECTURE.md): the folders of src/harnesscheck/ are the layers, in the order
LAYERS states; a module imports only its own folder and the folders below it, and no two
modules import each other at import time. Read from the source with `ast`, every import
statement (function-level ones too), so a lazy import cannot hide an upward import or a circle.
tests/ mirrors the layers: each test module sits in tests/<layer>/, the project-wide ones at the top."""

from __future__ import annotations

import ast
from pathlib import Path

import harnesscheck

ROOT = Path(harnesscheck.__file__).parent

#: Who may import the kit (the pytest plugin, catalog, adapters, matrix, verify): only the kit
#: itself and the apps on top of it (the command line, the published schemas). The levels'
#: evidence gatherers (loopback/), the backends and the bridge are below it.
MAY_IMPORT_KIT = {"kit", "apps"}


def _unit(module: str) -> str:
    """`harnesscheck.kit.adapters` -> `kit`; `harnesscheck.backends.registry` -> `registry`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "harnesscheck"


def _imports(path: Path, *, top_level_only: bool) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    out: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.startswith("harnesscheck"):
            # `from harnesscheck.loopback import wire` imports the submodule, not the package's body
            subs = {f"{node.module}.{a.name}" for a in node.names} & MODULES
            out.update(subs or {node.module})
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("harnesscheck"))
    return out


def _modules() -> dict[str, Path]:
    return {".".join(p.relative_to(ROOT.parent).with_suffix("").parts).removesuffix(".__init__"): p for p in sorted(ROOT.rglob("*.py"))}


MODULES = set(_modules())


#: The layers, lowest first: each folder of src/harnesscheck/ may import only itself and the
#: folders before it (doc/ARCHITECTURE.md draws the same tree). Why each sits where it does:
#: - core: the contract (contracts.py) and the values a request carries (scope.py, policy.py,
#:   events.py), settings, paths, model metadata; imports no other layer.
#: - contain: child env and redaction, run dir, process lifecycle, sandbox; core only.
#: - choke: dispatch and trace, the one path every tool call takes; redacts with contain's
#:   envpolicy, so it sits above contain.
#: - bridge: the MCP server the CLIs call, serving the choke point.
#: - backends: each backend, the registry of their specs and what only backends use (llm,
#:   authstore, audit, climanifest, the loopback seam); a harness backend starts the bridge.
#: - testing: the fake CLIs (the offline level's stand-ins), installed for a backend.
#: - loopback, acpserve: the loopback level's scripted servers and CLI install; `acp serve`.
#: - kit: the pytest plugin, adapters, catalog, matrix and verify, over every level.
#: - apps: the command line, the host-side run, doctor and the published schemas.
LAYERS = ["core", "contain", "choke", "bridge", "backends", "testing", "loopback", "acpserve", "kit", "apps"]

#: Modules at the top of the package, placed explicitly. `harnesscheck` (its __init__: the version
#: and lazy names given as strings) is below every layer; `authoring` (the public surface for
#: backend authors, re-exporting names from every layer) and `__main__` are above every layer.
BOTTOM = {"harnesscheck"}
TOP = {"harnesscheck.authoring", "harnesscheck.__main__"}

#: (importer, imported) pairs allowed to break the order, each with its reason. Empty: the rule
#: holds in the code; add a pair here only with the reason it cannot hold.
EXCEPTIONS: dict[tuple[str, str], str] = {}


def _rank(module: str) -> int:
    if module in BOTTOM:
        return -1
    if module in TOP:
        return len(LAYERS)
    unit = _unit(module)
    assert unit in LAYERS, f"{module}: its folder {unit!r} is not placed in LAYERS (tests/test_layers.py)"
    return LAYERS.index(unit)


def test_every_module_is_in_a_layer():
    """Every module is in a layer folder or placed explicitly at the top or the bottom: a new
    flat module (or a new folder) must be placed in the order before it can be imported."""
    unplaced = sorted(name for name in _modules() if name not in BOTTOM | TOP and _unit(name) not in LAYERS)
    assert not unplaced, f"place these in LAYERS, BOTTOM or TOP: {unplaced}"
    assert sorted(p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").is_file()) == sorted(LAYERS)


def test_folders_import_only_themselves_and_the_folders_below():
    """The layers contract: a module imports (at module level or inside a function) only
    modules of its own folder and of the folders below it in LAYERS."""
    offenders = sorted(
        f"{name} ({_unit(name)}) imports {target} ({_unit(target)})"
        for name, path in _modules().items()
        for target in _imports(path, top_level_only=False)
        if (name, target) not in EXCEPTIONS and _rank(target) > _rank(name)
    )
    assert not offenders, "\n".join(offenders)


def test_every_exception_is_still_needed():
    """An exception whose import is gone is removed, so the list stays the truth."""
    modules = _modules()
    stale = [pair for pair in EXCEPTIONS if pair[1] not in _imports(modules[pair[0]], top_level_only=False)]
    assert not stale, stale


def test_the_architecture_page_draws_the_same_order():
    """doc/ARCHITECTURE.md's "Layers" tree names the folders in the order LAYERS states, so the
    page cannot drift from the rule (the wheel ships no doc/: skipped there)."""
    import re

    page = ROOT.parent.parent / "doc" / "ARCHITECTURE.md"
    if not page.is_file():
        import pytest

        pytest.skip("no doc/ beside the package (an installed wheel)")
    section = page.read_text(encoding="utf-8").split("## Layers", 1)[1].split("\n## ", 1)[0]
    drawn = [m.group(1) for m in re.finditer(r"^      ([a-z]+)/ ", section, re.M)]
    assert drawn == LAYERS, f"doc/ARCHITECTURE.md draws {drawn}; tests/test_layers.py states {LAYERS}"


#: tests/ mirrors the layers: a test module sits in tests/<layer>/, the folder of the layer it
#: tests (tests/core/, ..., tests/apps/). Only these judge the project as a whole (its docs, lint,
#: packaging, the examples, the public surface above every layer) and sit at the top of tests/.
PROJECT_WIDE_TESTS = frozenset(
    {
        "test_layers.py",
        "test_lint.py",
        "test_readme.py",
        "test_kit_wheel.py",
        "test_kit_authoring.py",
        "test_example_cli_backend.py",
        "test_example_acp_agent.py",
    }
)

#: Folders of tests/ that are support, not a layer, and hold no test module: the known-bad
#: backends, the foreign bindings, the scripts the process tests run, syrupy's snapshots.
TEST_SUPPORT_FOLDERS = frozenset({"mutants", "foreign", "proc_scripts", "__snapshots__"})


def _is_test_module(path: Path) -> bool:
    """pytest's default `python_files`: test_*.py and *_test.py."""
    return path.suffix == ".py" and (path.name.startswith("test_") or path.stem.endswith("_test"))


def _mirror_offenders(tests: Path) -> list[str]:
    """What breaks the mirror in the tests folder `tests`: a folder at its top that is neither a
    layer nor support, a test module outside a layer's folder (deeper, or in a support folder),
    and a test module at the top that is not listed in PROJECT_WIDE_TESTS."""
    out = [
        f"tests/{d.name}/: not a layer (LAYERS) nor a support folder (TEST_SUPPORT_FOLDERS)"
        for d in sorted(tests.iterdir())
        if d.is_dir() and d.name not in LAYERS and d.name not in TEST_SUPPORT_FOLDERS and d.name != "__pycache__"
    ]
    for path in sorted(p for p in tests.rglob("*.py") if _is_test_module(p)):
        rel = path.relative_to(tests)
        if len(rel.parts) == 1 and rel.name not in PROJECT_WIDE_TESTS:
            out.append(f"tests/{rel}: move it into tests/<layer>/ for the layer it tests, or list it in PROJECT_WIDE_TESTS")
        elif len(rel.parts) > 1 and (len(rel.parts) > 2 or rel.parts[0] not in LAYERS):
            out.append(f"tests/{rel.as_posix()}: a test module belongs in tests/<layer>/ (one of {LAYERS})")
    return out


def test_tests_mirror_the_layers():
    """tests/ mirrors src/harnesscheck/: each test module is in the folder named after the layer
    it tests, and the top of tests/ holds only the short list of project-wide tests (plus the
    support modules, which are not test modules)."""
    tests = Path(__file__).resolve().parent
    assert not _mirror_offenders(tests), "\n".join(_mirror_offenders(tests))
    assert {p.name for p in tests.glob("test_*.py")} == PROJECT_WIDE_TESTS, "PROJECT_WIDE_TESTS names a file that is gone"


def test_the_mirror_guard_sees_a_stray_test(tmp_path):
    """A test module at the top that is not project-wide, one in a folder that is no layer, one
    nested below a layer's folder and one in a support folder are each found; a layer's test,
    a project-wide test, a support module and a snapshot are not."""
    for name in ("core/test_scope.py", "core/__snapshots__/test_scope.ambr", "test_lint.py", "kit_support.py", "mutants/api.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    assert _mirror_offenders(tmp_path) == []
    for name in ("test_stray.py", "stray_test.py", "widgets/test_widget.py", "core/deep/test_deep.py", "mutants/test_mutant.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    found = _mirror_offenders(tmp_path)
    assert {line.split(":")[0] for line in found} == {
        "tests/widgets/",
        "tests/test_stray.py",
        "tests/stray_test.py",
        "tests/widgets/test_widget.py",
        "tests/core/deep/test_deep.py",
        "tests/mutants/test_mutant.py",
    }, found


def test_the_order_guard_sees_an_upward_import(tmp_path):
    """A core module importing a backend, even inside a function, is found and ranked upward."""
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from harnesscheck.backends.registry import get_spec\n", encoding="utf-8")
    (target,) = _imports(f, top_level_only=False)
    assert _rank(target) > _rank("harnesscheck.core.contracts")
    assert _rank("harnesscheck.apps.cli") > _rank("harnesscheck.kit.plugin") > _rank("harnesscheck.backends.api")


def test_only_the_kit_and_the_cli_import_the_kit():
    offenders = sorted(
        f"{name} imports {target}"
        for name, path in _modules().items()
        for target in _imports(path, top_level_only=False)
        if _unit(target) == "kit" and _unit(name) not in MAY_IMPORT_KIT
    )
    assert not offenders, offenders


def test_kit_and_loopback_form_no_circle():
    """loopback/ (scripted servers, CLI install, the kit-free scenario scripts) is below the
    kit: the kit's loopback adapter lives in kit/loopback_adapter.py."""
    loopback = [(name, t) for name, path in _modules().items() if _unit(name) == "loopback" for t in _imports(path, top_level_only=False) if _unit(t) == "kit"]
    assert not loopback, loopback


def test_no_import_cycle_at_module_import():
    """Top-level imports form no cycle between modules (a cycle makes import order matter)."""
    modules = _modules()
    graph = {name: {t for t in _imports(path, top_level_only=True) if t in modules and t != name} for name, path in modules.items()}
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt) :] + [nxt] if nxt in stack else [node, nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert not cycles, [" -> ".join(c) for c in cycles]


def test_the_guard_sees_a_circle(tmp_path):
    """The reader finds a function-level import (what a lazy circle would use)."""
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from harnesscheck.kit.adapters import SkipCell\n", encoding="utf-8")
    assert _imports(f, top_level_only=False) == {"harnesscheck.kit.adapters"}
    assert _imports(f, top_level_only=True) == set()


#: Names of the project's own stand-ins, which the kit may name: the fake ACP agent's column
#: (`acp-fake`, its executable `acp-agent`), the `fake` ACP profile and `harnesscheck` serving
#: itself over ACP. None of them is a third party's CLI or agent.
OWN_STAND_INS = frozenset({"acp-fake", "acp-agent", "fake", "harnesscheck"})


def _registered_cli_and_agent_names() -> set[str]:
    """Every CLI and agent the registry knows: the harness backends' ids and executables, any
    api backend whose kit profile says it runs a CLI (`reasoning`: e.g. reasoning-only Claude
    Code), and the ACP agent profiles shipped in backends/acp/profiles/ (by name). An api
    provider whose kit profile only tells doctor of its login (copilot's) runs no CLI."""
    from harnesscheck.backends.acp.profile import PROFILE_DIR, load_profile
    from harnesscheck.backends.registry import BUILTIN_SPECS, kit_profile

    names: set[str] = set()
    for spec in BUILTIN_SPECS.values():
        if spec.kind.value == "harness" or kit_profile(spec).reasoning is not None:
            names.update(n for n in (spec.id, spec.cli_name) if n)
    names.update(load_profile(path).name for path in PROFILE_DIR.glob("*.toml"))
    return {n.lower() for n in names} - OWN_STAND_INS


def _naming(text: str, names: set[str]) -> list[str]:
    """The registered names `text` contains as a word of its own (letters and digits around
    it end the word, `-`, `_`, `.` and case do not: `CLAUDE_CONFIG_DIR` and `mcp__codex__x` name one)."""
    import re

    return sorted(n for n in names if re.search(rf"(?<![a-z0-9]){re.escape(n)}(?![a-z0-9])", text.lower()))


def test_the_kit_names_no_cli_or_agent():
    """What the kit knows of one CLI or agent lives with that backend as its kit profile
    (`backends/<backend>/kit_profile.py`, found through `spec.kit_profile`), never in kit/:
    no module under kit/ names a registered CLI or agent, in code, comments or docstrings
    (a docstring that names one is how a per-CLI branch starts). The names come from the
    registry, so a new backend is covered the day it is registered. Only the project's own
    stand-ins are allowed (OWN_STAND_INS: the fake ACP agent and harnesscheck itself); a plain
    word that is also a CLI's name (a text cursor) is reworded in kit modules rather than
    allowed, since the guard cannot tell the two apart. Templates (kit/templates/) are not
    modules and are not read."""
    names = _registered_cli_and_agent_names()
    assert {"claude", "codex", "gemini"} <= names  # the guard reads the registry, not a list of its own
    offenders = {str(path.relative_to(ROOT)): _naming(path.read_text(encoding="utf-8"), names) for path in sorted((ROOT / "kit").rglob("*.py"))}
    offenders = {path: found for path, found in offenders.items() if found}
    assert not offenders, offenders


#: Modules outside kit/ that serve every backend alike and so name none: what they know of one
#: backend is read from its profile through the registry (`KitProfile.doctor`, `.npm_runtime_deps`,
#: `.pip_runtime`, backends/_setup_profile.py; `KitProfile.recording`,
#: backends/_recording_profile.py). Paths relative to src/harnesscheck/.
NAME_GUARDED_MODULES = ("apps/doctor.py", "loopback/install.py", "loopback/record.py")


def _name_offenders(root: Path, paths, names: set[str]) -> dict[str, list[str]]:
    """{path: the registered names it contains} for each of `paths` (under `root`) naming one."""
    found = {path: _naming((root / path).read_text(encoding="utf-8"), names) for path in paths}
    return {path: hit for path, hit in found.items() if hit}


def test_doctor_install_and_record_name_no_cli_or_agent():
    """The guard of the kit, over the modules listed in NAME_GUARDED_MODULES (code, comments and
    docstrings): `harnesscheck doctor` and `harnesscheck install-clis` read each backend's
    credentials, billing variables, login check, runtime lookup and runtime packages from its
    profile, and `harnesscheck record` reads each CLI's recipes, documented error answers,
    credential handling and fixture placeholders from its recording profile, never from a table
    keyed by backend id or CLI name or a `spec.id == ...` / `cli == ...` branch; a comment that
    names a CLI for generic behaviour is reworded, and a list of backends is read from the registry."""
    names = _registered_cli_and_agent_names()
    assert all((ROOT / path).is_file() for path in NAME_GUARDED_MODULES), NAME_GUARDED_MODULES
    offenders = _name_offenders(ROOT, NAME_GUARDED_MODULES, names)
    assert not offenders, offenders


def test_the_module_name_guard_sees_a_branch(tmp_path):
    """A guarded module that branches on a backend id, or names a CLI in a comment, is found."""
    (tmp_path / "apps").mkdir()
    (tmp_path / "apps" / "doctor.py").write_text('if spec.id == "deepseek":  # an SDK dir\n    pass\n', encoding="utf-8")
    (tmp_path / "apps" / "plain.py").write_text("# reads the backend's profile\n", encoding="utf-8")
    names = {"deepseek", "claude"}
    assert _name_offenders(tmp_path, ["apps/doctor.py", "apps/plain.py"], names) == {"apps/doctor.py": ["deepseek"]}


def test_the_name_guard_sees_a_name():
    """The guard finds a name in an identifier, a path and a docstring, and not inside a word."""
    names = {"claude", "codex", "cursor-agent"}
    assert _naming('env["CLAUDE_CONFIG_DIR"]', names) == ["claude"]
    assert _naming('"mcp__codex__read"', names) == ["codex"]
    assert _naming('"""Runs `cursor-agent --print`."""', names) == ["cursor-agent"]
    assert _naming("codexes and preclaude", names) == []


#: A module past this many lines says why in its docstring ("Over 800 lines for a reason: ..."),
#: naming the seam it would split along; otherwise it is split.
MAX_LINES = 800


def _oversized(paths) -> list[str]:
    out = []
    for path in paths:
        text = path.read_text(encoding="utf-8")
        if text.count("\n") > MAX_LINES and "Over 800 lines for a reason" not in (ast.get_docstring(ast.parse(text)) or ""):
            out.append(f"{path.name}: {text.count(chr(10))} lines")
    return out


def test_no_module_past_800_lines_without_its_reason():
    """The product's modules (the package and the fake CLI engine it ships) stay small enough to
    read, or their docstring states why not."""
    paths = [*ROOT.rglob("*.py"), *(ROOT.parents[1] / "fake_clis").glob("*.py")]
    assert not _oversized(paths), _oversized(paths)


def test_the_size_guard_sees_a_long_module(tmp_path):
    long = tmp_path / "long.py"
    long.write_text('"""A module."""\n' + "x = 1\n" * 801)
    assert _oversized([long]) == ["long.py: 802 lines"]
    long.write_text('"""A module.\n\nOver 800 lines for a reason: one state machine."""\n' + "x = 1\n" * 801)
    assert _oversized([long]) == []
