"""The loopback level of a reasoning-only backend: an api backend whose model is one tool-less
call of another backend's CLI per host turn (its kit profile's `reasoning`,
backends/_kit_profile.py). The backend's own transport (the api kind's host loop) runs the
pinned real CLI of the backend its profile names (`cli_backend`), whose model is the scripted
server on 127.0.0.1 (harnesscheck.loopback.server).

Registered in `harnesscheck.kit.levels.LEVEL_PROVIDERS[("api", "loopback")]` through the
lazy stand-in in loopback/level.py: only a reasoning-only backend has an api loopback level
(the other api columns have no real binary to run).

The kit's abstract scenarios are that CLI's loopback scripts (`loopback_scenario(<its
cli_name>, ...)`), with every tool call the model makes written as the text protocol's fenced
```json {"tool": ..., "args": ...}``` block (the CLI is offered no tool); only the
`native_tool_use` scenario's built-in call stays a real `tool_use` block, the tripwire's
subject. The server serves turn N to a prompt holding N model messages (the profile's
`turn_of_prompt`), since each CLI call sends the whole conversation as one text prompt.

Evidence a check gets, all observed from outside the CLI:
- `run.requests` (path, header values with credentials masked, body) and `run.model_saw`
  (the host's tool results as the model read them in the prompt, and the last prompt);
- `run.children`: each CLI call (argv, env, cwd, pid), recorded by the loopback exec wrapper,
  and as its `stdin` the first turn's prompt as the model received it;
- `tools_offered(run)`: tools offered at the wire (must be none) plus the names the text
  protocol advertised in the system prompt; `system_seen(run)`: the system prompt received;
- `run.facts`: usage summed over the served turns, the served model;
- `run.trace`: the host loop's dispatch trace;
- `run.opened`, `run.network`: the files every CLI call of the session opened and the network
  calls it made, seen with strace, when a check set `trace_opens`.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import replace
from typing import Any

from harnesscheck.backends._kit_profile import KitProfile
from harnesscheck.backends.loopback_endpoint import DUMMY_KEY, LoopbackEndpoint
from harnesscheck.backends.registry import kit_profile
from harnesscheck.core.contracts import Usage
from harnesscheck.kit.adapters import BackendUnderTest, Setup
from harnesscheck.kit.levels import reasoning_profile
from harnesscheck.kit.session import Facts, Progress, SessionRun, SkipCell
from harnesscheck.loopback.adapter import (
    STRACE_LOG,
    CannotScript,
    host_records,
    loopback_scenario,
    read_network,
    read_opens,
    read_records,
    wrapper_binds,
    write_wrapper,
)
from harnesscheck.loopback.scenario import Scenario, ServedUsage, Turn
from harnesscheck.loopback.server import ScriptedModelServer


def cli_spec(spec):
    """The spec of the backend whose CLI the reasoning-only `spec` runs (its kit profile's `cli_backend`)."""
    from harnesscheck.backends.registry import get_spec

    return get_spec(reasoning_profile(spec).cli_backend)


def fenced(name: str, args: dict) -> str:
    return "```json\n" + json.dumps({"tool": name, "args": args}) + "\n```"


def reasoning_scenario(cli: str, name: str, ws: Any, tool_calls: list | None = None, *, profile: KitProfile) -> Scenario:
    """The loopback script of CLI `cli` for kit scenario `name`, its tool calls as fenced text.
    `cached_usage` (two turns serving cache reads and writes) is this level's own: each turn
    is one CLI call whose usage the host loop sums."""
    if name == "cached_usage":
        first = ServedUsage(input=300, output=20, cache_read=1200, cache_write=800)
        return Scenario(
            name,
            (
                Turn(text="reading\n" + fenced("list_dir", {"path": "."}), usage=first),
                Turn(text="done", usage=ServedUsage(input=40, output=15, cache_read=2000)),
            ),
        )
    try:
        base = loopback_scenario(cli, name, ws, tool_calls, profile=profile)
    except CannotScript as exc:  # what the real CLI cannot be made to show: the cell skips
        raise SkipCell(exc.reason, exc.message) from None
    turns = []
    for turn in base.turns:
        keep = tuple(c for c in turn.tool_calls if name == "native_tool_use" and c.builtin)
        text_calls = [c for c in turn.tool_calls if c not in keep]
        if not text_calls:
            turns.append(replace(turn, tool_calls=keep))
            continue
        text = "\n".join([turn.text, *(fenced(c.name, dict(c.input)) for c in text_calls)]).strip()
        turns.append(replace(turn, text=text, tool_calls=keep))
    return replace(base, turns=tuple(turns))


def _prompt_text(body: dict) -> str:
    """The user text of an Anthropic Messages request (the rendered transcript)."""
    parts = []
    for message in body.get("messages") or []:
        if not isinstance(message, dict) or message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "text":
                parts.append(str(block.get("text", "")))
    return "\n".join(parts)


def _system_text(body: dict) -> str:
    system = body.get("system")
    if isinstance(system, list):
        return "\n".join(str(b.get("text", "")) for b in system if isinstance(b, dict))
    return system if isinstance(system, str) else ""


_ADVERTISED = re.compile(r"^- ([A-Za-z0-9_.-]+): ", re.M)
_RESULT = re.compile(r"<<[0-9a-f]+ host>>\n(\[tool result [^\n]*\n.*?)(?=\n\n<<[0-9a-f]+ |\Z)", re.S)


class ReasoningLoopbackAdapter(BackendUnderTest):
    """A reasoning-only backend at the loopback level (see the module docstring)."""

    name = "reasoning-loopback"

    def __init__(self, spec, level, tmp_path):
        super().__init__(spec, level, tmp_path)
        self.reasoning = reasoning_profile(spec)
        self.cli_spec = cli_spec(spec)
        binary, why = self.pinned_cli(spec)
        if binary is None:
            raise SkipCell("env-missing", why)
        self.binary = binary
        self._servers: list[ScriptedModelServer] = []
        self._wrappers = 0
        #: Set by a check for the sessions it runs: every CLI call of the session runs under
        #: `strace -f` (contain.network-loopback-only), its calls in `run.opened` and `run.network`.
        self.trace_opens = False

    @staticmethod
    def pinned_cli(spec):
        """(the pinned CLI of the backend the profile names, "") or (None, why): the registry's
        pin, never a version named here."""
        from harnesscheck.loopback.clis import require_pinned_cli

        return require_pinned_cli(cli_spec(spec))

    @classmethod
    def available(cls, spec) -> tuple[bool, str]:
        binary, why = cls.pinned_cli(spec)
        return binary is not None, why

    @property
    def cli_version(self) -> str | None:
        return self.binary.version

    def provenance(self) -> str:
        return (
            f"the real {self.cli_spec.cli_name} {self.binary.version} (the {self.cli_spec.id} pin), one tool-less "
            "call per host turn, against the scripted model server on 127.0.0.1"
        )

    def _factory(self):
        import importlib

        module, _, attr = self.spec.factory.partition(":")
        return getattr(importlib.import_module(module), attr)

    def transport(self, **settings):
        """The backend's transport at the pinned CLI (no server: for checks that run no session)."""
        from harnesscheck.core.config import Settings

        self.run_settings(settings)
        return self._factory()(self.spec, Settings(backend=self.spec.id, **settings), cli_path=self.binary.path)

    def prepare(self, scenario, ws, *, tool_calls=None, model=None, timeout_s=None, echo=None, **_: Any) -> Setup:
        from harnesscheck.backends.registry import probe_version, remember_version
        from harnesscheck.core.config import Settings

        if echo:
            raise SkipCell("adapter-not-implemented", "upstream text echo is a fake-CLI device")
        script = reasoning_scenario(self.cli_spec.cli_name, scenario, ws, tool_calls, profile=kit_profile(self.cli_spec))
        turn_of_prompt = self.reasoning.turn_of_prompt
        server = ScriptedModelServer(
            script, expected_key=DUMMY_KEY, watch=[ws.canary], turn_of=lambda protocol, body: turn_of_prompt(_prompt_text(body))
        ).start()
        self._servers.append(server)
        self._wrappers += 1
        strace = shutil.which("strace") if self.trace_opens else None  # every turn's call appends to one log
        wrapper, record = write_wrapper(self.tmp_path / f"reasoning-bin{self._wrappers}", self.binary.path, self.cli_spec.cli_name, strace=strace)
        printed = probe_version(self.binary.path)  # probed already (pinned_cli): cached
        if printed:
            remember_version(wrapper, printed)
        settings = Settings(backend=self.spec.id, **self.run_settings({}))
        transport = self._factory()(self.spec, settings, cli_path=wrapper, loopback=LoopbackEndpoint(server.base_url))
        bind = getattr(transport, "bind_in_sandbox", None)
        if bind is not None:  # each turn's sandbox sees the real CLI and writes the wrapper's record
            read_only, writable = wrapper_binds(wrapper, self.binary.path)
            bind(read_only=read_only, writable=writable)
        return Setup(
            transport,
            Facts(requested_model=model),
            model=model,
            extra={"server": server, "record": record, "script": script, "strace": record.parent / STRACE_LOG if strace else None},
        )

    #: The longest deadline `run` retries a session at that its deadline cut short.
    MAX_RETRY_TIMEOUT_S = 120.0

    def run(self, scenario: str, **kwargs) -> SessionRun:
        """A session, repeated at 4x its deadline (at most MAX_RETRY_TIMEOUT_S) when the deadline
        cut it short although its script never stalls: every host turn starts the (large) CLI
        again, which a loaded machine makes slower than the kit's session budgets. Then the cell
        is skipped `budget`: the backend is judged by what it did, never by the machine's speed.
        A script that stalls on purpose (a timeout check) is judged as it ran."""
        timeout = kwargs.pop("timeout_s", 30.0)
        attempt = 0
        while True:
            run = super().run(scenario, timeout_s=timeout, **kwargs)
            if not self._cut_by_the_clock(run):
                return run
            attempt += 1
            if kwargs.get("workspace") is not None and kwargs.get("run_dir") is None:
                # a retry in the caller's workspace gets its own run dir: the cut attempt's trace is not this one's
                kwargs["run_dir"] = kwargs["workspace"].base / f"run-retry{attempt}"
            if timeout >= self.MAX_RETRY_TIMEOUT_S:
                raise SkipCell(
                    "budget",
                    f"the session's deadline ({timeout:g} s) fired before its scripted turns were "
                    "served, with nothing in the script that stalls: this machine is too slow right now to "
                    f"start {self.cli_spec.cli_name} once per host turn; the backend was not judged",
                )
            timeout = min(4 * timeout, self.MAX_RETRY_TIMEOUT_S)

    @staticmethod
    def _cut_by_the_clock(run: SessionRun) -> bool:
        from harnesscheck.core.contracts import ErrorClass, OutcomeStatus

        script = getattr(run, "script", None)
        tl = run.timeline
        # Every tool call the host started was dispatched to its end (its trace record is there):
        # the time went to the CLI calls, not to a host tool that blocked (that is judged).
        dispatched = sum(1 for r in run.trace if r.get("event") == "tool")
        return (
            script is not None
            and not any(t.hang or t.delay_s for t in script.turns)
            and (run.outcome.status, run.outcome.error_class) == (OutcomeStatus.truncated, ErrorClass.timeout)
            and run.outcome.tool_calls <= dispatched
            and tl.cancel_sent is None
            and tl.ended >= tl.started + tl.timeout_s
        )

    def collect(self, run: SessionRun, setup: Setup, request) -> None:
        super().collect(run, setup, request)  # the host loop's dispatch trace
        run.script = setup.extra["script"]  # type: ignore[attr-defined]
        server: ScriptedModelServer = setup.extra["server"]
        server.stop()
        run.run_dir = request.run_dir
        turns = server.turn_requests()
        # The wrapper cannot read stdin without taking it from the CLI; the prompt the model
        # was given is the evidence of how it arrived (as for a harness at loopback).
        delivered = _prompt_text(turns[0].body) if turns else ""
        run.children = [
            {**r, "stdin": delivered}
            for r in host_records(read_records(setup.extra["record"]))  # a sandbox's pids as the host's
            if r.get("argv", [])[1:2] != ["--version"]
        ]
        traced = setup.extra.get("strace")
        run.opened = read_opens(traced) if traced else None  # type: ignore[attr-defined]
        run.network = read_network(traced) if traced else None  # type: ignore[attr-defined]
        run.requests = [
            {"url": r.path + (f"?{r.query}" if r.query else ""), "status": r.status, "headers": r.headers, "visible_headers": r.headers, "body": r.body_text}
            for r in server.requests
        ]
        run.model_calls = len(turns)
        saw: list[str] = []
        if turns:
            last = _prompt_text(turns[-1].body)
            saw.extend(m.group(1) for m in _RESULT.finditer(last))
            saw.append(last)
        run.model_saw = saw
        run.loopback_requests = turns  # type: ignore[attr-defined]
        served = [r for r in turns if r.status == 200]
        if served:
            total = server.served_usage_total()
            run.facts.usage = Usage(
                input=total.input, output=total.output, cache_read=total.cache_read, cache_write=total.cache_write, reasoning=total.reasoning
            )
            run.facts.served_model = served[-1].served_model

    def spawned(self) -> list[dict]:
        return []

    def tools_offered(self, run: SessionRun) -> list[str] | None:
        """Tools offered at the wire (a reasoning turn offers none) and the names the text
        protocol advertised in the system prompt, over every turn."""
        turns = getattr(run, "loopback_requests", None)
        if not turns:
            return None
        offered: dict[str, None] = {}
        for r in turns:
            for name in r.tools:
                offered.setdefault(name, None)
            system = _system_text(r.body)
            if "# Tools" in system:
                for name in _ADVERTISED.findall(system.split("# Tools", 1)[1]):
                    offered.setdefault(name, None)
        return list(offered)

    def system_seen(self, run: SessionRun) -> str | None:
        turns = getattr(run, "loopback_requests", None) or []
        return _system_text(turns[0].body) if turns else None

    def usage_fields(self) -> tuple[str, ...]:
        return ("input", "output", "cache_read", "cache_write")  # the Anthropic wire: no reasoning count

    #: A real CLI needs most of a second to start and send its first request.
    MIN_STALL_TIMEOUT_S = 2.0

    def observes_stalls(self) -> bool:
        return True

    def stall_progress(self, setup: Setup):
        server = setup.extra.get("server")
        if server is None:
            return None
        return Progress(stalled=server.stalled_at, last_output=server.stalled_at, latest=server.last_request_at)

    def close(self) -> None:
        for srv in self._servers:
            srv.stop()
