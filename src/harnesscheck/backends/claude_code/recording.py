"""Claude Code's recording profile (backends/_recording_profile.py): how `harnesscheck record`
makes its offline fixtures from the real `claude -p`.

Requirements kept here: the fixtures the real CLI can be made to show and how each is recorded
(its recipes), the Anthropic Messages error answers the scripted model serves (400
`invalid_request_error` "prompt is too long", 404 `not_found_error` naming the model), the
subscription token taken away (and the API key given instead for `api_key_source`), and how
its stream-json becomes the fake's placeholders: the init event's `tools` / `mcp_servers` /
`model` and the echoed model, only where they say what the transport asked for.
"""

from __future__ import annotations

import json

from harnesscheck.backends._recording_profile import NO_CREDENTIAL_NOTE, ErrorAnswer, Recipe, RecordingProfile

#: A model name no scripted server knows (model_not_found asks for it).
MISSING_MODEL = "claude-nope-9"

RECIPES = {
    "success": Recipe(),
    "tool_calls": Recipe(),
    "max_turns": Recipe(max_iters=2),
    "not_logged_in": Recipe(credential="none"),
    "auth_401": Recipe(),
    "rate_limit_429": Recipe(),
    # its 529 ladder takes minutes: it ends at the transport's stop (codex's is recorded whole)
    "overloaded_529": Recipe(),
    "context_overflow": Recipe(),
    "model_not_found": Recipe(model=MISSING_MODEL),
    "served_model_mismatch": Recipe(),
    "timeout_mid_stream": Recipe(timeout_s=6.0),
    "native_tool_use": Recipe(),
    "mcp_failed": Recipe(broken_bridge=True),
    "api_key_source": Recipe(credential="api_key"),
    # root-cause precedence (doc/SPEC-claude-code.md): a 429 ladder the deadline cuts short
    # is a rate limit, not a timeout; a bridge that cannot start under a 401 server
    "rate_limit_429_deadline": Recipe(full_ladder=True, timeout_s=45.0, script="rate_limit_429"),
    "auth_401_bridge_failed": Recipe(broken_bridge=True, script="auth_401"),
}

ERROR_ANSWERS = {
    # Anthropic Messages: 400 invalid_request_error "prompt is too long"
    "context_overflow": ErrorAnswer(400, "invalid_request_error", "prompt is too long: 215000 tokens > 200000 maximum"),
    # Anthropic Messages: 404 not_found_error naming the model
    "model_not_found": ErrorAnswer(404, "not_found_error", "model: {model}"),
}


def init_model(recipe: Recipe, lines: list[str]) -> str | None:
    """The model the init event names (the CLI's default when the request named none)."""
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("subtype") == "init":
            return event.get("model")
    return None


def server_fields(servers) -> dict | None:
    """The fields beside `{name, status: connected}` that every server of an init's
    `mcp_servers` shares (2.1.332: `{"source": "dynamic"}`; 2.1.197: `{}`), or None when
    the list is empty, a server is not connected (failed, pending) or the servers differ:
    then the list must stay literal."""
    if not isinstance(servers, list) or not servers:
        return None
    extras = []
    for server in servers:
        if not isinstance(server, dict) or server.get("status") != "connected" or not isinstance(server.get("name"), str):
            return None
        extras.append({k: v for k, v in server.items() if k not in ("name", "status")})
    return extras[0] if all(e == extras[0] for e in extras) else None


def placeholders(event: dict, default_model: str | None, fields: dict | None = None) -> dict:
    """init echoes argv (tools, MCP servers, model): make it the fake's placeholders, but
    only where it says what the transport asked for (a failed bridge, a missing tool stay
    literal: a replay must show the same failure). `fields` (filled in): the extra fields
    the templated servers carried, which the fixture keeps as `mcp_server_fields`."""
    if event.get("type") == "system" and event.get("subtype") == "init":
        event = dict(event)
        tools = event.get("tools")
        if isinstance(tools, list) and tools and all(str(t).startswith("mcp__bridge__") for t in tools):
            event["tools"] = "{{allowed_tools}}"
        # the placeholder replays each configured server `connected`, with the fields every
        # recorded server shared (2.1.332's `source`) kept in `mcp_server_fields`; any other
        # status (failed, pending) or servers that differ stay literal (a classification reads them)
        extras = server_fields(event.get("mcp_servers"))
        if extras is not None and (fields is None or not fields or fields == extras):
            event["mcp_servers"] = "{{mcp_server_names}}"
            if fields is not None:
                fields.update(extras)
        if event.get("model") == default_model:
            event["model"] = "{{model}}"
    if event.get("type") == "result" and isinstance(event.get("modelUsage"), dict) and default_model:
        event = dict(event)
        event["modelUsage"] = {("{{model}}" if k == default_model else k): v for k, v in event["modelUsage"].items()}
    if event.get("type") == "assistant" and default_model:
        msg = event.get("message")
        if isinstance(msg, dict) and msg.get("model") == default_model.split("[", 1)[0]:
            event = dict(event, message=dict(msg, model="{{model_base}}"))
    return event


RECORDING = RecordingProfile(
    recipes=RECIPES,
    missing_model=MISSING_MODEL,
    error_answers=ERROR_ANSWERS,
    bridge_module="harnesscheck.backends.claude_code",
    credential_vars=("CLAUDE_CODE_OAUTH_TOKEN",),
    api_key_var="ANTHROPIC_API_KEY",  # the key is then the only credential
    credential_notes={
        "none": NO_CREDENTIAL_NOTE,
        "api_key": "a dummy ANTHROPIC_API_KEY (scrubbed), the transport in api_key mode, no subscription token",
    },
    placeholder_model=init_model,
    placeholders=placeholders,
    version_line="{version} (Claude Code)",
    side_effect_uid_dirs=("claude",),  # tmp/claude-<uid>/<cwd>/<session>/...
)
