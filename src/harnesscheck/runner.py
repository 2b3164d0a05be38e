"""`harnesscheck run`: one session through the registry, a run report, a short summary.

Contract (doc/SPEC-report.md, "The run command"):
- Settings come from the HARNESS_* environment (and the HARNESS_* lines of ./.env), then the
  command-line options override them: `--backend`, `--model`, `--timeout`, and `--cli`
  (else HARNESS_BACKEND_CLI) for the binary. No auto-detection, no fallback.
- The tools are scoped to `--root`, read-only unless `--write`.
- RUN_REPORT.md and RUN_REPORT.json go into `--run-dir` (default: a fresh private temp dir,
  never inside the worktree).
- Exit codes: 0 the session ended ok; 1 the backend failed (any other status); 2 usage
  error (bad option, unknown backend, no root); 3 environment fault (CLI missing or
  unsupported, no credentials). A HarnessError prints its message and fix on stderr.
"""

from __future__ import annotations

import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

EXIT_OK, EXIT_BACKEND_FAILED, EXIT_USAGE, EXIT_ENVIRONMENT = 0, 1, 2, 3


def _err(text: str) -> None:
    print(text, file=sys.stderr)


def run_command(
    *,
    backend: str,
    root: Path,
    prompt: str,
    timeout: float | None = None,
    model: str | None = None,
    cli: Path | None = None,
    write: bool = False,
    run_dir: Path | None = None,
    as_json: bool = False,
) -> int:
    """Run one session and write its report. Returns the process exit code."""
    from harnesscheck.config import Settings
    from harnesscheck.contracts import AgentSessionRequest, HarnessError
    from harnesscheck.envpolicy import redact
    from harnesscheck.registry import get_spec, resolve_provider
    from harnesscheck.report import ReportFacts, write_report
    from harnesscheck.scope import ToolScope

    root = Path(root).expanduser()
    if not root.is_dir():
        _err(f"error: --root {root} is not a directory\n  fix: pass the worktree the tools are scoped to")
        return EXIT_USAGE
    root = root.resolve()
    if timeout is not None and timeout <= 0:
        _err("error: --timeout must be a positive number of seconds")
        return EXIT_USAGE
    if not prompt.strip():
        _err("error: --prompt is empty")
        return EXIT_USAGE

    try:
        dotenv = Path.cwd() / ".env"
        settings = Settings.from_env(dotenv=dotenv if dotenv.is_file() else None)
        update: dict = {"backend": backend}
        if model:
            update["model"] = model
        if timeout is not None:
            update["timeout_s"] = float(timeout)
        if cli is not None:
            update["cli"] = Path(cli).expanduser().absolute()
        settings = settings.model_copy(update=update)
        spec = get_spec(backend)
        transport = resolve_provider(settings)
    except HarnessError as exc:
        _err(f"error: {exc.message}" + (f"\n  fix: {exc.fix}" if exc.fix else ""))
        return int(getattr(exc, "exit_code", EXIT_ENVIRONMENT))

    if run_dir is None:
        run_dir = Path(tempfile.mkdtemp(prefix=f"harnesscheck-run-{spec.id}-"))
    run_dir = Path(run_dir).expanduser().absolute()
    try:
        run_dir.relative_to(root)
        inside = True
    except ValueError:
        inside = False
    if inside:
        _err(f"error: --run-dir {run_dir} is inside the worktree {root}\n  fix: choose a run dir outside --root")
        return EXIT_USAGE
    run_dir.mkdir(parents=True, exist_ok=True)

    scope = ToolScope(root=root, read_only=not write)
    request = AgentSessionRequest(
        prompt=prompt,
        scope=scope,
        model=settings.model,
        timeout_s=settings.timeout_s,
        run_dir=run_dir,
    )
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    if hasattr(transport, "audit_worktree"):
        transport.audit_worktree = True  # the transport audits; let it diff the worktree too
        before = None
    else:
        before = _audit_before(spec, root)
    try:
        outcome = transport.run_session(request)
    except HarnessError as exc:
        _err(f"error: {exc.message}" + (f"\n  fix: {exc.fix}" if exc.fix else ""))
        return int(getattr(exc, "exit_code", EXIT_ENVIRONMENT))
    if outcome.audit is None and before is not None:
        outcome.audit = _audit_after(spec, root, run_dir, write, before)

    if not outcome.backend:
        outcome.backend = spec.id
    cli_version = outcome.cli_version or getattr(transport, "cli_version", None)
    facts = ReportFacts.from_spec(
        spec,
        cli_version=cli_version,
        cli_path=str(settings.cli) if settings.cli else None,
        root=str(root),
        read_only=not write,
        requested_model=settings.model,
        timeout_s=settings.timeout_s,
        started_at=started,
        run_dir=str(run_dir),
    )
    md_path, json_path = write_report(run_dir, facts, outcome)

    if as_json:
        print(redact(outcome.model_dump_json(indent=2)))
        _err(f"report: {md_path}")
    else:
        status = outcome.status.value + (f" ({outcome.error_class.value})" if outcome.error_class else "")
        print(f"{spec.id}: {status} in {outcome.duration_s:.1f} s")
        if outcome.audit is not None:
            from harnesscheck.report import verdict_line

            print(f"  {verdict_line(facts, outcome)}")
        if outcome.message:
            print(f"  {redact(outcome.message)}")
        if outcome.text:
            excerpt = outcome.text if len(outcome.text) <= 2000 else outcome.text[:2000] + " …"
            print(redact(excerpt))
        print(f"report: {md_path}")
    if outcome.audit is not None and not outcome.audit.clean:
        _err("audit: FLAGGED: " + ", ".join(sorted({f.code for f in outcome.audit.flags})))
        return EXIT_BACKEND_FAILED
    return EXIT_OK if outcome.ok else EXIT_BACKEND_FAILED


def _audit_before(spec, root: Path):
    """For harness backends: the worktree snapshot and instruction files before the session."""
    from harnesscheck.contracts import Kind

    if spec.kind is not Kind.harness:
        return None
    from harnesscheck.audit import find_instruction_files, snapshot_tree

    return snapshot_tree(root), find_instruction_files(root)


def _audit_after(spec, root: Path, run_dir: Path, write: bool, before):
    """Audit the CLI's event log (<run dir>/events.jsonl) against the run's facts; None when
    the transport kept no event log. A failing audit is reported, never silently skipped."""
    from harnesscheck.audit import RunFacts, audit_events, snapshot_tree
    from harnesscheck.bridge.spec import summarize_trace
    from harnesscheck.contracts import AuditFlag, AuditVerdict, Capability
    from harnesscheck.providers._eventlog import EVENT_LOG_NAME

    events = run_dir / EVENT_LOG_NAME
    if not events.is_file():
        return None
    worktree_before, instruction_files = before
    facts = RunFacts(
        scope_root=root,
        read_only=not write,
        builtin_tools_off=spec.supports(Capability.builtin_tools_off),
        bridge=summarize_trace(run_dir / "bridge-trace.jsonl"),
        session_cwd=run_dir / "cwd",
        worktree_before=worktree_before,
        worktree_after=snapshot_tree(root),
        instruction_files=instruction_files,
    )
    try:
        return audit_events(events, spec.cli_name or spec.id, facts)
    except Exception as exc:  # noqa: BLE001 - an audit that cannot run must say so, not pass
        return AuditVerdict(clean=False, flags=[AuditFlag(code="audit_failed", detail=f"{type(exc).__name__}: {exc}")])
