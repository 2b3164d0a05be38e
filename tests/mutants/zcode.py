"""Known-bad backends built on the zcode transport (see __init__.py): the seed
implementation's zcode defects and the hazards its shapes carry."""

from __future__ import annotations

from harnesscheck.backends._eventlog import SessionAudit
from harnesscheck.backends.audit import Auditor
from harnesscheck.backends.zcode import ZcodeParser, ZcodeTransport
from harnesscheck.core.contracts import OutcomeStatus
from tests.mutants import mutant_spec

M = "tests.mutants.zcode"


class LeavesAHugePromptInArgv(ZcodeTransport):
    """Keeps a prompt over 100 000 bytes in `--prompt=` instead of PROMPT.md + `--attach` (E2BIG)."""

    def invocation(self, ctx, request, cli, *, tool_less):
        from harnesscheck.backends.zcode import compose_prompt

        inv = super().invocation(ctx, request, cli, tool_less=tool_less)
        prompt = compose_prompt(request.system, request.prompt, () if tool_less else request.scope.tool_names())
        argv = [a for a in inv.argv if not a.startswith("--prompt=")]
        if "--attach" in argv:
            i = argv.index("--attach")
            del argv[i : i + 2]
        inv.argv = [argv[0], f"--prompt={prompt}", *argv[1:]]
        return inv


class PassesTheHostEnvThrough(ZcodeTransport):
    """Hands zcode the host's whole environment (the seed's `sanitized_env()` was a denylist)."""

    def invocation(self, ctx, request, cli, *, tool_less):
        inv = super().invocation(ctx, request, cli, tool_less=tool_less)
        inv.injections.update({k: v for k, v in self.parent_env.items() if k not in inv.injections})
        return inv


class _LiteralPrefixAuditor(Auditor):
    """The seed's zcode `_audit` for Glob: only the literal prefix before the first `*?[{` is
    bound, and an empty prefix binds nothing."""

    def _paths(self, tool, args):
        if tool == "Glob" and isinstance(args, dict) and isinstance(args.get("pattern"), str):
            pattern = args["pattern"]
            cut = min([pattern.find(c) for c in "*?[{" if c in pattern] or [len(pattern)])
            prefix = pattern[:cut]
            args = {k: v for k, v in args.items() if k != "pattern"}
            if prefix:
                args["pattern"] = prefix
        super()._paths(tool, args)


class AuditsGlobsByTheirLiteralPrefix(ZcodeTransport):
    """Binds a Glob pattern by its literal prefix (the seed's blind spot): `<worktree>/src/**/../../../outside/*`
    passes (its prefix `<worktree>/src/` is inside), and so does `<worktree>/src/{..,lib}/../outside/*`."""

    def __init__(self, spec, settings=None, **kwargs):
        super().__init__(spec, settings, **kwargs)
        self._audit = SessionAudit("zcode", auditor=_LiteralPrefixAuditor)


class _ExitZeroParser(ZcodeParser):
    def _classify(self, result):
        if self.result is None and not self.errors and result.exit_code == 0 and result.signal is None:
            return OutcomeStatus.ok, None, "", None
        return super()._classify(result)


class TrustsExitZero(ZcodeTransport):
    """Counts exit 0 as success when no `result` event came (the stream was cut, nothing said it ended)."""

    def make_parser(self, ctx, request, *, tool_less, on_text=None):
        from harnesscheck.backends._eventlog import EVENT_LOG_NAME, LoggedParser

        parser = _ExitZeroParser(requested_model=self.requested_model(request))
        parser.on_text = on_text
        return LoggedParser(parser, ctx.run_dir / EVENT_LOG_NAME)


class RateLimitIsAuth(ZcodeTransport):
    """Reads Z.AI's 1302 / HTTP 429 as a login failure: blocked, never retried."""

    def make_parser(self, ctx, request, *, tool_less, on_text=None):
        import harnesscheck.backends.zcode as z

        logged = super().make_parser(ctx, request, tool_less=tool_less, on_text=on_text)
        inner = logged.parser
        original = inner._classify

        def classify(result):
            status, cls, message, retry = original(result)
            if cls is z.ErrorClass.rate_limit:
                return z.OutcomeStatus.blocked, z.ErrorClass.auth, message, None
            return status, cls, message, retry

        inner._classify = classify
        return logged


leaves_a_huge_prompt_in_argv = mutant_spec("zcode", M, LeavesAHugePromptInArgv)
passes_the_host_env_through = mutant_spec("zcode", M, PassesTheHostEnvThrough)
audits_globs_by_their_literal_prefix = mutant_spec("zcode", M, AuditsGlobsByTheirLiteralPrefix)
trusts_exit_zero = mutant_spec("zcode", M, TrustsExitZero)
rate_limit_is_auth = mutant_spec("zcode", M, RateLimitIsAuth)
