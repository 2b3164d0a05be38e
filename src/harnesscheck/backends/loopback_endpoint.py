"""LoopbackEndpoint: the one seam through which a harness transport is pointed at a
scripted model server on 127.0.0.1 (never a pass-through of the host environment).

A transport built with `loopback=LoopbackEndpoint(...)` must
- claude-code: inject `claude_env(endpoint)` through the env policy's explicit,
  traced injections (ANTHROPIC_BASE_URL, a dummy CLAUDE_CODE_OAUTH_TOKEN, and
  CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1), reading no host credential;
- codex: write `codex_provider_toml(endpoint)` into its per-run CODEX_HOME/config.toml
  (top-level keys first) and inject `codex_env(endpoint)` (the provider's env_key);
- gemini: inject `gemini_env(endpoint)` (GOOGLE_GEMINI_BASE_URL and the dummy key as
  GEMINI_API_KEY; its per-run settings.json selects the `gemini-api-key` auth type).

Standard library only: transports import this at module top without cost.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from urllib.parse import urlsplit

#: The name of the env variable holding the dummy key for codex's loopback provider.
CODEX_KEY_VAR = "HARNESSCHECK_LOOPBACK_KEY"
#: The provider id written into codex's config.toml.
CODEX_PROVIDER_ID = "harnesscheck_loopback"
#: The dummy credential a loopback CLI sends (the server checks it; it opens nothing).
DUMMY_KEY = "sk-loopback-dummy-0000"


def session_key() -> str:
    """A credential of one session's scripted server (the kit's loopback sessions): the server
    serves it only, so another session's CLI (or another local user) holding the common
    DUMMY_KEY is refused and counted as foreign. Random, opens nothing."""
    import secrets

    return f"sk-loopback-{secrets.token_hex(12)}"


@dataclass(frozen=True)
class LoopbackEndpoint:
    """A scripted model server: its base URL (http://127.0.0.1:<port>) and the dummy key."""

    base_url: str
    api_key: str = DUMMY_KEY

    def __post_init__(self) -> None:
        parts = urlsplit(self.base_url)
        if parts.scheme != "http" or parts.hostname not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError(f"a loopback endpoint must be http on 127.0.0.1, got {self.base_url!r}")

    @property
    def v1_url(self) -> str:
        return self.base_url.rstrip("/") + "/v1"


def claude_env(ep: LoopbackEndpoint) -> dict[str, str]:
    """The explicit injections that point `claude` at the server (names are traced).

    The dummy credential goes in as a subscription token (CLAUDE_CODE_OAUTH_TOKEN): the CLI
    then runs exactly as under a subscription login (`apiKeySource: "none"`, a bearer
    header, `rate_limit_event` lines), which is the mode hosts run; the transport's
    subscription-mode guard (no API key) stays armed."""
    return {
        "ANTHROPIC_BASE_URL": ep.base_url,
        "CLAUDE_CODE_OAUTH_TOKEN": ep.api_key,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }


def codex_env(ep: LoopbackEndpoint) -> dict[str, str]:
    """The explicit injection codex's loopback provider reads its key from."""
    return {CODEX_KEY_VAR: ep.api_key}


def gemini_env(ep: LoopbackEndpoint) -> dict[str, str]:
    """The explicit injections that point `gemini` at the server (names are traced): the
    Gemini API base URL (the CLI appends `/v1beta/models/<m>:streamGenerateContent`) and
    the dummy key it sends as `x-goog-api-key`."""
    return {"GOOGLE_GEMINI_BASE_URL": ep.base_url, "GEMINI_API_KEY": ep.api_key}


def _toml_str(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def codex_provider_top(ep: LoopbackEndpoint) -> str:
    """Top-level keys (must precede every [table] in config.toml)."""
    return f"model_provider = {_toml_str(CODEX_PROVIDER_ID)}\n"


def codex_provider_table(ep: LoopbackEndpoint) -> str:
    """The provider table: Responses over HTTP (no websockets). Retry counts stay at the
    CLI's defaults, so the loopback level sees the retry ladder real users get (the
    transport must stop early on an auth failure; doc/SPEC-loopback.md)."""
    return (
        f"[model_providers.{CODEX_PROVIDER_ID}]\n"
        f'name = "harnesscheck loopback"\n'
        f"base_url = {_toml_str(ep.v1_url)}\n"
        f"env_key = {_toml_str(CODEX_KEY_VAR)}\n"
        f'wire_api = "responses"\n'
        f"supports_websockets = false\n"
    )


def codex_provider_toml(ep: LoopbackEndpoint) -> str:
    """A complete config.toml fragment (top-level keys, then the provider table)."""
    return codex_provider_top(ep) + "\n" + codex_provider_table(ep)
