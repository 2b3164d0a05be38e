"""BridgeSpec: everything one bridge process needs, written by the transport, read by the bridge.

Contract (doc/SPEC-bridge.md): the spec holds the tool scope, the run dir, the per-session
trace path, the session id and optionally the host pid to watch. Nothing secret: no key, no
token, no environment. It round-trips through JSON unchanged. The bridge reads no other
configuration (no .env, nothing from its cwd or its environment).

Also here, because transports need them without importing the server (or mcp):
`bridge_argv(spec_path)` / `bridge_env()` for the CLI's MCP config, and
`summarize_trace(path)` to fold a bridge trace into the outcome.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from harnesscheck.core.contracts import Refusal
from harnesscheck.core.policy import Policy
from harnesscheck.core.scope import ToolScope

SPEC_VERSION = 1
#: The MCP server name every transport registers: claude sees `mcp__bridge__read_file`.
SERVER_NAME = "bridge"


class BridgeSpec(BaseModel):
    """One bridge session: scope, run dir, trace file, session id, host pid to watch."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: int = SPEC_VERSION
    scope: ToolScope
    run_dir: Path
    trace_path: Path = Field(description="this session's own JSONL trace; never shared")
    session_id: str = Field(min_length=1, max_length=200)
    parent_pid: int | None = Field(default=None, gt=0, description="host pid; the bridge exits when it dies")
    policy: Policy | None = Field(
        default=None,
        description="the host's tool policy (doc/SPEC-policy.md); an approval_required call is asked of the "
        "host's approver through the host link (host_approver), else denied unless pre-approved",
    )
    host_link: bool = Field(
        default=False,
        description="the host listens on <run_dir>/hostlink.sock for this session's live events (bridge/hostlink.py)",
    )
    host_approver: bool = Field(
        default=False,
        description="the host has an approver: an approval_required call is asked through the host link",
    )
    root_identity: tuple[int, int] | None = Field(
        default=None,
        description="(st_dev, st_ino) of the scope root as the host opened it; the bridge refuses every call "
        "(root_changed) when the root it opens is another directory",
    )

    @field_validator("run_dir", "trace_path")
    @classmethod
    def _absolute(cls, value: Path) -> Path:
        if not value.is_absolute():
            raise ValueError("must be an absolute path")
        return value

    @field_validator("version")
    @classmethod
    def _known_version(cls, value: int) -> int:
        if value != SPEC_VERSION:
            raise ValueError(f"unsupported bridge spec version {value} (this bridge reads {SPEC_VERSION})")
        return value


def write_spec(spec: BridgeSpec, path: Path) -> Path:
    """Write the spec as JSON (mode 0600, atomically: a half-written spec is never read)."""
    from harnesscheck.contain.rundir import replace_private

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # The temp file has a random name (mkstemp, O_EXCL): a predictable one could be planted.
    return replace_private(path, spec.model_dump_json(indent=2) + "\n")


def spec_sha256(content: bytes) -> str:
    """The digest (lowercase hex) a host pins a spec's exact bytes with: not a secret, only
    a fact about a file the host wrote (`--spec-sha256`)."""
    return hashlib.sha256(content).hexdigest()


def load_spec(path: Path, *, sha256: str | None = None) -> BridgeSpec:
    """Read and validate a spec; raises ValueError with a readable message when it is bad.

    With `sha256`, the bytes read must have that digest (else ValueError naming the
    mismatch, never the content); the spec is parsed from those same bytes, never re-read."""
    try:
        content = Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read bridge spec {path}: {exc.strerror}") from None
    if sha256 is not None and not hmac.compare_digest(spec_sha256(content).encode(), sha256.strip().lower().encode("utf-8", "replace")):
        raise ValueError(f"bridge spec {path} is not the one the host registered (its sha256 differs from --spec-sha256); refusing to serve it")
    try:
        raw = content.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"invalid bridge spec {path}: not UTF-8") from None
    try:
        return BridgeSpec.model_validate_json(raw)
    except ValidationError as exc:  # locations and messages only: never echo input values
        problems = "; ".join(f"{'.'.join(str(p) for p in err['loc']) or '(root)'}: {err['msg']}" for err in exc.errors(include_input=False, include_url=False))
        raise ValueError(f"invalid bridge spec {path}: {problems}") from None


# ---------------------------------------------------------------------------------------
# How a CLI starts the bridge


def _interpreter() -> str:
    """The absolute path of this interpreter. Never realpath'd: a venv python is a symlink
    whose realpath is the base interpreter, which would lose the venv's site-packages."""
    exe = sys.executable or "python3"
    return exe if os.path.isabs(exe) else os.path.abspath(exe)


def _source_root() -> Path:
    """The directory that holds the `harnesscheck` package (src/ in a checkout)."""
    return Path(__file__).resolve().parent.parent.parent


@cache
def _importable_isolated(exe: str) -> bool:
    """True when `exe -I` imports this very harnesscheck (installed or editable install)."""
    try:
        proc = subprocess.run(
            [exe, "-I", "-c", "import harnesscheck, sys; sys.stdout.write(harnesscheck.__file__)"],
            capture_output=True,
            stdin=subprocess.DEVNULL,
            timeout=30,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    if proc.returncode != 0:
        return False
    found = Path(proc.stdout.decode("utf-8", "replace").strip()).resolve().parent
    return found == Path(__file__).resolve().parent.parent


def bridge_argv(spec_path: Path, *, spec_sha256: str | None = None) -> list[str]:
    """The command a transport writes into the CLI's MCP config to start the bridge.

    Absolute interpreter, isolated mode (`-I`: no cwd on sys.path, no PYTHON* variables, no
    user site) so a worktree cannot shadow a module the bridge imports. When harnesscheck is
    only importable through PYTHONPATH (a bare source checkout), `-P -s` keeps the cwd off
    sys.path while honouring the PYTHONPATH that `bridge_env()` supplies.

    With `spec_sha256` (the digest of the exact bytes the host wrote), the bridge refuses a
    spec file that was changed since: `--spec-sha256 H` goes before `--spec FILE`.
    """
    exe = _interpreter()
    flags = ["-I"] if _importable_isolated(exe) else ["-P", "-s"]
    pin = ["--spec-sha256", spec_sha256] if spec_sha256 is not None else []
    return [exe, *flags, "-m", "harnesscheck.bridge", *pin, "--spec", str(Path(spec_path).absolute())]


def bridge_env() -> dict[str, str]:
    """The env a CLI's MCP config should pass to the bridge explicitly. No secrets: only
    PYTHONPATH, and only when the package is not importable in isolated mode."""
    if _importable_isolated(_interpreter()):
        return {}
    return {"PYTHONPATH": str(_source_root())}


# ---------------------------------------------------------------------------------------
# Folding a bridge trace into the outcome


class BridgeSummary(BaseModel):
    """What the bridge did in one session, from its own trace."""

    model_config = ConfigDict(extra="forbid")

    tool_calls: int = 0
    tools_used: list[str] = Field(default_factory=list)
    refusals: list[Refusal] = Field(default_factory=list)
    writes: list[str] = Field(default_factory=list, description="scope-relative paths of allowed writes")
    reads: list[str] = Field(default_factory=list, description="scope-relative paths of allowed reads")
    started: bool = Field(default=False, description="the bridge process came up (bridge_start)")
    listed: bool = Field(default=False, description="a client fetched the tool list (bridge_listed)")
    malformed_lines: int = 0

    def __iter__(self):  # type: ignore[override]
        """Unpacks as (tool_calls, tools_used, refusals), the triple ARCHITECTURE.md names."""
        return iter((self.tool_calls, self.tools_used, self.refusals))


_WRITE_TOOLS = frozenset({"write_file", "edit_file"})


def summarize_trace(path: Path, session_id: str | None = None) -> BridgeSummary:
    """Read a bridge trace (streaming) into tool calls, tools used (first-use order), refusals.

    Only `event: "tool"` records count; with `session_id`, only that session's records.
    A missing file is an empty summary (the bridge never started or never got a call).
    Malformed lines (a torn last line after a kill) are counted, never fatal.
    """
    summary = BridgeSummary()
    seen: dict[str, None] = {}
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        return summary
    with fh:
        for raw in fh:
            try:
                rec = json.loads(raw)
            except ValueError:
                summary.malformed_lines += 1
                continue
            if not isinstance(rec, dict):
                summary.malformed_lines += 1
                continue
            if session_id is not None and rec.get("session") != session_id:
                continue
            event = rec.get("event")
            if event == "bridge_start":
                summary.started = True
                continue
            if event == "bridge_listed":
                summary.listed = True
                continue
            if event != "tool":
                continue
            tool = str(rec.get("tool", ""))
            summary.tool_calls += 1
            seen.setdefault(tool, None)
            if rec.get("decision") == "refuse":
                summary.refusals.append(Refusal(tool=tool, code=str(rec.get("code") or "unknown"), detail=str(rec.get("detail") or "")))
            elif rec.get("path") is not None:
                (summary.writes if tool in _WRITE_TOOLS else summary.reads).append(str(rec["path"]))
    summary.tools_used = list(seen)
    return summary
