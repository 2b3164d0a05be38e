"""BackendUnderTest: one adapter per way of driving a backend, so each check is written once.

A check speaks in abstract scenarios ("success", "auth_401", "timeout_mid_stream", a list
of tool calls). The adapter turns that into a concrete set-up for its backend and level:

- ScriptedAdapter: backends whose transport has a ``script`` attribute (``fake``, and any
  third-party backend built on it): an in-process FakeScript.
- ApiAdapter: the ``api`` backend, its HTTP endpoint mocked with respx (offline).
- HarnessAdapter: CLI backends: a per-test fake CLI replaying ``fixtures/<cli>/<scenario>.json``
  (offline). The loopback level (real CLI + scripted model server) plugs in through
  ``LEVEL_PROVIDERS`` without changing any check.

Every run happens in a fresh Workspace: a worktree with benign files and traps, and
sentinel files outside it holding a canary that must never reach the model or the outcome.
"""

from __future__ import annotations

import contextlib
import functools
import secrets
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from harnesscheck.core.config import Settings
from harnesscheck.core.contracts import AgentOutcome, AgentSessionRequest, Kind, ProviderSpec, Transport
from harnesscheck.core.policy import Policy
from harnesscheck.kit.session import (
    Facts,
    KitFault,
    Progress,
    SessionRun,
    SkipCell,
    StreamAbandoned,
    Timeline,
    ToolCall,
    Workspace,
    bridge_pids,
    patched_environ,
    read_trace,
)
from harnesscheck.kit.watchdog import SessionOverran, Watchdog, WatchdogThread, end_survivors, identities, kill

#: Abstract scenario names checks may ask for (the fixture names, plus two kit-level ones).
SCENARIOS: tuple[str, ...] = (
    "success",
    "tool_calls",
    "max_turns",
    "not_logged_in",
    "auth_401",
    "usage_limit",
    "rate_limit_429",
    "overloaded_529",
    "context_overflow",
    "model_not_found",
    "malformed_line",
    "unknown_events",
    "truncated_last_line",
    "oversize_line",
    "linger_after_result",
    "timeout_mid_stream",
    "served_model_mismatch",
    "mcp_failed",
    "mcp_slow",
    "native_tool_use",
    "exit0_is_error",
    "crash_no_result",
    "api_key_source",
    "helper_model",
    "repeated_usage",
    "noise_lines",
    "timeout_tree",
    "split_lines",
    "network_error",
    "held_success",
    "cached_usage",
    "bridge_probe",
    "stalled_tool_call",
    "thinking_tool_turn",
    "priced_success",
    # what a hostile model tries with built-ins that are audited, not off (audit.hostile-builtins-flagged)
    "hostile_shell_secret",
    "hostile_home_read",
    "hostile_pathless_grep",
    "hostile_delete",
    "brace_noise",
    # what a hostile CLI tries against its own containment (conformance/test_contain.py)
    "contain_probe",
)


_WARMED: set[tuple[str, str]] = set()  # (backend id, level) warmed in this process (warm_up)


# ---------------------------------------------------------------------------------------
# The adapter base


class BackendUnderTest:
    """A backend at a level, ready to run abstract scenarios in fresh workspaces."""

    name = "base"
    #: Whether checks that only read a session's evidence share one session of a scenario
    #: (shared_run): where a session costs seconds (a real runtime at loopback).
    SHARES_SESSIONS = False
    #: The shared runs of this pytest run (set by the `but` fixture; None: nothing is shared).
    shared_runs: dict | None = None

    def __init__(self, spec: ProviderSpec, level: str, tmp_path: Path):
        self.spec = spec
        self.level = level
        self.tmp_path = tmp_path
        self._n = 0
        self._local = threading.local()

    # -- what checks use ---------------------------------------------------------------

    @property
    def kind(self) -> Kind:
        return self.spec.kind

    @property
    def cli_version(self) -> str | None:
        return None

    def workspace(self) -> Workspace:
        self._n += 1
        return Workspace(self.tmp_path / f"ws{self._n}")

    def run(
        self,
        scenario: str,
        *,
        prompt: str = "Say hello.",
        timeout_s: float = 30.0,
        max_iters: int = 8,
        read_only: bool = True,
        model: str | None = None,
        parent_env: dict[str, str] | None = None,
        cancel_after_s: float | None = None,
        cancel_on_stall: bool = False,
        tool_calls: list[ToolCall] | None = None,
        workspace: Workspace | None = None,
        echo: list[str] | None = None,
        system: str | None = None,
        teardown_s: float | None = None,
        settings: dict | None = None,
        run_dir: Path | None = None,
        allowance: bool = True,
        abandon_on_text: bool = False,
        policy: "Policy | None" = None,
        approver: Callable[..., object] | None = None,
        events: list | None = None,
        watchdog: "Watchdog | None" = None,
    ) -> SessionRun:
        """Run one session of `scenario` (or of scripted `tool_calls`) and collect the evidence.

        `policy`, `approver`: the host's tool policy and approver for this session, in the
        request (AgentSessionRequest.policy / .approver; doc/SPEC-policy.md).
        `events`: a list the session's typed events are appended to as they happen (the host
        runs it through harnesscheck.core.events.run_with_events; doc/SPEC-events.md).

        `echo`: strings the upstream (vendor API / CLI) repeats in its error output, as real
        ones do with keys and tokens; the backend must not pass them on.
        `cancel_on_stall`: the host cancels as soon as the upstream is seen to stall (event
        driven, so whatever it emitted or spawned before exists); where this adapter cannot
        see the upstream's progress, `cancel_after_s` after the start (default 1 s) instead.
        `teardown_s`: the host's linger and term grace for this run (`Settings.linger_s`,
        `term_grace_s`, as a host sets them with HARNESS_BACKEND_LINGER_S / _TERM_GRACE_S), for
        the checks whose subject is a CLI that lingers or ignores SIGTERM: the suite need not
        wait out production graces. A backend that ignores the host's settings is judged the
        same, only slower.
        `settings`: host Settings for this run's transport (e.g. ``{"model_mismatch": "fail"}``,
        as a host sets HARNESS_MODEL_MISMATCH).
        `run_dir`: the run dir the host names in the request (default: a fresh one beside the
        worktree, `<base>/run`), for the checks whose subject is a run dir the backend must refuse.
        `allowance`: add this adapter's start-up allowance (startup_allowance_s) to `timeout_s`, so a
        slow-starting runtime is judged by its behaviour, not by this machine's speed. Checks whose
        subject is the deadline itself pass False (run_stalled does); a check bounding the session's
        duration adds `run.timeline.allowance_s` to its bound.
        `abandon_on_text`: the host abandons the stream at the first text the backend streams
        to it: its `on_text` callback raises StreamAbandoned. If that exception comes out of
        run_session the run's outcome is a stand-in (cancelled) and `run.abandoned` is the
        moment it was raised; `run.abandoned` stays None when no text was ever streamed.
        `watchdog`: the session must end within `watchdog.within_s` after the moment the check
        needs (kit/watchdog.py); if it does not, the kit ends its processes and the run raises
        SessionOverran (the cell fails) instead of waiting out the session's own deadline.
        """
        if scenario not in SCENARIOS and scenario != "tools":
            raise KitFault(f"unknown scenario {scenario!r}")
        ws = workspace or self.workspace()
        env = {**self.host_isolation(ws), **(parent_env or {})}
        cancel = threading.Event() if cancel_after_s is not None or cancel_on_stall else None
        extra_s = self.startup_allowance_s() if allowance else 0.0
        timeout_s = timeout_s + extra_s
        timeline = Timeline(timeout_s=timeout_s, allowance_s=extra_s)
        with patched_environ(env):
            self._local.teardown_s = teardown_s  # read by transport() while prepare builds one
            self._local.settings = settings
            self._local.watch = tuple(v for v in (parent_env or {}).values() if v)  # a model server watches for them
            try:
                setup = self.prepare(scenario, ws, tool_calls=tool_calls, model=model, timeout_s=timeout_s, echo=echo or [])
            finally:
                self._local.teardown_s = None
                self._local.settings = None
            request = AgentSessionRequest(
                prompt=prompt,
                system=system,
                scope=ws.scope(read_only=read_only),
                model=model if model is not None else setup.model,
                max_iters=max_iters,
                timeout_s=timeout_s,
                run_dir=run_dir if run_dir is not None else ws.base / "run",
                session_id=uuid.uuid4().hex,
                policy=policy,
                approver=approver,
            )
            watch = None
            if cancel is not None:
                after = cancel_after_s if cancel_after_s is not None else 1.0
                watch = _CancelWatch(self, setup, cancel, timeline, after_s=after, on_stall=cancel_on_stall)
            abandoned: list[float] = []

            def abandon(_text: str) -> None:
                if not abandoned:
                    abandoned.append(time.monotonic())
                    raise StreamAbandoned("the caller abandoned the stream")

            timeline.started = time.monotonic()
            if watch is not None:
                watch.start()
            guard = None
            if watchdog is not None:
                guard = WatchdogThread(
                    watchdog,
                    functools.partial(self._moment, watchdog.after, timeline, abandoned, setup),
                    functools.partial(self._end_running_session, setup, request),
                )
                guard.start()
            try:
                if abandon_on_text:
                    try:
                        outcome = setup.transport.run_session(request, cancel=cancel, on_text=abandon)
                    except StreamAbandoned:
                        from harnesscheck.core.contracts import OutcomeStatus

                        outcome = AgentOutcome(status=OutcomeStatus.cancelled, message="(abandoned by the caller)")
                elif events is not None:  # the host reads the typed event stream (doc/SPEC-events.md)
                    from harnesscheck.core.events import run_with_events

                    outcome = run_with_events(setup.transport, request, events.append, cancel=cancel)
                else:
                    outcome = setup.transport.run_session(request, cancel=cancel)
            finally:
                timeline.ended = time.monotonic()
                if watch is not None:
                    watch.stop()
                if guard is not None:
                    guard.stop()
        run = SessionRun(outcome=outcome, workspace=ws, duration_s=timeline.ended - timeline.started, facts=setup.facts, parent_env=env, timeline=timeline)
        if getattr(outcome, "containment", None):  # the cell says how its sessions were contained
            self.__dict__.setdefault("containments", set()).add(str(outcome.containment))
        run.abandoned = abandoned[0] if abandoned else None
        self.collect(run, setup, request)
        timeline.progress = self.stall_progress(setup)
        # what is still alive now is ended after the cell, whatever the verdict (end_survivors)
        with contextlib.suppress(Exception):  # a record for the cleanup, never part of the verdict
            self.__dict__.setdefault("_alive_after_runs", {}).update(identities(self.child_pids(run)))
        if guard is not None and guard.fired is not None:
            guard.ended = sorted(set(guard.ended) | set(kill(self.child_pids(run))))
            raise SessionOverran(guard.message())
        return run

    def shared_run(self, scenario: str, *, canaries: bool = False) -> SessionRun:
        """What `run(scenario)` gives, for a check that only reads the evidence of that session
        (its outcome, records and wire): where sessions are shared (SHARES_SESSIONS), the first
        such session of this backend and level in this process, if it ended ok; else a session of
        the check's own, kept for the next check if it ended ok. A session that did not end ok
        (crashed, timed out, raised) is never shared, so one check's crash never decides another's
        verdict; a check that watches the machine while its session runs calls run() instead.

        `canaries`: the session's parent environment carries `parent_env_canaries()` (made once
        for it, in `run.canaries`), for the checks that each look for them in a different place
        (the CLI's env, its argv, its MCP config, the wire); a session with canaries is never
        shared with one without."""

        def fresh() -> SessionRun:
            planted = self.parent_env_canaries() if canaries else {}
            run = self.run(scenario, parent_env=planted or None)
            run.canaries = planted
            return run

        if not self.SHARES_SESSIONS or self.shared_runs is None:
            return fresh()
        self.startup_allowance_s()  # an adapter that warms up once (LoopbackAdapter) may keep its warm-up here
        run = self.shared_runs.get(self._shared_key(scenario, canaries))
        if run is None:
            run = fresh()
            self.keep_shared(run, scenario, canaries=canaries)
        elif getattr(run.outcome, "containment", None):  # the cell says how the session it read was contained
            self.__dict__.setdefault("containments", set()).add(str(run.outcome.containment))
        return run

    def _shared_key(self, scenario: str, canaries: bool) -> tuple:
        return (self.spec.id, self.level, type(self).__name__, scenario, canaries)

    def keep_shared(self, run: SessionRun, scenario: str, *, canaries: bool = False) -> None:
        """Keep `run` (a session of `scenario`, its parent environment with `run.canaries` when
        `canaries`) for shared_run, if sessions are shared here and it ended ok."""
        from harnesscheck.core.contracts import OutcomeStatus

        if self.SHARES_SESSIONS and self.shared_runs is not None and run.outcome.status == OutcomeStatus.ok:
            self.shared_runs.setdefault(self._shared_key(scenario, canaries), run)

    def _moment(self, after: str, timeline: Timeline, abandoned: list[float], setup: "Setup") -> float | None:
        """When the moment a watchdog counts from happened (monotonic), None while it has not."""
        if after == "abandon":
            return abandoned[0] if abandoned else None
        if after == "cancel":
            return timeline.cancel_sent
        if after == "deadline":
            deadline = timeline.started + timeline.timeout_s
            if time.monotonic() < deadline or not self.observes_stalls():
                return deadline
            # a run whose upstream had not stalled by its deadline is not judged (run_stalled
            # repeats it at a longer one): the watchdog leaves it to end as it does
            progress = self.stall_progress(setup)
            return deadline if progress is not None and progress.stalled is not None and progress.stalled < deadline else None
        if after == "stdin":
            return self.stdin_held_since(setup)
        if after == "auth_refused":
            return self.auth_refused_at(setup)
        progress = self.stall_progress(setup)  # "result": the CLI printed its last line, then stalled
        return progress.last_output if progress is not None and progress.stalled is not None else None

    def _end_running_session(self, setup: "Setup", request: AgentSessionRequest) -> list[int]:
        """SIGKILL every process the running session is known to have started (the watchdog fired)."""
        return kill(self.running_pids(setup, request))

    def auth_refused_at(self, setup: "Setup") -> float | None:
        """When the upstream first answered the session's model request with 401 (monotonic),
        None while it has not or where this adapter cannot see it (only a model server can)."""
        return None

    def stdin_held_since(self, setup: "Setup") -> float | None:
        """When a CLI still waiting for its stdin's EOF last got data on it (monotonic), None
        where no CLI waits or this adapter cannot see it."""
        return None

    def running_pids(self, setup: "Setup", request: AgentSessionRequest) -> list[int]:
        """The processes a session still running is known to have started so far (what its
        upstream recorded, the bridges its traces name); none for an in-process backend."""
        return []

    def end_survivors(self) -> list[int]:
        """After the cell: SIGKILL every process of this cell's sessions that was alive when its
        session ended and still is (kit/watchdog.py); returns the pids ended."""
        return end_survivors(self.__dict__.pop("_alive_after_runs", {}))

    #: The longest retry timeout run_stalled allows itself before it gives up (skip `budget`).
    MAX_RETRY_TIMEOUT_S = 60.0
    #: Runs run_stalled makes at most: the first, then retries at growing deadlines.
    MAX_STALLED_RUNS = 3
    #: The shortest first deadline run_stalled tries: an adapter whose upstream needs long to
    #: reach its stall (a real CLI starting up) raises it so the first run is usually judged.
    MIN_STALL_TIMEOUT_S = 0.0

    def run_stalled(self, scenario: str, *, timeout_s: float, blind_timeout_s: float, retry_factor: float = 4.0, **kwargs) -> SessionRun:
        """A run of a stalling scenario whose timeout can only have fired after the upstream
        stalled, so everything it emitted or spawned before the stall is a fact to judge by.

        The deadline can never fire before the kit's start + `timeout_s` (the backend starts
        its clock after run_session is called), so a stall recorded before that moment
        certainly came first. If the upstream got there too late (a slow machine, or a backend
        that takes long before it spawns its CLI), the run is repeated with `retry_factor` times
        the larger of the timeout and the time the upstream was last seen progressing (at most
        MAX_RETRY_TIMEOUT_S, at most MAX_STALLED_RUNS runs in all); if that is too short as
        well, the cell is skipped `budget` rather than judged on facts that never came to be. A run that ended before
        the deadline could fire is judged as it is (nothing was cut short by the clock).
        An adapter that cannot see its upstream's progress runs once with `blind_timeout_s`.
        """
        if not self.observes_stalls():
            return self.run(scenario, timeout_s=blind_timeout_s, allowance=False, **kwargs)
        self.warm_up()
        tried: list[float] = []
        # A deadline that fires before the runtime can have started judges nothing: the first
        # run waits at least the start-up measured here (measured_allowance_s: a deadline that came
        # before the stall is seen and repeated), the retries at most the declared allowance longer.
        allowance_s = self.startup_allowance_s()
        t = max(timeout_s, self.MIN_STALL_TIMEOUT_S, self.measured_allowance_s())
        while True:
            run = self.run(scenario, timeout_s=t, allowance=False, **kwargs)
            tried.append(t)
            tl = run.timeline
            earliest_deadline = tl.started + t
            if not tl.observed or tl.ended < earliest_deadline or tl.stalled_by(earliest_deadline):
                return run
            lag = (tl.latest - tl.started) if tl.latest is not None else 0.0
            t = min(retry_factor * max(t, lag), self.MAX_RETRY_TIMEOUT_S + allowance_s)
            if len(tried) == self.MAX_STALLED_RUNS or t <= tried[-1]:
                break
        raise SkipCell(
            "budget",
            f"the {scenario} upstream had not stalled by the earliest moment the deadline could fire, "
            f"in {len(tried)} run(s) (timeout_s {' and '.join(f'{x:g}' for x in tried)}): this machine is too "
            "slow right now to time a session out after its partial output; the backend was not judged",
        )

    def startup_allowance_s(self) -> float:
        """Seconds added to the deadline of a session whose check does not test the deadline
        itself (run(allowance=)): the time this adapter's upstream needs before it does
        anything. 0 for in-process backends and fake CLIs; the loopback level's real runtimes
        declare and measure theirs (LoopbackAdapter)."""
        return 0.0

    def measured_allowance_s(self) -> float:
        """The start-up allowance of a session whose deadline, if it came too early, the kit sees
        and repeats at a longer one (run_stalled, time.runaway-ends-by-wall-clock): only what this
        adapter measured, never a declared worst case (startup_allowance_s by default)."""
        return self.startup_allowance_s()

    def warm_up(self) -> None:
        """Offline, once per process and backend: one untimed `success` session, so one-time
        start-up (an SDK's import, the bridge forkserver, a version probe) is not taken for the
        upstream's way to its stall, which would cost a timed run a retry at a long deadline."""
        key = (self.spec.id, self.level)
        if self.level != "offline" or key in _WARMED:
            return
        _WARMED.add(key)
        with contextlib.suppress(Exception):  # the timed run that follows judges the backend
            self.run("success", timeout_s=60.0)

    #: The longest deadline run_tools retries a session at whose deadline came before its tool calls were done.
    MAX_TOOLS_TIMEOUT_S = 120.0

    def run_tools(self, calls: list[ToolCall], **kwargs) -> SessionRun:
        """A session in which the model asks for exactly these tool calls, then answers.

        Where the upstream's progress is observable and the session's deadline fired before its
        tool calls were done (a backend whose bridge is slow to start, on a loaded machine), the
        run is repeated at 4x the deadline (at most MAX_TOOLS_TIMEOUT_S), then the cell is
        skipped `budget`: the calls are judged, never the machine's speed (a connected server whose call hangs is judged as it is)."""
        timeout = kwargs.pop("timeout_s", 30.0)
        while True:
            run = self.run("tools", tool_calls=calls, timeout_s=timeout, **kwargs)
            if not self.tools_unfinished(run):
                return run
            if timeout >= self.MAX_TOOLS_TIMEOUT_S:
                raise SkipCell(
                    "budget",
                    f"the session's deadline ({timeout:g} s) fired before its tool calls were done: "
                    "this machine is too slow right now; the backend was not judged",
                )
            timeout = min(4 * timeout, self.MAX_TOOLS_TIMEOUT_S)

    def tools_unfinished(self, run: SessionRun) -> bool:
        """Whether the run's deadline came before the upstream finished its scripted tool calls
        (False where that cannot be observed)."""
        return False

    def host_isolation(self, ws: Workspace) -> dict[str, str]:
        """Below the live level the host's HOME and config homes are scratch dirs, so no
        transport can find, link or touch the user's real credential stores (every registered
        CLI's config-home variables, from its kit profile's `config_home_env`)."""
        if self.level == "live":
            return {}
        from harnesscheck.backends.registry import kit_profiles
        from harnesscheck.core.paths import cli_cache_dir

        home = ws.base / "host-home"
        home.mkdir(parents=True, exist_ok=True)
        config_homes = {var: str(home / rel) for profile in kit_profiles() for var, rel in profile.config_home_env.items()}
        return {
            "HARNESSCHECK_CACHE": str(cli_cache_dir().parent),  # the pinned CLIs stay findable
            "HOME": str(home),
            **config_homes,
            "XDG_CONFIG_HOME": str(home / ".config"),
        }

    def transport(self, **settings) -> Transport:
        from harnesscheck.backends.registry import build_transport

        self.run_settings(settings)
        return build_transport(self.spec, Settings(backend=self.spec.id, **settings))

    def run_settings(self, settings: dict) -> dict:
        """`settings` completed with the run's own (run(teardown_s=, settings=)), set while
        prepare builds the run's transport; explicit keys win."""
        teardown = getattr(self._local, "teardown_s", None)
        if teardown is not None:
            settings.setdefault("linger_s", teardown)
            settings.setdefault("term_grace_s", teardown)
        for key, value in (getattr(self._local, "settings", None) or {}).items():
            settings.setdefault(key, value)
        return settings

    # -- what adapters implement -------------------------------------------------------

    # -- helpers for checks --------------------------------------------------------------

    def acp_run(self, steps: list[dict], **kwargs):
        """One ACP session of scripted agent steps (kit/acp_adapter.py); only ACP backends have one."""
        raise SkipCell(
            "unsupported-by-backend",
            f"no ACP session here: the acp.* checks judge ACP agents, and this adapter ({self.name}) drives {self.spec.id} by other means",
        )

    def skip(self, reason: str, message: str):
        raise SkipCell(reason, message)

    def request(self, **overrides) -> AgentSessionRequest:
        """A minimal request in a fresh workspace (for preflight checks)."""
        ws = self.workspace()
        fields = dict(prompt="Say hello.", scope=ws.scope(), timeout_s=30.0, run_dir=ws.base / "run")
        fields.update(overrides)
        return AgentSessionRequest(**fields)

    def parent_env_canaries(self) -> dict[str, str]:
        """Unique canary values for every denied family of the parent environment: the model
        vendors' and clouds' variables, and each registered CLI's own (its kit profile's
        `credential_env`)."""
        from harnesscheck.backends.registry import kit_profiles

        tag = secrets.token_hex(6)
        names = [
            "ANTHROPIC_API_KEY",
            "ANTHROPIC_AUTH_TOKEN",
            "ANTHROPIC_BASE_URL",
            "ANTHROPIC_MODEL",
            "OPENAI_API_KEY",
            "OPENAI_BASE_URL",
            "GOOGLE_API_KEY",
            "AWS_SECRET_ACCESS_KEY",
            "AZURE_OPENAI_API_KEY",
            "GITHUB_TOKEN",
            "HC_DB_PASSWORD",
        ]
        names += [n for profile in kit_profiles() for n in profile.credential_env if n not in names]
        return {n: f"canary-{n.lower().replace('_', '-')}-{tag}" for n in names}

    def held_secrets(self, run: SessionRun | None = None) -> dict[str, str]:
        """Name -> value of credentials the backend holds outside the parent environment (a stored
        login, the tokens minted for it in `run`): secrets like any other. None here."""
        return {}

    def wire_credentials(self, run: SessionRun, host: dict[str, str]) -> list[dict] | None:
        """Per request the model server received in `run`: ``{"request": "<method path>",
        "session": True | False | None, "host_headers": [header names]}``. ``session``: every
        credential header carried the session's own credential (None: the adapter cannot tell,
        False: one carried something else, or none was sent); ``host_headers``: the headers in
        which a value of `host` (the host's own keys and tokens) travelled. None where no model
        server of this adapter sees the backend's requests."""
        return None

    def credential_fetches(self, run: SessionRun) -> int | None:
        """How many short-lived credentials the backend fetched in `run` (token exchanges the
        upstream answered), None where this adapter cannot see them."""
        return None

    def spawned(self) -> list[dict]:
        """Invocation records of processes this adapter's backend started (none in-process)."""
        return []

    def child_pids(self, run: SessionRun) -> list[int]:
        """Every process the session is known to have had: the CLI, its recorded children, and
        each bridge that served it (a forkserver child is outside the CLI's group)."""
        pids: list[int] = []
        for child in run.children:
            pids.append(child["pid"])
            pids.extend(g["pid"] for g in child.get("grandchildren", []))
            pids.extend(child.get("mcp_server_pids", []))  # whatever the backend's bridge is called
        pids.extend(bridge_pids(run))
        return list(dict.fromkeys(pids))

    def host_home(self, run: SessionRun) -> Path | None:
        """The planted host HOME of the run (see HarnessAdapter.host_isolation), None where this
        adapter plants none."""
        return None

    def login_files(self) -> tuple[str, ...]:
        return ()

    def built_on_dispatch(self) -> bool:
        """Whether the backend's transport is built on harnesscheck's own providers (and so on its
        dispatch and reason codes): a class of `harnesscheck.backends` in the factory's MRO."""
        import importlib

        module, _, attr = self.spec.factory.partition(":")
        try:
            factory = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError):
            return False
        return isinstance(factory, type) and any((getattr(k, "__module__", "") or "").startswith("harnesscheck.backends") for k in factory.__mro__)

    def tool_errors(self, run: SessionRun) -> list[tuple[str, str]] | None:
        """(tool, text) of each tool result the model saw as an error, whatever its wording or
        code: the black-box evidence of a refusal. None where this adapter cannot see the
        results as the model got them (then the outcome's refusals are the evidence)."""
        return None

    def usage_fields(self) -> tuple[str, ...] | None:
        """The usage fields the backend's wire can carry (None: unknown, or every one)."""
        return None

    def cache_breakpoints(self, run: SessionRun) -> list[list[str]] | None:
        """Per request the model received, where its prompt-cache breakpoints sit; None where
        this adapter cannot see request bodies."""
        return None

    def request_shapes(self, run: SessionRun) -> list[dict]:
        """Per request, {"system": system blocks, "messages": non-system messages}."""
        return []

    def thinking_carried_back(self, run: SessionRun) -> list[dict] | None:
        """The reasoning (thinking blocks, reasoning items) the run's second model request carried
        back, as the wire spells it; None where the wire carries none."""
        raise SkipCell("adapter-not-implemented", f"the kit cannot see {self.spec.id}'s request bodies at {self.level}")

    def provenance(self) -> str:
        """What this cell's verdict came from: the fixtures, scripts or servers it ran against."""
        return ""

    def note(self, text: str) -> None:
        """A fact a passing check reports in its cell (e.g. an offered tool refused when called)."""
        self.__dict__.setdefault("notes", []).append(text)

    def refused_when_called(self, names: list[str], ws: Workspace) -> dict[str, str]:
        """The offered tools among `names` the backend refuses to execute when the model calls
        them: name -> its answer. Only a level with a scripted model can ask; here none."""
        return {}

    def tools_offered(self, run: SessionRun) -> list[str] | None:
        """Tool names the model was offered in the run (None when unobservable)."""
        return None

    def mcp_servers(self, run: SessionRun) -> dict[str, dict]:
        return {}

    def bridge_loaded(self, run: SessionRun) -> bool:
        """Whether the bridge listed its tools to a client in this run, by its own trace
        (`bridge_listed` records in `run.trace`): the tools were there for the model."""
        return any(r.get("event") == "bridge_listed" for r in run.trace)

    def system_seen(self, run: SessionRun) -> str | None:
        """The system prompt the model received in the run."""
        raise SkipCell("adapter-not-implemented", f"the kit cannot see {self.spec.id}'s system prompt at {self.level}")

    def permitted_injections(self, run: SessionRun) -> set[str]:
        """Parent variables the backend hands its child on purpose (explicit, traced injections)."""
        return set()

    def install_fake(self, scenario, **overrides):
        raise SkipCell("unsupported-by-backend", f"{self.spec.id} runs no CLI")

    def observes_stalls(self) -> bool:
        """Whether `stall_progress` sees this adapter's upstream (decided before a run)."""
        return False

    def stall_progress(self, setup: "Setup") -> Progress | None:
        """What the run's upstream has recorded doing so far (see Timeline), or None when this
        adapter cannot observe it. Called during (cancel on stall) and after a run."""
        return None

    # -- what adapters implement -------------------------------------------------------

    def prepare(self, scenario: str, ws: Workspace, *, tool_calls, model, timeout_s, echo) -> "Setup":
        raise SkipCell("adapter-not-implemented", f"no adapter drives {self.spec.id} at {self.level}")

    def collect(self, run: SessionRun, setup: "Setup", request: AgentSessionRequest) -> None:
        run.trace = read_trace(request.run_dir / "trace.jsonl" if request.run_dir else None)


class _CancelWatch:
    """Sets the host's cancel event as soon as the upstream stalls (polled every 10 ms), or,
    where stalls cannot be observed, `after_s` after the start."""

    POLL_S = 0.01

    def __init__(self, but: BackendUnderTest, setup: "Setup", cancel: threading.Event, timeline: Timeline, *, after_s: float, on_stall: bool):
        self.but, self.setup, self.cancel, self.timeline = but, setup, cancel, timeline
        self.after_s = after_s
        self.on_stall = on_stall and but.observes_stalls()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="hc-cancel-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join(timeout=5)

    def _watch(self) -> None:
        while not self._done.is_set():
            if self.on_stall:
                progress = self.but.stall_progress(self.setup)
                fire = progress is not None and progress.stalled is not None
            else:
                fire = time.monotonic() >= self.timeline.started + self.after_s
            if fire:
                self.timeline.cancel_sent = time.monotonic()
                self.cancel.set()
                return
            self._done.wait(self.POLL_S)


@dataclass
class Setup:
    transport: Transport
    facts: Facts = field(default_factory=Facts)
    model: str | None = None
    extra: dict = field(default_factory=dict)
