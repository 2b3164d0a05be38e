"""A test-built claude stream around real MCP calls to the bridge (reference:cli-formats §1.B),
for the fake CLI with `"mcp": "connect"` (fake_clis/_fakecli.py)."""

from __future__ import annotations

SID = "0a4d8d99-ef93-4499-9084-39b2c92d24e0"


def claude_bridge_scenario(calls: list[tuple[str, dict]], ending: list[dict]) -> dict:
    """init; per call the model's tool_use, the real MCP call and its tool_result; then
    `ending` (the closing events, session id SID); then exit 0."""
    steps = [
        {
            "emit": {
                "type": "system",
                "subtype": "init",
                "cwd": "{{cwd}}",
                "session_id": SID,
                "tools": "{{mcp_tools}}",
                "mcp_servers": "{{mcp_server_names}}",
                "model": "{{model}}",
                "apiKeySource": "none",
            }
        }
    ]
    for n, (tool, args) in enumerate(calls):
        tid = f"toolu_{n:02d}"
        steps += [
            {
                "emit": {
                    "type": "assistant",
                    "parent_tool_use_id": None,
                    "session_id": SID,
                    "message": {
                        "id": f"msg_{n:02d}",
                        "model": "{{model_base}}",
                        "role": "assistant",
                        "content": [{"type": "tool_use", "id": tid, "name": f"mcp__bridge__{tool}", "input": args}],
                        "usage": {"input_tokens": 10, "output_tokens": 5},
                    },
                }
            },
            {"mcp_call": {"server": "bridge", "tool": tool, "arguments": args}},
            {
                "emit": {
                    "type": "user",
                    "parent_tool_use_id": None,
                    "session_id": SID,
                    "message": {
                        "role": "user",
                        "content": [
                            {
                                "type": "tool_result",
                                "tool_use_id": tid,
                                "content": [{"type": "text", "text": "{{mcp_result_text}}"}],
                                "is_error": "{{mcp_result_is_error}}",
                            }
                        ],
                    },
                }
            },
        ]
    return {
        "provenance": {
            "cli": "claude",
            "cli_version": "2.1.197",
            "source": "reference:cli-formats §1.B",
            "date": "2026-11-29",
            "notes": "test-built: real bridge over MCP stdio",
        },
        "default_model": "claude-opus-4-8",
        "mcp": "connect",
        "mcp_timeout": 30,
        "steps": steps + ending + [{"exit": 0}],
    }
