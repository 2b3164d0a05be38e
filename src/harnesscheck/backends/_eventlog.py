"""The CLI's stdout event log, kept in the run dir for the post-run audit.

`LoggedParser` wraps a transport's pure parser: every stdout line is appended to
`<run dir>/events.jsonl` (mode 0600) before the parser sees it, so the audit can make its
own streaming pass later. Constant memory; the file is closed when the outcome is built.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

EVENT_LOG_NAME = "events.jsonl"


class LoggedParser:
    def __init__(self, parser: Any, path: Path):
        self.parser = parser
        self.path = Path(path)
        from harnesscheck.contain.rundir import create_private

        fd = create_private(self.path, append=True)  # fresh, O_EXCL|O_NOFOLLOW, 0600
        self._fh = os.fdopen(fd, "w", encoding="utf-8", errors="replace")

    def feed(self, line: str):
        if not self._fh.closed:
            self._fh.write(line)
            self._fh.write("\n")
        return self.parser.feed(line)

    def outcome(self, result: Any):
        if not self._fh.closed:
            self._fh.close()
        return self.parser.outcome(result)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.parser, name)


class SessionAudit:
    """The post-run audit of a harness session whose built-ins cannot be switched off.

    `before(ctx, request)` runs before the CLI starts (instruction/config files present,
    and a worktree snapshot when `worktree` is set: it hashes every file, so it is opt-in);
    `after(...)` runs once the process tree is gone and returns the outcome with
    `audit` set. The audit reads the event log this module keeps, the bridge's trace and
    the run's facts; an audit that raises becomes the flag `audit_failed` (never a pass).
    """

    def __init__(self, cli: str, auditor: type | None = None):
        self.cli = cli
        self.auditor = auditor  # an audit.Auditor subclass, or None for the Auditor itself
        self._before: dict[str, tuple] = {}

    def before(self, ctx: Any, request: Any, *, worktree: bool) -> None:
        from harnesscheck.backends.audit import find_instruction_files, snapshot_tree

        root = request.scope.root
        snap = snapshot_tree(root) if worktree else None
        self._before[ctx.session_id] = (request, snap, find_instruction_files(root) if root.is_dir() else [])

    def after(self, ctx: Any, spec: Any, outcome: Any) -> Any:
        from harnesscheck.backends.audit import RunFacts, audit_events, snapshot_tree
        from harnesscheck.core.contracts import AuditFlag, AuditVerdict, Capability

        if ctx.session_id not in self._before:
            return outcome
        request, snap, instruction_files = self._before.pop(ctx.session_id)
        try:
            bridge = None
            if ctx.bridge_trace is not None:
                from harnesscheck.bridge.spec import summarize_trace

                bridge = summarize_trace(ctx.bridge_trace, ctx.session_id)
            facts = RunFacts(
                scope_root=request.scope.root,
                read_only=request.scope.read_only,
                builtin_tools_off=spec.supports(Capability.builtin_tools_off),
                bridge=bridge,
                session_cwd=ctx.cwd,
                worktree_before=snap,
                worktree_after=snapshot_tree(request.scope.root) if snap is not None else None,
                instruction_files=instruction_files,
                policy=request.policy_engine(ctx.session_id) if request.policy is not None else None,
            )
            verdict = audit_events(ctx.run_dir / EVENT_LOG_NAME, self.cli, facts, auditor=self.auditor)
        except Exception as exc:  # noqa: BLE001 - an audit that cannot run must say so, not pass
            verdict = AuditVerdict(clean=False, flags=[AuditFlag(code="audit_failed", detail=f"{type(exc).__name__}: {exc}")])
        return outcome.model_copy(update={"audit": verdict})
