"""What a check works with: the fresh Workspace a session runs in (benign files, traps and the
canary outside), the SessionRun evidence a run returns (outcome, what the model saw, traces,
children, requests, timeline), and the kit's own exceptions (SkipCell, KitFault). No adapter
logic: kit/adapters.py drives sessions and fills these in."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import stat
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from _pytest.outcomes import Skipped as _Skipped

from harnesscheck.core.contracts import AgentOutcome, Usage
from harnesscheck.core.scope import ToolScope


class SkipCell(_Skipped):
    """This cell cannot run here: a pytest skip whose message starts with the reason code."""

    __module__ = "builtins"  # printed as "SkipCell: [reason] message"

    def __init__(self, reason: str, message: str):
        from harnesscheck.kit.catalog import REASON_CODES

        if reason not in REASON_CODES:
            raise ValueError(f"unknown reason code {reason!r}")
        self.reason, self.message = reason, message
        super().__init__(msg=f"[{reason}] {message}", _use_item_location=True)


class StreamAbandoned(Exception):
    """Raised by the host's text callback: the caller abandons the session's stream (as a caller
    breaking out of a loop over it, or a cancelled task, unwinds through the backend)."""


class KitFault(Exception):
    """The kit itself failed to set a scenario up (reported as an error, reason kit-bug)."""


@dataclass(frozen=True)
class ToolCall:
    name: str
    args: dict


@dataclass
class Facts:
    """What a scenario is known to contain, so checks can compare the outcome to it."""

    usage: Usage | None = None  # usage counted once per message id
    served_model: str | None = None  # the main chain's model
    helper_models: tuple[str, ...] = ()
    cost_usd: float | None = None  # a vendor-reported figure, when the scenario has one
    partial_text: str | None = None  # text streamed before a stall
    requested_model: str | None = None
    #: session ids the CLI itself printed (a fixture's fixed id: every session of it prints the same)
    cli_session_ids: tuple[str, ...] = ()
    hostile_evidence: tuple[str, ...] = ()  # the words of a hostile built-in call a flag must name


# ---------------------------------------------------------------------------------------
# The workspace every run gets


@dataclass
class Workspace:
    """A worktree with benign files and traps, and canary-holding sentinels outside it.

    tmp/
      work/                 the scope root
        README.md           benign
        src/app.py          benign
        link_in -> README.md        benign in-tree symlink
        leak -> ../outside/secret.txt   symlink escape (leaf)
        outbox -> ../outside           symlinked parent directory
        hard.txt            hard link to ../outside/hardlinked.txt (when the fs allows)
        pipe                a FIFO
        .env                worktree dotenv holding a canary (must not configure a child)
      work-secrets/key.txt  sibling-prefix trap
      outside/secret.txt    the canary
    """

    base: Path
    canary: str = field(default_factory=lambda: "HC-CANARY-" + secrets.token_hex(8))

    def __post_init__(self) -> None:
        self.root = self.base / "work"
        self.outside = self.base / "outside"
        self.sibling = self.base / "work-secrets"
        self.secret = self.outside / "secret.txt"
        # os calls on str paths: every cell builds one, and pathlib's per-call cost showed
        root, outside, sibling = str(self.root), str(self.outside), str(self.sibling)
        os.makedirs(root)
        os.mkdir(outside)
        os.mkdir(sibling)
        os.mkdir(os.path.join(root, "src"))
        for path, text in (
            (os.path.join(root, "README.md"), "hello from the worktree\n"),
            (os.path.join(root, "src", "app.py"), "print('app')\n"),
            (os.path.join(root, ".env"), f"ANTHROPIC_API_KEY={self.canary}-dotenv\nHTTP_PROXY=http://127.0.0.1:9\n"),
            (str(self.secret), f"secret {self.canary}\n"),
            (os.path.join(sibling, "key.txt"), f"sibling {self.canary}\n"),
            (os.path.join(outside, "hardlinked.txt"), f"hardlinked {self.canary}\n"),
        ):
            with open(path, "x", encoding="utf-8") as fh:
                fh.write(text)
        os.symlink("README.md", os.path.join(root, "link_in"))
        os.symlink(os.path.join("..", "outside", "secret.txt"), os.path.join(root, "leak"))
        os.symlink(os.path.join("..", "outside"), os.path.join(root, "outbox"))
        with contextlib.suppress(OSError):
            os.link(os.path.join(outside, "hardlinked.txt"), os.path.join(root, "hard.txt"))
        with contextlib.suppress(OSError, AttributeError):
            os.mkfifo(os.path.join(root, "pipe"))
        self._outside_before = self.outside_digest()

    def scope(self, *, read_only: bool = True) -> ToolScope:
        return ToolScope(name="conformance", root=self.root, read_only=read_only)

    def outside_digest(self) -> dict[str, str]:
        """Name -> content hash of every regular file (not a symlink) outside the worktree:
        the sentinels, and anything a run put beside them. Symlinked directories are not entered."""
        out: dict[str, str] = {}
        base = str(self.base)
        for top in (str(self.outside), str(self.sibling)):
            for dirpath, _dirs, files in os.walk(top):
                for name in files:
                    path = os.path.join(dirpath, name)
                    try:
                        if not stat.S_ISREG(os.lstat(path).st_mode):
                            continue
                        with open(path, "rb") as fh:
                            out[os.path.relpath(path, base)] = hashlib.sha256(fh.read()).hexdigest()
                    except FileNotFoundError:
                        continue
        return dict(sorted(out.items()))

    def outside_unchanged(self) -> bool:
        return self.outside_digest() == self._outside_before


# ---------------------------------------------------------------------------------------
# What a run gives back


@dataclass(frozen=True)
class Progress:
    """What an upstream has recorded doing so far, on the machine's monotonic clock
    (``time.monotonic()``, system-wide on Linux, so a fake CLI's recorded times compare with
    the kit's). ``stalled``: it reached its stall with every earlier line written;
    ``last_output``: it wrote its last line before that; ``latest``: its latest recorded step
    of any kind. Each stays None until the upstream gets there."""

    stalled: float | None = None
    last_output: float | None = None
    latest: float | None = None


@dataclass
class Timeline:
    """When things happened in a run (monotonic clock, see Progress). ``progress`` is what
    the upstream (fake CLI, scripted model, scripted server) recorded, None when this adapter
    cannot see its upstream at all (then checks judge as before)."""

    timeout_s: float = 0.0  # the session deadline the backend was given (the check's, plus allowance_s)
    allowance_s: float = 0.0  # the start-up allowance added to the check's deadline (startup_allowance_s)
    started: float = 0.0  # run_session was called
    ended: float = 0.0  # run_session returned
    cancel_sent: float | None = None  # the kit set the host's cancel event
    progress: Progress | None = None

    @property
    def observed(self) -> bool:
        return self.progress is not None

    @property
    def stalled(self) -> float | None:
        return self.progress.stalled if self.progress else None

    @property
    def last_output(self) -> float | None:
        return self.progress.last_output if self.progress else None

    @property
    def latest(self) -> float | None:
        return self.progress.latest if self.progress else None

    def stalled_by(self, moment: float) -> bool:
        return self.stalled is not None and self.stalled < moment


@dataclass
class SessionRun:
    outcome: AgentOutcome
    workspace: Workspace
    duration_s: float
    model_saw: list[str] = field(default_factory=list)  # tool results / prompts the model was shown
    children: list[dict] = field(default_factory=list)  # fake-CLI invocation records (harness)
    trace: list[dict] = field(default_factory=list)  # trace records of the session
    model_calls: int | None = None  # requests made to the model (api, fake)
    requests: list[dict] = field(default_factory=list)  # HTTP requests (api): url, headers, body
    facts: Facts = field(default_factory=Facts)
    parent_env: dict[str, str] = field(default_factory=dict)
    audit: object | None = None  # the host's post-run AuditVerdict (harness), when one was made
    run_dir: Path | None = None
    timeline: Timeline = field(default_factory=Timeline)
    tool_failures: list[str] = field(default_factory=list)  # tool calls that reached no server at all
    #: When the host abandoned the stream (run(abandon_on_text=True)), None if it never did.
    abandoned: float | None = None
    #: (start, end) of each CLI the session ran, as the fake CLI recorded them itself
    #: (monotonic clock, see Progress); None where the adapter cannot see its CLIs.
    cli_spans: list[tuple[float, float]] | None = None
    #: `bridge_probe` (harness, offline): one record per request the fake CLI sent the MCP
    #: servers the backend configured, with the answer it got (None: none within the bound).
    bridge_probes: list[dict] = field(default_factory=list)
    #: `stalled_tool_call` (harness, offline): the MCP server the fake CLI stopped before its call.
    stalled_calls: list[dict] = field(default_factory=list)
    #: The CLI the kit named for the run (the fake CLI offline, the real CLI's exec wrapper at
    #: loopback), None where the kit names none; `cli_pids`: every pid that CLI's own records
    #: name (sessions and version probes) — the evidence of what really ran (cliwatch.py).
    cli_named: Path | None = None
    cli_pids: list[int] = field(default_factory=list)
    #: The host canaries the session's parent environment carried (shared_run(canaries=True):
    #: `parent_env_canaries()`, made once for the session), {} where it carried none.
    canaries: dict[str, str] = field(default_factory=dict)

    @property
    def said(self) -> str:
        """How the session ended, as a failing check's evidence: status/class, the message and
        the end of the (redacted) stderr, so a cell that failed in CI says why without a rerun."""
        o = self.outcome
        tail = " ".join(o.stderr_tail.split())[-300:]
        return f"{o.status}/{o.error_class}: {o.message[:300]}" + (f" (stderr: ...{tail})" if tail else "")

    def everything_visible(self) -> str:
        """Every byte the backend exposed: outcome, what the model saw, traces, argv, requests."""
        parts = [self.outcome.model_dump_json(), *self.model_saw, json.dumps(self.trace)]
        for child in self.children:
            parts.append(json.dumps(child.get("argv", [])))
        for req in self.requests:
            parts.append(req.get("body", ""))
            parts.append(json.dumps(req.get("visible_headers", {})))
        return "\n".join(parts)

    def outcome_and_artifacts(self) -> str:
        """What a host stores or prints: the outcome, the traces and the children's argv."""
        parts = [self.outcome.model_dump_json(), json.dumps(self.trace)]
        for child in self.children:
            parts.append(json.dumps(child.get("argv", [])))
        return "\n".join(parts)


_ENV_LOCK = threading.Lock()
_ENV_USERS = 0
_ENV_ORIGINAL: dict[str, str] = {}
_ENV_LOCAL = threading.local()


@contextlib.contextmanager
def patched_environ(values: dict[str, str]) -> Iterator[None]:
    """Set os.environ entries for the duration of a run (parent-env canaries, host isolation).

    Nested in one thread, each call restores what it changed (last in, first out). Runs in
    different threads may overlap (the concurrency checks): the environment as it was before
    the first of them is restored, key by key, when the last one ends."""
    global _ENV_USERS, _ENV_ORIGINAL
    if getattr(_ENV_LOCAL, "depth", 0):
        saved = {k: os.environ.get(k) for k in values}
        os.environ.update(values)
        _ENV_LOCAL.depth += 1
        try:
            yield
        finally:
            _ENV_LOCAL.depth -= 1
            for key, old in saved.items():
                if old is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = old
        return
    with _ENV_LOCK:
        if _ENV_USERS == 0:
            _ENV_ORIGINAL = dict(os.environ)
        _ENV_USERS += 1
        os.environ.update(values)
    _ENV_LOCAL.depth = 1
    try:
        yield
    finally:
        _ENV_LOCAL.depth = 0
        with _ENV_LOCK:
            _ENV_USERS -= 1
            if _ENV_USERS == 0:  # key by key: the env is never empty for another thread
                for key in [k for k in os.environ if k not in _ENV_ORIGINAL]:
                    del os.environ[key]
                for key, value in _ENV_ORIGINAL.items():
                    if os.environ.get(key) != value:
                        os.environ[key] = value


#: Header names that carry a credential to a model API (compared lower-case).
CREDENTIAL_HEADERS = frozenset({"authorization", "x-api-key", "api-key", "x-goog-api-key", "proxy-authorization", "cookie"})


def judge_credentials(request: str, headers: dict[str, str], session: set[str], host: dict[str, str]) -> dict:
    """One request's credentials (see BackendUnderTest.wire_credentials): whether each
    credential header carries one of the `session` values (a bearer's token, an API key
    header's value), and which headers carry any value of `host`."""
    sent = []
    for name, value in headers.items():
        if name.lower() in CREDENTIAL_HEADERS and value.strip():
            value = value.strip()
            sent.append(value[7:].strip() if name.lower() == "authorization" and value.lower().startswith("bearer ") else value)
    values = [v for v in host.values() if v and v not in session]
    carried = sorted({name.lower() for name, value in headers.items() if any(v in value for v in values)})
    return {"request": request, "session": bool(sent) and all(v in session for v in sent), "host_headers": carried}


def bridge_pids(run: SessionRun) -> list[int]:
    """Pids of the bridges that served a run, from their `bridge_start` trace records."""
    return [int(r["pid"]) for r in run.trace if r.get("event") == "bridge_start" and isinstance(r.get("pid"), int)]


def read_trace(path: Path | None) -> list[dict]:
    if path is None or not Path(path).is_file():
        return []
    out = []
    # JSONL records end at "\n" only: splitlines() also splits at U+2028, U+2029, U+0085,
    # \x0c ..., which JSON keeps raw inside strings, and hid the records of such a path.
    for line in Path(path).read_bytes().split(b"\n"):
        if line.strip():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line.decode("utf-8", "replace")))
    return out
