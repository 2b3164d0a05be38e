"""ACP agent profiles: what the host must know of one agent, as data (doc/SPEC-acp.md).

Requirements kept here:
- A profile is a TOML file beside this backend (`backends/acp/profiles/<agent>.toml`) or any
  file a user names (`--backend acp:<file>.toml`); `--backend 'acp:<command line>'` builds an
  ad-hoc profile from the command alone. No agent is known by a branch in code: each fact is a
  field here.
- Nothing from the host environment is read: the agent's env is the host's built env
  (envpolicy) plus exactly `env` (placeholders `{base_url}`, `{key}`, `{home}`, `{cwd}`),
  and its HOME holds only the `files` the profile writes there and the `home_from` paths it
  copies or links there (a missing source is a ConfigError naming install-clis).
- The error table maps an agent's JSON-RPC error (`code`, a `data` key's value, message words)
  to an ErrorClass; the first matching rule wins, before the generic rules (errors.py).
"""

from __future__ import annotations

import shlex
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from harnesscheck.core.contracts import ConfigError, ErrorClass

PROFILE_DIR = Path(__file__).parent / "profiles"

#: The model wire an agent speaks to its model server (what the loopback level scripts).
Wire = Literal["anthropic_messages", "responses", "chat_completions", "gemini"]

#: The env an ad-hoc profile injects per wire: the agent's model endpoint and its key.
WIRE_ENV: dict[str, dict[str, str]] = {
    "anthropic_messages": {"ANTHROPIC_BASE_URL": "{base_url}", "ANTHROPIC_API_KEY": "{key}"},
    "responses": {"OPENAI_BASE_URL": "{base_url}/v1", "OPENAI_API_KEY": "{key}"},
    "chat_completions": {"OPENAI_BASE_URL": "{base_url}/v1", "OPENAI_API_KEY": "{key}"},
    "gemini": {"GOOGLE_GEMINI_BASE_URL": "{base_url}", "GEMINI_API_KEY": "{key}"},
}


class ErrorRule(BaseModel):
    """One row of an agent's error table. Every field given must match; `data_key` alone
    matches when the key is present, with `data_value` when it has that value (a dict value
    matches when it holds `data_value` as a key, as codex's `codex_error_info` does)."""

    model_config = ConfigDict(extra="forbid")

    error_class: ErrorClass
    code: int | None = None
    data_key: str | None = None
    data_value: str | None = None
    message_contains: str | None = None


class PermissionMode(BaseModel):
    """How the host puts the agent in a mode where every side effect asks."""

    model_config = ConfigDict(extra="forbid")

    #: `session/set_mode` with this mode id (None: the agent's default mode already asks).
    mode_id: str | None = None
    #: Or `session/set_config_option` with {configId, value} (agents that expose modes only there).
    config_option: dict[str, str] | None = None


class BuiltinCall(BaseModel):
    """How the scripted model calls one of the agent's own built-ins at loopback (a profile
    with built-ins on): its wire name and arguments, `{path}` / `{content}` / `{command}` filled."""

    model_config = ConfigDict(extra="forbid")

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)

    def filled(self, values: dict[str, str]) -> dict[str, Any]:
        """The arguments with the placeholders filled."""

        def filled(value):
            if isinstance(value, str):
                return fill(value, values)
            if isinstance(value, dict):
                return {k: filled(v) for k, v in value.items()}
            if isinstance(value, list):
                return [filled(v) for v in value]
            return value

        return filled(self.arguments)


class Install(BaseModel):
    """Where `install-clis` gets the agent (an npm package at a version, the bin to run)."""

    model_config = ConfigDict(extra="forbid")

    npm: str | None = None  # "pkg@version"
    bin: str | None = None  # path inside the install dir
    #: The bin answers `--version` with its version (codex-acp 0.16.0 does not: then the
    #: installed package's manifest says the version, and install-clis checks that).
    prints_version: bool = True


class AcpProfile(BaseModel):
    """One ACP agent, as the host drives it. See the module docstring and doc/SPEC-acp.md."""

    model_config = ConfigDict(extra="forbid")

    name: str
    #: The agent's command line; argv[0] is looked up on the host PATH when not absolute.
    #: `{fake_clis}` is this checkout's fake_clis directory; `{python}` the host interpreter.
    command: list[str] = Field(min_length=1)
    version: str | None = None
    wire: Wire = "anthropic_messages"
    #: Injected into the agent's env (names traced, values never): placeholders as above.
    env: dict[str, str] = Field(default_factory=dict)
    #: Files written into the agent's private HOME before it starts (path under HOME -> text).
    files: dict[str, str] = Field(default_factory=dict)
    #: Paths under HOME made from host paths before the agent starts (path under HOME -> host
    #: path, placeholders as in `env`): a file is copied, a directory linked and bound into the
    #: sandbox read-only. For what an agent would otherwise fetch from a registry at each start
    #: (opencode's plugin package, which install-clis pre-installs beside the CLI).
    home_from: dict[str, str] = Field(default_factory=dict)
    #: session/new `_meta` (e.g. claude-agent-acp's `claudeCode.options.tools = []`: built-ins off).
    session_meta: dict[str, Any] = Field(default_factory=dict)
    #: Host paths the agent's command needs in its sandbox, bound read-only: the operator's word
    #: (an ad-hoc command's own script directories; what a profile file lists). The CLI cache's
    #: installs are found from the command itself (sandbox.cache_installs).
    binds: list[str] = Field(default_factory=list)
    #: Whether the profile switches the agent's own built-in tools off (by _meta, argv or files).
    builtins_off: bool = False
    mode: PermissionMode = Field(default_factory=PermissionMode)
    #: The agent's own error forms, first match wins (see ErrorRule).
    errors: list[ErrorRule] = Field(default_factory=list)
    #: How long the host waits for `stopReason: cancelled` after `session/cancel` (s).
    cancel_bound_s: float = Field(default=2.0, gt=0)
    #: How long the host waits, once the prompt is answered and stdin closed, for the agent to
    #: exit by itself before it ends the tree (s; None: Settings.linger_s). For an agent known
    #: not to exit on stdin's EOF (acp.exits-on-stdin-close fails it), so that no session waits
    #: out the whole default for nothing. A linger the host chose wins: passed to the transport
    #: (`linger_s=`, as the kit's acp.exits-on-stdin-close does) or Settings.linger_s set by the
    #: host (HARNESS_BACKEND_LINGER_S or in code, even to the default's value).
    linger_s: float | None = Field(default=None, ge=0, le=60)
    #: After an auth-looking signal (a notification named in `auth_signals` reporting no login,
    #: or an auth line on stderr), how long without any update before the host ends the
    #: session blocked/auth instead of waiting out a silent retry ladder (s).
    auth_stall_s: float = Field(default=10.0, gt=0)
    auth_signals: list[str] = Field(default_factory=lambda: ["_auth/status_update"])
    #: How the agent names the bridge's tools in tool_call titles/names (`{tool}` placeholder).
    bridge_tool_names: list[str] = Field(default_factory=lambda: ["mcp__bridge__{tool}", "mcp_bridge_{tool}", "bridge_{tool}", "{tool}"])
    #: The agent's own built-ins the scripted model calls at loopback for an acp.* check's local
    #: `write` and `shell` steps (a profile with built-ins on; none when they are off).
    builtin_calls: dict[Literal["write", "shell"], BuiltinCall] = Field(default_factory=dict)
    install: Install = Field(default_factory=Install)
    #: The agent replays a scripted turn given `--scenario FILE --record FILE` (the fake ACP
    #: agent): the offline level can drive it. A real agent needs a model: the loopback level.
    replays_scenarios: bool = False
    #: The agent plays a JSON script given as its prompt (harnesscheck's own `acp serve --backend
    #: fake`: FakeScript, doc/SPEC-fake.md): the offline level drives it by the prompt it sends.
    scripted_by_prompt: bool = False
    description: str = ""

    def argv(self, values: dict[str, str]) -> list[str]:
        return [fill(a, values) for a in self.command]

    def injected_env(self, values: dict[str, str]) -> dict[str, str]:
        return {k: fill(v, values) for k, v in self.env.items()}


def fill(text: str, values: dict[str, str]) -> str:
    """`{name}` placeholders of `values` replaced; any other brace text is left as it is."""
    for name, value in values.items():
        text = text.replace("{" + name + "}", value)
    return text


def load_profile(path: Path | str) -> AcpProfile:
    """A profile from a TOML file; a malformed one is a ConfigError naming the field."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read ACP profile {path.name}: {exc.strerror}", "give the path of a readable .toml file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"ACP profile {path.name} is not valid TOML: {exc}", "fix the file") from None
    return validate_profile(data, path.name)


def validate_profile(data: dict, where: str) -> AcpProfile:
    from pydantic import ValidationError

    try:
        return AcpProfile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"ACP profile {where}: {loc}: {first['msg']}", "see doc/SPEC-acp.md, 'Profile format'") from None


def builtin_profile(name: str) -> AcpProfile:
    path = PROFILE_DIR / f"{name}.toml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in PROFILE_DIR.glob("*.toml")))
        raise ConfigError(f"no ACP profile named {name!r}", f"use one of: {known}, or --backend acp:<file>.toml")
    return load_profile(path)


#: `acp:<command line>` options the host reads (and removes) before the command: `--wire=<wire>`.
WIRE_OPTION = "--hc-wire="
#: `acp:--hc-builtins-off <command>`: the agent has no tools of its own (only the host's MCP
#: servers): it claims builtin_tools_off, which the audit checks verify at the model wire.
BUILTINS_OFF_OPTION = "--hc-builtins-off"


def adhoc_profile(command_line: str) -> AcpProfile:
    """The profile of `--backend 'acp:<command line>'`: the command, and the model wire given
    by a leading `--hc-wire=<wire>` word (default anthropic_messages: ANTHROPIC_BASE_URL and
    ANTHROPIC_API_KEY; responses / chat_completions: OPENAI_BASE_URL and OPENAI_API_KEY)."""
    words = shlex.split(command_line)
    wire = "anthropic_messages"
    builtins_off = False
    while words and (words[0].startswith(WIRE_OPTION) or words[0] == BUILTINS_OFF_OPTION):
        word = words.pop(0)
        if word == BUILTINS_OFF_OPTION:
            builtins_off = True
        else:
            wire = word[len(WIRE_OPTION) :]
    if not words:
        raise ConfigError("acp: names no command", "e.g. --backend 'acp:npx my-agent --acp'")
    if wire not in WIRE_ENV:
        raise ConfigError(f"unknown model wire {wire!r}", f"use one of: {', '.join(WIRE_ENV)}")
    # the scripts the command names by absolute path (`node /abs/agent.js`): their directories,
    # with what they load beside them, are bound into the agent's sandbox read-only
    binds = sorted({str(Path(w).parent if Path(w).is_file() else Path(w)) for w in words[1:] if Path(w).is_absolute() and Path(w).exists()})
    return AcpProfile(
        name=Path(words[0]).name,
        command=words,
        wire=wire,
        env=dict(WIRE_ENV[wire]),  # type: ignore[arg-type]
        builtins_off=builtins_off,
        binds=binds,
        description=f"ad-hoc ACP agent: {command_line}",
    )


def profile_for(backend_id: str) -> AcpProfile:
    """The profile a backend id names: `acp:<file>.toml`, `acp:<command line>`, or `acp-<name>`
    (a profile shipped in backends/acp/profiles/)."""
    if backend_id.startswith("acp:"):
        rest = backend_id[4:].strip()
        if rest.endswith(".toml") and " " not in rest:
            return load_profile(Path(rest).expanduser())
        return adhoc_profile(rest)
    if backend_id.startswith("acp-"):
        return builtin_profile(backend_id[4:].partition("==")[0])
    raise ConfigError(f"{backend_id!r} names no ACP agent", "use acp:<command line>, acp:<file>.toml or acp-<profile>")
