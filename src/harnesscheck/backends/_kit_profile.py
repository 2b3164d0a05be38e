"""KitProfile: what the conformance kit must know of one backend's CLI, kept beside that backend.

Requirements kept here:
- The kit (src/harnesscheck/kit/) names no CLI or agent (tests/test_layers.py). Every fact it
  needs of one CLI is a field of a KitProfile: the fake executable that stands in for it
  offline, how its fixtures state usage, cost and the served model, the built-in calls a
  hostile model makes through it, its login files and the credential stores of its real
  users, where it reads its MCP servers and which tools it offers, and its loopback and live
  specifics, and the reader of its event log the post-run audit uses. Each backend fills one
  in `backends/<backend>/kit_profile.py`; its ProviderSpec names it (`kit_profile="module:attr"`)
  and the kit finds it through `harnesscheck.backends.registry.kit_profile(spec)`. A third party adds a CLI without editing the kit.
- Plain data where the fact is data; a function where the fact is a reader of the CLI's own
  format (its stream events, its config files, its argv). Such a function lives in the
  backend's folder and the profile points to it. Functions get plain dicts and the kit's
  objects (a SessionRun, a Facts) duck-typed: nothing here imports the kit.
- The same profile tells `harnesscheck doctor` and `harnesscheck install-clis` what they know of
  the backend (its `doctor`, `npm_runtime_deps` and `pip_runtime` fields, backends/_setup_profile.py),
  and tells `harnesscheck record` how its fixtures are recorded (`recording`,
  backends/_recording_profile.py).
- The empty profile, KitProfile(), is what a backend without one gets: no fake CLI, no facts
  read from fixtures, no hostile built-in calls, no login files, no tools read from its config.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from harnesscheck.backends._recording_profile import RecordingProfile
from harnesscheck.backends._setup_profile import DoctorProfile, NpmRuntimeDeps, PipRuntime

if TYPE_CHECKING:
    from harnesscheck.backends.audit import AuditReader

#: A reader of facts from a fixture: (the main chain's emitted events, the fixture's placeholder
#: values `{{model}}` / `{{model_base}}`, the kit's Facts to fill: usage, cost_usd, served_model,
#: helper_models). It sets only what the fixture states.
FactsReader = Callable[[list[dict], Mapping[str, str], Any], None]


def _frozen(mapping: Mapping | None = None) -> Mapping:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True)
class ReasoningProfile:
    """An api backend whose model is one call of another backend's CLI per host turn
    (reasoning-only): the kit runs that backend's pinned CLI at the loopback level."""

    #: The registered backend whose pinned CLI (and loopback scripts) this one runs.
    cli_backend: str
    #: The number of model turns a rendered prompt holds (the scripted server serves turn N to it).
    turn_of_prompt: Callable[[str], int]
    #: Why the backend has no offline cells (the skip message of each).
    offline_skip: str


@dataclass(frozen=True)
class KitProfile:
    """What the kit knows of one backend's CLI. See the module docstring."""

    # -- offline: the fake CLI replaying fixtures/<fake_name>/ --
    #: The fake executable (fake_clis/<name>) and fixture directory standing in for the CLI;
    #: None: no fake stands in for it (its offline cells skip `adapter-not-implemented`).
    fake_name: str | None = None
    #: The CLI repeats each main-chain message event once per content block (same id, same usage):
    #: the scenario with them repeated so, for `repeated_usage` (a parser that sums per line is
    #: caught). None: the CLI reports usage once per turn.
    repeat_usage_events: Callable[[dict], dict] | None = None
    #: Reads usage, vendor cost, served and helper models from a fixture's events (FactsReader).
    fixture_facts: FactsReader | None = None
    #: The assistant text a scenario shows before it hangs (its steps -> text or None).
    stall_text: Callable[[dict], str | None] | None = None
    #: What a hostile model tries with the CLI's audited built-ins: scenario -> (the built-in
    #: call as the CLI's stream shows it, its arguments). `~` stays unexpanded.
    hostile_calls: Mapping[str, tuple[str, dict]] = field(default_factory=_frozen)
    #: The stream lines the CLI prints for one built-in call that ran: (tool, args) -> steps.
    hostile_steps: Callable[[str, dict], list[dict]] | None = None
    #: The CLI waits for its (slow) bridge before the first turn: the `mcp_slow` replay starts it.
    waits_for_bridge: bool = False

    # -- the host the CLI runs in --
    #: Host files (relative to HOME) the backend may hand its CLI by design: its own login.
    login_files: tuple[str, ...] = ()
    #: The credential and config stores a real user of this CLI has (path under HOME ->
    #: content template, `{c}` the workspace canary, braces doubled): planted in the hostile
    #: host HOME of every offline cell, whichever backend runs there.
    host_files: Mapping[str, str] = field(default_factory=_frozen)
    #: Variables of this CLI's vendor a real user's shell has (name -> template, `{c}` the canary).
    host_env: Mapping[str, str] = field(default_factory=_frozen)
    #: The CLI's config-home variables, pointed into the scratch HOME below the live level
    #: (variable -> directory under HOME).
    config_home_env: Mapping[str, str] = field(default_factory=_frozen)
    #: Variables that carry this CLI's credential or switch its provider: a parent environment
    #: holds a canary in each, and none may reach a session it did not choose to hand them to.
    credential_env: tuple[str, ...] = ()
    #: Provider variables the backend hands its CLI as a traced injection by design.
    permitted_injections: frozenset[str] = frozenset()

    # -- what the CLI was configured with --
    #: The MCP servers one file declares, when the file is one of this CLI's config files
    #: (path -> servers; None: not this CLI's file). Every profile's reader sees every file.
    mcp_config_file: Callable[[Path], dict | None] | None = None
    #: MCP servers the CLI was given through its environment (the recorded children -> servers).
    mcp_config_env: Callable[[list[dict]], dict] | None = None
    #: The tools the CLI offers its model, read from what the backend configured
    #: ((run, the MCP servers configured) -> names, `builtin:<name>` for a built-in; None: unknown).
    tools_offered: Callable[[Any, dict], list[str] | None] | None = None

    # -- loopback and live --
    #: The tool results the model got back as errors are read from the Anthropic Messages
    #: requests the CLI sent the scripted server (rather than from the outcome).
    tool_errors_at_wire: bool = False
    #: An SDK installed as a directory is started through a launcher beside it (sdk dir -> executable).
    sdk_launcher: Callable[[Path], Path] | None = None
    #: The call a hostile model makes at the loopback level to read a file outside the worktree
    #: with the CLI's own built-in (the file's path -> (the tool as the model names it, its
    #: arguments)); None: no built-in call is scripted for this CLI (`native_tool_use` skips).
    loopback_builtin_read: Callable[[str], tuple[str, dict]] | None = None
    #: The CLI's model wire carries cache-write tokens (Anthropic Messages'
    #: `cache_creation_input_tokens`): the scripted server serves some, so a parser that drops them is seen.
    wire_cache_write: bool = False
    #: The vendor cost one line of the CLI's stdout states (its parsed event -> USD, or None),
    #: summed over the run: what `usage.*` compares the backend's reported cost against.
    stdout_cost: Callable[[dict], float | None] | None = None
    #: What this machine lacks for a live run with the user's real login (HOME -> why, or None).
    live_login_missing: Callable[[Path], str | None] | None = None
    #: Set for an api backend whose model is another backend's CLI (reasoning-only).
    reasoning: ReasoningProfile | None = None

    # -- the post-run audit (every level and `harnesscheck run`, not the kit only) --
    #: The reader of this CLI's event log (backends/audit.py AuditReader, kept in
    #: `backends/<backend>/audit.py`); None: no post-run audit reads its log.
    audit_reader: AuditReader | None = None

    # -- harnesscheck doctor and install-clis (backends/_setup_profile.py) --
    #: What `harnesscheck doctor` knows of the backend's credentials and binary.
    doctor: DoctorProfile = field(default_factory=DoctorProfile)
    #: The package the CLI would fetch at each session start, pre-installed by install-clis.
    npm_runtime_deps: NpmRuntimeDeps | None = None
    #: The backend's runtime is a Python package install-clis puts in the cache with pip.
    pip_runtime: PipRuntime | None = None

    # -- harnesscheck record (backends/_recording_profile.py) --
    #: How `harnesscheck record` makes the CLI's offline fixtures from the real CLI at the
    #: loopback level; None: its fixtures are not recorded.
    recording: RecordingProfile | None = None


#: The profile of a backend that has none.
NO_PROFILE = KitProfile()


def first_text_before_hang(scenario: dict, text_of: Callable[[dict], str | None]) -> str | None:
    """The first main-chain assistant text (`text_of(event)`, blank ignored) the scenario's
    emitted events show before its first `hang` step; None if none."""
    for step in scenario.get("steps", []):
        if "hang" in step:
            return None
        event = step.get("emit")
        if isinstance(event, dict):
            text = text_of(event)
            if text is not None and text.strip():
                return text
    return None


def assistant_text(event: dict) -> str | None:
    """The text blocks of a main-chain `assistant` event in the stream-json form (an Anthropic
    Messages `message` inside; more than one CLI prints it), None for any other event."""
    if event.get("type") != "assistant" or event.get("parent_tool_use_id"):
        return None
    content = (event.get("message") or {}).get("content") or []
    return "".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")


def repeat_assistant_events(scenario: dict) -> dict:
    """The scenario with each main-chain stream-json `assistant` event emitted three times (same
    id, same usage), as a CLI that prints a message once per content block does."""
    steps = []
    for step in scenario.get("steps", []):
        steps.append(step)
        event = step.get("emit")
        if isinstance(event, dict) and event.get("type") == "assistant" and event.get("parent_tool_use_id") is None:
            steps.append(copy.deepcopy(step))
            steps.append(copy.deepcopy(step))
    return {**scenario, "steps": steps}


def mcp_servers_json(path: Path) -> dict:
    """`mcpServers` of a JSON config file ({} when it does not read)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return dict(data.get("mcpServers") or {}) if isinstance(data, dict) else {}
