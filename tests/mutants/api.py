"""Known-bad api backends: the api transport in one api_mode with one defect in its request
builder or its usage accounting (see __init__.py). Each swaps its LLM client's class for a
subclass that overrides one step (`request_kwargs`, the request builder; `_consume`, the stream
reader), so everything else is the reference."""

from __future__ import annotations

from harnesscheck.backends.api import ApiTransport
from harnesscheck.backends.llm import LLM
from tests.mutants import mutant_spec

M = "tests.mutants.api"


def _without_cache_control(value):
    if isinstance(value, dict):
        return {k: _without_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_without_cache_control(v) for v in value]
    return value


class _NoBreakpoints(LLM):
    def request_kwargs(self, *args, **kwargs):
        return _without_cache_control(super().request_kwargs(*args, **kwargs))


class _EveryMessageMarked(LLM):
    def request_kwargs(self, *args, **kwargs):
        body = super().request_kwargs(*args, **kwargs)
        for message in body["messages"]:
            if isinstance(message["content"], list) and message["content"]:
                message["content"][-1] = {**message["content"][-1], "cache_control": {"type": "ephemeral"}}
            elif isinstance(message["content"], str):
                message["content"] = [{"type": "text", "text": message["content"], "cache_control": {"type": "ephemeral"}}]
        return body


class _DropsCacheTokens(LLM):
    def _consume(self, stream, turn):
        super()._consume(stream, turn)
        turn.reply.usage = turn.reply.usage.model_copy(update={"cache_read": 0, "cache_write": 0})


class _CachedAsInput(LLM):
    def _consume(self, stream, turn):
        super()._consume(stream, turn)
        u = turn.reply.usage
        turn.reply.usage = u.model_copy(update={"input": u.input + u.cache_read + u.cache_write, "cache_read": 0, "cache_write": 0})


class _DropsReasoning(LLM):
    def _consume(self, stream, turn):
        super()._consume(stream, turn)
        turn.reply.usage = turn.reply.usage.model_copy(update={"reasoning": 0})


class _TakesTheHostAuthToken(LLM):
    def client(self):
        import os

        token = os.environ.get("ANTHROPIC_AUTH_TOKEN")
        if token and self._client is None:  # as SDKs that read both variables send both headers
            self._default_headers["Authorization"] = f"Bearer {token}"
        return super().client()


class _WaitsSilently(LLM):
    def create(self, **kwargs):
        from harnesscheck.backends.llm import retry_notices

        token = retry_notices.set(None)  # the backoff still waits, it just says nothing
        try:
            return super().create(**kwargs)
        finally:
            retry_notices.reset(token)


def _with_llm(llm_class):
    def __init__(self, *args, **kwargs):
        ApiTransport.__init__(self, *args, **kwargs)
        self.llm.__class__ = llm_class

    return __init__


class DropsCacheBreakpoints(ApiTransport):
    """Sends Anthropic Messages requests without prompt-cache breakpoints: every turn pays the full input price."""

    __init__ = _with_llm(_NoBreakpoints)


class MarksEveryMessageForCaching(ApiTransport):
    """Puts a cache breakpoint on every message, past Anthropic's four a request (the API refuses such a request)."""

    __init__ = _with_llm(_EveryMessageMarked)


class DropsCacheTokens(ApiTransport):
    """Reads Anthropic's usage without cache_read_input_tokens / cache_creation_input_tokens: cache hits vanish from usage and cost."""

    __init__ = _with_llm(_DropsCacheTokens)


class CountsCachedTokensAsInput(ApiTransport):
    """Chat Completions: takes prompt_tokens as fresh input, ignoring prompt_tokens_details.cached_tokens (overcharged at the input price)."""

    __init__ = _with_llm(_CachedAsInput)


class DropsReasoningTokens(ApiTransport):
    """Responses: ignores output_tokens_details.reasoning_tokens, so reasoning is reported as 0."""

    __init__ = _with_llm(_DropsReasoning)


class SendsTheHostAuthToken(ApiTransport):
    """Sends the host's ANTHROPIC_AUTH_TOKEN as a bearer token beside the session's key (as SDKs that read both variables did)."""

    __init__ = _with_llm(_TakesTheHostAuthToken)


class RetriesSilently(ApiTransport):
    """Waits out its backoff before each retry of an overloaded upstream without a word: the host sees silence, not "retrying in N s"."""

    __init__ = _with_llm(_WaitsSilently)


class _ForgetsThinking(LLM):
    def _consume(self, stream, turn):
        super()._consume(stream, turn)
        turn.think_order.clear()  # the thought was streamed; the reply keeps none of it


class DropsThinking(ApiTransport):
    """Streams the model's thought but drops it from the transcript: the next request after a
    tool turn goes without the signed thinking block."""

    __init__ = _with_llm(_ForgetsThinking)


class BillsCacheReadsAsInput(ApiTransport):
    """Prices cache reads at the input rate: a cached session is billed several times over."""

    def session_cost(self, model, usage, *, partial):
        return super().session_cost(model, usage.model_copy(update={"input": usage.input + usage.cache_read, "cache_read": 0}), partial=partial)


class SendsOverLongRequests(ApiTransport):
    """Sends a request its model's context window cannot hold: it never checks the window."""

    def over_context(self, *args, **kwargs):
        return None


drops_cache_breakpoints = mutant_spec("api/anthropic_messages", M, DropsCacheBreakpoints)
marks_every_message_for_caching = mutant_spec("api/anthropic_messages", M, MarksEveryMessageForCaching)
drops_cache_tokens = mutant_spec("api/anthropic_messages", M, DropsCacheTokens)
counts_cached_tokens_as_input = mutant_spec("api/chat_completions", M, CountsCachedTokensAsInput)
drops_reasoning_tokens = mutant_spec("api/responses", M, DropsReasoningTokens)
sends_the_host_auth_token = mutant_spec("api/anthropic_messages", M, SendsTheHostAuthToken)
retries_silently = mutant_spec("api/responses", M, RetriesSilently)
sends_over_long_requests = mutant_spec("api/chat_completions", M, SendsOverLongRequests)
drops_thinking = mutant_spec("api/anthropic_messages", M, DropsThinking)
bills_cache_reads_as_input = mutant_spec("api/anthropic_messages", M, BillsCacheReadsAsInput)
