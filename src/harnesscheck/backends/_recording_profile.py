"""RecordingProfile: what `harnesscheck record` knows of one backend's CLI, kept beside that backend.

Requirements kept here:
- loopback/record.py (the fixture recorder) names no CLI or agent (tests/test_layers.py): how each
  of a CLI's fixtures is recorded, the error answers its vendor's API documents, the credential
  the recorder takes away, and how its stdout becomes a replayable fixture are fields of the
  CLI's RecordingProfile, held by its KitProfile (`KitProfile.recording`) and found through
  `harnesscheck.backends.registry.kit_profile_of_cli`. A CLI without one cannot be recorded.
- Plain data where the fact is data (the recipes, the documented error bodies, variable names,
  the version line); a function, kept in the backend's folder, where it reads or edits the CLI's
  own format (its stream events, its config file). Nothing here imports loopback/: the error
  answers are plain `ErrorAnswer`s the recorder turns into its scripted model's turns.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


@dataclass(frozen=True)
class Recipe:
    """How one fixture is recorded.

    `credential`: what the CLI is given to authenticate with: `token` (the loopback dummy as
    a subscription token / the provider key: the normal loopback setup), `none` (nothing at
    all: the CLI's own not-logged-in path), `api_key` (a dummy API key in the profile's
    `api_key_var`, the transport in api_key mode). `broken_bridge`: the bridge command in the
    CLI's MCP config is one that cannot start. `model`: the model the request names."""

    credential: str = "token"
    broken_bridge: bool = False
    #: Seconds the bridge waits before it starts (a slow bridge); when the CLI printed nothing
    #: until then, the fixture starts with that wait as a `delay` step.
    slow_bridge_s: float = 0.0
    model: str | None = None
    #: Let the CLI run its whole retry ladder (the transport's retry_stop_after=None), so
    #: the fixture holds every notice and the final failure, not only the first notice.
    full_ladder: bool = False
    max_iters: int = 8
    timeout_s: float = 60.0
    #: Shared kit scenario whose script this fixture serves (default: its own name).
    script: str | None = None


@dataclass(frozen=True)
class ErrorAnswer:
    """An HTTP error answer the vendor's API documents, which the scripted model serves on every
    request of the scenario. `{model}` in the message stands for the profile's missing model."""

    status: int
    error_type: str
    message: str
    #: The error `code` (Responses/Chat: `context_length_exceeded`, `model_not_found`);
    #: None: the scripted server derives it from `error_type`.
    code: str | None = None


#: What every stored recording made without a credential says of it.
NO_CREDENTIAL_NOTE = "no credential at all (no token, no key, no login)"


@dataclass(frozen=True)
class RecordingProfile:
    """What the fixture recorder knows of one CLI. See the module docstring."""

    #: Fixture name -> how it is recorded. Everything else in fixtures/<cli>/ is hand-written.
    recipes: Mapping[str, Recipe]
    #: A model name no scripted server knows (the `model_not_found` recipe asks for it).
    missing_model: str
    #: Scenario -> the error the vendor's API answers in it (served instead of the kit's
    #: script). The kit's own scripts serve every other scenario.
    error_answers: Mapping[str, ErrorAnswer] = field(default_factory=lambda: MappingProxyType({}))
    #: The module whose `bridge_command` the transport calls: the recorder replaces it there
    #: while it records a bridge that cannot start or starts slowly.
    bridge_module: str = ""
    #: The variables that carry the loopback credential; a recording without one takes them away.
    credential_vars: tuple[str, ...] = ()
    #: For a recipe without a credential: edits the CLI's config so it sends none at all (the
    #: invocation's injections -> None; it changes the files they point to). None: taking the
    #: variables away is enough.
    strip_credential_config: Callable[[Mapping[str, str]], None] | None = None
    #: The variable a dummy API key is given in for an `api_key` recipe (the transport in
    #: api_key mode, `credential_vars` taken away); None: the CLI has no API-key recording.
    api_key_var: str | None = None
    #: What the fixture's provenance notes say of the credential, by recipe `credential`.
    credential_notes: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({"none": NO_CREDENTIAL_NOTE}))
    #: The model the fake's `{{model}}` stands for in a recording ((recipe, the raw stdout
    #: lines) -> model or None); the fixture keeps it as `default_model`. None: no model is.
    placeholder_model: Callable[[Recipe, list[str]], str | None] | None = None
    #: Makes one stdout event the fake's placeholders where it echoes what the transport asked
    #: for ((event, placeholder_model, the `mcp_server_fields` to fill) -> event).
    placeholders: Callable[[dict, str | None, dict], dict] | None = None
    #: The bridge call one stdout event shows (event -> `{name, arguments}` or None): the
    #: replay makes it too, before the event (its trace is the host's record).
    replayed_bridge_call: Callable[[dict], dict | None] | None = None
    #: The CLI awaits its MCP servers before the first request: the replay starts the
    #: configured bridge too (fixture `"mcp": "connect"`), unless the recipe broke it or gave
    #: no credential.
    replay_connects_bridge: bool = False
    #: The line `--version` prints (`{version}`: the pinned version).
    version_line: str = "{version}"
    #: Directories the CLI makes in its temp dir named `<name>-<uid>`: the side effects
    #: `record` reports name them `<name>-<uid>`.
    side_effect_uid_dirs: tuple[str, ...] = ()
