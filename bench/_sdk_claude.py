"""The official Claude Agent SDK doing bench_vs_sdk.py's turn: one `query()` over the same
claude binary and scripted loopback server, the host's tool as the SDK's own in-process MCP
server (`create_sdk_mcp_server`, named `bridge`: the model sees `mcp__bridge__read_file`).

    bench/.venv-sdk/bin/python bench/_sdk_claude.py CLI BASE_URL ROOT HOME_DIR

Runs in the bench's own venv (bench/.venv-sdk: `pip install claude-agent-sdk`), never the
project's. Prints one JSON line: {"in_host_s": query() start -> result, "ok": ...}.
"""

import json
import sys
import time

T_START = time.perf_counter()

import anyio  # noqa: E402
from claude_agent_sdk import ClaudeAgentOptions, ResultMessage, create_sdk_mcp_server, query, tool  # noqa: E402


def main() -> None:
    cli, base_url, root, home = sys.argv[1:5]

    @tool("read_file", "Read a file under the worktree", {"path": str})
    async def read_file(args):
        with open(f"{root}/{args['path']}", encoding="utf-8") as fh:
            return {"content": [{"type": "text", "text": fh.read()}]}

    options = ClaudeAgentOptions(
        cli_path=cli,
        cwd=home,
        tools=[],  # built-ins off, as the transport runs claude
        allowed_tools=["mcp__bridge__read_file"],
        mcp_servers={"bridge": create_sdk_mcp_server("bridge", tools=[read_file])},
        strict_mcp_config=True,
        setting_sources=[],
        max_turns=8,
        env={
            "HOME": home,
            "CLAUDE_CONFIG_DIR": home,
            "ANTHROPIC_BASE_URL": base_url,
            "CLAUDE_CODE_OAUTH_TOKEN": "sk-loopback-dummy-0000",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        },
    )

    async def turn() -> dict:
        t0 = time.perf_counter()
        ok, text = False, ""
        async for message in query(prompt="Say hello.", options=options):
            if isinstance(message, ResultMessage):
                ok, text = not message.is_error, message.result or ""
        return {"in_host_s": time.perf_counter() - t0, "ok": ok, "text": text[:80], "import_s": t0 - T_START}

    print(json.dumps(anyio.run(turn)), flush=True)


if __name__ == "__main__":
    main()
