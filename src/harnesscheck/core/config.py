"""Settings: the HARNESS_* variables, read from an environment mapping and an optional .env.

`Settings(...)` is a plain value: constructing one reads nothing (a library host passes what
it wants). `Settings.from_env(environ, dotenv)` reads the variables through pydantic-settings:
the environment wins over the .env file; of a .env file only the HARNESS_* names below are
read (a provider key in it is never read into settings, so it can never reach an error or a
dump). Each field's `description` is its rule; an invalid value raises `ConfigError` naming
the variable, the value, the rule and pydantic's reason, e.g.
`HARNESS_BACKEND_TIMEOUT_S='-5': must be a positive, finite number of seconds (pydantic: Input should be greater than 0)`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from harnesscheck import __version__
from harnesscheck.core.contracts import ConfigError

_SECONDS_0_60 = "must be a number of seconds from 0 to 60"
_URL_RULE = r"^https?://[^\s/?#]+(/[^\s?#]*)?$"


class Settings(BaseModel):
    """The HARNESS_* settings. Each field's validation alias is its variable's name."""

    model_config = ConfigDict(frozen=True, extra="forbid", validate_by_name=True, validate_by_alias=True, str_strip_whitespace=True)

    backend: str | None = Field(default=None, validation_alias="HARNESS_BACKEND", description="a registered backend id or module:factory")
    model: str | None = Field(default=None, validation_alias="HARNESS_BACKEND_MODEL", description="a model name inside the backend")
    concurrency: int = Field(default=2, gt=0, validation_alias="HARNESS_BACKEND_CONCURRENCY", description="must be a whole number of sessions, 1 or more")
    cli: Path | None = Field(default=None, validation_alias="HARNESS_BACKEND_CLI", description="must be the path of the CLI binary")
    timeout_s: float = Field(
        default=1800.0, gt=0, allow_inf_nan=False, validation_alias="HARNESS_BACKEND_TIMEOUT_S", description="must be a positive, finite number of seconds"
    )
    #: After the CLI printed its result, how long it may take to exit before its tree is ended
    #: (harness-anchors C10: the reference waits 2 s).
    linger_s: float = Field(default=2.0, ge=0, le=60, allow_inf_nan=False, validation_alias="HARNESS_BACKEND_LINGER_S", description=_SECONDS_0_60)
    #: Between SIGTERM and SIGKILL when a CLI's tree is ended (deadline, linger, cancel).
    term_grace_s: float = Field(default=2.0, ge=0, le=60, allow_inf_nan=False, validation_alias="HARNESS_BACKEND_TERM_GRACE_S", description=_SECONDS_0_60)
    #: Whether each harness CLI and ACP agent runs in a sandbox of its own (doc/SPEC-sandbox.md):
    #: auto (the default: where the machine allows it, else the process guard alone, said on the
    #: outcome), require (a session that cannot be sandboxed does not start), off (the process
    #: guard alone).
    sandbox: str = Field(default="auto", pattern="^(auto|off|require)$", validation_alias="HARNESS_BACKEND_SANDBOX", description="must be auto, off or require")
    model_mismatch: str = Field(default="warn", pattern="^(fail|warn)$", validation_alias="HARNESS_MODEL_MISMATCH", description="must be fail or warn")
    api_mode: str | None = Field(
        default=None,
        pattern="^(anthropic_messages|chat_completions|responses)$",
        validation_alias="HARNESS_API_MODE",
        description="must be anthropic_messages, chat_completions or responses",
    )
    #: The deepseek backend's API key (its only source: never ANTHROPIC_/OPENAI_ keys, never the
    #: runtime's own DEEPSEEK_API_KEY fallback). A secret: never printed, never in argv.
    deepseek_api_key: SecretStr | None = Field(
        default=None, validation_alias="HARNESS_DEEPSEEK_API_KEY", description="the DeepSeek API key for the deepseek backend"
    )
    #: An ACP agent's model key and endpoint (`{key}`, `{base_url}` of its profile; doc/SPEC-acp.md):
    #: the only source outside the loopback level. A secret: never printed, never in argv.
    acp_api_key: SecretStr | None = Field(default=None, validation_alias="HARNESS_ACP_API_KEY", description="the model API key handed to an ACP agent")
    acp_base_url: str | None = Field(
        default=None,
        pattern=_URL_RULE,
        validation_alias="HARNESS_ACP_BASE_URL",
        description="must be the model endpoint for an ACP agent, http(s)://host[:port][/path]",
    )
    # GitHub Copilot (backends/copilot/, doc/SPEC-copilot.md): every endpoint is a setting, so a
    # host (or a test) points them at an enterprise host or a mock on 127.0.0.1.
    copilot_url: str = Field(
        default="https://api.githubcopilot.com",
        pattern=_URL_RULE,
        validation_alias="HARNESS_COPILOT_URL",
        description="must be the Copilot API base URL, http(s)://host[:port][/path]",
    )
    github_url: str = Field(
        default="https://github.com",
        pattern=_URL_RULE,
        validation_alias="HARNESS_GITHUB_URL",
        description="must be the GitHub web URL of the device flow, http(s)://host[:port][/path]",
    )
    github_api_url: str = Field(
        default="https://api.github.com",
        pattern=_URL_RULE,
        validation_alias="HARNESS_GITHUB_API_URL",
        description="must be the GitHub API URL of the token exchange, http(s)://host[:port][/path]",
    )
    copilot_client_id: str = Field(
        default="Ov23li8tweQw6odWQebz",
        pattern=r"^[A-Za-z0-9._-]{1,100}$",
        validation_alias="HARNESS_COPILOT_CLIENT_ID",
        description="must be a GitHub OAuth app client id (letters, digits, . _ -)",
    )
    #: Copilot's editor headers: who is calling. Defaults name harnesscheck itself for the editor
    #: and the integration id the public chat endpoint is reported to accept from third-party
    #: clients; neither has been verified against the live API here (doc/SPEC-copilot.md, Limits).
    copilot_editor_version: str = Field(
        default=f"harnesscheck/{__version__}",
        pattern=r"^[A-Za-z0-9._/+-]{1,100}$",
        validation_alias="HARNESS_COPILOT_EDITOR_VERSION",
        description="must be an Editor-Version value, e.g. name/1.2.3",
    )
    copilot_integration_id: str = Field(
        default="vscode-chat",
        pattern=r"^[A-Za-z0-9._-]{1,100}$",
        validation_alias="HARNESS_COPILOT_INTEGRATION_ID",
        description="must be a Copilot-Integration-Id (letters, digits, . _ -)",
    )
    auth_dir: Path | None = Field(default=None, validation_alias="HARNESS_AUTH_DIR", description="must be the directory of harnesscheck's own auth.json")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, dotenv: Path | None = None) -> "Settings":
        """Settings from HARNESS_* variables; a .env file fills only names not already set.
        An empty (or blank) variable counts as unset."""
        env = os.environ if environ is None else environ
        # The environment is handed to pydantic-settings as init values (they win over the
        # .env source), so a host's own mapping (doctor, tests) is read exactly like os.environ.
        given = {name: env[name] for name in ENV_NAMES.values() if (env.get(name) or "").strip()}
        dotenv = Path(dotenv) if dotenv is not None and Path(dotenv).is_file() else None
        try:
            read = _from_environment()(_env_file=dotenv, **given)
        except ValidationError as exc:
            raise _config_error(exc, given, dotenv) from None
        return cls(**read.model_dump(exclude_unset=True))  # model_fields_set: what the host set, even to a default


#: Field -> the variable it is read from.
ENV_NAMES: dict[str, str] = {name: str(f.validation_alias) for name, f in Settings.model_fields.items()}


@cache
def _from_environment() -> type:
    """Settings as a pydantic-settings class: init values (the environment), then the .env
    file; nothing else (no secrets dir, no os.environ behind the caller's back). Built on first
    use, so importing config (every transport does) does not import pydantic-settings."""
    from pydantic_settings import BaseSettings, SettingsConfigDict

    class FromEnvironment(BaseSettings, Settings):
        model_config = SettingsConfigDict(
            case_sensitive=True,
            env_ignore_empty=True,
            extra="ignore",
            frozen=True,
            env_file_encoding="utf-8",
        )

        @classmethod
        def settings_customise_sources(cls, settings_cls, init_settings, env_settings, dotenv_settings, file_secret_settings):
            return (init_settings, dotenv_settings)

    return FromEnvironment


def _config_error(exc: ValidationError, given: Mapping[str, str], dotenv: Path | None) -> ConfigError:
    """One line per bad variable: NAME='value': the rule (pydantic's reason) [from .env]."""
    parts: list[str] = []
    names: list[str] = []
    fields_by_alias = {alias: field for field, alias in ENV_NAMES.items()}
    for err in exc.errors():
        name = str(err["loc"][0]) if err.get("loc") else "?"
        field = fields_by_alias.get(name, name)
        info = Settings.model_fields.get(field)
        rule = info.description if info is not None and info.description else "invalid"
        value = str(err.get("input", ""))
        shown = value if len(value) <= 80 else value[:77] + "..."
        where = "" if name in given or dotenv is None else f" (from {dotenv})"
        parts.append(f"{name}={shown!r}: {rule} (pydantic: {err.get('msg', 'invalid')}){where}")
        names.append(name)
    bad = ", ".join(dict.fromkeys(names))
    return ConfigError("; ".join(parts), f"set {bad} to a valid value in the environment or .env, or unset it (README, Configuration)")
