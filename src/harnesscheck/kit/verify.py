"""`harnesscheck verify`: the suite over every registered backend at every level available here.

Runs pytest with the kit plugin in a child process (so a crashing backend cannot take the
command down, and pytest-xdist can spread the cells), shows the progress per backend × level
(kit/progress.py), then prints the matrix and writes into the report directory:
conformance-report.json, junit.xml (pytest's own --junitxml), backends.md/.json/.html and
pytest-output.txt (the child's own output). Offline is always available and needs nothing
external; loopback runs where adapters for it are installed (kit.levels.LEVEL_PROVIDERS).

Where it writes: the report directory, and only at the end: the child writes into a hidden
folder inside it, whose files replace the previous run's in one step (an interrupted run
leaves the previous run's files as they were). Everything else the run makes (pytest's
temporary folders, the sessions' run dirs, fake CLIs, bridge forkservers) goes under one
scratch folder in $TMPDIR, the child's TMPDIR, removed at the end unless --keep.

Exit codes: 0 conformant (within the baseline), 1 a backend failed (or regressed against
the committed matrix), 2 usage error, 3 kit or environment fault (nothing could be verified
here included), 130 interrupted (Ctrl-C), 143 and 129 ended by SIGTERM and SIGHUP (a CI job's
timeout, `timeout`, a closed terminal): each ends the child's whole run as Ctrl-C does.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from harnesscheck.kit.results import EXIT_BACKEND_FAILED, EXIT_KIT_FAULT, EXIT_OK, EXIT_USAGE

EXIT_INTERRUPTED = 130
#: the files a run writes into the report directory (an older run's are replaced or removed)
REPORT_FILES = ("conformance-report.json", "junit.xml", "backends.md", "backends.json", "backends.html", "pytest-output.txt")
#: the committed matrix verify ratchets against by default, when it is there
DEFAULT_RATCHET = Path("doc") / "backends.json"

LEVELS = ("offline", "loopback", "live")


def _err(text: str) -> None:
    print(f"harnesscheck verify: {text}", file=sys.stderr)


class LevelUnavailable(Exception):
    """A level asked for by name cannot run a selected backend here (exit 3, the reason said)."""


def plan(backends: list[str], levels: list[str]) -> tuple[list[str], list[str], list[str]]:
    """(backend ids, levels to run, notes on levels left out)."""
    from harnesscheck.backends.registry import column_ids, default_backend_ids, get_spec
    from harnesscheck.kit.levels import level_available

    if any(":" in b for b in backends) and os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())  # `module:attr` resolves from the current directory, as in the suite's run
    ids = list(dict.fromkeys([c for b in backends for c in column_ids(b)] or default_backend_ids()))
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
    from harnesscheck.backends.registry import get_spec
    from harnesscheck.bridge import forkserver
    from harnesscheck.kit.levels import starts_bridges

    template = forkserver.start_template() if starts_bridges(get_spec(backend) for backend in ids) else None
    try:
        yield template.socket_path if template is not None else None
    finally:
        if template is not None:
            template.close()


def pytest_args(
    ids: list[str],
    levels: list[str],
    report_dir: Path,
    baseline: Path | None,
    jobs: str | None,
    template: str | None = None,
    *,
    checks: list[str] = (),
    ratchet: Path | None = None,
    scratch: Path | None = None,
) -> list[str]:
    """The child's command line. `report_dir` gets the report, the JUnit XML and the progress
    events; `scratch` (the run's own folder) pytest's temporary folders."""
    from harnesscheck.core.paths import conformance_dir

    # -P: the current directory is not put first on sys.path, so a project's own `conformance/`
    # (this checkout's, for one) never shadows the suite shipped in the package.
    args = [
        sys.executable,
        "-P",
        "-m",
        "pytest",
        str(conformance_dir()),
        "-p",
        "no:cacheprovider",
        "-q",
        "--rootdir",
        str(conformance_dir().parent),
        "-c",
        os.devnull,
        "-m",
        "not live" if "live" not in levels else "live",
        "--hc-report",
        str(report_dir / "conformance-report.json"),
        "--hc-progress",
        str(report_dir / PROGRESS_NAME),
        # pytest's own JUnit writer; xunit1 is the family whose testcases may carry the
        # properties (check_id, backend, level) the kit records on them
        "--junitxml",
        str(report_dir / "junit.xml"),
        "-o",
        "junit_family=xunit1",
        "-o",
        "junit_suite_name=harnesscheck-conformance",
    ]
    if scratch is not None:
        args += ["--basetemp", str(scratch / "pytest")]
    for backend in ids:
        args += ["--hc-backend", backend]
    for level in levels:
        args += ["--hc-level", level]
    for check_id in checks:
        args += ["--hc-check", check_id]
    if baseline is not None:
        args += ["--hc-baseline", str(baseline)]
    if ratchet is not None:
        args += ["--hc-ratchet", str(ratchet)]
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


PROGRESS_NAME = "progress.jsonl"


def child_env(scratch: Path | None = None) -> dict[str, str]:
    """The child pytest's environment: this one, with plugin autoloading off (pytest_args
    names the plugins the suite needs), and TMPDIR the run's scratch folder, so whatever
    its processes make in a temporary folder is removed with it."""
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    if scratch is not None:
        env["TMPDIR"] = str(scratch / "tmp")
    return env


@contextlib.contextmanager
def scratch_folder(keep: bool) -> Iterator[Path]:
    """The run's own temporary folder (in $TMPDIR); this process's temporary files go there
    too while it lasts (the bridge template), and it is removed at the end unless `keep`."""
    scratch = Path(tempfile.mkdtemp(prefix="harnesscheck-verify-"))
    (scratch / "tmp").mkdir()
    saved = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(scratch / "tmp")
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again
    try:
        yield scratch
    finally:
        if saved is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved
        tempfile.tempdir = None
        if keep:
            print(f"kept the run's temporary files: {scratch}", flush=True)
        else:
            _remove(scratch)


def _remove(path: Path) -> None:
    """Remove a folder whose last writers (a bridge or fake CLI ending with its host) may still
    be leaving: retried for up to ~2 s."""
    for _ in range(20):
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            return
        time.sleep(0.1)


#: The signals that end a run from outside besides Ctrl-C: a CI job's timeout and `timeout`
#: send SIGTERM to verify's pid alone; a closed terminal sends SIGHUP. The child runs in a
#: session of its own, so neither reaches it: verify must end it, or the whole suite runs on.
ENDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP while verify runs: handled where Ctrl-C is (the child's group ended,
    the partial folder and the scratch removed), exit 128 + the signal's number."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def _run_signals_to(handler) -> Iterator[bool]:
    """While the block runs, SIGINT, SIGTERM and SIGHUP go to `handler`, except a signal
    ignored when it starts, which stays ignored (`nohup` ignores SIGHUP; a shell's `&` SIGINT);
    their handlers before are put back after. Yields False (nothing changed) outside the main
    thread, where handlers cannot be set."""
    try:
        handled = [sig for sig in (signal.SIGINT, *ENDING_SIGNALS) if signal.getsignal(sig) is not signal.SIG_IGN]
        previous = {sig: signal.signal(sig, handler) for sig in handled}
    except ValueError:  # not the main thread: the caller's own handling stands
        yield False
        return
    try:
        yield True
    finally:
        for sig, before in previous.items():
            signal.signal(sig, before)


@contextlib.contextmanager
def _interrupts_end_the_run() -> Iterator[None]:
    """While the block runs, the first of SIGINT, SIGTERM and SIGHUP raises in the main thread
    (KeyboardInterrupt for SIGINT, as Python's own handler does; Terminated for the others),
    and every later one is noted, not raised: the child's group is then ended and the folders
    removed in full. A CI runner's cancel sends SIGINT, then SIGTERM seconds later, then
    SIGKILL: the SIGTERM must not cut short the ending the SIGINT began."""
    seen: list[int] = []

    def interrupted(signum, frame):
        seen.append(signum)
        if len(seen) == 1:
            raise KeyboardInterrupt if signum == signal.SIGINT else Terminated(signum)

    with _run_signals_to(interrupted):
        yield


@contextlib.contextmanager
def _deferred_sigint() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP wait until the block is over (the report files are moved in
    place); then Ctrl-C raises KeyboardInterrupt and the others end the process as they would
    have (their handler before the block, delivered again)."""
    pending: list[int] = []
    try:
        with _run_signals_to(lambda signum, frame: pending.append(signum)):
            yield
    finally:
        for signum in dict.fromkeys(pending):
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            os.kill(os.getpid(), signum)


def publish(staging: Path, report_dir: Path) -> None:
    """The new run's files replace the old run's: each moved in place (a rename), and a file
    of an older run this one did not write removed, with Ctrl-C held back meanwhile; the
    report directory's other files are left alone."""
    with _deferred_sigint():
        for name in REPORT_FILES:
            new, old = staging / name, report_dir / name
            if new.exists():
                os.replace(new, old)
            elif old.exists():
                old.unlink()
    shutil.rmtree(staging, ignore_errors=True)


def _run_child(args: list[str], env: dict[str, str], staging: Path, stream=None, folders: tuple[Path, ...] = ()) -> int:
    """The child pytest in its own session (so Ctrl-C reaches only this process, which ends
    the child's whole group itself, quietly), its output in pytest-output.txt, the progress
    shown as its events arrive. The child gets the read end of a pipe whose write end only
    this process holds (end_with_verify): if this process is killed (SIGKILL, which it cannot
    handle), the child ends its own run and removes `folders`."""
    from harnesscheck.kit.progress import EventReader, Progress, view

    progress, reader = Progress(), EventReader(staging / PROGRESS_NAME)
    alive_read, alive_write = os.pipe()  # neither inheritable: the child gets its copy through pass_fds
    env = {**env, ALIVE_FD_ENV: str(alive_read), FOLDERS_ENV: os.pathsep.join(map(str, folders))}
    with open(alive_write, "wb", buffering=0), open(alive_read, "rb", buffering=0) as childs_end, open(staging / "pytest-output.txt", "wb") as out:
        try:
            proc = subprocess.Popen(
                args, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, pass_fds=(alive_read,)
            )
        finally:
            childs_end.close()  # the write end stays open here until the child is gone
        try:
            with view(progress, stream) as shown:
                while True:
                    code = proc.poll()
                    for event in reader.read():
                        for what, data in progress.feed(event):
                            shown.announce(what, data)
                    if code is not None:
                        return code
                    shown.refresh()
                    time.sleep(0.1)
        except BaseException:
            _end_group(proc)
            raise


#: verify's child finds the read end of verify's liveness pipe under this name (a descriptor
#: number), and under the next the folders of verify's run to remove should verify die first.
ALIVE_FD_ENV = "HARNESSCHECK_VERIFY_ALIVE_FD"
FOLDERS_ENV = "HARNESSCHECK_VERIFY_FOLDERS"
#: The folders a child may remove for its dead verify: the run's scratch and its staging.
_VERIFY_FOLDER_PREFIXES = ("harnesscheck-verify-", ".harnesscheck-partial-")
#: Set in the child when verify's pipe reached EOF before the run ended: verify is gone.
_verify_gone = threading.Event()
#: The child's copy of FOLDERS_ENV (end_with_verify), for remove_verify_folders.
_VERIFY_FOLDERS: list[Path] = []


def end_with_verify() -> None:
    """In verify's child pytest (its main process; kit/plugin.py calls this at configure, before
    any xdist worker starts): watch verify's liveness pipe. EOF on it while the run goes on means
    verify died without ending the run (SIGKILL; the OOM killer), and the child's session is its
    own, so nothing else would end it: a daemon thread ends the child's process group as verify
    would have (SIGINT, then SIGTERM, then SIGKILL, END_GRACES_S apart), and remove_verify_folders
    removes what verify would have removed. No-op outside verify's child; the variables are
    taken out of the environment, so no worker or CLI sees them."""
    raw = os.environ.pop(ALIVE_FD_ENV, None)
    folders = os.environ.pop(FOLDERS_ENV, "")
    if raw is None:
        return
    try:
        fd = int(raw)
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return
    except (ValueError, OSError):
        return
    if os.getpgrp() != os.getpid():  # not the leader of a group of its own: not verify's child
        return
    os.set_inheritable(fd, False)
    _VERIFY_FOLDERS[:] = [Path(f) for f in folders.split(os.pathsep) if f and Path(f).name.startswith(_VERIFY_FOLDER_PREFIXES)]
    threading.Thread(target=_end_group_when_verify_is_gone, args=(fd,), daemon=True, name="harnesscheck-verify-alive").start()


def _end_group_when_verify_is_gone(fd: int) -> None:
    try:
        while os.read(fd, 64):  # verify never writes: this returns b"" when its end closes
            pass
    except OSError:
        return
    _verify_gone.set()
    for sig, grace_s in zip((signal.SIGINT, signal.SIGTERM, signal.SIGKILL), END_GRACES_S):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(os.getpgrp(), sig)
        time.sleep(grace_s)


def remove_verify_folders() -> None:
    """At the child's end (kit/plugin.py, unconfigure): if verify died first, remove its run's
    scratch and staging folders, as verify's own ending would have."""
    if _verify_gone.is_set():
        for folder in _VERIFY_FOLDERS:
            _remove(folder)


#: How long the child's group gets after each signal of _end_group (s): after SIGINT, a little
#: more than xdist's own 10 s for its workers to come down (`NodeManager.EXIT_TIMEOUT`), so a
#: slow worker is ended by xdist's teardown, not cut off mid-unwind by SIGTERM.
END_GRACES_S = (12.0, 5.0, 5.0)


def _end_group(proc: subprocess.Popen, graces_s: tuple[float, float, float] = END_GRACES_S) -> None:
    """SIGINT to the child's process group (pytest, its xdist workers), then SIGTERM, then
    SIGKILL, each given its grace (`graces_s`) before the next. SIGINT first: Python turns it
    into KeyboardInterrupt, so each session unwinds and removes what it made outside the
    scratch folder (a too-deep run dir's short runtime dir in /tmp, envpolicy.private_temp_dirs);
    at SIGTERM's default a worker dies mid-session and leaves those behind."""
    for sig, grace_s in zip((signal.SIGINT, signal.SIGTERM, signal.SIGKILL), graces_s):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=grace_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _nothing_to_run(ids: list[str], levels: list[str]) -> str | None:
    """Why no cell of this run could be verified here (every backend × level unavailable), or None."""
    from harnesscheck.backends.registry import get_spec
    from harnesscheck.kit.levels import level_available

    whys = []
    for level in levels:
        for backend in ids:
            ok, why = level_available(get_spec(backend), level)
            if ok:
                return None
            whys.append((level, backend, why))
    level, backend, why = next(((lv, b, w) for lv, b, w in whys if "not installed" in w), whys[0])
    return f"nothing can be verified here: no selected backend can run at {', '.join(levels)} ({backend}: {why})"


def verify_command(
    backends: list[str],
    levels: list[str],
    report_dir: Path,
    baseline: Path | None,
    jobs: str | None,
    cli: Path | None = None,
    *,
    checks: list[str] = (),
    keep: bool = False,
    ratchet: Path | None | str = "default",
    as_json: bool = False,
    last_failed: bool = False,
) -> int:
    """`ratchet`: the committed matrix to compare against ("default": doc/backends.json of the
    current directory when it is a harnesscheck matrix; None or "none": no ratchet).
    `as_json`: the conformance report on stdout (for CI), everything else on stderr.
    `last_failed`: only the checks that failed in the report already in `report_dir`."""
    from harnesscheck.contain.process import harden_host
    from harnesscheck.core.contracts import HarnessError
    from harnesscheck.kit.matrix import combine, write_matrix
    from harnesscheck.kit.results import ReportError, read_report

    harden_host()  # verify holds the user's whole environment: no CLI of a session may read it through /proc

    out = sys.stderr if as_json else sys.stdout
    if last_failed:
        from harnesscheck.kit.summary import last_failed as previous_failures

        failed_backends, failed_checks, note = previous_failures(Path(report_dir))
        print(note, file=out, flush=True)
        checks = list(dict.fromkeys([*checks, *failed_checks]))
        backends = backends or failed_backends

    if cli is not None:
        # --cli is HARNESS_BACKEND_CLI for the one backend named (loopback/clis.py honours or refuses it)
        if len(backends) != 1:
            _err("--cli needs exactly one --backend (whose binary is it?)")
            return EXIT_USAGE
        os.environ["HARNESS_BACKEND_CLI"] = str(Path(cli).expanduser().absolute())
        os.environ["HARNESS_BACKEND"] = backends[0]

    try:
        from harnesscheck.core.config import Settings

        Settings.from_env()  # a bad HARNESS_* value is refused here too, as `run` refuses it
        unknown = unknown_checks(list(checks))
        if unknown:
            _err(unknown)
            return EXIT_USAGE
        ids, chosen, notes = plan(backends, levels)
    except LevelUnavailable as exc:
        _err(str(exc))
        return EXIT_KIT_FAULT
    except (HarnessError, ValueError, ImportError) as exc:
        _err(str(exc))
        return EXIT_USAGE
    if cli is not None and not set(chosen) & {"loopback", "live"}:
        _err(
            f"--cli {cli}: the {', '.join(chosen)} level runs the kit's fake CLIs, never a given binary\n"
            f"  fix: add --level loopback to run {cli} against the scripted model server, or drop --cli"
        )
        return EXIT_USAGE
    if baseline is not None and not Path(baseline).is_file():
        _err(f"baseline {baseline} not found")
        return EXIT_USAGE
    ratchet_path, why = _ratchet_path(ratchet)
    if why:
        _err(why)
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
    nothing = _nothing_to_run(ids, chosen)
    if nothing:
        _err(nothing)
        return EXIT_KIT_FAULT
    report_dir = Path(report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    workers = f"{jobs} workers" if jobs and jobs != "0" else "serial"
    print(f"harnesscheck verify: backends {', '.join(ids)}; levels {', '.join(chosen)}; {workers}", file=out, flush=True)
    for note in notes:
        print(f"  (skipping {note})", file=out, flush=True)
    if ratchet_path is not None:
        print(f"  (ratchet: every cell that passed in {ratchet_path} must pass)", file=out, flush=True)
    try:
        with _interrupts_end_the_run():
            staging = Path(tempfile.mkdtemp(prefix=".harnesscheck-partial-", dir=report_dir))
            try:
                with scratch_folder(keep) as scratch, bridge_template(ids) as template:
                    args = pytest_args(ids, chosen, staging, baseline, jobs, template, checks=list(checks), ratchet=ratchet_path, scratch=scratch)
                    returncode = _run_child(args, child_env(scratch), staging, out, folders=(staging,) if keep else (scratch, staging))
            except KeyboardInterrupt:  # Terminated too
                shutil.rmtree(staging, ignore_errors=True)
                raise
    except Terminated as exc:
        _err(f"ended by {signal.Signals(exc.signum).name}: {report_dir} still holds the previous run's files")
        return 128 + exc.signum
    except KeyboardInterrupt:
        _err(f"interrupted: {report_dir} still holds the previous run's files")
        return EXIT_INTERRUPTED
    (staging / PROGRESS_NAME).unlink(missing_ok=True)
    report_path = report_dir / "conformance-report.json"
    if returncode == 4:
        _err(f"the suite refused its arguments: {_tail(staging / 'pytest-output.txt')}")
        shutil.rmtree(staging, ignore_errors=True)
        return EXIT_USAGE
    try:
        report = read_report(staging / "conformance-report.json")
    except ReportError as exc:
        _err(f"the suite wrote no report (pytest exit {returncode}): {exc}; its output: {_tail(staging / 'pytest-output.txt')}")
        shutil.rmtree(staging, ignore_errors=True)
        return EXIT_KIT_FAULT
    counts = report.counts()
    if not (counts["passed"] or counts["failed"] or counts["xfailed"] or counts["error"]):
        shutil.rmtree(staging, ignore_errors=True)
        _err(_why_nothing(report))
        return EXIT_KIT_FAULT
    from harnesscheck.kit.publish import read_previous

    matrix = combine([report], previous=read_previous(report_dir / "backends.json"))
    write_matrix(matrix, staging)
    publish(staging, report_dir)
    from harnesscheck.kit.summary import console_for, print_summary

    print_summary(console_for(out), matrix, report, report_path, _selectors(ids))
    if as_json:
        sys.stdout.write(report_path.read_text(encoding="utf-8"))
        sys.stdout.flush()
    for problem in report.problems:
        _err(problem)
    code = report.exit_code()
    if returncode not in (0, 1) and code == EXIT_OK:
        return EXIT_KIT_FAULT
    return code if code in (EXIT_OK, EXIT_BACKEND_FAILED, EXIT_KIT_FAULT) else EXIT_KIT_FAULT


def unknown_checks(checks: list[str]) -> str:
    """ "" when every --check names a check of the catalog; else the usage error (the ids,
    the nearest known ones, where the ids are listed): checked here, before any worker starts
    (an unknown id inside an xdist run crashed the controller)."""
    if not checks:
        return ""
    import difflib

    from harnesscheck.kit.catalog import issued_ids, load_catalog

    known = load_catalog()
    unknown = [c for c in dict.fromkeys(checks) if c not in known]
    if not unknown:
        return ""
    retired = issued_ids()
    parts = []
    for check_id in unknown:
        if retired.get(check_id):
            parts.append(f"{check_id} (retired: {retired[check_id]})")
            continue
        near = difflib.get_close_matches(check_id, list(known), n=2, cutoff=0.6)
        parts.append(f"{check_id}" + (f" (did you mean {' or '.join(near)}?)" if near else ""))
    return (
        f"--check: no such check: {', '.join(parts)}\n  fix: use a check id of doc/catalog.md (e.g. env.provider-keys-stripped); `harnesscheck verify --help`"
    )


def _selectors(ids: list[str]) -> dict[str, str]:
    """spec id -> the --backend value that named it (`mine:spec` reruns `mine`)."""
    from harnesscheck.backends.registry import get_spec

    out = {}
    for backend in ids:
        try:
            out[get_spec(backend).id] = backend
        except Exception:  # noqa: BLE001 - resolved once already (plan); a rerun hint is not worth a crash
            out[backend] = backend
    return out


def _why_nothing(report) -> str:
    """One line: the run verified nothing, and the commonest reason."""
    from collections import Counter

    if not report.cells:
        return "nothing was verified: no cell was selected"
    (reason, message), _ = Counter((c.reason, c.message) for c in report.cells).most_common(1)[0]
    return f"nothing was verified: all {len(report.cells)} cells were skipped ({reason}: {message})"


def _tail(path: Path, lines: int = 3) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    except OSError:
        return "(no output)"
    return " | ".join(line.strip() for line in text[-lines:]) or "(no output)"


def _ratchet_path(ratchet: Path | str | None) -> tuple[Path | None, str]:
    """(the committed matrix to ratchet against or None, a usage error or "")."""
    import json

    if ratchet is None or ratchet == "none":
        return None, ""
    explicit = ratchet != "default"
    path = Path(ratchet) if explicit else DEFAULT_RATCHET
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return None, (f"--ratchet {path}: not a readable matrix ({exc})" if explicit else "")
    from harnesscheck.kit.matrix import MATRIX_SCHEMA

    if not isinstance(data, dict) or data.get("schema") != MATRIX_SCHEMA:
        return None, (f"--ratchet {path}: not a {MATRIX_SCHEMA} file" if explicit else "")
    return path.resolve(), ""
