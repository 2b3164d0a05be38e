"""Gemini CLI's recording profile (backends/_recording_profile.py): how `harnesscheck record`
makes its offline fixtures from the real `gemini -p --output-format stream-json`.

Requirements kept here: the fixtures the real CLI can be made to show and how each is recorded
(its recipes), the Gemini API error answers the scripted model serves (400 INVALID_ARGUMENT
naming the token limit, 404 NOT_FOUND naming the model), the key taken away, and how its
stream becomes a replay: the requested model (init `model`, a `stats.models` key) becomes
`{{model}}`, each bridge call it printed is made again by the replay, and the replay starts the
configured bridge, since the CLI awaits its MCP servers before the first request.
"""

from __future__ import annotations

from harnesscheck.backends._recording_profile import ErrorAnswer, Recipe, RecordingProfile
from harnesscheck.backends.gemini import BRIDGE_PREFIX, DEFAULT_MODEL

#: A model name no scripted server knows (model_not_found asks for it).
MISSING_MODEL = "gemini-nope-9"

RECIPES = {
    "success": Recipe(),
    "tool_calls": Recipe(),
    "not_logged_in": Recipe(credential="none"),
    "auth_401": Recipe(),
    "rate_limit_429": Recipe(),
    "overloaded_529": Recipe(),
    "context_overflow": Recipe(),
    "model_not_found": Recipe(model=MISSING_MODEL),
    "served_model_mismatch": Recipe(),
    "timeout_mid_stream": Recipe(timeout_s=45.0),
    "native_tool_use": Recipe(),
    "mcp_failed": Recipe(broken_bridge=True),
    # root-cause precedence (doc/SPEC-gemini.md): a 401 with a bridge that never started
    "auth_401_bridge_failed": Recipe(broken_bridge=True, script="auth_401"),
}

ERROR_ANSWERS = {
    # Gemini API: 400 INVALID_ARGUMENT naming the token limit
    "context_overflow": ErrorAnswer(400, "invalid_request_error", "The input token count (1215000) exceeds the maximum number of tokens allowed (1048576)."),
    # Gemini API: 404 NOT_FOUND naming the model
    "model_not_found": ErrorAnswer(404, "not_found_error", "models/{model} is not found for API version v1beta, or is not supported for generateContent."),
}


def requested_model(recipe: Recipe, lines: list[str]) -> str:
    """The model the request named, else the CLI's default (what `{{model}}` stands for)."""
    return recipe.model or DEFAULT_MODEL


def placeholders(event: dict, model: str | None, fields: dict | None = None) -> dict:
    """The requested model (init `model`, a `stats.models` key equal to it) becomes
    `{{model}}`, so the replay answers with whatever model the transport asks for; a served
    model other than the requested one stays as recorded."""
    if not model:
        return event
    if event.get("type") == "init" and event.get("model") == model:
        event = {**event, "model": "{{model}}"}
    stats = event.get("stats")
    if event.get("type") == "result" and isinstance(stats, dict) and isinstance(stats.get("models"), dict):
        models = {("{{model}}" if k == model else k): v for k, v in stats["models"].items()}
        event = {**event, "stats": {**stats, "models": models}}
    return event


def bridge_call(event: dict) -> dict | None:
    """A `tool_use` of the bridge's tool: the call the replay makes to the bridge."""
    name = str(event.get("tool_name") or "")
    if event.get("type") == "tool_use" and name.startswith(BRIDGE_PREFIX):
        return {"name": name[len(BRIDGE_PREFIX) :], "arguments": event.get("parameters") or {}}
    return None


RECORDING = RecordingProfile(
    recipes=RECIPES,
    missing_model=MISSING_MODEL,
    error_answers=ERROR_ANSWERS,
    bridge_module="harnesscheck.backends.gemini",
    credential_vars=("GEMINI_API_KEY",),
    placeholder_model=requested_model,
    placeholders=placeholders,
    replayed_bridge_call=bridge_call,
    replay_connects_bridge=True,
)
