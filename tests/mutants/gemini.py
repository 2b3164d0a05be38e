"""Known-bad backends built on the gemini transport (see __init__.py)."""

from __future__ import annotations

from harnesscheck.backends import gemini
from harnesscheck.backends.gemini import GeminiParser, GeminiTransport
from harnesscheck.core.contracts import OutcomeStatus
from tests.mutants import mutant_spec

M = "tests.mutants.gemini"


class LeavesBuiltinsOn(GeminiTransport):
    """Writes no `tools.core`: the CLI's built-ins (read_file, glob, google_web_search...) stay offered."""

    def invocation(self, ctx, request, cli, *, tool_less):
        inv = super().invocation(ctx, request, cli, tool_less=tool_less)
        path = ctx.run_dir / "config-homes" / "home" / ".gemini" / "settings.json"
        import json

        settings = json.loads(path.read_text(encoding="utf-8"))
        settings.pop("tools", None)
        path.unlink()
        gemini._write_private(path, json.dumps(settings))
        return inv


class WalksUpForGeminiMd(GeminiTransport):
    """Writes no `context.memoryBoundaryMarkers: []`: gemini loads every GEMINI.md from its scratch
    cwd up to the nearest git root (a run dir inside a checkout)."""

    #: Judged without the reference's sandbox: in one, the CLI finds no worktree or checkout above its cwd to read (the defect is
    #: harmless there); the check must catch the defect itself, as in a backend with no sandbox.
    sandboxed = False

    def invocation(self, ctx, request, cli, *, tool_less):
        import json

        inv = super().invocation(ctx, request, cli, tool_less=tool_less)
        path = ctx.run_dir / "config-homes" / "home" / ".gemini" / "settings.json"
        settings = json.loads(path.read_text(encoding="utf-8"))
        settings.pop("context", None)
        path.unlink()
        gemini._write_private(path, json.dumps(settings))
        return inv


class ForgetsSkipTrust(GeminiTransport):
    """Drops `--skip-trust`: headless gemini in an untrusted folder prints one stderr line and exits."""

    def invocation(self, ctx, request, cli, *, tool_less):
        inv = super().invocation(ctx, request, cli, tool_less=tool_less)
        inv.argv = [a for a in inv.argv if a != "--skip-trust"]
        return inv


class PassesTheHostEnvThrough(GeminiTransport):
    """Hands the CLI the host's whole environment (its GEMINI_API_KEY, HOME, NODE_OPTIONS...)."""

    def invocation(self, ctx, request, cli, *, tool_less):
        inv = super().invocation(ctx, request, cli, tool_less=tool_less)
        inv.injections.update({k: v for k, v in self.parent_env.items() if k not in inv.injections})
        return inv


class _ExitZeroParser(GeminiParser):
    def outcome(self, result):
        out = super().outcome(result)
        if self.result is None and result.exit_code == 0 and result.signal is None:
            return out.model_copy(update={"status": OutcomeStatus.ok, "error_class": None, "retryable": False})
        return out


class TrustsExitZero(GeminiTransport):
    """Reads success from exit 0: a stream that ended without a `result` event is an ok session."""

    def make_parser(self, ctx, request, *, tool_less, on_text=None):
        parser = super().make_parser(ctx, request, tool_less=tool_less, on_text=on_text)
        parser.parser.__class__ = _ExitZeroParser
        return parser


leaves_builtins_on = mutant_spec("gemini", M, LeavesBuiltinsOn)
forgets_skip_trust = mutant_spec("gemini", M, ForgetsSkipTrust)
walks_up_for_gemini_md = mutant_spec("gemini", M, WalksUpForGeminiMd)
passes_the_host_env_through = mutant_spec("gemini", M, PassesTheHostEnvThrough)
trusts_exit_zero = mutant_spec("gemini", M, TrustsExitZero)
