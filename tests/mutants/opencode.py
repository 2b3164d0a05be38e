"""Known-bad backends built on the opencode transport (see __init__.py)."""

from __future__ import annotations

from harnesscheck.backends.opencode import OpencodeParser, OpencodeTransport
from tests.mutants import mutant_spec

M = "tests.mutants.opencode"


class LeavesItsBuiltinsOn(OpencodeTransport):
    """Writes the bridge into opencode's config but never switches its ten built-ins off."""

    def session_config(self, *, bridge, provider, model):
        config = super().session_config(bridge=bridge, provider=provider, model=model)
        config.pop("tools", None)
        config.pop("permission", None)
        return config


class KeepsTheHostHome(OpencodeTransport):
    """Gives opencode the host's HOME and XDG dirs (the user's ~/.config/opencode, auth.json, ~/.ssh)."""

    def invocation(self, ctx, request, cli, *, tool_less):
        inv = super().invocation(ctx, request, cli, tool_less=tool_less)
        for name in ("HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME"):
            inv.injections.pop(name, None)
        return inv


class _ExitZeroParser(OpencodeParser):
    def outcome(self, result):
        out = super().outcome(result)
        if self.terminal is None and result.exit_code == 0 and out.error_class is not None:
            return out.model_copy(update={"status": "ok", "error_class": None, "message": "", "text": self.texts.text()})
        return out


class ReadsSuccessFromExitZero(OpencodeTransport):
    """Takes exit 0 as success when the stream ended without a final step_finish."""

    def make_parser(self, ctx, request, *, tool_less, on_text=None):
        from harnesscheck.backends._eventlog import EVENT_LOG_NAME, LoggedParser

        parser = _ExitZeroParser(requested_model=request.model or self.settings.model)
        parser.on_text = on_text
        return LoggedParser(parser, ctx.run_dir / EVENT_LOG_NAME)


class _DeafToStderrParser(OpencodeParser):
    def feed_err(self, line):
        return None


class WaitsOutItsOwnRetries(OpencodeTransport):
    """Reads stdout only: a 429 that opencode retries forever (printed only in its log on
    stderr) runs into the deadline and is reported as a timeout, not a retryable rate limit."""

    def make_parser(self, ctx, request, *, tool_less, on_text=None):
        from harnesscheck.backends._eventlog import EVENT_LOG_NAME, LoggedParser

        parser = _DeafToStderrParser(requested_model=request.model or self.settings.model)
        parser.on_text = on_text
        return LoggedParser(parser, ctx.run_dir / EVENT_LOG_NAME)


leaves_its_builtins_on = mutant_spec("opencode", M, LeavesItsBuiltinsOn)
keeps_the_host_home = mutant_spec("opencode", M, KeepsTheHostHome)
reads_success_from_exit_zero = mutant_spec("opencode", M, ReadsSuccessFromExitZero)
waits_out_its_own_retries = mutant_spec("opencode", M, WaitsOutItsOwnRetries)
