"""Settings: the HARNESS_* variables, read from an environment mapping and an optional .env.

Only HARNESS_* names are read from a .env file; provider keys are read from the process
environment by the provider that needs them, never copied into Settings output or errors.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from harnesscheck.contracts import ConfigError


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    backend: str | None = None
    model: str | None = None
    concurrency: int = Field(default=2, gt=0)
    cli: Path | None = None
    timeout_s: float = Field(default=1800.0, gt=0)
    #: After the CLI printed its result, how long it may take to exit before its tree is ended
    #: (harness-anchors C10: the reference waits 2 s).
    linger_s: float = Field(default=2.0, ge=0, le=60)
    #: Between SIGTERM and SIGKILL when a CLI's tree is ended (deadline, linger, cancel).
    term_grace_s: float = Field(default=2.0, ge=0, le=60)
    model_mismatch: str = Field(default="warn", pattern="^(fail|warn)$")
    api_mode: str | None = Field(default=None, pattern="^(anthropic_messages|chat_completions|responses)$")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, dotenv: Path | None = None) -> "Settings":
        """Settings from HARNESS_* variables; a .env file fills only names not already set."""
        env = dict(os.environ if environ is None else environ)
        if dotenv is not None and dotenv.is_file():
            for key, value in read_dotenv(dotenv).items():
                if key.startswith("HARNESS_"):
                    env.setdefault(key, value)
        fields = {
            "backend": "HARNESS_BACKEND",
            "model": "HARNESS_BACKEND_MODEL",
            "concurrency": "HARNESS_BACKEND_CONCURRENCY",
            "cli": "HARNESS_BACKEND_CLI",
            "timeout_s": "HARNESS_BACKEND_TIMEOUT_S",
            "linger_s": "HARNESS_BACKEND_LINGER_S",
            "term_grace_s": "HARNESS_BACKEND_TERM_GRACE_S",
            "model_mismatch": "HARNESS_MODEL_MISMATCH",
            "api_mode": "HARNESS_API_MODE",
        }
        values = {f: env[v].strip() for f, v in fields.items() if env.get(v, "").strip()}
        try:
            return cls(**values)
        except ValueError as exc:
            bad = ", ".join(fields[str(e["loc"][0])] for e in exc.errors())  # type: ignore[attr-defined]
            raise ConfigError(f"invalid setting: {bad}", f"fix the value of {bad} (see README, Configuration)") from None


def read_dotenv(path: Path) -> dict[str, str]:
    """Minimal KEY=VALUE reader (comments, export prefix, single/double quotes)."""
    out: dict[str, str] = {}
    for raw in path.read_text(encoding="utf-8", errors="replace").splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        if line.startswith("export "):
            line = line[7:].lstrip()
        key, _, value = line.partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        out[key.strip()] = value
    return out
