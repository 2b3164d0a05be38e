"""Known-bad backends built on the codex transport (see __init__.py)."""

from __future__ import annotations

import os

from harnesscheck.backends._eventlog import SessionAudit
from harnesscheck.backends.audit import Auditor, shell_path_words
from harnesscheck.backends.codex import CodexTransport
from harnesscheck.core.contracts import Capability
from tests.mutants import mutant_spec

M = "tests.mutants.codex"


class HidesItsBuiltins(CodexTransport):
    """Declares neither built-ins off nor an audit of them: native tool use would go unseen."""


class ForgetsNativeToolCalls(CodexTransport):
    """Drops the vendor built-in calls it saw from the outcome."""

    def _finish(self, outcome, ctx, result, info, redact):
        return super()._finish(outcome, ctx, result, info, redact).model_copy(update={"native_tool_calls": []})


class FailsAnUnverifiedModel(CodexTransport):
    """Treats a served model codex never reports as a mismatch: every guarded session fails."""

    def judge(self, outcome, ctx, *, tool_less):
        from harnesscheck.core.contracts import ErrorClass, ModelVerdict, OutcomeStatus

        outcome = super().judge(outcome, ctx, tool_less=tool_less)
        if outcome.ok and outcome.requested_model and outcome.model_verdict is ModelVerdict.unverified and self.settings.model_mismatch == "fail":
            return outcome.model_copy(
                update={
                    "status": OutcomeStatus.error,
                    "error_class": ErrorClass.invalid_request,
                    "message": "served model unverified (HARNESS_MODEL_MISMATCH=fail)",
                }
            )
        return outcome


class _PathOnlyAuditor(Auditor):
    """Judges a shell by the files it names, joined to the worktree: `~/.ssh/id_rsa` becomes
    `<worktree>/~/.ssh/id_rsa` (inside), `grep -r token` and `rm -rf build` name nothing outside."""

    def _native_used(self, name, args, *, shell, write, known):
        if not shell:
            return super()._native_used(name, args, shell=shell, write=write, known=known)
        self._native(name)
        cmd = args.get("command") if isinstance(args, dict) else None
        root = self.binder.root
        for word in shell_path_words(cmd):
            real = os.path.realpath(os.path.join(root, word))
            if not (real == root or real.startswith(root + os.sep)):
                self.flag("native_file_outside_scope", f"{name}: {word!r}")


class AuditsShellsByThePathsTheyName(CodexTransport):
    """Lets a shell command pass its audit unless it names a path outside the worktree, with `~`
    taken as a worktree folder: a read of ~/.ssh/id_rsa, a path-less grep and a delete all pass."""

    def __init__(self, spec, settings=None, **kwargs):
        super().__init__(spec, settings, **kwargs)
        self._audit = SessionAudit("codex", auditor=_PathOnlyAuditor)


class LoadsTheProjectDocs(CodexTransport):
    """Leaves `project_doc_max_bytes = 0` out of its config.toml: codex reads every AGENTS.md from
    the nearest git root above its scratch cwd down to it (a run dir inside a checkout)."""

    #: Judged without the reference's sandbox: in one, the CLI finds no worktree or checkout above its cwd to read (the defect is
    #: harmless there); the check must catch the defect itself, as in a backend with no sandbox.
    sandboxed = False

    def invocation(self, ctx, request, cli, *, tool_less):
        from harnesscheck.backends import codex

        inv = super().invocation(ctx, request, cli, tool_less=tool_less)
        path = ctx.run_dir / "config-homes" / "codex_home" / "config.toml"
        text = path.read_text(encoding="utf-8").replace(codex.PROJECT_DOCS_OFF_TOML + "\n", "")
        path.unlink()
        codex._write_private(path, text)
        return inv


hides_its_builtins = mutant_spec(
    "codex",
    M,
    HidesItsBuiltins,
    capabilities=frozenset(c for c in mutant_spec("codex", M, HidesItsBuiltins).capabilities if c is not Capability.native_tools_audited),
)
forgets_native_tool_calls = mutant_spec("codex", M, ForgetsNativeToolCalls)
fails_an_unverified_model = mutant_spec("codex", M, FailsAnUnverifiedModel)
audits_shells_by_the_paths_they_name = mutant_spec("codex", M, AuditsShellsByThePathsTheyName)
loads_the_project_docs = mutant_spec("codex", M, LoadsTheProjectDocs)
