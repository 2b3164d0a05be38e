"""The copilot provider (doc/SPEC-copilot.md), against respx mocks only: no real GitHub host is
contacted (every URL is a setting pointed at 127.0.0.1:9, where nothing listens, and respx
answers first). Clocks are injected: nothing here sleeps."""

from __future__ import annotations

import json
import os
import stat
import threading
from concurrent.futures import ThreadPoolExecutor

import api_wire as W
import httpx
import pytest
import respx
import respx_httpx2  # noqa: F401  (registers the "httpx2" respx mocker)
from typer.testing import CliRunner

import harnesscheck
from harnesscheck.backends import copilot as C
from harnesscheck.backends.authstore import AuthStore
from harnesscheck.backends.llm import LLMError
from harnesscheck.backends.registry import BUILTIN_SPECS, resolve_provider
from harnesscheck.core.config import Settings
from harnesscheck.core.contracts import AgentSessionRequest, AuthUnavailable, ErrorClass, OutcomeStatus
from harnesscheck.core.scope import ToolScope

ROOT = "http://127.0.0.1:9"
TOKEN_URL = ROOT + "/copilot_internal/v2/token"
NOW = 1_900_000_000.0


@pytest.fixture(autouse=True)
def _fresh_sources():
    C._forget_sources()
    yield
    C._forget_sources()


@pytest.fixture
def settings(tmp_path) -> Settings:
    return Settings(
        backend="copilot",
        model="claude-x",
        copilot_url=ROOT,
        github_url=ROOT,
        github_api_url=ROOT,
        auth_dir=tmp_path / "auth",
        copilot_client_id="hc-test-client",
    )


@pytest.fixture
def gh():
    """respx for httpx: GitHub (device flow, token exchange) and Copilot's GET /models."""
    with respx.mock(assert_all_mocked=True, assert_all_called=False) as r:
        yield r


@pytest.fixture
def wire():
    """respx for the SDKs' httpx2: the codec endpoints."""
    with respx.mock(using="httpx2", assert_all_mocked=True, assert_all_called=False) as r:
        yield r


GITHUB_TOKEN = "gho_hctest" + "a1b2c3d4" * 4


def store_login(settings: Settings, token: str = GITHUB_TOKEN) -> None:
    AuthStore(settings.auth_dir).put("copilot", {"type": "oauth", "access": token, "refresh": "", "expires": 0})


def models(*entries: dict) -> httpx.Response:
    return httpx.Response(200, json={"object": "list", "data": list(entries)})


class Exchange:
    """The token exchange endpoint: mints a new Copilot token per call (or answers `status`)."""

    def __init__(self, ttl: float = 1800.0, statuses: list[int] | None = None):
        self.ttl, self.statuses, self.calls, self.minted = ttl, list(statuses or []), 0, []
        self.lock = threading.Lock()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        with self.lock:
            self.calls += 1
            assert request.headers["authorization"] == f"token {GITHUB_TOKEN}"
            status = self.statuses.pop(0) if self.statuses else 200
            if status != 200:
                return httpx.Response(status, json={"message": "Not Found"})
            token = f"tid=hc{self.calls};exp=1;sku=hc:{os.urandom(8).hex()}"
            self.minted.append(token)
            return httpx.Response(200, json={"token": token, "expires_at": NOW + self.ttl, "refresh_in": 1500})


def session(transport, tmp_path, prompt="Say hi", **kwargs):
    root = tmp_path / "work"
    root.mkdir(parents=True, exist_ok=True)
    (root / "README.md").write_text("hello\n")
    return transport.run_session(
        AgentSessionRequest(prompt=prompt, scope=ToolScope(root=root), run_dir=tmp_path / "run", timeout_s=600, **kwargs)
    )  # only a hang ends it (a loaded machine is slow)


# ---------------------------------------------------------------------------------------
# The device flow (RFC 8628)


class Clock:
    def __init__(self):
        self.now, self.sleeps = 0.0, []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def device_routes(gh, polls: list[dict], *, interval=5, expires_in=900):
    code = gh.post(ROOT + "/login/device/code").mock(
        return_value=httpx.Response(
            200,
            json={
                "device_code": "dc-secret-0123456789",
                "user_code": "ABCD-1234",
                "verification_uri": ROOT + "/login/device",
                "interval": interval,
                "expires_in": expires_in,
            },
        )
    )
    answers = iter(polls)
    token = gh.post(ROOT + "/login/oauth/access_token").mock(side_effect=lambda req: httpx.Response(200, json=next(answers)))
    return code, token


def test_device_flow_waits_through_pending_and_slows_down_by_5_s(gh, settings):
    code, token = device_routes(
        gh,
        [
            {"error": "authorization_pending"},
            {"error": "slow_down"},
            {"error": "authorization_pending"},
            {"access_token": GITHUB_TOKEN, "token_type": "bearer"},
        ],
    )
    clock, shown = Clock(), []
    path = C.login(settings, on_prompt=lambda c, u: shown.append((c, u)), http=httpx.Client(), sleep=clock.sleep, clock=clock)
    assert shown == [("ABCD-1234", ROOT + "/login/device")]
    assert clock.sleeps == [5, 5, 10, 10], "slow_down adds 5 s to this and every later poll"
    form = dict(x.split("=", 1) for x in token.calls[0].request.content.decode().split("&"))
    assert form["grant_type"] == "urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Adevice_code"
    assert form["client_id"] == "hc-test-client" and form["device_code"] == "dc-secret-0123456789"
    assert json.loads(path.read_text())["copilot"]["access"] == GITHUB_TOKEN


def test_slow_down_takes_githubs_new_interval_when_larger(gh, settings):
    device_routes(gh, [{"error": "slow_down", "interval": 30}, {"access_token": GITHUB_TOKEN}])
    clock = Clock()
    C.login(settings, on_prompt=lambda c, u: None, http=httpx.Client(), sleep=clock.sleep, clock=clock)
    assert clock.sleeps == [5, 30]


@pytest.mark.parametrize(
    "answer, words",
    [
        ({"error": "expired_token"}, "expired"),
        ({"error": "access_denied"}, "denied"),
        ({"error": "unsupported_grant_type"}, "unsupported_grant_type"),
    ],
)
def test_device_flow_ends_on_expiry_denial_and_errors(gh, settings, answer, words):
    device_routes(gh, [{"error": "authorization_pending"}, answer])
    clock = Clock()
    with pytest.raises(C.LoginFailed, match=words) as info:
        C.login(settings, on_prompt=lambda c, u: None, http=httpx.Client(), sleep=clock.sleep, clock=clock)
    assert "dc-secret" not in str(info.value)
    assert not (settings.auth_dir / "auth.json").exists()


def test_device_flow_gives_up_when_the_code_expires_while_pending(gh, settings):
    _, token = device_routes(gh, [{"error": "authorization_pending"}] * 10, interval=5, expires_in=12)
    clock = Clock()
    with pytest.raises(C.LoginFailed, match="expired"):
        C.login(settings, on_prompt=lambda c, u: None, http=httpx.Client(), sleep=clock.sleep, clock=clock)
    assert clock.sleeps == [5, 5] and token.call_count == 2, "no poll after the code's lifetime"


def test_login_command_shows_code_and_url_never_a_secret(gh, settings, monkeypatch, tmp_path):
    device_routes(gh, [{"access_token": GITHUB_TOKEN}])
    monkeypatch.setattr(C, "_sleep", lambda s: None)
    for name, value in {"HARNESS_GITHUB_URL": ROOT, "HARNESS_AUTH_DIR": str(settings.auth_dir), "HARNESS_COPILOT_CLIENT_ID": "hc-test-client"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    from harnesscheck.apps.cli import app

    result = CliRunner().invoke(app, ["login", "copilot"])
    assert result.exit_code == 0, result.output
    assert "ABCD-1234" in result.output and ROOT + "/login/device" in result.output
    assert GITHUB_TOKEN not in result.output and "dc-secret" not in result.output
    path = settings.auth_dir / "auth.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert json.loads(path.read_text()) == {"copilot": {"type": "oauth", "access": GITHUB_TOKEN, "refresh": "", "expires": 0}}


def test_login_of_an_unknown_provider_is_a_usage_error():
    from harnesscheck.apps.cli import app

    result = CliRunner().invoke(app, ["login", "nope"])
    assert result.exit_code != 0


# ---------------------------------------------------------------------------------------
# The auth file


def test_auth_file_is_0600_whatever_the_umask_and_keeps_other_providers(settings):
    old = os.umask(0)
    try:
        store = AuthStore(settings.auth_dir)
        store.put("other", {"type": "api", "key": "k-1234567890"})
        store_login(settings)
    finally:
        os.umask(old)
    path = settings.auth_dir / "auth.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert set(json.loads(path.read_text())) == {"copilot", "other"}
    assert [p.name for p in settings.auth_dir.iterdir() if p.name.endswith(".tmp")] == []


def test_a_readable_auth_file_is_refused_with_the_fix(settings):
    store_login(settings)
    path = settings.auth_dir / "auth.json"
    path.chmod(0o644)
    with pytest.raises(AuthUnavailable) as info:
        resolve_provider(settings)
    assert "chmod 600" in info.value.fix and GITHUB_TOKEN not in str(info.value)


def test_a_symlinked_auth_file_is_refused(settings, tmp_path):
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps({"copilot": {"access": GITHUB_TOKEN}}))
    elsewhere.chmod(0o600)
    settings.auth_dir.mkdir(parents=True)
    (settings.auth_dir / "auth.json").symlink_to(elsewhere)
    with pytest.raises(AuthUnavailable):
        resolve_provider(settings)


def test_no_login_is_auth_unavailable_naming_the_login_command(settings):
    with pytest.raises(AuthUnavailable) as info:
        resolve_provider(settings)
    assert "harnesscheck login copilot" in info.value.fix


# ---------------------------------------------------------------------------------------
# The credential: exchange, cache until expiry - 120 s, direct-bearer fallback, single flight


def test_token_is_cached_until_120_s_before_expiry(gh, settings):
    exchange = Exchange(ttl=1000)
    gh.get(TOKEN_URL).mock(side_effect=exchange)
    clock = Clock()
    clock.now = NOW
    source = C.TokenSource(GITHUB_TOKEN, settings, clock=clock)
    first = source.current()
    assert first.mode == "exchange" and first.token == exchange.minted[0]
    clock.now = NOW + 1000 - 121
    assert source.current() is first and exchange.calls == 1
    clock.now = NOW + 1000 - 120
    second = source.current()
    assert exchange.calls == 2 and second.token == exchange.minted[1]


@pytest.mark.parametrize("status", [401, 403, 404])
def test_rejected_exchange_falls_back_to_the_github_token_as_bearer(gh, settings, status):
    exchange = Exchange(statuses=[status])
    gh.get(TOKEN_URL).mock(side_effect=exchange)
    source = C.TokenSource(GITHUB_TOKEN, settings, clock=lambda: NOW)
    cred = source.current()
    assert (cred.mode, cred.token, cred.expires_at) == ("direct", GITHUB_TOKEN, None)
    assert source.current() is cred and source.refresh(cred) is None, "direct mode: nothing to refresh"
    assert exchange.calls == 1


def test_exchange_server_errors_are_not_a_fallback(gh, settings):
    gh.get(TOKEN_URL).mock(return_value=httpx.Response(502, json={"message": "bad gateway"}))
    with pytest.raises(LLMError) as info:
        C.TokenSource(GITHUB_TOKEN, settings).current()
    assert info.value.error_class is ErrorClass.server_error


def test_a_login_revoked_after_a_good_exchange_is_auth_not_a_fallback(gh, settings):
    exchange = Exchange(statuses=[200, 401])
    gh.get(TOKEN_URL).mock(side_effect=exchange)
    source = C.TokenSource(GITHUB_TOKEN, settings, clock=lambda: NOW)
    cred = source.current()
    with pytest.raises(LLMError) as info:
        source.refresh(cred)
    assert info.value.error_class is ErrorClass.auth and "harnesscheck login copilot" in info.value.message


def test_concurrent_refreshes_exchange_once(gh, settings):
    exchange = Exchange()
    gh.get(TOKEN_URL).mock(side_effect=exchange)
    source = C.TokenSource(GITHUB_TOKEN, settings, clock=lambda: NOW)
    stale = source.current()
    barrier = threading.Barrier(8)

    def refresh(_):
        barrier.wait()
        return source.refresh(stale).token

    with ThreadPoolExecutor(8) as pool:
        tokens = set(pool.map(refresh, range(8)))
    assert exchange.calls == 2 and tokens == {exchange.minted[1]}, "eight sessions, one refresh"


# ---------------------------------------------------------------------------------------
# Routing by supported_endpoints, and the Copilot headers


@pytest.mark.parametrize(
    "entry, mode",
    [
        ({"supported_endpoints": ["/v1/messages", "/chat/completions"]}, "anthropic_messages"),
        ({"supported_endpoints": ["/chat/completions", "/responses"]}, "responses"),
        ({"supported_endpoints": ["/chat/completions"]}, "chat_completions"),
        ({}, "chat_completions"),
        ({"supported_endpoints": ["/v1/embeddings"]}, None),
    ],
)
def test_route_for(entry, mode):
    assert C.route_for(entry) == mode


ROUTES = {
    "anthropic_messages": ("/v1/messages", "claude-x", ["/v1/messages"]),
    "responses": ("/responses", "gpt-r", ["/responses", "/chat/completions"]),
    "chat_completions": ("/chat/completions", "gpt-c", ["/chat/completions"]),
}


@pytest.mark.parametrize("mode", list(ROUTES))
def test_each_model_goes_to_its_endpoint_with_the_copilot_headers(gh, wire, settings, tmp_path, mode):
    store_login(settings)
    exchange = Exchange()
    gh.get(TOKEN_URL).mock(side_effect=exchange)
    gh.get(ROOT + "/models").mock(return_value=models(*({"id": m, "supported_endpoints": eps} for _, m, eps in ROUTES.values())))
    path, model, _ = ROUTES[mode]
    served = {"anthropic_messages": "claude-x", "responses": "gpt-r", "chat_completions": "gpt-c"}[mode]
    codec = wire.post(ROOT + path).mock(
        side_effect=W.script(mode, [W.Turn(tool_calls=[("call_1", "read_file", {"path": "README.md"})], model=served), W.Turn(text="done", model=served)])
    )
    outcome = session(resolve_provider(settings.model_copy(update={"model": model})), tmp_path)
    assert outcome.status is OutcomeStatus.ok, outcome.message
    assert outcome.text == "done" and outcome.tool_calls == 1
    assert codec.call_count == 2
    first, second = (c.request.headers for c in codec.calls)
    assert [first["x-initiator"], second["x-initiator"]] == ["user", "agent"]
    for h in (first, second):
        assert h["authorization"] == f"Bearer {exchange.minted[0]}" and "x-api-key" not in h
        assert h["openai-intent"] == "conversation-edits" and h["x-github-api-version"] == C.GITHUB_API_VERSION
        assert h["user-agent"] == C.USER_AGENT and "copilot-vision-request" not in h
        assert h["editor-version"] == settings.copilot_editor_version == f"harnesscheck/{harnesscheck.__version__}"
        assert h["copilot-integration-id"] == "vscode-chat" and h["editor-plugin-version"].startswith("harnesscheck/")
        assert (h.get("anthropic-beta") == C.ANTHROPIC_BETA) is (mode == "anthropic_messages")
    assert outcome.cost.usd is None, "a subscription: tokens are never priced"
    assert exchange.calls == 1, "one exchange for the whole session"


def test_the_editor_headers_are_settings_and_go_on_models_and_turns(gh, wire, settings, tmp_path):
    """A host registered as another integration says so by setting, on every request."""
    store_login(settings)
    gh.get(TOKEN_URL).mock(side_effect=Exchange())
    listing = gh.get(ROOT + "/models").mock(return_value=models({"id": "gpt-c", "supported_endpoints": ["/chat/completions"]}))
    codec = wire.post(ROOT + "/chat/completions").mock(side_effect=W.script("chat_completions", [W.Turn(text="ok", model="gpt-c")]))
    custom = settings.model_copy(update={"model": "gpt-c", "copilot_editor_version": "myeditor/2.0", "copilot_integration_id": "my-integration"})
    outcome = session(resolve_provider(custom), tmp_path)
    assert outcome.status is OutcomeStatus.ok, outcome.message
    for request in (listing.calls[0].request, codec.calls[0].request):
        assert request.headers["editor-version"] == "myeditor/2.0"
        assert request.headers["copilot-integration-id"] == "my-integration"


def test_the_vision_header_goes_with_images(gh, wire, settings):
    gh.get(TOKEN_URL).mock(side_effect=Exchange())
    gh.get(ROOT + "/models").mock(return_value=models({"id": "claude-x", "supported_endpoints": ["/v1/messages"]}))
    codec = wire.post(ROOT + "/v1/messages").mock(side_effect=W.script("anthropic_messages", [W.Turn(text="a cat")] * 2))
    llm = C.CopilotLLM(C.TokenSource(GITHUB_TOKEN, settings, clock=lambda: NOW), settings, model="claude-x")
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    llm.create(messages=[{"role": "user", "content": [image, {"type": "text", "text": "what is it?"}]}])
    llm.create(messages=[{"role": "user", "content": "no picture"}])
    assert codec.calls[0].request.headers["copilot-vision-request"] == "true"
    assert "copilot-vision-request" not in codec.calls[1].request.headers


@pytest.mark.parametrize(
    "listing",
    [
        [{"id": "other-model", "supported_endpoints": ["/v1/messages"]}],
        [{"id": "claude-x", "supported_endpoints": ["/v1/embeddings"]}],
    ],
)
def test_unlisted_or_unspeakable_model_is_model_unavailable_before_any_turn(gh, wire, settings, tmp_path, listing):
    store_login(settings)
    gh.get(TOKEN_URL).mock(side_effect=Exchange())
    gh.get(ROOT + "/models").mock(return_value=models(*listing))
    codec = wire.route().mock(return_value=httpx.Response(500))
    outcome = session(resolve_provider(settings), tmp_path)
    assert (outcome.status, outcome.error_class) == (OutcomeStatus.error, ErrorClass.model_unavailable)
    assert codec.call_count == 0


# ---------------------------------------------------------------------------------------
# 401: one refresh, once more with the new credential, then blocked


def _auth_check(tokens_ok: set):
    def side_effect(request):
        if request.headers["authorization"].removeprefix("Bearer ") in tokens_ok:
            return W.sse_response(W.events("anthropic_messages", W.Turn(text="ok", model="claude-x")))
        return W.error_response(401, {"type": "error", "error": {"type": "authentication_error", "message": f"bad token {request.headers['authorization']}"}})

    return side_effect


def test_a_401_refreshes_once_then_succeeds(gh, wire, settings, tmp_path):
    store_login(settings)
    exchange = Exchange()
    gh.get(TOKEN_URL).mock(side_effect=exchange)
    gh.get(ROOT + "/models").mock(return_value=models({"id": "claude-x", "supported_endpoints": ["/v1/messages"]}))
    good: set = set()
    codec = wire.post(ROOT + "/v1/messages").mock(side_effect=lambda req: (good.update(exchange.minted[1:]), _auth_check(good)(req))[1])
    outcome = session(resolve_provider(settings), tmp_path)
    assert outcome.status is OutcomeStatus.ok, outcome.message
    assert (exchange.calls, codec.call_count) == (2, 2)


def test_a_second_401_after_the_refresh_blocks_as_auth(gh, wire, settings, tmp_path):
    store_login(settings)
    exchange = Exchange()
    gh.get(TOKEN_URL).mock(side_effect=exchange)
    gh.get(ROOT + "/models").mock(return_value=models({"id": "claude-x", "supported_endpoints": ["/v1/messages"]}))
    codec = wire.post(ROOT + "/v1/messages").mock(side_effect=_auth_check(set()))
    outcome = session(resolve_provider(settings), tmp_path)
    assert (outcome.status, outcome.error_class, outcome.retryable) == (OutcomeStatus.blocked, ErrorClass.auth, False)
    assert (exchange.calls, codec.call_count) == (2, 2), "one refresh, one more request, never a ladder"
    for token in [GITHUB_TOKEN, *exchange.minted]:
        assert token not in outcome.message and token not in outcome.model_dump_json()


def test_direct_bearer_401_is_blocked_at_once(gh, wire, settings, tmp_path):
    store_login(settings)
    gh.get(TOKEN_URL).mock(return_value=httpx.Response(404, json={"message": "Not Found"}))
    gh.get(ROOT + "/models").mock(return_value=models({"id": "claude-x", "supported_endpoints": ["/v1/messages"]}))
    codec = wire.post(ROOT + "/v1/messages").mock(side_effect=_auth_check(set()))
    outcome = session(resolve_provider(settings), tmp_path)
    assert (outcome.status, outcome.error_class) == (OutcomeStatus.blocked, ErrorClass.auth)
    assert codec.call_count == 1
    assert codec.calls[0].request.headers["authorization"] == f"Bearer {GITHUB_TOKEN}"
    assert GITHUB_TOKEN not in outcome.message


def test_concurrent_sessions_refresh_once(gh, wire, settings, tmp_path):
    """Four sessions whose first credential is rejected: one exchange refreshes it for all."""
    store_login(settings)
    exchange = Exchange()
    gh.get(TOKEN_URL).mock(side_effect=exchange)
    gh.get(ROOT + "/models").mock(return_value=models({"id": "claude-x", "supported_endpoints": ["/v1/messages"]}))
    barrier = threading.Barrier(4, timeout=300)
    good: set = set()

    def side_effect(request):
        if request.headers["authorization"].removeprefix("Bearer ") == exchange.minted[0]:
            barrier.wait()  # every session holds the stale token before anyone refreshes
        good.update(exchange.minted[1:])
        return _auth_check(good)(request)

    wire.post(ROOT + "/v1/messages").mock(side_effect=side_effect)
    transport = resolve_provider(settings.model_copy(update={"concurrency": 4}))
    transport.llm.routes()
    transport.tokens.current()
    with ThreadPoolExecutor(4) as pool:
        outcomes = list(pool.map(lambda i: session(transport, tmp_path / f"s{i}"), range(4)))
    assert all(o.status is OutcomeStatus.ok for o in outcomes), [o.message for o in outcomes]
    assert exchange.calls == 2, f"{exchange.calls} exchanges: concurrent sessions must refresh once"


def test_registry_spec_is_an_api_kind_with_a_host_loop():
    spec = BUILTIN_SPECS["copilot"]
    assert spec.kind.value == "api" and "host_tool_loop" in spec.capabilities


def test_no_real_github_host_in_the_tests_settings(settings):
    for url in (settings.copilot_url, settings.github_url, settings.github_api_url):
        assert url.startswith("http://127.0.0.1:")
