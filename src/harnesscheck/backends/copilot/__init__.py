"""Provider `copilot`: GitHub Copilot as an api provider (doc/SPEC-copilot.md).

The host owns the tool loop, exactly as for `api` (CopilotTransport is an ApiTransport); what
differs is the credential and the wire:

- Login: the GitHub OAuth device flow (RFC 8628), `harnesscheck login copilot`; the GitHub
  token is stored in harnesscheck's own auth.json (authstore.py, mode 0600).
- Credential: the GitHub token is exchanged for a short-lived Copilot token, cached until its
  expiry - 120 s; when the exchange endpoint rejects the login (401/403/404) the GitHub token
  itself is the bearer (direct mode). Both behind `TokenSource.current()`. A 401 from Copilot
  refreshes once for every concurrent session (single flight) and the request is sent once
  more, only with a new credential; a second 401 ends the session blocked as auth.
- Routing: `GET /models` lists each model's `supported_endpoints`; a model goes to the
  Anthropic Messages codec (`/v1/messages`), else Responses (`/responses`), else Chat
  Completions (`/chat/completions`) of harnesscheck.backends.llm. A model not listed, or listed only on
  endpoints harnesscheck does not speak, is model_unavailable before any request.
- Headers: `Editor-Version`, `Editor-Plugin-Version`, `Copilot-Integration-Id` (settings),
  `X-GitHub-Api-Version`, `Openai-Intent`, `x-initiator` (`user` for the first
  request of a user turn, `agent` for the tool loop's follow-ups), `Copilot-Vision-Request`
  when a message holds an image, `anthropic-beta` on the messages route.

No secret (GitHub token, Copilot token, device code) is ever printed, logged, traced or put
in an error: every message passes `llm.scrub` with both tokens. Every URL is a setting
(HARNESS_COPILOT_URL, HARNESS_GITHUB_URL, HARNESS_GITHUB_API_URL), so tests use mocks.
"""

from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from harnesscheck import __version__
from harnesscheck.backends.api import ApiTransport
from harnesscheck.backends.llm import LLM, LLMError, Reply, classify, scrub
from harnesscheck.core.config import Settings
from harnesscheck.core.contracts import AuthUnavailable, Cost, CostSource, ErrorClass, HarnessError, ProviderSpec

PROVIDER_ID = "copilot"
USER_AGENT = f"harnesscheck/{__version__}"
GITHUB_API_VERSION = "2026-06-01"
OPENAI_INTENT = "conversation-edits"
ANTHROPIC_BETA = "interleaved-thinking-2025-05-14"
#: A Copilot token is used until this many seconds before its `expires_at`.
EXPIRY_MARGIN_S = 120.0
#: RFC 8628 3.5: `slow_down` adds 5 seconds to the polling interval, for this and every later poll.
SLOW_DOWN_S = 5.0
DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
HTTP_TIMEOUT_S = 30.0
_sleep = time.sleep  # the device flow's wait between polls (tests replace it: they never sleep)
#: supported_endpoints entry -> codec, in order of preference (a model's native protocol first).
ENDPOINT_MODES: tuple[tuple[str, str], ...] = (
    ("/v1/messages", "anthropic_messages"),
    ("/responses", "responses"),
    ("/chat/completions", "chat_completions"),
)
#: A model listed without supported_endpoints is served on the classic endpoint.
LEGACY_MODE = "chat_completions"
#: The exchange endpoint's answers that mean "not for this login" (then: direct bearer).
REJECTED = (401, 403, 404)


class LoginFailed(HarnessError):
    """The device flow ended without a token (expired, denied, or GitHub refused it)."""

    error_class = ErrorClass.auth
    exit_code = 3


def _http(timeout: float = HTTP_TIMEOUT_S) -> Any:
    import httpx

    from harnesscheck.backends.llm import tls_context

    return httpx.Client(timeout=timeout, verify=tls_context(), follow_redirects=False)


def _json(response: Any) -> dict:
    try:
        data = response.json()
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


# ---------------------------------------------------------------------------------------
# Login: the OAuth device flow (RFC 8628)


@dataclass(frozen=True)
class DeviceCode:
    device_code: str  # a secret: never shown
    user_code: str  # shown to the user, with the URL
    verification_uri: str
    interval: float
    expires_in: float

    def __repr__(self) -> str:
        return f"DeviceCode(user_code={self.user_code!r}, verification_uri={self.verification_uri!r})"


def request_device_code(settings: Settings, http: Any) -> DeviceCode:
    """Step 1: POST <github>/login/device/code {client_id, scope}."""
    url = settings.github_url.rstrip("/") + "/login/device/code"
    try:
        response = http.post(
            url, data={"client_id": settings.copilot_client_id, "scope": "read:user"}, headers={"Accept": "application/json", "User-Agent": USER_AGENT}
        )
    except Exception as exc:
        raise LoginFailed(f"copilot login: cannot reach {url} ({type(exc).__name__})", "check the network, or HARNESS_GITHUB_URL") from None
    data = _json(response)
    if response.status_code != 200 or not data.get("device_code") or not data.get("user_code"):
        what = str(data.get("error") or f"HTTP {response.status_code}")
        raise LoginFailed(
            f"copilot login: GitHub refused the device code request: {scrub(what, ())}",
            "check HARNESS_COPILOT_CLIENT_ID (a GitHub OAuth app with the device flow enabled)",
        )
    return DeviceCode(
        device_code=str(data["device_code"]),
        user_code=str(data["user_code"]),
        verification_uri=str(data.get("verification_uri") or settings.github_url.rstrip("/") + "/login/device"),
        interval=max(1.0, float(data.get("interval") or 5)),
        expires_in=max(1.0, float(data.get("expires_in") or 900)),
    )


def poll_for_token(
    settings: Settings, http: Any, code: DeviceCode, *, sleep: Callable[[float], None] | None = None, clock: Callable[[], float] = time.monotonic
) -> str:
    """Step 2: poll <github>/login/oauth/access_token every `interval` seconds until GitHub
    answers with a token. `authorization_pending`: poll again; `slow_down`: the interval grows
    by 5 s (or to GitHub's new interval, if larger) for every later poll; `expired_token`, the
    code's lifetime running out, `access_denied` or any other error: LoginFailed."""
    url = settings.github_url.rstrip("/") + "/login/oauth/access_token"
    interval = code.interval
    deadline = clock() + code.expires_in
    form = {"client_id": settings.copilot_client_id, "device_code": code.device_code, "grant_type": DEVICE_GRANT}
    secrets = (code.device_code,)
    sleep = sleep or _sleep
    while True:
        if clock() + interval > deadline:
            raise LoginFailed("copilot login: the code expired before it was entered", "run `harnesscheck login copilot` again")
        sleep(interval)
        try:
            response = http.post(url, data=form, headers={"Accept": "application/json", "User-Agent": USER_AGENT})
        except Exception as exc:
            raise LoginFailed(f"copilot login: cannot reach {url} ({type(exc).__name__})", "check the network, then log in again") from None
        data = _json(response)
        token = data.get("access_token")
        if isinstance(token, str) and token:
            return token
        error = str(data.get("error") or f"HTTP {response.status_code}")
        if error == "authorization_pending":
            continue
        if error == "slow_down":
            interval = max(interval + SLOW_DOWN_S, float(data.get("interval") or 0))
            continue
        if error == "expired_token":
            raise LoginFailed("copilot login: the code expired before it was entered", "run `harnesscheck login copilot` again")
        if error == "access_denied":
            raise LoginFailed("copilot login: the request was denied on GitHub", "run `harnesscheck login copilot` again and approve it")
        raise LoginFailed(f"copilot login: GitHub answered {scrub(error, secrets)}", "run `harnesscheck login copilot` again")


def login(
    settings: Settings,
    *,
    on_prompt: Callable[[str, str], None],
    http: Any = None,
    sleep: Callable[[float], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Path:
    """The whole device flow: show the code (`on_prompt(user_code, verification_uri)`), wait
    for the user, store the GitHub token under `copilot` in auth.json (0600). Returns its path."""
    from harnesscheck.backends.authstore import AuthStore
    from harnesscheck.core.paths import auth_dir

    own = http is None
    http = http or _http()
    try:
        code = request_device_code(settings, http)
        on_prompt(code.user_code, code.verification_uri)
        token = poll_for_token(settings, http, code, sleep=sleep, clock=clock)
    finally:
        if own:
            http.close()
    store = AuthStore(settings.auth_dir or auth_dir())
    path = store.put(PROVIDER_ID, {"type": "oauth", "access": token, "refresh": "", "expires": 0})
    _forget_sources()  # a new login: no cached credential of the old one is used again
    return path


def login_command(settings: Settings | None = None, *, echo: Callable[[str], None] = print, **kwargs) -> int:
    """`harnesscheck login copilot`: prints the URL and the code, never a token."""
    settings = settings or Settings.from_env(dotenv=Path.cwd() / ".env")

    def prompt(user_code: str, uri: str) -> None:
        echo(f"To log in to GitHub Copilot, open {uri} and enter the code {user_code}")
        echo("waiting for GitHub ...")

    path = login(settings, on_prompt=prompt, **kwargs)
    echo(f"logged in: the GitHub token is stored in {path} (mode 600)")
    return 0


# ---------------------------------------------------------------------------------------
# The credential: exchanged Copilot token, or the GitHub token as a direct bearer


@dataclass(frozen=True)
class Credential:
    token: str
    mode: str  # "exchange" | "direct"
    expires_at: float | None = None  # epoch seconds; None: no expiry known (direct)

    def __repr__(self) -> str:  # never shows the token
        return f"Credential(mode={self.mode!r}, expires_at={self.expires_at!r})"

    def usable(self, now: float) -> bool:
        return self.expires_at is None or now < self.expires_at - EXPIRY_MARGIN_S


class TokenSource:
    """The Copilot credential of one stored GitHub login, shared by every session using it.

    `current()` exchanges the GitHub token at `<github api>/copilot_internal/v2/token` and
    caches the Copilot token until `expires_at - 120 s`; if that endpoint rejects the login
    (401/403/404) the first time, the source is in direct mode for good: the GitHub token is
    the bearer. `refresh(stale)` after a 401: under one lock, so concurrent sessions refresh
    once (whoever comes second gets the credential the first one fetched); None when there is
    nothing to refresh (direct mode). A login the exchange accepted and now rejects raises
    auth (no fallback: the login itself was revoked). `clock` is injectable (epoch seconds)."""

    def __init__(self, github_token: str, settings: Settings, *, clock: Callable[[], float] = time.time, http: Callable[[], Any] | None = None):
        self._github_token = github_token
        self._url = settings.github_api_url.rstrip("/") + "/copilot_internal/v2/token"
        self._clock = clock
        self._http = http or _http
        self._lock = threading.Lock()
        self._cred: Credential | None = None
        self._mode: str | None = None  # decided by the first exchange
        self.exchanges = 0  # requests made to the exchange endpoint (evidence for tests)

    def __repr__(self) -> str:
        return f"TokenSource(mode={self._mode!r})"

    def secrets(self) -> tuple[str, ...]:
        cred = self._cred
        return (self._github_token,) + ((cred.token,) if cred is not None else ())

    def current(self) -> Credential:
        with self._lock:
            if self._cred is None or not self._cred.usable(self._clock()):
                self._cred = self._fetch()
            return self._cred

    def refresh(self, stale: Credential) -> Credential | None:
        with self._lock:
            cred = self._cred
            if cred is not None and cred.token != stale.token and cred.usable(self._clock()):
                return cred  # another session refreshed meanwhile
            if stale.mode == "direct":
                return None
            self._cred = None
            self._cred = self._fetch()
            return self._cred

    def _fetch(self) -> Credential:
        if self._mode == "direct":
            return Credential(self._github_token, "direct")
        self.exchanges += 1
        secrets = (self._github_token,)
        try:
            with self._http() as http:
                response = http.get(
                    self._url,
                    headers={
                        "Authorization": f"token {self._github_token}",
                        "Accept": "application/json",
                        "User-Agent": USER_AGENT,
                        "X-GitHub-Api-Version": GITHUB_API_VERSION,
                    },
                )
        except Exception as exc:
            raise LLMError(ErrorClass.network, f"copilot token exchange: connection error ({type(exc).__name__})") from None
        data = _json(response)
        status = response.status_code
        if status in REJECTED:
            if self._mode is None:
                self._mode = "direct"
                return Credential(self._github_token, "direct")
            raise LLMError(
                ErrorClass.auth, f"copilot token exchange: HTTP {status}: GitHub rejected the stored login; fix: harnesscheck login copilot", status_code=status
            )
        if status != 200:
            error_class = classify(status, data)
            message = scrub(f"copilot token exchange: HTTP {status}: {str(data.get('message') or '')[:200]}", secrets)
            raise LLMError(error_class if error_class is not ErrorClass.unknown else ErrorClass.server_error, message, status_code=status)
        token, expires_at = data.get("token"), data.get("expires_at")
        if not isinstance(token, str) or not token or not isinstance(expires_at, (int, float)):
            raise LLMError(ErrorClass.protocol, "copilot token exchange: the answer has no token and expires_at")
        self._mode = "exchange"
        return Credential(token, "exchange", float(expires_at))


_SOURCES: dict[tuple[str, str], TokenSource] = {}
_SOURCES_LOCK = threading.Lock()


def shared_source(github_token: str, settings: Settings) -> TokenSource:
    """One TokenSource per (login, exchange endpoint) in this process: every transport and
    session of the host shares its cache and its single-flight refresh."""
    key = (hashlib.sha256(github_token.encode()).hexdigest(), settings.github_api_url)
    with _SOURCES_LOCK:
        source = _SOURCES.get(key)
        if source is None:
            source = _SOURCES[key] = TokenSource(github_token, settings)
        return source


def _forget_sources() -> None:
    with _SOURCES_LOCK:
        _SOURCES.clear()


# ---------------------------------------------------------------------------------------
# Routing and headers


def route_for(entry: dict) -> str | None:
    """The codec for one `GET /models` entry: by its supported_endpoints, in ENDPOINT_MODES
    order; the classic chat endpoint when the entry lists none; None when it lists only
    endpoints harnesscheck does not speak."""
    endpoints = entry.get("supported_endpoints")
    if not isinstance(endpoints, list):
        return LEGACY_MODE
    listed = {str(e).rstrip("/") for e in endpoints}
    for endpoint, mode in ENDPOINT_MODES:
        if endpoint in listed:
            return mode
    return None


def _blocks_of(messages: list[dict]) -> list[dict]:
    return [b for m in messages if isinstance(m.get("content"), list) for b in m["content"] if isinstance(b, dict)]


def has_image(messages: list[dict]) -> bool:
    return any(b.get("type") in ("image", "image_url", "input_image") for b in _blocks_of(messages))


def initiator(messages: list[dict]) -> str:
    """`agent` when the request follows up on tool results (the host's tool loop), else `user`."""
    last = messages[-1] if messages else {}
    content = last.get("content")
    if last.get("role") == "user" and isinstance(content, list):
        if any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content):
            return "agent"
    return "user"


def turn_headers(messages: list[dict], mode: str) -> dict[str, str]:
    """The per-request Copilot headers of one model turn."""
    headers = {"x-initiator": initiator(messages)}
    if has_image(messages):
        headers["Copilot-Vision-Request"] = "true"
    if mode == "anthropic_messages":
        headers["anthropic-beta"] = ANTHROPIC_BETA
    return headers


BASE_HEADERS = {"User-Agent": USER_AGENT, "X-GitHub-Api-Version": GITHUB_API_VERSION, "Openai-Intent": OPENAI_INTENT}


def base_headers(settings: Settings) -> dict[str, str]:
    """Every Copilot request's headers: BASE_HEADERS and the editor identity of the settings
    (`Editor-Version`, `Editor-Plugin-Version`, `Copilot-Integration-Id`)."""
    return {
        **BASE_HEADERS,
        "Editor-Version": settings.copilot_editor_version,
        "Editor-Plugin-Version": f"harnesscheck/{__version__}",
        "Copilot-Integration-Id": settings.copilot_integration_id,
    }


class CopilotLLM:
    """LLM-shaped (`create`, `close`, `model`, `backoff_s`): one Copilot account, each model
    routed to its codec, the Copilot headers, and the one refresh on 401."""

    def __init__(
        self,
        tokens: TokenSource,
        settings: Settings,
        *,
        model: str | None = None,
        sleep: Callable[[float], None] | None = None,
        retries: int | None = None,
        max_tokens: int | None = None,
    ):
        self.tokens = tokens
        self.settings = settings
        self.model = model
        self.base_url = settings.copilot_url.rstrip("/")
        self._codec_kwargs: dict[str, Any] = {"sleep": sleep}
        if retries is not None:
            self._codec_kwargs["retries"] = retries
        if max_tokens is not None:
            self._codec_kwargs["max_tokens"] = max_tokens
        self._backoff_s: float | None = None
        self._codecs: dict[str, tuple[str, LLM]] = {}
        self._routes: dict[str, str | None] | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"CopilotLLM(base_url={self.base_url!r}, model={self.model!r})"

    @property
    def backoff_s(self) -> float | None:
        return self._backoff_s

    @backoff_s.setter
    def backoff_s(self, value: float) -> None:
        self._backoff_s = value
        with self._lock:
            for _, codec in self._codecs.values():
                codec.backoff_s = value

    def close(self) -> None:
        with self._lock:
            for _, codec in self._codecs.values():
                codec.close()
            self._codecs.clear()

    # -- the pieces ------------------------------------------------------------------------

    def codec(self, mode: str, cred: Credential) -> LLM:
        """The mode's LLM client for this credential (rebuilt when the credential changed)."""
        with self._lock:
            held = self._codecs.get(mode)
            if held is not None and held[0] == cred.token:
                return held[1]
            codec = LLM(
                mode,
                api_key=cred.token,
                base_url=self.base_url,
                model=self.model,
                bearer=True,
                default_headers=base_headers(self.settings),
                **self._codec_kwargs,
            )
            if self._backoff_s is not None:
                codec.backoff_s = self._backoff_s
            self._codecs[mode] = (cred.token, codec)
            if held is not None:
                held[1].close()
            return codec

    def routes(self, deadline: float | None = None) -> dict[str, str | None]:
        """model id -> codec mode (None: no endpoint harnesscheck speaks), from `GET /models`,
        fetched once per transport."""
        if self._routes is None:
            data = self._authorized(lambda cred: self._get_models(cred, deadline))
            routes: dict[str, str | None] = {}
            for entry in data.get("data") or []:
                if isinstance(entry, dict) and isinstance(entry.get("id"), str):
                    routes[entry["id"]] = route_for(entry)
            self._routes = routes
        return self._routes

    def _get_models(self, cred: Credential, deadline: float | None) -> dict:
        timeout = HTTP_TIMEOUT_S if deadline is None else max(0.1, min(HTTP_TIMEOUT_S, deadline - time.monotonic()))
        try:
            with _http(timeout) as http:
                response = http.get(self.base_url + "/models", headers={**base_headers(self.settings), "Authorization": f"Bearer {cred.token}"})
        except Exception as exc:
            raise LLMError(ErrorClass.network, f"copilot GET /models: connection error ({type(exc).__name__})") from None
        data = _json(response)
        if response.status_code != 200:
            error_class = classify(response.status_code, data)
            raise LLMError(error_class, f"copilot GET /models: HTTP {response.status_code}", status_code=response.status_code)
        return data

    def _authorized(self, call: Callable[[Credential], Any]) -> Any:
        """call(credential); after a 401, once more with a refreshed credential, only if the
        refresh gave a different one. A second 401 is raised: auth, blocked, never retried."""
        try:
            cred = self.tokens.current()
            try:
                return call(cred)
            except LLMError as err:
                if err.error_class is not ErrorClass.auth or err.status_code != 401:
                    raise
                fresh = self.tokens.refresh(cred)
                if fresh is None or fresh.token == cred.token:
                    raise
                return call(fresh)
        except LLMError as err:
            err.message = scrub(err.message, self.tokens.secrets())
            err.args = (err.message,)
            raise

    # -- the LLM interface -------------------------------------------------------------------

    def create(
        self,
        *,
        messages: list[dict],
        system: str | None = None,
        tools: list[dict] | None = None,
        model: str | None = None,
        max_tokens: int | None = None,
        on_text: Callable[[str], None] | None = None,
        timeout_s: float | None = None,
        abort: Any = None,
        deadline: float | None = None,
    ) -> Reply:
        """One streamed turn through the model's codec (LLM.create), with the Copilot headers."""
        model = model or self.model
        if not model:
            raise LLMError(ErrorClass.invalid_request, "no model given (set HARNESS_BACKEND_MODEL or pass model)")
        routes = self.routes(deadline)
        if model not in routes:
            offered = ", ".join(sorted(routes)[:20]) or "none"
            raise LLMError(ErrorClass.model_unavailable, f"copilot offers no model {model!r} (GET /models lists: {offered})")
        mode = routes[model]
        if mode is None:
            raise LLMError(ErrorClass.model_unavailable, f"copilot serves {model!r} only on endpoints harnesscheck does not speak")
        headers = turn_headers(messages, mode)
        return self._authorized(
            lambda cred: self.codec(mode, cred).create(
                messages=messages,
                system=system,
                tools=tools,
                model=model,
                max_tokens=max_tokens,
                on_text=on_text,
                timeout_s=timeout_s,
                abort=abort,
                deadline=deadline,
                extra_headers=headers,
            )
        )


# ---------------------------------------------------------------------------------------
# The transport


class CopilotTransport(ApiTransport):
    """The `copilot` backend: the api backend's host-owned tool loop over a CopilotLLM."""

    def __init__(
        self, spec: ProviderSpec, settings: Settings, *, sleep: Callable[[float], None] | None = None, retries: int | None = None, max_tokens: int | None = None
    ):
        from harnesscheck.backends.authstore import AuthStore
        from harnesscheck.core.paths import auth_dir

        self.spec = spec
        self.settings = settings
        store = AuthStore(settings.auth_dir or auth_dir())
        record = store.get(PROVIDER_ID)
        token = (record or {}).get("access")
        if not isinstance(token, str) or not token:
            raise AuthUnavailable(spec.id, f"no GitHub login stored in {store.path}", "run: harnesscheck login copilot")
        self.api_mode = "copilot"
        self.tokens = shared_source(token, settings)
        self.llm = CopilotLLM(self.tokens, settings, model=settings.model, sleep=sleep, retries=retries, max_tokens=max_tokens)
        self.base_url = self.llm.base_url
        self._tool_cache = {}

    def __repr__(self) -> str:
        return f"CopilotTransport(base_url={self.base_url!r}, model={self.settings.model!r})"

    def model_metadata(self, model: str | None):
        """The model as the metadata snapshot lists it under Copilot (`github-copilot`): its
        context window bounds a request here; its prices are never applied (a subscription)."""
        from harnesscheck.core.models import metadata_provider, model_info

        return model_info(metadata_provider(PROVIDER_ID, None), model)

    def _finish(self, state, start, status, error_class=None, message=""):
        """As the api backend's, but Copilot is a subscription: no token is priced (cost stays
        unknown, never a figure from the API price table)."""
        outcome = super()._finish(state, start, status, error_class, message)
        return outcome.model_copy(update={"cost": Cost(usd=None, source=CostSource.none, partial=outcome.cost.partial)})
