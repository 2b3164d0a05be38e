"""Shared mode: one bridge in the host process, several sessions over streamable HTTP on
127.0.0.1, each only at its own secret path, each with its own scope and trace."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import httpx
import pytest

from harnesscheck.bridge.spec import BridgeSpec, summarize_trace
from harnesscheck.core.scope import ToolScope

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
}
HEADERS = {"accept": "application/json, text/event-stream"}


@pytest.fixture
def shared():
    from harnesscheck.bridge.shared import SharedBridge

    bridge = SharedBridge()
    yield bridge
    bridge.close()


def _spec(tmp_path: Path, name: str, read_only: bool = True) -> BridgeSpec:
    root = tmp_path / name
    root.mkdir()
    (root / "own.txt").write_text(f"{name}-content\n")
    return BridgeSpec(scope=ToolScope(root=root, read_only=read_only), run_dir=tmp_path, trace_path=tmp_path / f"{name}-trace.jsonl", session_id=name)


async def _use(url: str, calls):
    from mcp import Client

    with anyio.fail_after(60):
        async with Client(url, mode="legacy") as client:
            listed = await client.list_tools()
            return [t.name for t in listed.tools], [await client.call_tool(n, a) for n, a in calls]


def _text(result) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


def test_sessions_are_isolated_by_secret_path_scope_and_trace(shared, tmp_path: Path) -> None:
    a, b = _spec(tmp_path, "a"), _spec(tmp_path, "b", read_only=False)
    url_a, url_b = shared.add_session(a), shared.add_session(b)
    assert url_a.startswith(f"http://127.0.0.1:{shared.port}/s/") and url_a.endswith("/mcp") and url_a != url_b
    tools_a, res_a = anyio.run(
        _use, url_a, [("read_file", {"path": "own.txt"}), ("read_file", {"path": "../b/own.txt"}), ("write_file", {"path": "x", "content": "y"})]
    )
    tools_b, res_b = anyio.run(_use, url_b, [("read_file", {"path": "own.txt"}), ("write_file", {"path": "x", "content": "y"})])
    assert tools_a == ["read_file", "list_dir", "grep"] and "write_file" in tools_b
    assert _text(res_a[0]) == "a-content\n"
    assert res_a[1].is_error and _text(res_a[1]).startswith("refused: path_outside_scope: ")
    assert res_a[2].is_error and _text(res_a[2]).startswith("refused: read_only: ")
    assert _text(res_b[0]) == "b-content\n" and not res_b[1].is_error
    sa, sb = summarize_trace(a.trace_path, "a"), summarize_trace(b.trace_path, "b")
    assert (sa.tool_calls, sa.listed, len(sa.refusals)) == (3, True, 2)
    assert (sb.tool_calls, sb.writes) == (2, ["x"])
    for spec, url in ((a, url_a), (b, url_b)):
        text = spec.trace_path.read_text()
        assert url.split("/")[4] not in text  # the secret is never traced
        assert all(json.loads(line)["session"] == spec.session_id for line in text.splitlines())


def test_wrong_secret_other_paths_and_removed_sessions_get_404(shared, tmp_path: Path) -> None:
    url = shared.add_session(_spec(tmp_path, "a"))
    secret = url.split("/")[4]
    base = f"http://127.0.0.1:{shared.port}"
    for path in (f"/s/{'x' * len(secret)}/mcp", "/mcp", f"/s/{secret}", f"/s/{secret}/mcp/x", "/"):
        assert httpx.post(base + path, json=INIT, headers=HEADERS).status_code == 404, path
    assert httpx.post(url, json=INIT, headers=HEADERS).status_code == 200
    shared.remove_session("a")
    assert httpx.post(url, json=INIT, headers=HEADERS).status_code == 404
    assert summarize_trace(tmp_path / "a-trace.jsonl").started
    last = (tmp_path / "a-trace.jsonl").read_text().splitlines()[-1]
    assert json.loads(last)["event"] == "bridge_stop"


def test_dns_rebinding_is_refused(shared, tmp_path: Path) -> None:
    url = shared.add_session(_spec(tmp_path, "a"))
    evil = httpx.post(url, json=INIT, headers={**HEADERS, "host": "evil.example"})
    assert evil.status_code in (403, 421)
    origin = httpx.post(url, json=INIT, headers={**HEADERS, "origin": "http://evil.example"})
    assert origin.status_code == 403


def test_duplicate_session_id_is_rejected(shared, tmp_path: Path) -> None:
    spec = _spec(tmp_path, "a")
    shared.add_session(spec)
    with pytest.raises(ValueError, match="already served"):
        shared.add_session(spec)


def test_http_configs_for_each_cli(shared, tmp_path: Path) -> None:
    import tomllib

    from harnesscheck.bridge import readiness

    url = shared.add_session(_spec(tmp_path, "a"))
    assert readiness.claude_mcp_config(url=url) == {"mcpServers": {"bridge": {"type": "http", "url": url}}}
    assert readiness.cursor_mcp_config(url=url) == {"mcpServers": {"bridge": {"url": url}}}
    codex = tomllib.loads(readiness.codex_mcp_toml(url=url))["mcp_servers"]["bridge"]
    assert codex["url"] == url and codex["required"] is True and "command" not in codex
    with pytest.raises(ValueError):
        readiness.claude_mcp_config()
