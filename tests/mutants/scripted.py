"""Known-bad in-process backends, each the fake reference with one defect (see __init__.py)."""

from __future__ import annotations

import os
import time

from harnesscheck.backends.fake import FakeTransport
from harnesscheck.backends.registry import get_spec
from harnesscheck.core.contracts import Capability, Cost, CostSource, ErrorClass, ModelVerdict, Usage
from tests.mutants import mutant_spec

M = "tests.mutants.scripted"
STALL_CAP_S = 20.0  # a real defect would stall for an hour; the self-test only needs "too long"


def _ok(text):
    from harnesscheck.choke.dispatch import ToolResult

    return ToolResult(ok=True, text=text)


class FollowsSymlinks(FakeTransport):
    """Reads files itself after a lexical `..` check, and open() follows symlinks."""

    def call_tool(self, call, request, trace, session_id):
        path = str(call.args.get("path", ""))
        if call.name == "read_file" and "\x00" not in path and not os.path.isabs(path):
            full = os.path.normpath(os.path.join(request.scope.root, path))
            if full.startswith(str(request.scope.root) + os.sep) and os.path.isfile(full):
                with open(full, encoding="utf-8", errors="replace") as fh:
                    return _ok(fh.read())
        return super().call_tool(call, request, trace, session_id)


class PrefixCheckWithoutSeparator(FakeTransport):
    """Confines absolute paths with str.startswith(root): `work-secrets` passes as `work`."""

    def call_tool(self, call, request, trace, session_id):
        path = str(call.args.get("path", ""))
        if call.name == "read_file" and os.path.isabs(path) and "\x00" not in path:
            real = os.path.realpath(path)
            if real.startswith(str(request.scope.root)) and os.path.isfile(real):
                with open(real, encoding="utf-8", errors="replace") as fh:
                    return _ok(fh.read())
        return super().call_tool(call, request, trace, session_id)


class IgnoresTheTimeout(FakeTransport):
    """Waits for the model however long it stalls: the deadline is never checked."""

    def wait(self, seconds, deadline, cancel):
        return super().wait(min(seconds, STALL_CAP_S), float("inf"), cancel)


class IgnoresCancellation(FakeTransport):
    """Never looks at the host's cancel event."""

    def wait(self, seconds, deadline, cancel):
        return super().wait(min(seconds, STALL_CAP_S), deadline, None)


class NoTurnCap(FakeTransport):
    """Ignores max_iters: a model that never stops runs on (until an internal cap of 40)."""

    def run_session(self, request, **kwargs):
        return super().run_session(request.model_copy(update={"max_iters": 40}), **kwargs)


class SumsUsagePerStreamedLine(FakeTransport):
    """Adds up the usage of every streamed chunk, though each repeats the message's total."""

    def fold_usage(self, usage_events):
        total = Usage()
        for _, usage in usage_events:
            total = total + usage
        return total


class ReadsServedModelFromHelper(FakeTransport):
    """Takes the served model from the last model that reported usage, helpers included."""

    def served_model(self, state):
        return state.all_models[-1] if state.all_models else super().served_model(state)


class FabricatesADollarCost(FakeTransport):
    """Prices tokens with a guessed rate though no vendor or price table gave a figure."""

    def cost(self, state):
        tokens = sum(u.input + u.output for _, u in state.usage_events)
        return Cost(usd=round(tokens * 3e-6, 6), source=CostSource.api)


class AlwaysSaysModelMatches(FakeTransport):
    """Reports every served model as a match for the requested one."""

    def verdict(self, requested, served):
        return ModelVerdict.match


class RetriesA401(FakeTransport):
    """Retries an auth failure three times (a lockout in the making)."""

    def on_model_error(self, turn, index, log):
        if turn.error is ErrorClass.auth:
            for _ in range(3):
                time.sleep(0.01)
                log.model_calls += 1
        return turn.error


class RateLimitIsFinal(FakeTransport):
    """Treats a 429 as final: not retryable."""

    def run_session(self, request, **kwargs):
        outcome = super().run_session(request, **kwargs)
        if outcome.error_class is ErrorClass.rate_limit:
            outcome = outcome.model_copy(update={"retryable": False})
        return outcome


class OverloadIsFinal(FakeTransport):
    """Treats 529 overloaded as final: not retryable."""

    def run_session(self, request, **kwargs):
        outcome = super().run_session(request, **kwargs)
        if outcome.error_class is ErrorClass.overloaded:
            outcome = outcome.model_copy(update={"retryable": False})
        return outcome


class QuotaIsRetryable(FakeTransport):
    """Files an exhausted quota under rate_limit, so hosts retry it forever."""

    def on_model_error(self, turn, index, log):
        return ErrorClass.rate_limit if turn.error is ErrorClass.quota else turn.error


class EchoesSecretsInErrors(FakeTransport):
    """Copies the upstream's error text, secrets and all, into the outcome."""

    def error_message(self, turn, error):
        return turn.error_message or error.value


class DropsLoopRefusals(FakeTransport):
    """Refusals reach the model but never the outcome: the host cannot see them."""

    def record_refusal(self, state, call, result):
        pass


class ToolResultsNeverReachTheModel(FakeTransport):
    """Runs the tool but shows the model an empty result."""

    def call_tool(self, call, request, trace, session_id):
        result = super().call_tool(call, request, trace, session_id)
        return type(result)(ok=result.ok, text="", code=result.code, truncated=result.truncated)


class WritesWithoutDispatch(FakeTransport):
    """Writes files itself (no read-only check, no resolution): reads still go through dispatch."""

    def call_tool(self, call, request, trace, session_id):
        if call.name == "write_file":
            path = os.path.join(request.scope.root, str(call.args.get("path", "")))
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(str(call.args.get("content", "")))
            return _ok("written")
        return super().call_tool(call, request, trace, session_id)


class ReadsThroughHardLinks(FakeTransport):
    """Refuses writes through hard links but reads them (the reference's rule before issue 19):
    an in-tree hard link to an outside file hands the model the outside bytes."""

    def call_tool(self, call, request, trace, session_id):
        result = super().call_tool(call, request, trace, session_id)
        if call.name == "read_file" and not result.ok and result.code == "hardlink_outside":
            with open(os.path.join(request.scope.root, str(call.args.get("path", ""))), encoding="utf-8") as fh:
                return _ok(fh.read())
        return result


class OffersAShellTool(FakeTransport):
    """Offers the model a `bash` tool beside the scope's tools."""

    def offered_tools(self, request):
        return [*super().offered_tools(request), "bash"]


class OneTraceForAllSessions(FakeTransport):
    """Writes every session's records under the first session's id."""

    def run_session(self, request, **kwargs):
        first = getattr(self, "_first_id", None) or request.session_id
        self._first_id = first
        outcome = super().run_session(request, **kwargs)
        if request.run_dir is not None and (request.run_dir / "trace.jsonl").is_file():
            import json

            path = request.run_dir / "trace.jsonl"
            records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            path.write_text("".join(json.dumps({**r, "session": first}) + "\n" for r in records))
        return outcome


class AcceptsToolsInComplete(FakeTransport):
    """complete() silently drops the tools it was given instead of declining."""

    def complete(self, prompt, *, tools=None, **kwargs):
        return super().complete(prompt, tools=None, **kwargs)


class LabelsItselfWrongly(FakeTransport):
    """Reports its outcomes under another backend's name."""

    def run_session(self, request, **kwargs):
        return super().run_session(request, **kwargs).model_copy(update={"backend": "api"})


class AuthIsRetryable(FakeTransport):
    """Files an auth failure under rate_limit: hosts retry into a lockout."""

    def on_model_error(self, turn, index, log):
        return ErrorClass.rate_limit if turn.error is ErrorClass.auth else turn.error


class NetworkErrorsAreUnknown(FakeTransport):
    """Leaves connection failures unclassified."""

    def on_model_error(self, turn, index, log):
        return ErrorClass.unknown if turn.error is ErrorClass.network else turn.error


class ReturnsWholeFiles(FakeTransport):
    """Gives the model the whole file after dispatch allowed the read: no bound, no marker."""

    def call_tool(self, call, request, trace, session_id):
        result = super().call_tool(call, request, trace, session_id)
        if call.name == "read_file" and result.ok and result.truncated:
            with open(os.path.join(request.scope.root, call.args["path"]), encoding="utf-8") as fh:
                return _ok(fh.read())
        return result


class RefusesEveryWrite(FakeTransport):
    """Refuses every write, allowed or not (a scope that is useless for real work)."""

    def call_tool(self, call, request, trace, session_id):
        if call.name in ("write_file", "edit_file"):
            from harnesscheck.choke.dispatch import ToolResult

            return ToolResult(ok=False, text="refused: read_only: writes are off", code="read_only")
        return super().call_tool(call, request, trace, session_id)


class NeverReportsTheServedModel(FakeTransport):
    """Drops the served model the API reported."""

    def served_model(self, state):
        return None


class NeverComparesTheServedModel(FakeTransport):
    """Reports the served model but never compares it with the requested one (the seed's and the
    Agent SDK binding's way), and does not claim served-model reporting: verdict `unverified`,
    and a wrong model answers on under `fail`."""

    def verdict(self, requested, served):
        return ModelVerdict.unverified


class IgnoresTheSystemPrompt(FakeTransport):
    """Claims a system-prompt channel but never passes the system prompt on."""

    def system_prompt(self, request):
        return None


class LacksComplete(FakeTransport):
    """Has no complete(): not a Transport."""

    complete = None


class IgnoresTheMismatchPolicy(FakeTransport):
    """Reads HARNESS_MODEL_MISMATCH as `warn` whatever the host set: a wrong model answers on."""

    def __init__(self, spec, settings=None):
        super().__init__(spec, settings)
        self.settings = self.settings.model_copy(update={"model_mismatch": "warn"})


class ClaimsAlmostNothing(FakeTransport):
    """Declares no capability at all (a thin claim hoping for a green column) and names the requested
    model as the served one, a `match` it never saw."""

    def served_model(self, state):
        return state.requested or super().served_model(state)


follows_symlinks = mutant_spec("fake", M, FollowsSymlinks)
prefix_check_without_separator = mutant_spec("fake", M, PrefixCheckWithoutSeparator)
ignores_the_timeout = mutant_spec("fake", M, IgnoresTheTimeout)
ignores_cancellation = mutant_spec("fake", M, IgnoresCancellation)
no_turn_cap = mutant_spec("fake", M, NoTurnCap)
sums_usage_per_streamed_line = mutant_spec("fake", M, SumsUsagePerStreamedLine)
reads_served_model_from_helper = mutant_spec("fake", M, ReadsServedModelFromHelper)
fabricates_a_dollar_cost = mutant_spec("fake", M, FabricatesADollarCost)
always_says_model_matches = mutant_spec("fake", M, AlwaysSaysModelMatches)
retries_a_401 = mutant_spec("fake", M, RetriesA401)
rate_limit_is_final = mutant_spec("fake", M, RateLimitIsFinal)
quota_is_retryable = mutant_spec("fake", M, QuotaIsRetryable)
echoes_secrets_in_errors = mutant_spec("fake", M, EchoesSecretsInErrors)
drops_loop_refusals = mutant_spec("fake", M, DropsLoopRefusals)
tool_results_never_reach_the_model = mutant_spec("fake", M, ToolResultsNeverReachTheModel)
writes_without_dispatch = mutant_spec("fake", M, WritesWithoutDispatch)
reads_through_hard_links = mutant_spec("fake", M, ReadsThroughHardLinks)
offers_a_shell_tool = mutant_spec("fake", M, OffersAShellTool)
one_trace_for_all_sessions = mutant_spec("fake", M, OneTraceForAllSessions)
accepts_tools_in_complete = mutant_spec("fake", M, AcceptsToolsInComplete)
labels_itself_wrongly = mutant_spec("fake", M, LabelsItselfWrongly)
auth_is_retryable = mutant_spec("fake", M, AuthIsRetryable)
network_errors_are_unknown = mutant_spec("fake", M, NetworkErrorsAreUnknown)
returns_whole_files = mutant_spec("fake", M, ReturnsWholeFiles)
refuses_every_write = mutant_spec("fake", M, RefusesEveryWrite)
never_reports_the_served_model = mutant_spec("fake", M, NeverReportsTheServedModel)
# it does not claim served_model_reporting (so the served-model checks that require it skip): only
# the guard check, which every backend runs, can see that the model it names was never compared
never_compares_the_served_model = mutant_spec(
    "fake",
    M,
    NeverComparesTheServedModel,
    capabilities=get_spec("fake").capabilities - {Capability.served_model_reporting},
)
lacks_complete = mutant_spec("fake", M, LacksComplete)
ignores_the_system_prompt = mutant_spec("fake", M, IgnoresTheSystemPrompt)
overload_is_final = mutant_spec("fake", M, OverloadIsFinal)
ignores_the_mismatch_policy = mutant_spec("fake", M, IgnoresTheMismatchPolicy)


class ChecksTheRunDirLexically(FakeTransport):
    """Refuses a run dir inside the worktree by its spelling only (the seed's `harnesscheck
    run` check): `<x>/../work/run` and a symlinked alias of the worktree get through."""

    def session_run_dir(self, request):
        run_dir = os.path.abspath(request.run_dir) if request.run_dir else None
        root = str(request.scope.root)
        if run_dir is None:
            return super().session_run_dir(request)
        if run_dir == root or run_dir.startswith(root + os.sep):
            from harnesscheck.contain.rundir import RunDirError

            raise RunDirError(f"the run dir {run_dir} is inside the worktree", "choose another")
        os.makedirs(run_dir, exist_ok=True)
        from pathlib import Path

        return Path(run_dir)


checks_the_run_dir_lexically = mutant_spec("fake", M, ChecksTheRunDirLexically)
claims_almost_nothing = mutant_spec("fake", M, ClaimsAlmostNothing, capabilities=frozenset())


class IgnoresTheHostPolicy(FakeTransport):
    """Runs every tool call on the scope alone: the request's policy and approver are never
    consulted (a backend written before the host had a policy)."""

    def call_tool(self, call, request, trace, session_id):
        from harnesscheck.choke.dispatch import dispatch

        return dispatch(call.name, dict(call.args), request.scope, trace, session_id=session_id)


class ApprovalCoversTheTool(FakeTransport):
    """Remembers an approval by tool name: once the approver said yes to one write_file, every
    later write_file is approved without asking, whatever its arguments."""

    def call_tool(self, call, request, trace, session_id):
        engine = request.policy_engine(session_id)
        if engine is not None and engine.approver is not None and not getattr(engine, "_by_tool", None):
            ask, said_yes = engine.approver, set()

            def by_tool(req):
                if req.tool in said_yes:
                    return True
                answer = ask(req)
                if answer is True or getattr(answer, "approve", False):
                    said_yes.add(req.tool)
                return answer

            engine.approver, engine._by_tool = by_tool, True
        return super().call_tool(call, request, trace, session_id)


class RunsPastThePolicyLimit(FakeTransport):
    """Never ends a session at a policy limit: the calls past it are refused, but the session
    goes on and ends ok, so the host takes unfinished work for done."""

    def policy_limit_reached(self, engine):
        return None


ignores_the_host_policy = mutant_spec("fake", M, IgnoresTheHostPolicy)
approval_covers_the_tool = mutant_spec("fake", M, ApprovalCoversTheTool)
runs_past_the_policy_limit = mutant_spec("fake", M, RunsPastThePolicyLimit)


class IgnoresRequestOptions(FakeTransport):
    """Accepts any request option and runs the session without it (the option is silently lost)."""

    def run_session(self, request, **kwargs):
        return super().run_session(request.model_copy(update={"options": None}), **kwargs)


ignores_request_options = mutant_spec("fake", M, IgnoresRequestOptions)


class ReportsUsagePerChunk(FakeTransport):
    """Emits a usage event for every streamed chunk that repeats its message's usage: the host's
    running total counts a message as often as its stream repeated it."""

    def consume(self, event, state, on_text):
        super().consume(event, state, on_text)
        request = getattr(self._current, "request", None)
        if event.kind == "usage" and event.usage is not None and request is not None:
            request.events(request.session_id)("usage", usage=event.usage.model_dump())

    def run_session(self, request, **kwargs):
        import threading

        if not hasattr(self, "_current"):
            self._current = threading.local()
        self._current.request = request
        return super().run_session(request, **kwargs)


reports_usage_per_chunk = mutant_spec("fake", M, ReportsUsagePerChunk)
