"""`harnesscheck verify`: the suite over every registered backend at every level available here.

Runs pytest with the kit plugin in a child process (so a crashing backend cannot take the
command down, and pytest-xdist can spread the cells), shows pytest's progress, then prints
the matrix and writes into the report directory: conformance-report.json, junit.xml,
backends.md/.json/.html. Offline is always available and needs nothing external; loopback
runs where adapters for it are installed (kit.adapters.LEVEL_PROVIDERS).

Exit codes: 0 conformant (within the baseline), 1 a backend failed, 2 usage error,
3 kit or environment fault.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from harnesscheck.kit.results import EXIT_BACKEND_FAILED, EXIT_KIT_FAULT, EXIT_OK, EXIT_USAGE

LEVELS = ("offline", "loopback", "live")


def _err(text: str) -> None:
    print(f"harnesscheck verify: {text}", file=sys.stderr)


class LevelUnavailable(Exception):
    """A level asked for by name cannot run a selected backend here (exit 3, the reason said)."""


def plan(backends: list[str], levels: list[str]) -> tuple[list[str], list[str], list[str]]:
    """(backend ids, levels to run, notes on levels left out)."""
    from harnesscheck.kit.adapters import level_available
    from harnesscheck.registry import default_backend_ids, get_spec

    ids = list(dict.fromkeys(backends or default_backend_ids()))
    specs = [get_spec(i) for i in ids]
    notes: list[str] = []
    if levels:
        bad = [lv for lv in levels if lv not in LEVELS]
        if bad:
            raise ValueError(f"unknown level {bad[0]!r} (use {', '.join(LEVELS)})")
        chosen = list(dict.fromkeys(levels))
        if "loopback" in chosen:
            # asked for out loud: a CLI release that cannot run here is an error, not a column of skips
            absent = [f"{s.id}: {why}" for s in specs if s.cli_package for ok, why in [level_available(s, "loopback")] if not ok]
            if absent:
                raise LevelUnavailable("--level loopback cannot run " + "; ".join(absent))
    else:
        chosen = ["offline"]
        for level in ("loopback",):
            usable = [s.id for s in specs if level_available(s, level)[0]]
            if usable:
                chosen.append(level)
            else:
                notes.append(f"{level}: not available here ({level_available(specs[0], level)[1]})" if specs else level)
    return ids, chosen, notes


def default_jobs() -> tuple[str | None, str]:
    """xdist workers for this machine (kit/scheduling.py suite_workers); serial without
    pytest-xdist or on one CPU."""
    try:
        import xdist  # noqa: F401
    except ImportError:
        return None, "parallel cells: pytest-xdist is not installed, running serially"
    from harnesscheck.kit.scheduling import suite_workers

    workers = suite_workers()
    return (str(workers), "") if workers > 1 else (None, "")


@contextlib.contextmanager
def bridge_template(ids: list[str]) -> Iterator[str | None]:
    """The run's bridge forkserver template, when a selected backend is a harness (its cells
    start bridges): started before pytest, so its imports (mcp, ~0.5 s of CPU) overlap
    pytest's own start-up, where a core is idle, instead of the workers' (plugin.py
    --hc-bridge-template). Yields its socket path, or None (no harness backend; forkservers
    cannot run here); ended with the run."""
    from harnesscheck.bridge import forkserver
    from harnesscheck.kit.adapters import starts_bridges
    from harnesscheck.registry import get_spec

    template = forkserver.start_template() if starts_bridges(get_spec(backend) for backend in ids) else None
    try:
        yield template.socket_path if template is not None else None
    finally:
        if template is not None:
            template.close()


def pytest_args(ids: list[str], levels: list[str], report_dir: Path, baseline: Path | None, jobs: str | None,
                template: str | None = None) -> list[str]:
    from harnesscheck.paths import conformance_dir

    # -P: the current directory is not put first on sys.path, so a project's own `conformance/`
    # (this checkout's, for one) never shadows the suite shipped in the package.
    args = [sys.executable, "-P", "-m", "pytest", str(conformance_dir()), "-p", "no:cacheprovider", "-q",
            "--rootdir", str(conformance_dir().parent), "-c", os.devnull, "-m", "not live" if "live" not in levels else "live",
            "--hc-report", str(report_dir / "conformance-report.json"), "--hc-junit", str(report_dir / "junit.xml")]
    for backend in ids:
        args += ["--backend", backend]
    for level in levels:
        args += ["--level", level]
    if baseline is not None:
        args += ["--baseline", str(baseline)]
    if template is not None:
        args += ["--hc-bridge-template", template]
    # Only the kit's plugin (and xdist for -n): see child_env. Third-party plugins of the
    # environment can neither change the run nor cost start-up (each is assertion-rewritten).
    args += ["-p", "harnesscheck.kit.plugin"]
    # pytest's unraisable-exception plugin runs a full garbage collection as each process ends
    # (~0.1-0.2 s with the SDKs loaded) to turn late __del__ errors into warnings, which no
    # cell records; without it Python prints them to stderr itself.
    args += ["-p", "no:unraisableexception"]
    # The child runs this session and nothing else: it may skip the interpreter's module
    # teardown at its end (~0.4 s with the api SDK loaded, per process; plugin.py).
    args += ["--hc-exit-fast"]
    if jobs and jobs != "0":
        args += ["-p", "xdist.plugin", "-n", str(jobs)]
    return args


def child_env() -> dict[str, str]:
    """The child pytest's environment: this one, with plugin autoloading off (pytest_args
    names the plugins the suite needs)."""
    return {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}


def verify_command(backends: list[str], levels: list[str], report_dir: Path, baseline: Path | None, jobs: str | None,
                   cli: Path | None = None) -> int:
    from harnesscheck.contracts import HarnessError
    from harnesscheck.kit.matrix import combine, to_markdown, write_matrix
    from harnesscheck.kit.results import ReportError, read_report

    if cli is not None:
        # --cli is HARNESS_BACKEND_CLI for the one backend named (loopback/clis.py honours or refuses it)
        if len(backends) != 1:
            _err("--cli needs exactly one --backend (whose binary is it?)")
            return EXIT_USAGE
        os.environ["HARNESS_BACKEND_CLI"] = str(Path(cli).expanduser().absolute())
        os.environ["HARNESS_BACKEND"] = backends[0]

    try:
        ids, chosen, notes = plan(backends, levels)
    except LevelUnavailable as exc:
        _err(str(exc))
        return EXIT_KIT_FAULT
    except (HarnessError, ValueError, ImportError) as exc:
        _err(str(exc))
        return EXIT_USAGE
    if baseline is not None and not Path(baseline).is_file():
        _err(f"baseline {baseline} not found")
        return EXIT_USAGE
    if jobs is None:
        jobs, why = default_jobs()
        if why:
            notes.append(why)
    elif jobs != "0":
        try:
            import xdist  # noqa: F401
        except ImportError:
            _err("-n needs pytest-xdist (pip install pytest-xdist)")
            return EXIT_USAGE
    report_dir = Path(report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    report_path = report_dir / "conformance-report.json"
    if report_path.exists():
        report_path.unlink()
    workers = f"{jobs} workers" if jobs and jobs != "0" else "serial"
    print(f"harnesscheck verify: backends {', '.join(ids)}; levels {', '.join(chosen)}; {workers}", flush=True)
    for note in notes:
        print(f"  (skipping {note})", flush=True)
    with bridge_template(ids) as template:
        proc = subprocess.run(pytest_args(ids, chosen, report_dir, baseline, jobs, template), env=child_env(), stdin=subprocess.DEVNULL)
    if proc.returncode == 4:
        return EXIT_USAGE
    try:
        report = read_report(report_path)
    except ReportError as exc:
        _err(f"the suite wrote no report (pytest exit {proc.returncode}): {exc}")
        return EXIT_KIT_FAULT
    matrix = combine([report])
    write_matrix(matrix, report_dir)
    print()
    print(to_markdown(matrix).split("\n## Notes")[0].split("\n## Backends")[0])
    counts = report.counts()
    print(", ".join(f"{n} {k}" for k, n in counts.items() if n) + f" — report: {report_path}")
    for problem in report.problems:
        _err(problem)
    code = report.exit_code()
    if proc.returncode not in (0, 1) and code == EXIT_OK:
        return EXIT_KIT_FAULT
    return code if code in (EXIT_OK, EXIT_BACKEND_FAILED, EXIT_KIT_FAULT) else EXIT_KIT_FAULT
