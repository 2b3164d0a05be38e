"""CopilotAdapter: the `copilot` backend against a mocked Copilot on 127.0.0.1 (offline level).

One ScriptedServer (kit/api_adapter.py) plays GitHub's token exchange
(`GET /copilot_internal/v2/token`), Copilot's `GET /models` and the routed codec: the model
under test is listed with `supported_endpoints: ["/v1/messages"]`, so its turns are the
scripted Anthropic Messages replies; a request to any other codec endpoint is answered 400,
as Copilot answers a model sent to an endpoint it is not served on. The GitHub login is a
canary written into a private auth.json (0600) in the test's own directory; no real GitHub
host is named or contacted (every URL is a setting pointed at the mock).

Auth scenarios, shaped as a real account fails: `auth_401` — the Copilot token is refused and
the refresh finds the login revoked (the exchange answers 401); `not_logged_in` — the exchange
rejects the login from the start (direct bearer), and Copilot refuses it.
"""

from __future__ import annotations

import json
import secrets
import time
from http.server import BaseHTTPRequestHandler

from harnesscheck.core.config import Settings
from harnesscheck.kit.adapters import Setup
from harnesscheck.kit.api_adapter import REQUESTED, ApiAdapter, Fail, ScriptedServer, Turn, api_scenarios
from harnesscheck.kit.session import Facts, SessionRun, SkipCell

#: Other models the mock lists (routing evidence for tests; never requested by the suite).
OTHER_MODELS = [
    {"id": "hc-chat-model", "supported_endpoints": ["/chat/completions"]},
    {"id": "hc-responses-model", "supported_endpoints": ["/responses", "/chat/completions"]},
    {"id": "hc-legacy-model"},
]
TOKEN_PATH = "/copilot_internal/v2/token"


def _warm() -> None:
    """One-time start-up, paid before the cell's first session, not inside it: the anthropic
    SDK (the routed codec), httpx and the TLS context. On a loaded machine they took 25 s,
    which a duration-judging check (errors.auth-not-retried) would have blamed on the backend."""
    import importlib

    from harnesscheck.backends.llm import tls_context

    importlib.import_module("anthropic")
    importlib.import_module("httpx")
    tls_context()


class CopilotServer(ScriptedServer):
    """The scripted server plus GitHub's token exchange and Copilot's model list.

    `exchange`: "ok" (every exchange mints a new token), "revoked_on_refresh" (the first
    exchange works, later ones answer 401), "rejected" (every exchange answers 401: the
    client falls back to its GitHub token as the bearer). `models`: the listed model ids."""

    def __init__(self, replies: list, repeat_last: bool = False, *, exchange: str = "ok", models=None, token_ttl_s: float = 1800.0):
        self.exchange = exchange
        self.models = list([REQUESTED] if models is None else models)
        self.token_ttl_s = token_ttl_s
        self.auth_requests: list[dict] = []  # GETs: token exchanges and model lists
        self.minted: list[str] = []  # Copilot tokens handed out
        super().__init__(replies, repeat_last)

    def exchanges(self) -> int:
        return sum(1 for r in self.auth_requests if r["path"].startswith(TOKEN_PATH))

    def answer_get(self, h: BaseHTTPRequestHandler) -> None:
        with self._lock:
            self.auth_requests.append({"path": h.path, "headers": dict(h.headers)})
            n = self.exchanges()
        if h.path.startswith(TOKEN_PATH):
            if self.exchange == "rejected" or (self.exchange == "revoked_on_refresh" and n > 1):
                self.send_json(h, 401, {"message": "Bad credentials", "documentation_url": "https://docs.example/rest"})
                return
            token = f"tid=hc-{secrets.token_hex(8)};exp={int(time.time() + self.token_ttl_s)};sku=hc;8kp=1:{secrets.token_hex(16)}"
            with self._lock:
                self.minted.append(token)
            self.send_json(h, 200, {"token": token, "expires_at": int(time.time() + self.token_ttl_s), "refresh_in": 1500})
            return
        if h.path.rstrip("/") == "/models":
            data = [
                {
                    "id": m,
                    "name": m,
                    "vendor": "hc",
                    "model_picker_enabled": True,
                    "capabilities": {"type": "chat", "supports": {"tool_calls": True, "streaming": True}},
                    "supported_endpoints": ["/v1/messages"],
                }
                for m in self.models
            ]
            self.send_json(h, 200, {"object": "list", "data": data + OTHER_MODELS})
            return
        super().answer_get(h)

    def answer(self, h: BaseHTTPRequestHandler, reply, n: int) -> None:
        if not h.path.startswith("/v1/messages"):
            body = json.dumps({"error": {"message": f"model {REQUESTED} is not supported via {h.path}", "code": "unsupported_api_for_model"}}).encode()
            h.send_response(400)
            h.send_header("content-type", "application/json")
            h.send_header("content-length", str(len(body)))
            h.end_headers()
            h.wfile.write(body)
            return
        super().answer(h, reply, n)


class CopilotAdapter(ApiAdapter):
    """`copilot` against CopilotServer; its stored GitHub login is a canary."""

    name = "copilot-mock-server"

    def __init__(self, spec, level, tmp_path):
        super().__init__(spec, level, tmp_path)
        from harnesscheck.backends.authstore import AuthStore

        _warm()
        self.key = "gho_hccanary" + secrets.token_hex(14)
        self.auth_dir = tmp_path / "copilot-auth"
        AuthStore(self.auth_dir).put("copilot", {"type": "oauth", "access": self.key, "refresh": "", "expires": 0})

    def _env(self, url: str = "http://127.0.0.1:9") -> dict[str, str]:
        return {}

    def provenance(self) -> str:
        """The mock's provenance, and what it cannot vouch for: no real Copilot endpoint has
        answered these headers (doc/SPEC-copilot.md, Limits)."""
        return (
            super().provenance() + "; mocked Copilot: the editor headers (Editor-Version, "
            "Copilot-Integration-Id) and the API version and intent headers are unverified against the live API"
        )

    def transport(self, url: str | None = None, **settings):
        from harnesscheck.backends.registry import build_transport

        url = url or "http://127.0.0.1:9"
        settings.setdefault("model", REQUESTED)
        settings.setdefault("copilot_url", url)
        settings.setdefault("github_api_url", url)
        settings.setdefault("github_url", url)
        settings.setdefault("auth_dir", self.auth_dir)
        self.run_settings(settings)
        transport = build_transport(self.spec, Settings(backend=self.spec.id, **settings))
        llm = getattr(transport, "llm", None)
        if llm is not None and hasattr(llm, "backoff_s"):
            llm.backoff_s = 0.01  # quirk: keep the bounded 5xx retries, not their real-time backoff
        return transport

    def prepare(self, scenario, ws, *, tool_calls, model, timeout_s, echo) -> Setup:
        exchange, models = "ok", [model or REQUESTED]  # the requested model is listed (on /v1/messages)
        if scenario == "network_error":
            server = CopilotServer([])
            server.close()  # nothing listens on its port any more: connection refused
            self._servers.append(server)
            return Setup(self.transport(server.url), Facts(), model=REQUESTED, extra={"server": server})
        if scenario == "tools":
            replies = [Turn(tool_calls=[(c.name, dict(c.args)) for c in tool_calls or []]), Turn(text="done")]
            repeat, facts = False, Facts(served_model="hc-test-model-20260101")
        else:
            table = api_scenarios(echo)
            if scenario not in table:
                raise SkipCell("unsupported-by-backend", f"the copilot backend has no {scenario} situation")
            replies, repeat, facts = table[scenario]
            said = (" (" + " ".join(echo) + ")") if echo else ""
            if scenario == "auth_401":
                replies, exchange = [Fail(401, "authentication_error", "unauthorized: token expired" + said)], "revoked_on_refresh"
            elif scenario == "not_logged_in":
                replies, exchange = [Fail(401, "authentication_error", "Bad credentials" + said)], "rejected"
            elif scenario == "model_not_found":
                models = []  # GET /models does not list it
        server = CopilotServer(replies, repeat_last=repeat, exchange=exchange, models=models)
        self._servers.append(server)
        return Setup(self.transport(server.url), facts, model=facts.requested_model or REQUESTED, extra={"server": server})

    def collect(self, run: SessionRun, setup: Setup, request) -> None:
        super().collect(run, setup, request)
        server: CopilotServer = setup.extra["server"]
        run.auth_requests = list(server.auth_requests)
        run.minted = list(server.minted)
        # the credential travels only in its Authorization header; everywhere else it is a leak
        bearers = {f"Bearer {t}" for t in [*server.minted, self.key]}
        for req in run.requests:
            headers = {k.lower(): v for k, v in req["headers"].items()}
            if headers.get("authorization") in bearers:
                headers.pop("authorization")
            req["visible_headers"] = headers

    def session_credentials(self, run: SessionRun) -> set[str]:
        """The GitHub login (token exchange) and every Copilot token minted for it."""
        return {self.key, *getattr(run, "minted", [])}

    def held_secrets(self, run: SessionRun | None = None) -> dict[str, str]:
        held = {"COPILOT_GITHUB_LOGIN": self.key}
        for i, token in enumerate(getattr(run, "minted", []) if run is not None else []):
            held[f"COPILOT_TOKEN_{i}"] = token
        return held

    def credential_fetches(self, run: SessionRun) -> int | None:
        return sum(1 for r in getattr(run, "auth_requests", []) if r["path"].startswith(TOKEN_PATH))
