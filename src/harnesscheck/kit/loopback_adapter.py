"""The loopback level for the kit: a harness backend's real transport driving the pinned
real CLI, whose model is a scripted server on 127.0.0.1 (harnesscheck.loopback.server).

Registered in `harnesscheck.kit.levels.LEVEL_PROVIDERS[("harness", "loopback")]` (lazily,
by `kit.adapters.LoopbackLevel`, and by `register()` on import), so every check written for
the offline level runs here unchanged where the real CLI can express its scenario; the others
skip `adapter-not-implemented`. Built on the kit-free `harnesscheck.loopback.adapter` (the
scenario scripts, the exec wrapper, the /proc watcher), never the other way round.

Evidence a check gets, all observed from outside the CLI:
- `run.requests`: every HTTP request the CLI sent the model server (path, header values
  with credentials masked, body) and `run.model_saw` (tool results and messages in them);
- `run.children`: the CLI's own invocation (argv, env, cwd, pid), recorded by a tiny
  exec wrapper, with `grandchildren` (every descendant seen while it ran: the bridge, MCP
  helpers; pid, argv, exec-time env) from a /proc watcher;
- `tools_offered(run)`: the tools the CLI offered the model at the wire, mapped back to
  scope names (`mcp__bridge__read_file`, `mcp__bridge/read_file` -> `read_file`);
- `run.facts`: what the server sent (usage summed over answered turns, served model),
  and the vendor cost as the CLI printed it (its raw stdout is kept in `run.stdout_lines`).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from harnesscheck.backends.loopback_endpoint import LoopbackEndpoint, session_key
from harnesscheck.backends.registry import kit_profile
from harnesscheck.core.contracts import ErrorClass, Usage
from harnesscheck.kit.adapters import Setup
from harnesscheck.kit.harness_adapter import HarnessAdapter
from harnesscheck.kit.session import Facts, SessionRun, SkipCell
from harnesscheck.loopback.adapter import (
    _VERSION_FLAGS,
    STRACE_LOG,
    CannotScript,
    DescendantWatcher,
    _TeeParser,
    facts_from_stdout,
    host_records,
    loopback_scenario,
    loopback_transport,
    read_network,
    read_opens,
    read_records,
    wire_to_scope_name,
    wrapper_binds,
    write_wrapper,
)
from harnesscheck.loopback.server import ScriptedModelServer


@contextlib.contextmanager
def _as_skip():
    """A scenario or transport the real CLI cannot express: the cell skips with its reason."""
    try:
        yield
    except CannotScript as exc:
        raise SkipCell(exc.reason, exc.message) from None


# ---------------------------------------------------------------------------------------
# The adapter


class _CliVersion:
    """`adapter.cli_version` is the pinned version; `LoopbackAdapter.cli_version(spec)` is
    the probe the kit's report header calls on the registered class."""

    def __get__(self, obj, owner):
        if obj is None:
            return owner.probe_cli_version
        return obj.binary.version


#: The longest start-up (spawn to first model request) seen per backend in this process, in
#: seconds: LoopbackAdapter.startup_allowance_s. Module-level because the kit builds one adapter per cell.
_STARTUP_SEEN: dict[str, float] = {}
_STARTUP_LOCK = threading.Lock()
#: The measured start-up counts this many times over: a later session on a loaded machine may
#: start slower than the one measured.
STARTUP_HEADROOM = 2.0

#: Per (backend id, level), in this process: how the backend answers the model's call of a tool
#: that does not exist, the name replaced by TOOL_NAME (None: not with an error). What a refusal
#: of an offered tool is compared with (LoopbackAdapter.refused_when_called); asked once per
#: column and process, as the kit builds one adapter per cell. A probe that got no answer at all
#: (no tool result reached the model server) is not kept: the next cell asks again.
_UNKNOWN_TOOL_ANSWERS: dict[tuple[str, str], str | None] = {}
#: Stands for the tool's name in a kept answer (a NUL never occurs in an answer's wording).
TOOL_NAME = "\x00tool\x00"
#: error_answer_to's answer when no tool result reached the model server.
NO_ANSWER = object()


class LoopbackAdapter(HarnessAdapter):
    """A harness backend at the loopback level (see the module docstring)."""

    name = "loopback"
    SHARES_SESSIONS = True  # a real runtime's session costs seconds (BackendUnderTest.shared_run)

    def __init__(self, spec, level, tmp_path):
        super().__init__(spec, level, tmp_path)
        from harnesscheck.loopback.clis import require_pinned_cli

        binary, why = require_pinned_cli(spec)
        if binary is None:
            raise SkipCell("env-missing", why)
        self.binary = binary
        self._servers: list[ScriptedModelServer] = []
        self._wrappers = 0
        #: Run the CLI under `strace -f` and collect `run.opened` and `run.network` (set by a check that asks).
        self.trace_opens = False

    @staticmethod
    def available(spec) -> tuple[bool, str]:
        from harnesscheck.loopback.clis import require_pinned_cli

        binary, why = require_pinned_cli(spec)
        return binary is not None, why

    @staticmethod
    def probe_cli_version(spec) -> str | None:
        from harnesscheck.loopback.clis import require_pinned_cli

        binary, _ = require_pinned_cli(spec)
        return binary.version if binary else None

    cli_version = _CliVersion()

    def startup_allowance_s(self) -> float:
        """The real runtime's start-up, added to the deadline of every session whose check does
        not test the deadline itself: the larger of the spec's declared cold start
        (`ProviderSpec.cold_start_s`) and STARTUP_HEADROOM times the longest start-up measured in
        this process (session start to the model server's first request). A runtime that needs
        40 s to start on a loaded machine is judged by what it does, not by that machine's speed."""
        with _STARTUP_LOCK:  # parallel sessions of one check wait for the one measurement
            if self.spec.id not in _STARTUP_SEEN:
                self.measure_startup()
        return max(self.spec.cold_start_s, STARTUP_HEADROOM * _STARTUP_SEEN.get(self.spec.id, 0.0))

    def measured_allowance_s(self) -> float:
        """STARTUP_HEADROOM times the longest start-up measured in this process, without the
        declared cold start (the declared figure where nothing was measured): a session whose
        deadline came before the runtime got going is seen and repeated, so it needs no worst case."""
        declared = self.startup_allowance_s()  # measures once per process and backend
        return STARTUP_HEADROOM * _STARTUP_SEEN.get(self.spec.id, 0.0) or declared

    #: The warm-up session's deadline: long enough for any start-up, never judged.
    WARM_UP_TIMEOUT_S = 600.0

    def measure_startup(self) -> None:
        """Once per process and backend, before the first judged session: one untimed
        `success` session whose start-up (collect) is the first measurement, so no cell is
        judged on the declared figure alone while the machine is slower than it says. It is a
        plain session (no canaries: nothing a broken env policy passes on can stall it or
        skew the measurement), run as no check asked (no strace), and if it ended ok it is the
        one `shared_run("success")` gives the checks that read only its evidence (none of them
        judges its duration): the warm-up is not a session more.

        The warm-up is no session of the cell that happened to trigger it: its containment is
        left out of that cell's record (a cell that then skips says `containment: None`, on
        every run, whichever cell a worker ran first), and recorded in each cell that reads it
        through shared_run."""
        _STARTUP_SEEN.setdefault(self.spec.id, 0.0)
        traced, self.trace_opens = self.trace_opens, False  # the cell that triggered it may have asked
        recorded = set(self.__dict__.get("containments", ()))
        try:
            with contextlib.suppress(Exception):  # the judged sessions that follow judge the backend
                self.keep_shared(self.run("success", timeout_s=self.WARM_UP_TIMEOUT_S, allowance=False), "success")
        finally:
            self.trace_opens = traced
            if recorded:
                self.__dict__["containments"] = recorded
            else:
                self.__dict__.pop("containments", None)

    def provenance(self) -> str:
        return f"the real {self.spec.cli_name} {self.binary.version or '(version not printed)'} against the scripted model server on 127.0.0.1"

    def spawned(self) -> list[dict]:
        return []

    def transport(self, **settings):
        raise SkipCell("adapter-not-implemented", "this check drives the CLI by hand (fake-CLI level only)")

    def install_fake(self, scenario, **overrides):
        raise SkipCell("adapter-not-implemented", "a fake CLI scenario has no meaning at the loopback level")

    def script_profile(self):
        """The kit profile the loopback scripts read (the built-in call a hostile model makes, the
        wire's cache-write tokens): the backend's own."""
        return kit_profile(self.spec)

    def prepare(self, scenario, ws, *, tool_calls=None, model=None, timeout_s=None, echo=None, **_: Any) -> Setup:
        from harnesscheck.core.config import Settings

        if echo:
            raise SkipCell("adapter-not-implemented", "upstream text echo is a fake-CLI device")
        with _as_skip():
            script = loopback_scenario(self.spec.cli_name or "", scenario, ws, tool_calls, profile=self.script_profile())
        watch = [ws.canary, *getattr(self._local, "watch", ())]  # the host's values the check passed (run(parent_env=))
        key = session_key()  # this session's own: the server refuses every other credential
        server = ScriptedModelServer(script, expected_key=key, watch=watch).start()
        self._servers.append(server)
        self._wrappers += 1
        strace = shutil.which("strace") if self.trace_opens else None
        real = self.binary.path
        launcher = kit_profile(self.spec).sdk_launcher
        if real.is_dir() and launcher is not None:  # an SDK dir: the wrapper execs the launcher its profile names
            real = launcher(real)
        wrapper, record = write_wrapper(self.tmp_path / f"loopback-bin{self._wrappers}", real, self.spec.cli_name or "cli", strace=strace)
        from harnesscheck.backends.registry import probe_version, remember_version, version_probe_timeout_s
        from harnesscheck.loopback.install import manifest_versioned

        # an SDK dir prints nothing; a CLI with no --version (an ACP agent's bin) is not started to ask it
        printed = (
            f"{self.spec.id} {self.binary.version}"
            if self.binary.path.is_dir() or self.spec.cli_name in manifest_versioned()
            else probe_version(self.binary.path, version_probe_timeout_s(self.spec))
        )  # probed already (require_pinned_cli): cached
        if printed:  # the wrapper execs that binary: its answer, without starting it again per cell
            remember_version(wrapper, printed)
        with _as_skip():
            transport = loopback_transport(
                self.spec,
                Settings(backend=self.spec.id, **(getattr(self._local, "settings", None) or {})),  # run(settings=)
                cli_path=wrapper,
                endpoint=LoopbackEndpoint(server.base_url, api_key=key),
            )
        bind = getattr(transport, "bind_in_sandbox", None)
        if bind is not None:  # a sandboxed session sees the real CLI and writes the wrapper's record
            read_only, writable = wrapper_binds(wrapper, real)
            bind(read_only=read_only, writable=writable)
        lines: list[str] | None = []
        make_parser = getattr(transport, "make_parser", None)
        if make_parser is None:  # a backend not built on our providers: its CLI's stdout is not seen
            lines = None
        else:

            def tee_parser(*args, **kwargs):
                return _TeeParser(make_parser(*args, **kwargs), lines)

            transport.make_parser = tee_parser  # observe stdout only; behaviour unchanged
        watcher = DescendantWatcher(record).start()
        extra = {
            "prepared_at": time.time(),
            "server": server,
            "record": record,
            "wrapper": wrapper,
            "watcher": watcher,
            "lines": lines,
            "script": script,
            "strace": record.parent / STRACE_LOG if strace else None,
        }
        return Setup(transport, Facts(requested_model=model), model=model, extra=extra)

    def collect(self, run: SessionRun, setup: Setup, request) -> None:
        from harnesscheck.kit.session import read_trace

        run.ended_at = time.time()  # type: ignore[attr-defined]  # wall clock, like the server's timestamps
        server: ScriptedModelServer = setup.extra["server"]
        # The start-up: from just before the session started to the first request (an upper
        # bound); a session the deadline ended before any request started at least that slowly.
        startup = None
        if server.requests:
            startup = server.requests[0].ts - setup.extra["prepared_at"]
        elif run.outcome.error_class is ErrorClass.timeout:
            startup = run.ended_at - setup.extra["prepared_at"]  # type: ignore[attr-defined]
        if startup is not None:
            _STARTUP_SEEN[self.spec.id] = max(_STARTUP_SEEN.get(self.spec.id, 0.0), startup)
        watcher: DescendantWatcher = setup.extra["watcher"]
        descendants = watcher.stop()
        server.stop()
        run.run_dir = request.run_dir
        trace: list[dict] = []
        for name in ("session-trace.jsonl", "bridge-trace.jsonl"):
            trace.extend(read_trace(Path(request.run_dir) / name) if request.run_dir else [])
        run.trace = trace
        recorded = host_records(read_records(setup.extra["record"]), watcher.host_pids)  # a sandbox's pids as the host's
        records = [r for r in recorded if not set(r.get("argv", [])[1:2]) & _VERSION_FLAGS]
        run.cli_named, run.cli_pids = setup.extra["wrapper"], [int(r["pid"]) for r in recorded if "pid" in r]
        turns = server.turn_requests()
        # The wrapper cannot read stdin without taking it from the CLI; what the model was
        # given as the user's words is the loopback evidence of how the prompt arrived.
        delivered = "\n".join(m["text"] for m in (turns[0].messages if turns else []) if m.get("role") == "user")
        for rec in records:
            rec["grandchildren"] = descendants
            rec["stdin"] = delivered
        run.children = records
        run.requests = [
            {"url": r.path + (f"?{r.query}" if r.query else ""), "status": r.status, "headers": r.headers, "body": r.body_text} for r in server.requests
        ]
        run.model_calls = len(turns)
        saw: list[str] = []
        for r in turns:
            saw.extend(tr["text"] for tr in r.tool_results)
        if turns:
            saw.extend(m["text"] for m in turns[-1].messages if m.get("text"))
        run.model_saw = saw
        # None: the kit could not see what the CLI printed (a foreign backend), so the figures only
        # its stdout carries (the vendor cost) are unknown, not absent
        run.stdout_lines = None if setup.extra["lines"] is None else list(setup.extra["lines"])  # type: ignore[attr-defined]
        run.opened = read_opens(setup.extra["strace"]) if setup.extra.get("strace") else None  # type: ignore[attr-defined]
        run.network = read_network(setup.extra["strace"]) if setup.extra.get("strace") else None  # type: ignore[attr-defined]
        run.loopback_requests = turns  # type: ignore[attr-defined]
        run.loopback_all = list(server.requests)  # type: ignore[attr-defined]  # side requests too
        run.served_at = [r.ts for r in server.requests]  # type: ignore[attr-defined]
        served = [r for r in turns if r.status == 200]
        total = server.served_usage_total()
        if served:
            run.facts.usage = Usage(
                input=total.input, output=total.output, cache_read=total.cache_read, cache_write=total.cache_write, reasoning=total.reasoning
            )
            run.facts.served_model = served[-1].served_model
        run.facts.cost_usd = facts_from_stdout(kit_profile(self.spec), run.stdout_lines or []).get("cost_usd")  # type: ignore[attr-defined]

    def wire_credentials(self, run: SessionRun, host: dict[str, str]) -> list[dict] | None:
        """From the scripted model server's records (it keeps no credential value): a model turn
        must carry the session's dummy key; a side request (a model list, a title) may carry no
        credential, but never another one. The host's values the check passed are watched for
        in every header (`canary_hits`)."""
        out = []
        for r in getattr(run, "loopback_all", None) or []:
            if not r.is_turn and not r.credentials_present:
                session = None  # a side request without a credential: nothing was sent
            else:
                session = bool(r.credentials_present and r.credential_matches)
            out.append({"request": f"{r.method} {r.path}", "session": session, "host_headers": sorted(h for h in r.canary_hits if h != "body")})
        return out

    def tools_offered(self, run: SessionRun) -> list[str] | None:
        """Every tool the CLI offered the model in any request, in scope names."""
        turns = getattr(run, "loopback_requests", None)
        if not turns:
            return None
        offered: dict[str, None] = {}
        for r in turns:
            for name in r.tools:
                offered.setdefault(wire_to_scope_name(name), None)
        return list(offered)

    def tool_errors(self, run: SessionRun) -> list[tuple[str, str]]:
        """(tool, text) of each tool result the model got back as an error, read from the
        requests the CLI sent the model server (for a CLI whose kit profile says
        `tool_errors_at_wire`: the Messages wire's `tool_result` with `is_error`, named by its
        `tool_use`), once per call whichever request repeats it. Any backend's refusals are seen
        this way, not only those its outcome lists."""
        if not kit_profile(self.spec).tool_errors_at_wire:
            return super().tool_errors(run)
        from harnesscheck.loopback.wire import ANTHROPIC, tool_results

        names: dict[str, str] = {}
        errors: dict[str, tuple[str, str]] = {}
        for req in run.requests:
            try:
                body = json.loads(req.get("body") or "")
            except ValueError:
                continue
            if not isinstance(body, dict):
                continue
            for m in body.get("messages") or []:
                for c in m.get("content") if isinstance(m, dict) and isinstance(m.get("content"), list) else []:
                    if isinstance(c, dict) and c.get("type") == "tool_use":
                        names[str(c.get("id"))] = wire_to_scope_name(str(c.get("name", "")))
            for tr in tool_results(ANTHROPIC, body):
                if tr["is_error"]:
                    errors.setdefault(str(tr["id"]), (names.get(str(tr["id"]), ""), tr["text"]))
        return list(errors.values())

    def refused_when_called(self, names: list[str], ws) -> dict[str, str]:
        """Offered tools judged by behaviour: the model calls each of `names` once (empty
        input, one session per name); name -> the CLI's answer for each it refused to execute.
        Refused means answered as the backend answers a tool that does not exist (a fresh
        name, asked once per column and process): an error tool result whose text is that
        answer with the tool's name in the fresh name's place; nothing outside the worktree
        changed; the sentinel not on the wire. An error alone is no refusal: a tool that is on
        answers an empty input with an error too (a shell or edit tool: an input validation
        error). A backend that does not answer an unknown tool with an error gives no refusal
        to compare with, so none of its offered tools counts as refused. The first name it
        executed, or answered otherwise, ends the probe and is left out (with the names after it)."""
        if not names:
            return {}
        unknown = self.unknown_tool_answer(ws)
        if unknown is None:
            return {}
        refused: dict[str, str] = {}
        for name in names:
            answer = self.error_answer_to(name, ws)
            if answer != unknown.replace(TOOL_NAME, name):
                break  # executed, or answered otherwise: the check fails on it, the rest need no session
            refused[name] = answer[:200]
        return refused

    def unknown_tool_answer(self, ws) -> str | None:
        """The backend's answer to the model's call of a tool that does not exist, its name
        replaced by TOOL_NAME; None when that answer is not an error, or when no answer came
        (_UNKNOWN_TOOL_ANSWERS keeps the first, not the second)."""
        import secrets

        key = (self.spec.id, self.level)
        if key not in _UNKNOWN_TOOL_ANSWERS:
            name = f"hc_no_such_tool_{secrets.token_hex(4)}"
            answer = self.error_answer_to(name, ws)
            if answer is NO_ANSWER:
                return None
            _UNKNOWN_TOOL_ANSWERS[key] = answer.replace(name, TOOL_NAME) if isinstance(answer, str) else None
        return _UNKNOWN_TOOL_ANSWERS[key]

    def error_answer_to(self, name: str, ws) -> str | object | None:
        """The text of the CLI's error answer to one call of `name` (empty input) that changed
        nothing outside the worktree and put no sentinel on the wire; NO_ANSWER when no tool
        result reached the model server; None for anything else. Read from the first request
        that carries a tool result, not from the second: a CLI may send a tool-less request of
        its own beside its first turn, sometimes before it and sometimes after (doc/SPEC-acp.md)."""
        from harnesscheck.kit.session import ToolCall as KitCall

        run = self.run("tools", workspace=ws, tool_calls=[KitCall(name, {})])
        turns = getattr(run, "loopback_requests", None) or []
        results = next((r.tool_results for r in turns if r.tool_results), [])
        if not results:
            return NO_ANSWER
        wire = "\n".join(str(req.get("body", "")) for req in run.requests)
        if not (len(results) == 1 and results[0].get("is_error") and ws.canary not in wire and ws.outside_unchanged()):
            return None
        return str(results[0].get("text", ""))

    def auth_refused_at(self, setup: Setup) -> float | None:
        """The scripted model server's first 401 to one of the session's model turns, on the
        monotonic clock (the server records wall-clock times, which the checks compare)."""
        server = setup.extra.get("server")
        refused = [r.ts for r in (server.turn_requests() if server is not None else []) if r.status == 401]
        if not refused:
            return None
        return time.monotonic() - (time.time() - min(refused))

    def running_pids(self, setup: Setup, request) -> list[int]:
        """The real CLI (its exec wrapper's records, version probes aside), every descendant the
        watcher has seen so far, and each bridge the traces name: what the watchdog ends."""
        watcher = setup.extra.get("watcher")
        known = dict(watcher.host_pids) if watcher is not None else {}
        pids = [
            int(r["pid"]) for r in host_records(read_records(setup.extra["record"]), known) if "pid" in r and not set(r.get("argv", [])[1:2]) & _VERSION_FLAGS
        ]
        for _ in range(3):  # the watcher's thread adds to `seen` while this copies it
            try:
                pids.extend(list(watcher.seen) if watcher is not None else [])
                break
            except RuntimeError:
                continue
        return list(dict.fromkeys(pids + super().running_pids(setup, request)))

    def child_pids(self, run: SessionRun) -> list[int]:
        pids: list[int] = []
        for child in run.children:
            pids.append(int(child["pid"]))
            pids.extend(int(g["pid"]) for g in child.get("grandchildren", []))
        from harnesscheck.kit.session import bridge_pids

        pids.extend(bridge_pids(run))  # a forkserver bridge is outside the CLI's group
        return sorted(set(pids))

    def tools_unfinished(self, run: SessionRun) -> bool:
        """Loopback: the session ended at its deadline (timeout) before the scripted model server
        got any tool result back, so the real CLI (slow to start on a loaded machine) never got
        as far as the calls: run_tools repeats it at a longer deadline, then skips `budget`. A
        session that ended otherwise, or whose calls came back, is judged as it is."""
        from harnesscheck.core.contracts import ErrorClass

        if run.outcome.error_class != ErrorClass.timeout:
            return False
        return not any(t.tool_results for t in getattr(run, "loopback_requests", None) or [])

    #: A real CLI needs most of a second to start and send its first request.
    MIN_STALL_TIMEOUT_S = 2.0

    def observes_stalls(self) -> bool:
        """The scripted model server notes when a hanging turn has sent all it will."""
        return True

    def stall_progress(self, setup: Setup):
        """The stall is the server's: the CLI has started, connected its bridge and asked for
        the turn that hangs (the CLI's own stdout lines carry no timestamps)."""
        from harnesscheck.kit.session import Progress

        server = setup.extra.get("server")
        if server is None:
            return None
        return Progress(stalled=server.stalled_at, last_output=server.stalled_at, latest=server.last_request_at)

    def close(self) -> None:
        for srv in self._servers:
            srv.stop()


def register() -> None:
    """Make the kit run harness backends at the loopback level through this adapter."""
    from harnesscheck.kit.levels import LEVEL_PROVIDERS

    LEVEL_PROVIDERS[("harness", "loopback")] = LoopbackAdapter


register()
