"""The `harnesscheck` command. Each command imports its implementation lazily, so that
`harnesscheck --help` never imports anthropic, openai or mcp.

Exit codes (every command): 0 ok; 1 a backend failed a check (or the session failed);
2 usage error (a bad option or setting: one line naming the value and the rule, then the
fix); 3 environment fault (a CLI, npm or a credential missing, the kit broke); 4 internal
error (a bug: one line, the traceback only with `harnesscheck --debug COMMAND ...`).

Bad input is caught here, before any work starts (nothing is created for a run that is
refused): paths that must be directories, files or executables, worker counts, numbers that
must be finite, prompts that must be UTF-8. The checks only look; nothing is created by them.
"""

from __future__ import annotations

import math
import os
import re
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from harnesscheck import __version__
from harnesscheck.core.contracts import HarnessError

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_ENVIRONMENT, EXIT_INTERNAL = 0, 1, 2, 3, 4

app = typer.Typer(
    name="harnesscheck",
    help="Conformance kit for coding-agent backends, and the reference implementation.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain click output: a usage error is a few plain lines, not a drawn box, and a command's
    # --help reads like the top-level one (launcher.py).
    rich_markup_mode=None,
)

_DEBUG = {"on": False}


class UsageError(HarnessError):
    """A bad option value: the message names the option, the value and the rule."""

    exit_code = EXIT_USAGE


def _version(value: bool) -> None:
    if value:
        typer.echo(f"harnesscheck {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show the traceback of an internal error.")] = False,
) -> None:
    """Conformance kit for coding-agent backends."""
    _DEBUG["on"] = debug


# ---------------------------------------------------------------------------------------
# Option checks: each raises UsageError(value + rule, fix) and creates nothing.


def _nearest_existing(path: Path) -> Path:
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return probe


def check_dir_option(option: str, path: Path) -> Path:
    """A directory the command writes into: an existing, writable directory, or a path whose
    nearest existing ancestor is a writable directory (it is created then)."""
    path = Path(path).expanduser()
    if path.exists() and not path.is_dir():
        raise UsageError(
            f"{option} {path}: is a file, must be a directory", f"pass a directory (a new one is created), e.g. {option} {path.parent / (path.name + '.d')}"
        )
    base = _nearest_existing(path.absolute())
    if not base.is_dir():
        raise UsageError(
            f"{option} {path}: {base} is a file, so the directory cannot be created", f"pass a path under a directory, not under a file, for {option}"
        )
    if not os.access(base, os.W_OK | os.X_OK) or not _can_make_dir_in(base):
        what = "is not writable" if base == path.absolute() else f"cannot be created ({base} is not writable)"
        raise UsageError(f"{option} {path}: {what}", f"pass a directory you can write to for {option}")
    return path


def _can_make_dir_in(base: Path) -> bool:
    """Whether a directory can really be made in `base` (access() says yes to root for /proc
    and /sys, where mkdir fails): a probe directory, made and removed at once."""
    import tempfile

    try:
        os.rmdir(tempfile.mkdtemp(prefix=".harnesscheck-probe-", dir=base))
    except OSError:
        return False
    return True


def check_file_option(option: str, path: Path, example: str = "out.json") -> Path:
    """A file the command writes: not a directory, and creatable where it is."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise UsageError(f"{option} {path}: is a directory, must be a file path", f"name the file, e.g. {option} {path / example}")
    base = _nearest_existing(path.absolute().parent)
    if not base.is_dir():
        raise UsageError(f"{option} {path}: {base} is a file, so {path.name} cannot be created there", f"pass a file path under a directory for {option}")
    writable = os.access(path, os.W_OK) if path.exists() else os.access(base, os.W_OK | os.X_OK)
    if not writable:
        raise UsageError(
            f"{option} {path}: not writable ({path if path.exists() else base} is not writable by you)", f"pass a path you can write to for {option}"
        )
    return path


def check_executable_option(option: str, path: Path) -> Path:
    """A binary to run: an existing, executable regular file. A missing path is left to the
    registry (CLI not found, exit 3: the paths tried and how to install)."""
    path = Path(path).expanduser().absolute()
    if path.is_dir():
        raise UsageError(f"{option} {path}: is a directory, must be the CLI binary itself", f"pass the executable file, e.g. {option} {path / '<cli name>'}")
    if path.exists() and not os.access(path, os.X_OK):
        mode = oct(path.stat().st_mode & 0o777)[2:]
        raise UsageError(f"{option} {path}: is not executable (mode {mode})", f"chmod +x {path}, or pass the real binary")
    return path


#: An npm release: X.Y.Z with an optional pre-release/build suffix (semver), nothing that
#: npm would read as a range, tag or path.
_RELEASE_RE = re.compile(r"\d+\.\d+\.\d+(?:-[0-9A-Za-z.]+)?(?:\+[0-9A-Za-z.]+)?")


def check_jobs_option(value: str | None) -> str | None:
    """`-n`: a whole number of workers, 0 or more (0 = serially), or `auto`."""
    if value is None:
        return None
    text = value.strip()
    if text == "auto":
        return text
    try:
        jobs = int(text)
    except ValueError:
        jobs = None
    if jobs is None or jobs < 0:
        raise UsageError(
            f"-n {value!r}: must be a whole number of workers, 0 or more (0 runs serially), or auto",
            "pass e.g. -n 2, -n 0 or -n auto (or leave -n out for the default)",
        )
    return str(jobs)


def check_seconds_option(option: str, value: float | None, *, zero_ok: bool = False) -> float | None:
    if value is None:
        return None
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
        rule = "a finite number of seconds, 0 or more" if zero_ok else "a positive, finite number of seconds"
        raise UsageError(f"{option} {value:g}: must be {rule}", f"pass e.g. {option} 60")
    return value


def check_text_option(option: str, value: str) -> str:
    """Non-blank text that is valid UTF-8 (an argv of other bytes arrives as lone surrogates)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = value[exc.start].encode("utf-8", "surrogateescape")
        raise UsageError(
            f"{option}: not valid UTF-8 (byte 0x{bad.hex()} at character {exc.start})", f"pass {option} as UTF-8 text (e.g. convert it with iconv -t UTF-8)"
        ) from None
    if not value.strip():
        raise UsageError(f"{option}: is empty", f"pass the task as {option} TEXT")
    return value


# ---------------------------------------------------------------------------------------
# Commands


@app.command()
def verify(
    backend: Annotated[Optional[list[str]], typer.Option("--backend", "-b", help="Backend id (repeatable); default: all.")] = None,
    level: Annotated[Optional[list[str]], typer.Option("--level", "-l", help="offline | loopback | live (repeatable).")] = None,
    report: Annotated[Path, typer.Option("--report", help="Directory for the JSON report, JUnit XML and matrix.")] = Path("harnesscheck-report"),
    baseline: Annotated[Optional[Path], typer.Option("--baseline", help="Baseline file of known failures.")] = None,
    jobs: Annotated[
        Optional[str],
        typer.Option(
            "--jobs", "-n", help=("pytest-xdist workers: N, 0 to run serially, or auto; default one more than the CPUs, at most 4 (serial on one CPU).")
        ),
    ] = None,
    cli: Annotated[Optional[Path], typer.Option("--cli", help="Real CLI binary the loopback level runs for the one --backend (HARNESS_BACKEND_CLI).")] = None,
    check: Annotated[Optional[list[str]], typer.Option("--check", help="Only the cells of this check id (repeatable).")] = None,
    keep: Annotated[bool, typer.Option("--keep", help="Keep the run's temporary files (session run dirs, pytest's tmp) and print where.")] = False,
    ratchet: Annotated[
        Optional[str],
        typer.Option("--ratchet", help=("Committed matrix whose passing cells must still pass; default doc/backends.json when present; 'none' disables.")),
    ] = "default",
    json_out: Annotated[bool, typer.Option("--json", help="Print the conformance report (JSON) on stdout for CI; progress and summary go to stderr.")] = False,
    last_failed: Annotated[
        bool, typer.Option("--last-failed", "--lf", help=("Rerun only the checks that failed in the report already in --report (all when none failed)."))
    ] = False,
) -> None:
    """Run the conformance suite over every registered backend and print the verdict."""
    jobs = check_jobs_option(jobs)
    report = check_dir_option("--report", report)
    if baseline is not None and not Path(baseline).is_file():
        raise UsageError(f"--baseline {baseline}: not a file", "pass the baseline file (see doc/SPEC-kit.md, Baseline)")
    from harnesscheck.kit.verify import verify_command

    raise typer.Exit(
        verify_command(
            backends=backend or [],
            levels=level or [],
            report_dir=report,
            baseline=baseline,
            jobs=jobs,
            cli=cli,
            checks=check or [],
            keep=keep,
            ratchet=ratchet,
            as_json=json_out,
            last_failed=last_failed,
        )
    )


@app.command()
def matrix(
    reports: Annotated[list[Path], typer.Argument(help="Conformance report JSON files.")],
    out: Annotated[Path, typer.Option("--out", help="Directory for backends.md/.json/.html (created if missing).")] = Path("harnesscheck-matrix"),
    previous: Annotated[
        Optional[Path],
        typer.Option(
            "--previous", help=("The previous backends.json, for each cell's history (since when it holds, what changed); default: the one already in --out.")
        ),
    ] = None,
) -> None:
    """Combine reports into the verification matrix (Markdown, JSON, HTML)."""
    out = check_dir_option("--out", out)
    from harnesscheck.kit.matrix import matrix_command

    raise typer.Exit(matrix_command(reports, out, previous))


@app.command()
def doctor(
    backend: Annotated[Optional[list[str]], typer.Option("--backend", "-b", help="Backend id (repeatable).")] = None,
    probe: Annotated[bool, typer.Option("--probe", help="Make one cheap round trip through the backend.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Check binaries, versions, auth and the bridge; every failing line prints the fix."""
    from harnesscheck.apps.doctor import doctor_command

    raise typer.Exit(doctor_command(backends=backend or [], probe=probe, as_json=json_out))


@app.command()
def run(
    root: Annotated[Path, typer.Option("--root", help="Worktree the tools are scoped to.")],
    prompt: Annotated[str, typer.Option("--prompt", help="The task.")],
    backend: Annotated[Optional[str], typer.Option("--backend", "-b", help="Backend id; default: HARNESS_BACKEND (environment, then ./.env).")] = None,
    timeout: Annotated[Optional[float], typer.Option("--timeout", help="Wall clock, seconds.")] = None,
    model: Annotated[Optional[str], typer.Option("--model", help="Model inside the backend.")] = None,
    cli: Annotated[Optional[Path], typer.Option("--cli", help="Binary to run (fake or real).")] = None,
    write: Annotated[bool, typer.Option("--write", help="Allow the writing tools (default read-only).")] = False,
    run_dir: Annotated[Optional[Path], typer.Option("--run-dir", help="Where RUN_REPORT.md/.json go.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the AgentOutcome as JSON.")] = False,
    retries: Annotated[int, typer.Option("--retries", help="Reruns after a transient error (429, 529, 5xx, network); 0 disables.")] = 2,
    retry_wait_max: Annotated[float, typer.Option("--retry-wait-max", help="Total seconds to wait between retries.")] = 120.0,
    policy: Annotated[
        Optional[Path],
        typer.Option("--policy", help=("A TOML policy file (doc/SPEC-policy.md); approval_required calls are asked on the terminal, denied without one.")),
    ] = None,
    events: Annotated[
        bool, typer.Option("--events", help=("Print the session's typed events as JSON lines on stdout as they happen (doc/SPEC-events.md)."))
    ] = False,
    preflight: Annotated[
        bool,
        typer.Option(
            "--preflight",
            help=(
                "Say what the backend will and will not do for this request (CLI, credential, declines, policy), then exit: 0 ok, 3 not; nothing is started."
            ),
        ),
    ] = False,
) -> None:
    """Run one session through the registry and write RUN_REPORT.md/.json."""
    prompt = check_text_option("--prompt", prompt)
    timeout = check_seconds_option("--timeout", timeout)
    check_seconds_option("--retry-wait-max", retry_wait_max, zero_ok=True)
    if retries < 0:
        raise UsageError(f"--retries {retries}: must be a whole number, 0 or more", "pass --retries 0 to disable retrying")
    if run_dir is not None:
        run_dir = check_dir_option("--run-dir", run_dir)
    if cli is not None:
        cli = check_executable_option("--cli", cli)
    from harnesscheck.apps.runner import RetryPolicy, run_command

    raise typer.Exit(
        run_command(
            backend=backend,
            root=root,
            prompt=prompt,
            timeout=timeout,
            model=model,
            cli=cli,
            write=write,
            run_dir=run_dir,
            as_json=json_out,
            retry=RetryPolicy(retries=retries, max_wait_s=retry_wait_max),
            policy_file=policy,
            events=events,
            preflight_only=preflight,
        )
    )


@app.command()
def login(
    provider: Annotated[str, typer.Argument(help="The provider to log in to: copilot.")],
) -> None:
    """Log in to a provider (copilot: GitHub's device flow) and store its token in harnesscheck's own auth.json (0600)."""
    if provider != "copilot":
        raise UsageError(f"login {provider!r}: no provider of that name logs in here", "use: harnesscheck login copilot")
    from harnesscheck.backends.copilot import login_command

    raise typer.Exit(login_command(echo=typer.echo))


@app.command()
def bridge(
    root: Annotated[Path, typer.Option("--root", help="Root the tools are scoped to.")],
    read_only: Annotated[bool, typer.Option("--read-only", help="Serve only the reading tools.")] = False,
    trace: Annotated[Optional[Path], typer.Option("--trace", help="JSONL trace file.")] = None,
) -> None:
    """Serve the scoped tools as a stdio MCP server."""
    if not Path(root).expanduser().is_dir():
        raise UsageError(f"--root {root}: not a directory", "pass the directory the tools are scoped to")
    if trace is not None:
        trace = check_file_option("--trace", trace, "trace.jsonl")
    from harnesscheck.bridge.__main__ import exit_now
    from harnesscheck.bridge.server import bridge_command

    exit_now(bridge_command(root=root, read_only=read_only, trace=trace))


@app.command("install-clis")
def install_clis(
    dest: Annotated[Optional[Path], typer.Option("--dest", help="Cache dir (default: the loopback cache).")] = None,
    backend: Annotated[
        Optional[str],
        typer.Option(
            "--backend",
            "-b",
            help=(
                "Only this backend's CLI: claude-code, codex, gemini, opencode, the ACP agents (acp-opencode and acp-gemini run"
                " their CLI's pin) (npm) or deepseek (pip)."
            ),
        ),
    ] = None,
    version: Annotated[
        Optional[str],
        typer.Option(
            "--version",
            help="Install this release (X.Y.Z or latest) beside the others; needs --backend (a CLI: an ACP agent runs the release its profile names).",
        ),
    ] = None,
    check: Annotated[bool, typer.Option("--check", help="Say whether each pin is behind npm's latest and whether this Node meets its engines.")] = False,
) -> None:
    """Install the pinned real CLIs for the loopback level: claude-code, codex, gemini, opencode and
    the ACP agents acp-claude-agent-acp, acp-codex-acp (npm), deepseek (pip)."""
    if dest is not None:
        dest = check_dir_option("--dest", dest)
    if version is not None and version != "latest" and not _RELEASE_RE.fullmatch(version):
        raise UsageError(f"--version {version!r}: must be a release X.Y.Z (optionally -pre.N) or latest", "pass e.g. --version 0.171.0 or --version latest")
    from harnesscheck.loopback.install import install_command

    raise typer.Exit(install_command(dest, backend=backend, version=version, check=check))


@app.command()
def record(
    backend: Annotated[str, typer.Option("--backend", "-b", help="A backend with loopback scenarios: claude-code, codex or gemini.")],
    scenario: Annotated[str, typer.Option("--scenario", help="Loopback scenario name, or all.")],
    out: Annotated[Optional[Path], typer.Option("--out", help="Fixture file to write (default: the shipped fixture, which needs --force).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Allow overwriting an existing fixture file (a shipped one included).")] = False,
) -> None:
    """Record a loopback scenario's raw CLI output as a scrubbed fixture with provenance."""
    if out is not None:
        out = check_file_option("--out", out)
    from harnesscheck.loopback.record import record_command

    raise typer.Exit(record_command(backend=backend, scenario=scenario, out=out, force=force))


@app.command()
def drift(
    backend: Annotated[
        Optional[list[str]],
        typer.Option(
            "--backend",
            "-b",
            help="A backend with a pinned npm CLI (claude-code, codex, gemini, opencode), or ID==VERSION; default: all of them.",
        ),
    ] = None,
    against: Annotated[Optional[str], typer.Option("--against", help="Compare with the stored baseline of this release (default: the same release).")] = None,
    save: Annotated[bool, typer.Option("--save", help="Store the fresh facts as this release's baseline first.")] = False,
    shapes: Annotated[bool, typer.Option("--shapes", help="Also compare the stored recordings' event shapes.")] = False,
) -> None:
    """What changed that matters: requests, behaviour, classification and side effects of a CLI release, ranked."""
    from harnesscheck.loopback.drift import drift_command

    raise typer.Exit(drift_command(backends=backend or [], against=against, save=save, shapes_too=shapes))


acp_app = typer.Typer(name="acp", no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)
app.add_typer(acp_app, name="acp", help="Agent Client Protocol: serve a backend as an ACP agent over stdio.")


@acp_app.command("serve")
def acp_serve(
    backend: Annotated[
        Optional[str], typer.Option("--backend", "-b", help="Backend id; default: HARNESS_BACKEND (the environment only, never ./.env).")
    ] = None,
    root: Annotated[Optional[Path], typer.Option("--root", help="Sessions' cwd must be this directory or beneath it.")] = None,
    model: Annotated[Optional[str], typer.Option("--model", help="Model inside the backend.")] = None,
    timeout: Annotated[Optional[float], typer.Option("--timeout", help="Wall clock of each prompt, seconds.")] = None,
    cli: Annotated[Optional[Path], typer.Option("--cli", help="Binary to run (fake or real).")] = None,
) -> None:
    """Serve one backend as an ACP (v1) agent on stdin/stdout (doc/SPEC-acp-serve.md)."""
    timeout = check_seconds_option("--timeout", timeout)
    if cli is not None:
        cli = check_executable_option("--cli", cli)
    from harnesscheck.acpserve import serve_command

    raise typer.Exit(serve_command(backend=backend, root=root, model=model, timeout=timeout, cli=cli))


@app.command()
def schema() -> None:
    """Print the JSON Schema of AgentOutcome."""
    from harnesscheck.core.contracts import outcome_schema_json

    typer.echo(outcome_schema_json(), nl=False)


# ---------------------------------------------------------------------------------------


def _command_name(argv: list[str]) -> str:
    names = {c.name or (c.callback.__name__ if c.callback else "") for c in app.registered_commands}
    return next((a for a in argv if a in names), "")


#: What each option's value is, shown in --help instead of a Python type (`<list[str]>`).
METAVARS = {
    "backend": "ID",
    "level": "LEVEL",
    "check": "CHECK-ID",
    "jobs": "N",
    "ratchet": "MATRIX|none",
    "report": "DIR",
    "out": "PATH",
    "dest": "DIR",
    "root": "DIR",
    "run_dir": "DIR",
    "baseline": "FILE",
    "policy": "FILE",
    "trace": "FILE",
    "previous": "FILE",
    "cli": "PATH",
    "prompt": "TEXT",
    "model": "MODEL",
    "version": "X.Y.Z|latest",
    "scenario": "NAME|all",
    "against": "VERSION",
    "timeout": "SECONDS",
    "retries": "N",
    "retry_wait_max": "SECONDS",
}


def _name_metavars(command) -> None:
    """Every option that takes a value shows what it is (METAVARS, else its name in capitals)."""
    for param in getattr(command, "params", []):
        if getattr(param, "param_type_name", "") == "option" and not getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = METAVARS.get(param.name or "", (param.name or "value").upper().replace("_", "-"))
    for sub in getattr(command, "commands", {}).values():
        _name_metavars(sub)


def main() -> None:
    """Run the app; a HarnessError (bad input, missing CLI...) becomes its message and fix and
    its exit code; any other exception is an internal error (exit 4), with the traceback only
    under --debug."""
    argv = sys.argv[1:]
    if argv in ([], ["--help"]):  # the one top-level help (launcher.py), whichever entry point runs
        from harnesscheck.apps.launcher import fast_help

        sys.stdout.write(fast_help())
        raise SystemExit(EXIT_OK if argv else EXIT_USAGE)
    try:
        command = typer.main.get_command(app)
        _name_metavars(command)
        command(prog_name="harnesscheck")
    except HarnessError as exc:
        name = _command_name(argv)
        print(f"harnesscheck{' ' + name if name else ''}: {exc.message}" + (f"\n  fix: {exc.fix}" if exc.fix else ""), file=sys.stderr)
        raise SystemExit(int(getattr(exc, "exit_code", EXIT_USAGE) or EXIT_USAGE)) from None
    except Exception as exc:  # noqa: BLE001 - the last line of defence: one line, not a traceback
        if _DEBUG["on"] or "--debug" in argv:
            raise
        name = _command_name(argv)
        print(
            f"harnesscheck{' ' + name if name else ''}: internal error: {type(exc).__name__}: {str(exc)[:300]}\n"
            "  fix: this is a bug; rerun with `harnesscheck --debug ...` for the traceback and report it",
            file=sys.stderr,
        )
        raise SystemExit(EXIT_INTERNAL) from None


if __name__ == "__main__":
    main()
