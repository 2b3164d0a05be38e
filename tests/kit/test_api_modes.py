"""One matrix column per api_mode (issue 21 item 6, issue 18 item 8), and provenance per cell.

The registry side: `api/<mode>` ids, what `api` stands for in the kit, the mode a column's
transport speaks whatever HARNESS_API_MODE says. The kit side: each column's adapter speaks its
own wire, the cells record what their verdict came from, and the matrix keeps it per cell."""

from __future__ import annotations

import json

import pytest

from harnesscheck.backends import registry
from harnesscheck.backends.llm import API_MODES
from harnesscheck.core.config import Settings
from harnesscheck.core.contracts import Capability, ConfigError
from harnesscheck.kit.results import BackendInfo, CellResult, Report

COLUMNS = [f"api/{mode}" for mode in API_MODES]


def test_api_stands_for_its_three_mode_columns():
    assert registry.column_ids("api") == COLUMNS
    assert registry.column_ids("codex") == ["codex"] and registry.column_ids("claude-code==2.1.197") == ["claude-code==2.1.197"]
    ids = registry.default_backend_ids()
    assert "api" not in ids and ids[: len(COLUMNS)] == COLUMNS


@pytest.mark.parametrize("mode", API_MODES)
def test_a_mode_column_is_the_api_spec_in_that_mode(mode):
    spec = registry.get_spec(f"api/{mode}")
    base = registry.BUILTIN_SPECS["api"]
    assert (spec.id, spec.api_mode, spec.kind, spec.factory) == (f"api/{mode}", mode, base.kind, base.factory)
    assert base.capabilities <= spec.capabilities
    assert (Capability.prompt_caching in spec.capabilities) == (mode == "anthropic_messages")
    if mode != "anthropic_messages":
        assert "cache prompt prefixes by themselves" in registry.declined_because(spec, "prompt_caching")
    assert registry.declined_because(registry.BUILTIN_SPECS["api"], "prompt_caching") is None


def test_mode_ids_that_name_nothing_are_refused_with_the_fix():
    with pytest.raises(ConfigError) as info:
        registry.get_spec("api/completions")
    assert "api/chat_completions" in info.value.fix
    with pytest.raises(ConfigError) as info:
        registry.get_spec("codex/responses")
    assert "--backend codex" in info.value.fix


def test_a_mode_column_speaks_its_mode_and_refuses_a_contrary_setting():
    env = {"OPENAI_API_KEY": "sk-test-never-sent", "ANTHROPIC_API_KEY": "sk-ant-test-never-sent"}
    from harnesscheck.backends.api import ApiTransport

    t = ApiTransport(registry.get_spec("api/responses"), Settings(backend="api/responses", model="m"), environ=env)
    assert t.api_mode == "responses"
    t = ApiTransport(registry.get_spec("api/responses"), Settings(backend="api/responses", api_mode="responses"), environ=env)
    assert t.api_mode == "responses"
    with pytest.raises(ConfigError) as info:
        ApiTransport(registry.get_spec("api/responses"), Settings(backend="api/responses", api_mode="chat_completions"), environ=env)
    assert "HARNESS_API_MODE=chat_completions" in str(info.value)
    with pytest.raises(ConfigError):  # the plain id still needs HARNESS_API_MODE
        ApiTransport(registry.BUILTIN_SPECS["api"], Settings(backend="api"), environ=env)


@pytest.mark.parametrize("mode", API_MODES)
def test_each_column_is_served_its_own_wire(mode, tmp_path):
    """The adapter of each column talks to a server of that protocol: the requests go to the
    mode's path, and the tool results the model saw are read from that wire's shape."""
    from harnesscheck.kit.levels import adapter_for
    from harnesscheck.kit.session import ToolCall

    but = adapter_for(registry.get_spec(f"api/{mode}"), "offline", tmp_path)
    run = but.run_tools([ToolCall("read_file", {"path": "README.md"})])
    paths = {req["path"] for req in run.requests}
    assert paths == {{"anthropic_messages": "/v1/messages", "chat_completions": "/v1/chat/completions", "responses": "/v1/responses"}[mode]}
    assert any("hello from the worktree" in text for text in run.model_saw), (run.outcome.status, run.outcome.message, run.model_saw)
    assert but.tools_offered(run) and "read_file" in but.tools_offered(run)
    assert f"{'Anthropic Messages' if mode == 'anthropic_messages' else 'OpenAI'}" in but.provenance()
    assert "scenarios: tools" in but.provenance()
    for req in run.requests:  # the key travelled in its header only
        assert but.key not in json.dumps(req["visible_headers"]) and but.key not in req["body"]


def test_a_harness_cell_names_the_fixtures_it_replayed_and_where_they_came_from(tmp_path):
    from harnesscheck.kit.levels import adapter_for

    cursor = adapter_for(registry.get_spec("cursor"), "offline", tmp_path / "c")
    cursor.load_fixture("success")
    assert "fixtures/cursor/success.json (written from references" in cursor.provenance()
    claude = adapter_for(registry.get_spec("claude-code"), "offline", tmp_path / "cl")
    claude.load_fixture("success")
    assert "fixtures/claude/success.json (recorded from claude 2.1.332" in claude.provenance()


def test_the_matrix_keeps_provenance_per_cell():
    from harnesscheck.kit.matrix import combine, to_html, to_json

    report = Report(
        kit_version="0",
        catalog_hash="h",
        backends=[BackendInfo(id=c, kind="api") for c in COLUMNS[:2]],
        levels=["offline"],
        started_at="2026-12-02T00:00:00+00:00",
        cells=[
            CellResult(check="usage.x", backend=COLUMNS[0], level="offline", outcome="passed", area="usage", provenance="scripted server A"),
            CellResult(check="usage.x", backend=COLUMNS[1], level="offline", outcome="passed", area="usage", provenance="scripted server B"),
        ],
    )
    m = combine([report])
    data = to_json(m)
    assert data["cells"][COLUMNS[0]]["offline"]["usage.x"]["provenance"] == "scripted server A"
    assert data["cells"][COLUMNS[1]]["offline"]["usage.x"]["provenance"] == "scripted server B"
    assert "from: scripted server B" in to_html(m)
