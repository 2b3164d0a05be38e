"""AcpTransport: any coding agent that speaks the Agent Client Protocol, driven as safely as the
CLI transports (doc/SPEC-acp.md).

Requirements kept here:
- The agent runs under the host's process layer (HarnessTransport + run_process): the env
  built by envpolicy from the host env (no host secret) plus only what the profile injects,
  a private HOME / XDG dirs / TMPDIR in the run dir, its own process group under the session
  supervisor, the deadline, the whole-tree kill; its stdin is a StdinFeed kept open for the
  JSON-RPC conversation and closed when the prompt is answered (and at every ending).
- cwd is the session's empty scratch dir; the bridge (the same command the CLI transports
  write into their MCP configs) is the agent's only MCP server; client fs/* are served
  through dispatch with the session's ToolScope (session.py).
- A host cancel or the deadline sends `session/cancel` and waits `cancel_bound_s` for the
  prompt's answer, then ends the tree (a watcher thread per session); an auth signal followed
  by silence for `auth_stall_s` ends it blocked/auth.
- The agent's command comes from its profile (profile.py); its binary is found on the host
  PATH or as given, never by a branch in code.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harnesscheck.backends._harness import HarnessTransport, Invocation, SessionContext, bridge_command
from harnesscheck.backends.acp.profile import AcpProfile, profile_for
from harnesscheck.backends.acp.session import AcpEvidence, AcpSession
from harnesscheck.core.contracts import AgentOutcome, AgentSessionRequest

#: The wire log of a session in its run dir (redacted after the session like every session file).
WIRE_LOG = "acp-wire.jsonl"

#: How often the watcher looks at the host cancel, the deadline and the auth clock (s).
_WATCH_S = 0.05


class _Pending:
    """One session's hand-over between run_session, invocation/make_parser (same thread) and
    the watcher thread."""

    def __init__(self, evidence: AcpEvidence, observer: Callable | None) -> None:
        self.session: AcpSession | None = None
        self.evidence = evidence
        self.observer = observer
        self.installs: list[str] = []  # CLI-cache installs the command names (sandbox_paths)


class AcpTransport(HarnessTransport):
    """One ACP agent, described by an AcpProfile. See the module docstring."""

    SESSION_FILES = (*HarnessTransport.SESSION_FILES, WIRE_LOG)

    def __init__(
        self,
        spec,
        settings=None,
        *,
        profile: AcpProfile | None = None,
        loopback=None,
        api_key: str | None = None,
        policy: Callable[[dict, AcpSession], bool] | None = None,
        **kwargs,
    ):
        """`profile`: the agent (default: the one the backend id names, profile.profile_for).
        `loopback`: a LoopbackEndpoint whose base URL and dummy key fill `{base_url}` / `{key}`;
        else `api_key` (a key the host program hands over) or Settings.acp_api_key
        (HARNESS_ACP_API_KEY) and Settings.acp_base_url (HARNESS_ACP_BASE_URL; without one the
        profile's `{base_url}` entries are left out: the agent's own endpoint). Never a variable
        of the host environment under the agent's own name.
        `policy(tool_call, session) -> allow?`: the permission policy (default: the host's, see
        AcpSession.decide: bridge tools only)."""
        super().__init__(spec, settings, **kwargs)
        self.profile = profile or profile_for(spec.id)
        self.loopback = loopback
        settings_key = self.settings.acp_api_key.get_secret_value() if self.settings.acp_api_key else None
        self._key = loopback.api_key if loopback is not None else (api_key or settings_key or "")
        #: None: the agent keeps its own default endpoint (the profile's `{base_url}` entries are left out).
        self._base_url: str | None = loopback.base_url if loopback is not None else self.settings.acp_base_url
        self._local = threading.local()  # .pending: this thread's session (concurrent sessions each have their own)
        self.policy = policy
        # a linger the caller passed, or one the host set (HARNESS_BACKEND_LINGER_S, even to the default's value)
        host_chose = kwargs.get("linger_s") is not None or "linger_s" in self.settings.model_fields_set
        if self.profile.linger_s is not None and not host_chose:
            self.linger_s = self.profile.linger_s  # an agent that never exits on EOF: no default wait for nothing

    #: An agent's session/update stream shows its model turns (turn_event), so the policy's
    #: turns limit is enforced as for codex, cursor and gemini (doc/SPEC-policy.md).
    counts_turns = True

    def turn_event(self, event: dict) -> str | None:
        """One agent message, as the model turns it shows: its message or thought chunk, or a
        tool call it reports, is the model's output; a tool call's update that says it completed
        or failed is that tool's result (the next output begins a turn), and so is a tool call
        first reported already done. Conservative, as for codex: an agent that runs one
        response's calls one by one shows each later call as a new turn (early, never late)."""
        if event.get("method") != "session/update" or not isinstance(event.get("params"), dict):
            return None
        update = event["params"].get("update")
        kind = update.get("sessionUpdate") if isinstance(update, dict) else None
        done = update.get("status") in ("completed", "failed") if isinstance(update, dict) else False
        if kind == "tool_call":  # its first report; one already done is its result too
            return "output_and_result" if done else "output"
        if kind in ("agent_message_chunk", "agent_thought_chunk"):
            return "output"
        if kind == "tool_call_update" and done:
            return "result"
        return None

    # -- the binary -------------------------------------------------------------------------

    def cli(self) -> Any:
        from harnesscheck.backends.registry import CliInfo
        from harnesscheck.core.contracts import CliNotFound

        with self._lock:
            if self._cli_info is None:
                given = self._cli_path or (Path(self.settings.cli) if getattr(self.settings, "cli", None) else None)
                first = given or self._resolve(self.profile.command[0])
                if first is None or not (first.is_file() and os.access(first, os.X_OK)):
                    tried = str(first) if first is not None else self.profile.command[0]
                    raise CliNotFound(self.spec.id, self.profile.command[0], [tried], self.profile.install.npm)
                self._cli_info = CliInfo(path=first, version=self.profile.version)
            return self._cli_info

    def _resolve(self, word: str) -> Path | None:
        from harnesscheck.backends.acp.profile import fill

        word = fill(word, self._values({}))
        if "/" in word:
            return Path(word).expanduser().absolute()
        found = shutil.which(word, path=self.parent_env.get("PATH") or os.defpath)
        return Path(found) if found else None

    def _values(self, extra: dict[str, str]) -> dict[str, str]:
        from harnesscheck.core.paths import cli_cache_dir, fake_clis_dir

        return {
            "base_url": self._base_url or "",
            "key": self._key,
            "python": sys.executable,
            "fake_clis": str(fake_clis_dir()),
            "clis": str(cli_cache_dir()),
            **extra,
        }

    # -- one session ------------------------------------------------------------------------

    def run_session(
        self,
        request: AgentSessionRequest,
        *,
        cancel: threading.Event | None = None,
        on_text: Callable[[str], None] | None = None,
        evidence: AcpEvidence | None = None,
        observer: Callable[[str, dict, AcpEvidence], None] | None = None,
    ) -> AgentOutcome:
        """One session. `evidence` (filled in) and `observer(direction, message, evidence)`
        (called in the reading thread for each agent message, before the host answers it) are
        for the kit's ACP checks; a host needs neither."""
        return self._session(request, cancel, on_text, evidence, observer, tool_less=False)

    def _run(self, request, *, cancel, on_text, tool_less):  # complete() comes here directly
        if getattr(self._local, "pending", None) is not None:
            return super()._run(request, cancel=cancel, on_text=on_text, tool_less=tool_less)
        return self._session(request, cancel, on_text, None, None, tool_less=tool_less)

    def _session(self, request, cancel, on_text, evidence, observer, *, tool_less: bool) -> AgentOutcome:
        pending = _Pending(evidence if evidence is not None else AcpEvidence(), observer)
        hard_stop = threading.Event()
        bound = self.profile.cancel_bound_s
        # The process deadline leaves room for session/cancel's answer after the session's own.
        soft_deadline = time.monotonic() + request.timeout_s
        update: dict[str, Any] = {"timeout_s": request.timeout_s + bound + 0.5}
        if request.session_id is None:  # never the backend id: an ad-hoc one is a whole command line
            import uuid

            update["session_id"] = f"acp-{_slug(self.profile.name)}-{uuid.uuid4().hex[:12]}"
        extended = request.model_copy(update=update)
        stop_watch = threading.Event()
        watcher = threading.Thread(target=self._watch, args=(pending, cancel, soft_deadline, hard_stop, stop_watch), daemon=True, name="acp-watch")
        watcher.start()
        self._local.pending = pending
        try:
            return super()._run(extended, cancel=hard_stop, on_text=on_text, tool_less=tool_less)
        finally:
            self._local.pending = None
            stop_watch.set()
            watcher.join(timeout=1.0)
            session = pending.session
            pending.session = None
            if session is not None:
                session.feed_.dispose()

    def _watch(self, pending: _Pending, cancel, soft_deadline: float, hard_stop: threading.Event, stop_watch: threading.Event) -> None:
        """Host cancel / deadline -> session/cancel, then the tree after cancel_bound_s; an auth
        signal followed by silence -> the same, typed auth."""
        cancel_at: float | None = None
        while not stop_watch.wait(_WATCH_S):
            session = pending.session
            if session is None:
                if cancel is not None and cancel.is_set():
                    hard_stop.set()  # not started yet: nothing to ask
                continue
            ev = session.ev
            now = time.monotonic()
            reason = None
            if cancel is not None and cancel.is_set():
                reason = "host"
            elif now >= soft_deadline:
                reason = "deadline"
            elif ev.auth_signal_at is not None and not session.done:
                quiet_since = max(ev.auth_signal_at, ev.last_update_at or 0.0)
                if now - quiet_since >= self.profile.auth_stall_s:
                    ev.auth_stalled = True
                    reason = "auth"
            if reason is not None and cancel_at is None:
                session.request_cancel(reason)
                cancel_at = now
            if cancel_at is not None and (session.done or now - cancel_at >= self.profile.cancel_bound_s):
                if not session.done:
                    hard_stop.set()
                    return
                return  # answered: run_process lingers and ends the tree itself

    def invocation(self, ctx: SessionContext, request, cli: Path, *, tool_less: bool) -> Invocation:
        from harnesscheck.contain.envpolicy import config_home
        from harnesscheck.contain.process import StdinFeed
        from harnesscheck.contain.rundir import place_private

        _, home = config_home(ctx.run_dir, "HOME")
        values = self._values({"home": home, "cwd": str(ctx.cwd)})
        for rel, text in self.profile.files.items():
            if ".." in Path(rel).parts or Path(rel).is_absolute():
                from harnesscheck.core.contracts import ConfigError

                raise ConfigError(f"ACP profile {self.profile.name}: file {rel!r} is not beneath HOME", "use a relative path")
            place_private(home, rel, data=self._fill(text, values).encode("utf-8"))  # never through a link the agent left
        seeded = self._seed_home(Path(home), values)
        argv = [str(cli), *self.profile.argv(values)[1:]]
        injections = {
            "HOME": home,
            "XDG_CONFIG_HOME": str(Path(home) / ".config"),
            "XDG_CACHE_HOME": str(Path(home) / ".cache"),
            "XDG_DATA_HOME": str(Path(home) / ".local" / "share"),
            "XDG_STATE_HOME": str(Path(home) / ".local" / "state"),
            **{k: v for k, v in self.profile.injected_env(values).items() if self._base_url is not None or "{base_url}" not in self.profile.env[k]},
        }
        feed = StdinFeed()
        bridge = None if tool_less or ctx.spec_path is None else bridge_command(ctx.spec_path)
        trace = None
        if ctx.bridge_trace is not None and ctx.scope is not None:
            from harnesscheck.choke.trace import Trace

            trace = Trace(ctx.bridge_trace, ctx.session_id)  # fs/* calls are dispatch calls like the bridge's
        session = AcpSession(
            profile=self.profile,
            feed=feed,
            cwd=ctx.cwd,
            prompt=_compose(request),
            scope=ctx.scope,
            bridge=bridge,
            wire_log=ctx.run_dir / WIRE_LOG,
            dispatch_trace=trace,
            session_id=ctx.session_id,
            requested_model=request.model,
            evidence=self._local.pending.evidence,
            observer=self._local.pending.observer,
            policy=self.policy,
            engine=request.policy_engine(ctx.session_id),
        )
        session.start()  # `initialize` is queued: the agent reads it as soon as it runs
        self._local.pending.session = session
        from harnesscheck.contain.sandbox import cache_installs

        # what the profile runs beyond its first word (node's script, a CLI it points the agent at)
        self._local.pending.installs = [*cache_installs([*argv[1:], *injections.values()]), *(p for p in self.profile.binds if os.path.exists(p)), *seeded]
        return Invocation(argv=argv, injections=injections, stdin_feed=feed)

    def _seed_home(self, home: Path, values: dict[str, str]) -> list[str]:
        """The profile's `home_from`: each file copied under HOME (0600), each directory linked
        there, through rundir.place_private (HOME persists between the sessions of one run dir:
        a link the agent left there is replaced, never followed). Returns the linked
        directories (bound into the sandbox read-only)."""
        from harnesscheck.contain.rundir import place_private
        from harnesscheck.core.contracts import ConfigError

        linked = []
        for rel, source_text in self.profile.home_from.items():
            if ".." in Path(rel).parts or Path(rel).is_absolute():
                raise ConfigError(f"ACP profile {self.profile.name}: home_from {rel!r} is not beneath HOME", "use a relative path")
            source = Path(self._fill(source_text, {**values, "key": ""}))  # a path never carries the key
            if source.is_dir():
                place_private(home, rel, link_to=str(source))
                linked.append(str(source))
            elif source.is_file():
                place_private(home, rel, data=source.read_bytes())
            else:
                raise ConfigError(
                    f"ACP profile {self.profile.name}: {rel} comes from {source}, which is not installed",
                    f"run `harnesscheck install-clis --backend {self.spec.id}`",
                )
        return linked

    def sandbox_paths(self, ctx: SessionContext, cli: Path) -> tuple[list[str], list[str]]:
        """Beyond the base's: the CLI-cache installs the agent's command and environment name
        (sandbox.cache_installs), read-only."""
        read_only, writable = super().sandbox_paths(ctx, cli)
        pending = getattr(self._local, "pending", None)
        return [*read_only, *getattr(pending, "installs", ())], writable

    @staticmethod
    def _fill(text: str, values: dict[str, str]) -> str:
        from harnesscheck.backends.acp.profile import fill

        return fill(text, values)

    def make_parser(self, ctx: SessionContext, request, *, tool_less: bool, on_text=None):
        session = self._local.pending.session
        assert session is not None, "invocation() runs first"
        session.on_text = on_text
        return session


def _slug(name: str) -> str:
    import re

    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:40] or "agent"


def _compose(request: AgentSessionRequest) -> str:
    """The prompt: ACP has no system-prompt channel in v1, so the system text goes first."""
    if request.system and request.system.strip():
        return "# Instructions\n\n" + request.system.strip() + "\n\n# Task\n\n" + request.prompt
    return request.prompt
