"""Codex's recording profile (backends/_recording_profile.py): how `harnesscheck record` makes
its offline fixtures from the real `codex exec --json`.

Requirements kept here: the fixtures the real CLI can be made to show and how each is recorded
(its recipes: the 429/529 ladders take seconds, so they are recorded whole), the OpenAI
Responses error answers the scripted model serves (401 without a bearer, 400
`context_length_exceeded`, 400 `model_not_found`), and how a recording without a credential
takes the loopback key away: the variable, and the provider's `env_key` in its config.toml, so
it sends no key at all, as codex without a login does. Its `--json` stream has no placeholders.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from harnesscheck.backends._recording_profile import ErrorAnswer, Recipe, RecordingProfile
from harnesscheck.backends.loopback_endpoint import CODEX_KEY_VAR

#: A model name no scripted server knows (model_not_found asks for it).
MISSING_MODEL = "gpt-nope-9"

RECIPES = {
    "success": Recipe(),
    "tool_calls": Recipe(),
    # A 401 ends where the transport stops it (the first notice: auth is never retried,
    # whatever retry_stop_after says). The 429/529 ladders take seconds: recorded whole.
    "not_logged_in": Recipe(credential="none"),
    "auth_401": Recipe(),
    "rate_limit_429": Recipe(full_ladder=True),
    "overloaded_529": Recipe(full_ladder=True),
    "context_overflow": Recipe(),
    "model_not_found": Recipe(model=MISSING_MODEL),
    "served_model_mismatch": Recipe(),
    "timeout_mid_stream": Recipe(timeout_s=6.0),
    "mcp_failed": Recipe(broken_bridge=True),
    # A required bridge slow to start: codex waits for it, then runs normally.
    "mcp_slow": Recipe(slow_bridge_s=0.5, script="tool_calls"),
    # root-cause precedence (doc/SPEC-codex.md): a 429 ladder the deadline cuts short
    "rate_limit_429_deadline": Recipe(full_ladder=True, timeout_s=12.0, script="rate_limit_429"),
    "auth_401_bridge_failed": Recipe(broken_bridge=True, script="auth_401"),
}

ERROR_ANSWERS = {
    # without a login codex sends no Authorization header; the Responses API answers 401 with
    # this message (cli-formats §2.C "bad credential / not logged in")
    "not_logged_in": ErrorAnswer(401, "invalid_request_error", "Missing bearer or basic authentication in header"),
    # OpenAI Responses: 400 with code context_length_exceeded
    "context_overflow": ErrorAnswer(
        400,
        "invalid_request_error",
        "Your input exceeds the context window of this model. Please adjust your input and try again.",
        code="context_length_exceeded",
    ),
    # OpenAI Responses: 400 invalid_request_error, code model_not_found
    "model_not_found": ErrorAnswer(400, "invalid_request_error", "The model `{model}` does not exist or you do not have access to it.", code="model_not_found"),
}


def strip_env_key(injections: Mapping[str, str]) -> None:
    """The provider in CODEX_HOME's config.toml loses its `env_key`: it then sends no key at all."""
    codex_home = injections.get("CODEX_HOME")
    if codex_home:
        config = Path(codex_home) / "config.toml"
        kept = [line for line in config.read_text(encoding="utf-8").splitlines() if not line.startswith("env_key =")]
        config.write_text("\n".join(kept) + "\n", encoding="utf-8")


RECORDING = RecordingProfile(
    recipes=RECIPES,
    missing_model=MISSING_MODEL,
    error_answers=ERROR_ANSWERS,
    bridge_module="harnesscheck.backends.codex",
    credential_vars=(CODEX_KEY_VAR,),
    strip_credential_config=strip_env_key,
    credential_notes={"none": "no credential at all (no token, no key, no login: its provider has no env_key)"},
    version_line="codex-cli {version}",
)
