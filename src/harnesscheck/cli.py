"""The `harnesscheck` command. Each command imports its implementation lazily, so that
`harnesscheck --help` never imports anthropic, openai or mcp.

Exit codes: 0 ok, 1 a backend failed, 2 usage error, 3 kit or environment fault.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from harnesscheck import __version__

app = typer.Typer(
    name="harnesscheck",
    help="Conformance kit for coding-agent backends, and the reference implementation.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"harnesscheck {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    """Conformance kit for coding-agent backends."""


@app.command()
def verify(
    backend: Annotated[Optional[list[str]], typer.Option("--backend", "-b", help="Backend id (repeatable); default: all.")] = None,
    level: Annotated[Optional[list[str]], typer.Option("--level", "-l", help="offline | loopback | live (repeatable).")] = None,
    report: Annotated[Path, typer.Option("--report", help="Directory for the JSON report, JUnit XML and matrix.")] = Path("harnesscheck-report"),
    baseline: Annotated[Optional[Path], typer.Option("--baseline", help="Baseline file of known failures.")] = None,
    jobs: Annotated[Optional[str], typer.Option("--jobs", "-n", help="pytest-xdist workers: N, or 0 to run serially; default one more than the CPUs, at most 4 (serial on one CPU).")] = None,
) -> None:
    """Run the conformance suite over every registered backend and print the matrix."""
    from harnesscheck.kit.verify import verify_command

    raise typer.Exit(verify_command(backends=backend or [], levels=level or [], report_dir=report, baseline=baseline, jobs=jobs))


@app.command()
def matrix(
    reports: Annotated[list[Path], typer.Argument(help="Conformance report JSON files.")],
    out: Annotated[Path, typer.Option("--out", help="Directory for backends.md/.json/.html.")] = Path("doc"),
) -> None:
    """Combine reports into the verification matrix (Markdown, JSON, HTML)."""
    from harnesscheck.kit.matrix import matrix_command

    raise typer.Exit(matrix_command(reports, out))


@app.command()
def doctor(
    backend: Annotated[Optional[list[str]], typer.Option("--backend", "-b", help="Backend id (repeatable).")] = None,
    probe: Annotated[bool, typer.Option("--probe", help="Make one cheap round trip through the backend.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Check binaries, versions, auth and the bridge; every failing line prints the fix."""
    from harnesscheck.doctor import doctor_command

    raise typer.Exit(doctor_command(backends=backend or [], probe=probe, as_json=json_out))


@app.command()
def run(
    backend: Annotated[str, typer.Option("--backend", "-b", help="Backend id.")],
    root: Annotated[Path, typer.Option("--root", help="Worktree the tools are scoped to.")],
    prompt: Annotated[str, typer.Option("--prompt", help="The task.")],
    timeout: Annotated[Optional[float], typer.Option("--timeout", help="Wall clock, seconds.")] = None,
    model: Annotated[Optional[str], typer.Option("--model", help="Model inside the backend.")] = None,
    cli: Annotated[Optional[Path], typer.Option("--cli", help="Binary to run (fake or real).")] = None,
    write: Annotated[bool, typer.Option("--write", help="Allow the writing tools (default read-only).")] = False,
    run_dir: Annotated[Optional[Path], typer.Option("--run-dir", help="Where RUN_REPORT.md/.json go.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the AgentOutcome as JSON.")] = False,
    retries: Annotated[int, typer.Option("--retries", help="Reruns after a transient error (429, 529, 5xx, network); 0 disables.")] = 2,
    retry_wait_max: Annotated[float, typer.Option("--retry-wait-max", help="Total seconds to wait between retries.")] = 120.0,
) -> None:
    """Run one session through the registry and write RUN_REPORT.md/.json."""
    from harnesscheck.runner import RetryPolicy, run_command

    raise typer.Exit(
        run_command(
            backend=backend, root=root, prompt=prompt, timeout=timeout, model=model, cli=cli,
            write=write, run_dir=run_dir, as_json=json_out,
            retry=RetryPolicy(retries=retries, max_wait_s=retry_wait_max),
        )
    )


@app.command()
def bridge(
    root: Annotated[Path, typer.Option("--root", help="Root the tools are scoped to.")],
    read_only: Annotated[bool, typer.Option("--read-only", help="Serve only the reading tools.")] = False,
    trace: Annotated[Optional[Path], typer.Option("--trace", help="JSONL trace file.")] = None,
) -> None:
    """Serve the scoped tools as a stdio MCP server."""
    from harnesscheck.bridge.__main__ import exit_now
    from harnesscheck.bridge.server import bridge_command

    exit_now(bridge_command(root=root, read_only=read_only, trace=trace))


@app.command("install-clis")
def install_clis(
    dest: Annotated[Optional[Path], typer.Option("--dest", help="Cache dir (default: the loopback cache).")] = None,
) -> None:
    """Install the pinned real CLIs (claude, codex) with npm for the loopback level."""
    from harnesscheck.loopback.install import install_command

    raise typer.Exit(install_command(dest))


@app.command()
def record(
    backend: Annotated[str, typer.Option("--backend", "-b", help="claude-code | codex")],
    scenario: Annotated[str, typer.Option("--scenario", help="Loopback scenario name.")],
    out: Annotated[Optional[Path], typer.Option("--out", help="Fixture file to write.")] = None,
) -> None:
    """Record a loopback scenario's raw CLI output as a scrubbed fixture with provenance."""
    from harnesscheck.loopback.record import record_command

    raise typer.Exit(record_command(backend=backend, scenario=scenario, out=out))


@app.command()
def drift(
    backend: Annotated[Optional[list[str]], typer.Option("--backend", "-b", help="claude-code | codex")] = None,
) -> None:
    """Compare stored fixtures with fresh loopback recordings by event shape."""
    from harnesscheck.loopback.drift import drift_command

    raise typer.Exit(drift_command(backends=backend or []))


@app.command()
def schema() -> None:
    """Print the JSON Schema of AgentOutcome."""
    from harnesscheck.contracts import outcome_schema_json

    typer.echo(outcome_schema_json(), nl=False)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
