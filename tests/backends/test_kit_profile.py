"""Kit profiles (backends/_kit_profile.py, registry.kit_profile): each CLI backend's profile is
found through its spec, a backend without one inherits the profile of the CLI or transport it
builds on, and each profile's readers read its own fixtures (doc/ARCHITECTURE.md "Kit profiles")."""

from __future__ import annotations

import json

import pytest

from harnesscheck.backends._kit_profile import NO_PROFILE, KitProfile
from harnesscheck.backends.registry import BUILTIN_SPECS, get_spec, kit_profile, kit_profiles
from harnesscheck.core.contracts import ConfigError, Kind, ProviderSpec


def test_every_cli_backend_names_its_profile_beside_it():
    for spec in BUILTIN_SPECS.values():
        if spec.kind == Kind.harness and spec.cli_name != "acp-agent":
            assert spec.kit_profile == f"{spec.factory.partition(':')[0]}.kit_profile:PROFILE", spec.id
            assert isinstance(kit_profile(spec), KitProfile) and kit_profile(spec).fake_name, spec.id


def test_a_spec_without_a_profile_gets_the_one_of_the_cli_it_runs():
    foreign = ProviderSpec(id="my-claude", kind=Kind.harness, label="x", factory="nowhere:Nothing", cli_name="claude")
    assert kit_profile(foreign) is kit_profile(get_spec("claude-code"))


def test_a_spec_built_on_a_profiled_transport_gets_its_profile(monkeypatch):
    import sys
    import types

    from harnesscheck.backends.claude_code_reasoning import ClaudeReasoningTransport

    module = types.ModuleType("hc_test_reasoning_child")
    module.Child = type("Child", (ClaudeReasoningTransport,), {})
    monkeypatch.setitem(sys.modules, module.__name__, module)
    spec = ProviderSpec(id="my-reasoning", kind=Kind.api, label="x", factory=f"{module.__name__}:Child")
    assert kit_profile(spec).reasoning is not None
    assert kit_profile(spec) is kit_profile(get_spec("claude-code-reasoning"))


def test_a_spec_that_builds_on_nothing_known_gets_the_empty_profile():
    assert kit_profile(get_spec("fake")) is NO_PROFILE
    assert kit_profile(get_spec("acp-fake")) is NO_PROFILE


def test_a_reference_that_is_no_profile_is_a_config_error():
    spec = ProviderSpec(id="bad", kind=Kind.harness, label="x", factory="nowhere:Nothing", kit_profile="harnesscheck.backends.registry:BUILTIN_SPECS")
    with pytest.raises(ConfigError):
        kit_profile(spec)


def test_kit_profiles_lists_each_registered_profile_once():
    profiles = kit_profiles()
    assert len(profiles) == len({id(p) for p in profiles}) == len({s.kit_profile for s in BUILTIN_SPECS.values() if s.kit_profile})


@pytest.mark.parametrize("backend", sorted(s.id for s in BUILTIN_SPECS.values() if s.kit_profile and s.kind == Kind.harness))
def test_each_profile_reads_its_own_success_fixture(backend):
    """The reader states the usage its CLI's recorded success reports, and the hostile calls
    it declares have a stream form."""
    from harnesscheck.kit.harness_adapter import fixture_facts
    from harnesscheck.testing.fakes import fixture_path

    profile = kit_profile(get_spec(backend))
    data = json.loads(fixture_path(profile.fake_name, "success").read_text(encoding="utf-8"))
    facts = fixture_facts(profile, data, None)
    assert facts.usage is not None and facts.usage.total > 0
    assert not profile.hostile_calls or profile.hostile_steps is not None
    for tool, args in profile.hostile_calls.values():
        assert profile.hostile_steps(tool, args), backend


def test_repeated_usage_events_follow_the_profile():
    """A CLI that prints a message once per content block gets its main-chain events repeated;
    one that reports usage once per turn keeps its scenario as it is."""
    from harnesscheck.kit.harness_adapter import repeat_usage_events

    scenario = {
        "steps": [
            {"emit": {"type": "assistant", "parent_tool_use_id": None, "message": {"id": "m1"}}},
            {"emit": {"type": "assistant", "parent_tool_use_id": "t1", "message": {"id": "m2"}}},
            {"emit": {"type": "result"}},
        ]
    }
    repeated = repeat_usage_events(kit_profile(get_spec("claude-code")), scenario)
    assert [s["emit"]["message"]["id"] for s in repeated["steps"] if "message" in s["emit"]] == ["m1", "m1", "m1", "m2"]
    assert repeat_usage_events(kit_profile(get_spec("codex")), scenario) is scenario
