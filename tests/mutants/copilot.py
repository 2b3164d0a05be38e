"""Known-bad backends built on the copilot transport (see __init__.py), run against the kit's
mocked Copilot (kit/copilot_adapter.py)."""

from __future__ import annotations

from harnesscheck.backends.copilot import CopilotLLM, CopilotTransport, TokenSource
from harnesscheck.backends.llm import LLMError
from harnesscheck.core.contracts import ErrorClass
from tests.mutants import mutant_spec

M = "tests.mutants.copilot"


class _RetryingLLM(CopilotLLM):
    def _authorized(self, call):
        cred = self.tokens.current()
        for attempt in range(5):
            try:
                return call(cred)
            except LLMError as err:
                if err.error_class is not ErrorClass.auth or attempt == 4:
                    raise


class RetriesEvery401(CopilotTransport):
    """Sends a request Copilot refused with 401 again and again with the same token (no refresh, no cap of one)."""

    def __init__(self, spec, settings, **kwargs):
        super().__init__(spec, settings, **kwargs)
        self.llm = _RetryingLLM(self.tokens, settings, model=settings.model)


class _ChatOnlyLLM(CopilotLLM):
    def routes(self, deadline=None):
        return {model: "chat_completions" for model in super().routes(deadline)}


class RoutesEveryModelToChatCompletions(CopilotTransport):
    """Ignores supported_endpoints: a model Copilot serves only on /v1/messages is sent to /chat/completions."""

    def __init__(self, spec, settings, **kwargs):
        super().__init__(spec, settings, **kwargs)
        self.llm = _ChatOnlyLLM(self.tokens, settings, model=settings.model)


class _NoCacheSource(TokenSource):
    def current(self):
        with self._lock:
            self._cred = self._fetch()
            return self._cred


class ExchangesTheTokenPerRequest(CopilotTransport):
    """Exchanges the GitHub login for a new Copilot token before every request instead of caching it."""

    def __init__(self, spec, settings, **kwargs):
        super().__init__(spec, settings, **kwargs)
        self.tokens = _NoCacheSource(self.tokens._github_token, settings)
        self.llm = CopilotLLM(self.tokens, settings, model=settings.model)


class _NamingLLM(CopilotLLM):
    def _authorized(self, call):
        cred = self.tokens.current()
        try:
            return super()._authorized(call)
        except LLMError as err:
            if err.error_class is ErrorClass.auth:
                err.message = f"{err.message} (rejected credential: {cred.token})"
            raise


class NamesTheRejectedCredential(CopilotTransport):
    """Puts the credential Copilot rejected into the auth error, to help debugging: a secret in an error."""

    def __init__(self, spec, settings, **kwargs):
        super().__init__(spec, settings, **kwargs)
        self.llm = _NamingLLM(self.tokens, settings, model=settings.model)


retries_every_401 = mutant_spec("copilot", M, RetriesEvery401)
routes_every_model_to_chat_completions = mutant_spec("copilot", M, RoutesEveryModelToChatCompletions)
exchanges_the_token_per_request = mutant_spec("copilot", M, ExchangesTheTokenPerRequest)
names_the_rejected_credential = mutant_spec("copilot", M, NamesTheRejectedCredential)
