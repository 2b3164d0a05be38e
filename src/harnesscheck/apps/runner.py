"""`harnesscheck run`: one session through the registry, a run report, a short summary.

Contract (doc/SPEC-report.md, "The run command"):
- Settings come from the HARNESS_* environment (and the HARNESS_* lines of ./.env), then the
  command-line options override them: `--model`, `--timeout`, and `--cli` (else
  HARNESS_BACKEND_CLI) for the binary. The backend: `--backend`, else HARNESS_BACKEND (the
  environment, then ./.env), else a usage error that prints the .env line to add (exit 2).
  No auto-detection, no fallback.
- The tools are scoped to `--root`, read-only unless `--write`.
- RUN_REPORT.md and RUN_REPORT.json go into `--run-dir` (default: a fresh private temp dir,
  never inside the worktree).
- Retries (RetryPolicy): a session that ends as a transient error (rate_limit, overloaded,
  server_error, network, and only when the outcome says retryable) is run again, at most
  `--retries` more times (0 disables) and sleeping at most `--retry-wait-max` seconds in all.
  The wait is exponential backoff with jitter, never shorter than the outcome's retry_after_s;
  a retry-after beyond the remaining budget ends the retries instead. auth, quota and other
  blocking classes are never retried (no retry into a lockout); neither is a timeout (the budget
  is spent) nor, in a --write scope, an attempt that made any tool call (it may have written).
  Attempt 1 runs in the run dir, attempt n in <run dir>/attempt-<n>; RUN_REPORT.json lists every
  attempt under facts.attempts.
- Exit codes: 0 the session ended ok; 1 the backend failed (any other status); 2 usage
  error (bad option, unknown backend, no root); 3 environment fault (CLI missing or
  unsupported, no credentials). A HarnessError prints its message and fix on stderr.
"""

from __future__ import annotations

import contextlib
import random
import sys
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

EXIT_OK, EXIT_BACKEND_FAILED, EXIT_USAGE, EXIT_ENVIRONMENT = 0, 1, 2, 3

#: Error classes `harnesscheck run` retries: transient by nature. Not timeout (the session's
#: budget is spent), not cli_crash (nothing says a crash is transient), never a BLOCKING class.
RUN_RETRY_CLASSES = frozenset({"rate_limit", "overloaded", "server_error", "network"})


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries of transient errors: attempts, total sleep, backoff with jitter."""

    retries: int = 2  # extra attempts after the first; 0 disables retrying
    max_wait_s: float = 120.0  # total sleeping over all retries
    base_delay_s: float = 2.0
    max_delay_s: float = 30.0

    def decide(self, outcome, attempt: int, waited_s: float, *, read_only: bool, rng: Callable[[], float] = random.random) -> tuple[float | None, str]:
        """(seconds to wait before the next attempt, why); None means do not retry."""
        from harnesscheck.core.contracts import BLOCKING, OutcomeStatus

        cls = outcome.error_class
        if outcome.status is OutcomeStatus.ok:
            return None, "ok"
        if outcome.status is not OutcomeStatus.error or cls is None or cls in BLOCKING:
            return None, f"{outcome.status.value}" + (f" ({cls.value})" if cls else "") + " is final"
        if cls.value not in RUN_RETRY_CLASSES or not outcome.retryable:
            return None, f"{cls.value} is not retried"
        if attempt > self.retries:
            return None, f"no retries left ({self.retries} allowed)"
        if not read_only and (outcome.tool_calls or outcome.native_tool_calls):
            return None, "the attempt made tool calls in a writable scope: a rerun could apply them twice"
        delay = min(self.max_delay_s, self.base_delay_s * 2 ** (attempt - 1)) * (0.5 + 0.5 * rng())
        if outcome.retry_after_s is not None and outcome.retry_after_s > delay:
            delay = float(outcome.retry_after_s)
        left = self.max_wait_s - waited_s
        if delay > left:
            return None, f"waiting {delay:.1f} s would exceed the retry wait budget ({left:.1f} s left of {self.max_wait_s:g} s)"
        return delay, f"{cls.value} is transient"


def _err(text: str) -> None:
    print(text, file=sys.stderr)


def run_command(
    *,
    backend: str | None = None,
    root: Path,
    prompt: str,
    timeout: float | None = None,
    model: str | None = None,
    cli: Path | None = None,
    write: bool = False,
    run_dir: Path | None = None,
    as_json: bool = False,
    retry: RetryPolicy | None = None,
    policy_file: Path | None = None,
    events: bool = False,
    approver: Callable | None = None,
    preflight_only: bool = False,
    sleep: Callable[[float], None] = time.sleep,
    rng: Callable[[], float] = random.random,
) -> int:
    """Run one session and write its report. Returns the process exit code."""
    from harnesscheck.apps.report import ReportFacts, write_report
    from harnesscheck.backends.registry import get_spec, resolve_model_name, resolve_provider
    from harnesscheck.contain.envpolicy import redact
    from harnesscheck.core.config import Settings
    from harnesscheck.core.contracts import AgentSessionRequest, HarnessError, SelectionMissing
    from harnesscheck.core.scope import ToolScope

    root = Path(root).expanduser()
    if not root.is_dir():
        _err(f"harnesscheck run: --root {root}: not a directory\n  fix: pass the worktree the tools are scoped to")
        return EXIT_USAGE
    root = root.resolve()
    if timeout is not None and not (0 < timeout < float("inf")):
        _err(f"harnesscheck run: --timeout {timeout:g}: must be a positive, finite number of seconds\n  fix: pass e.g. --timeout 60")
        return EXIT_USAGE
    if not prompt.strip():
        _err("harnesscheck run: --prompt: is empty\n  fix: pass the task as --prompt TEXT")
        return EXIT_USAGE
    try:
        prompt.encode("utf-8")
    except UnicodeEncodeError:
        _err("harnesscheck run: --prompt: not valid UTF-8\n  fix: pass the prompt as UTF-8 text")
        return EXIT_USAGE
    retry = retry or RetryPolicy()
    if retry.retries < 0 or retry.max_wait_s < 0:
        _err("harnesscheck run: --retries and --retry-wait-max must not be negative\n  fix: pass 0 or more")
        return EXIT_USAGE
    if events and as_json:
        _err("harnesscheck run: --events and --json both want stdout\n  fix: pass one of them")
        return EXIT_USAGE
    policy = None
    if policy_file is not None:
        from harnesscheck.core.policy import Policy, PolicyError

        try:
            policy = Policy.load(policy_file)
        except PolicyError as exc:
            _err(f"harnesscheck run: --policy: {exc}\n  fix: correct the file (its schema: doc/policy.schema.json)")
            return EXIT_USAGE
    if approver is None and policy is not None:
        approver = terminal_approver()

    try:
        dotenv = Path.cwd() / ".env"
        settings = Settings.from_env(dotenv=dotenv if dotenv.is_file() else None)
        update: dict = {"backend": backend or settings.backend}
        if not update["backend"]:
            from harnesscheck.backends.registry import known_specs

            raise SelectionMissing(list(known_specs()))
        if model:
            update["model"] = model
        if timeout is not None:
            update["timeout_s"] = float(timeout)
        if cli is not None:
            update["cli"] = Path(cli).expanduser().absolute()
        settings = resolve_model_name(settings.model_copy(update=update))
        spec = get_spec(settings.backend)
        transport = resolve_provider(settings)
    except HarnessError as exc:
        _err(f"harnesscheck run: {exc.message}" + (f"\n  fix: {exc.fix}" if exc.fix else ""))
        return int(getattr(exc, "exit_code", EXIT_ENVIRONMENT))

    if preflight_only:
        from harnesscheck.apps.preflight import preflight

        checked = preflight(
            spec,
            settings,
            AgentSessionRequest(
                prompt=prompt,
                scope=ToolScope(root=root, read_only=not write),
                model=settings.model,
                timeout_s=settings.timeout_s,
                policy=policy,
                approver=approver,
            ),
            transport=transport,
        )
        if as_json:
            print(checked.model_dump_json(indent=2))
        else:
            for item in checked.items:
                print(f"{item.status:4}  {item.topic}: {item.detail}" + (f"\n      fix: {item.fix}" if item.fix and item.status != "ok" else ""))
            print(f"{spec.id}: preflight {'ok' if checked.ok else 'FAILED: the session would not be started'}")
        return EXIT_OK if checked.ok else EXIT_ENVIRONMENT

    from harnesscheck.backends._harness import scratch_dir
    from harnesscheck.contain.rundir import prepare_run_dir

    made_run_dir = run_dir is None
    try:
        # Fresh and private, or verified so; never inside the worktree, checked after
        # resolving '..' and symlinks (a lexical check let `<x>/../wt/run` and aliases in).
        if run_dir is None:
            run_dir = scratch_dir(root, f"harnesscheck-run-{spec.id}-")
        else:
            run_dir = prepare_run_dir(run_dir, forbidden=[root], prefix=f"harnesscheck-run-{spec.id}-")
    except HarnessError as exc:
        _err(f"error: --run-dir: {exc.message}\n  fix: {exc.fix}")
        return EXIT_USAGE

    scope = ToolScope(root=root, read_only=not write)
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    if hasattr(transport, "audit_worktree"):
        transport.audit_worktree = True  # the transport audits; let it diff the worktree too
        before = None
    else:
        before = _audit_before(spec, root)
    attempts: list[dict] = []
    waited = 0.0
    attempt = 0
    while True:
        attempt += 1
        attempt_dir = run_dir if attempt == 1 else run_dir / f"attempt-{attempt}"
        request = AgentSessionRequest(
            prompt=prompt,
            scope=scope,
            model=settings.model,
            timeout_s=settings.timeout_s,
            run_dir=attempt_dir,
            policy=policy,
            approver=approver,
        )
        try:
            if events:
                from harnesscheck.core.events import run_with_events

                outcome = run_with_events(transport, request, lambda e: print(redact(e.json_line()), flush=True))
            else:
                outcome = transport.run_session(request)
        except HarnessError as exc:
            _err(f"harnesscheck run: {exc.message}" + (f"\n  fix: {exc.fix}" if exc.fix else ""))
            if made_run_dir:
                _remove_if_empty(run_dir)
            return int(getattr(exc, "exit_code", EXIT_ENVIRONMENT))
        delay, why = retry.decide(outcome, attempt, waited, read_only=not write, rng=rng)
        record = {
            "attempt": attempt,
            "run_dir": str(attempt_dir),
            "status": outcome.status.value,
            "error_class": outcome.error_class.value if outcome.error_class else None,
            "retryable": outcome.retryable,
            "retry_after_s": outcome.retry_after_s,
            "duration_s": outcome.duration_s,
            "session_id": outcome.session_id,
            "message": redact(outcome.message)[:500],
            "retried": delay is not None,
            "wait_s": round(delay, 3) if delay is not None else None,
            "why": why,
        }
        attempts.append(record)
        if delay is None:
            break
        _err(
            f"{spec.id}: {outcome.status.value} ({outcome.error_class.value}); {why}: retrying in {delay:.1f} s (attempt {attempt + 1} of {retry.retries + 1})"
        )
        sleep(delay)
        waited += delay
    if outcome.audit is None and before is not None:
        outcome.audit = _audit_after(spec, root, attempt_dir, write, before)

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
        attempts=attempts,
    )
    md_path, json_path = write_report(run_dir, facts, outcome)

    if as_json:
        print(redact(outcome.model_dump_json(indent=2)))
        _err(f"report: {md_path}")
    elif events:
        status = outcome.status.value + (f" ({outcome.error_class.value})" if outcome.error_class else "")
        _err(f"{spec.id}: {status} in {outcome.duration_s:.1f} s\nreport: {md_path}")
    else:
        status = outcome.status.value + (f" ({outcome.error_class.value})" if outcome.error_class else "")
        print(f"{spec.id}: {status} in {outcome.duration_s:.1f} s")
        if outcome.audit is not None:
            from harnesscheck.apps.report import verdict_line

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


def terminal_approver(tty_path: str = "/dev/tty") -> Callable | None:
    """The approver `harnesscheck run` uses: a yes/no question on the controlling terminal
    for each approval_required call (tool, path, the first 12 hex digits of its digest), or
    None without a terminal: then such calls are denied (doc/SPEC-policy.md)."""
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        return None
    lock = threading.Lock()

    def approve(request) -> bool:
        where = f" {request.path}" if request.path else ""
        question = f"approve {request.tool}{where} ({request.kind.value}, call {request.digest[:12]})? [y/N] "
        with lock:  # one question at a time, whatever thread asks
            try:
                with open(tty_path, "rb", buffering=0) as tty_in, open(tty_path, "wb", buffering=0) as tty_out:
                    tty_out.write(question.encode("utf-8", "replace"))
                    answer = tty_in.readline(200).decode("utf-8", "replace")
            except OSError:  # a terminal that went away answers no
                return False
            return answer.strip().lower() in ("y", "yes")

    return approve


def _remove_if_empty(run_dir: Path) -> None:
    """A run dir this command made and nothing was written to (the session never started) is
    not left behind in the temp dir; one holding anything (a trace, an attempt) is kept."""
    with contextlib.suppress(OSError):
        run_dir.rmdir()


def _audit_before(spec, root: Path):
    """For harness backends: the worktree snapshot and instruction files before the session."""
    from harnesscheck.core.contracts import Kind

    if spec.kind is not Kind.harness:
        return None
    from harnesscheck.backends.audit import find_instruction_files, snapshot_tree

    return snapshot_tree(root), find_instruction_files(root)


def _audit_after(spec, root: Path, run_dir: Path, write: bool, before):
    """Audit the CLI's event log (<run dir>/events.jsonl) against the run's facts; None when
    the transport kept no event log. A failing audit is reported, never silently skipped."""
    from harnesscheck.backends._eventlog import EVENT_LOG_NAME
    from harnesscheck.backends.audit import RunFacts, audit_events, snapshot_tree
    from harnesscheck.bridge.spec import summarize_trace
    from harnesscheck.core.contracts import AuditFlag, AuditVerdict, Capability

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
