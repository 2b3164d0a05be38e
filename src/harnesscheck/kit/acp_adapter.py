"""AcpAdapter: an ACP backend at the offline level — its real transport driving the fake ACP agent.

Each run writes a scenario for `fake_clis/acp-agent` (a fixture `fixtures/acp-agent/<scenario>.json`,
or the steps of an acp.* check) and runs the backend's own transport with its profile's
command extended by `--scenario FILE --record FILE`; a miniature's profile adds its `--defect`.
Tool calls are real: the fake starts the bridge the transport named in `session/new` and calls
it. Canonical scenarios the fake cannot stand for are skipped `adapter-not-implemented`, with the
reason; nothing is guessed.

The evidence of an ACP session (`AcpRun`): the outcome, what the host saw on the wire
(backends/acp/session.py AcpEvidence), the fake's own record (its pid, its tool children and MCP
servers with the env it gave them) and the effects on disk the check looks at itself.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from harnesscheck.kit.adapters import BackendUnderTest, Setup
from harnesscheck.kit.session import Facts, SessionRun, SkipCell

#: The canonical scenarios the fake ACP agent replays from fixtures/acp-agent/ as they are.
FIXTURE_SCENARIOS = frozenset(
    {"success", "timeout_mid_stream", "not_logged_in", "auth_401", "rate_limit_429", "overloaded_529", "context_overflow", "max_turns"}
)


def _between(lines: tuple[str, ...]):
    """Steps with each of `lines` on stdout before the first step and after every step."""
    noise = [{"noise": line} for line in lines]
    return lambda steps: [*noise, *(x for step in steps for x in (step, *noise))]


def _unknown(steps: list[dict]) -> list[dict]:
    """An update kind and a vendor notification no host knows, before the steps."""
    return [
        {
            "send": {
                "jsonrpc": "2.0",
                "method": "session/update",
                "params": {"sessionId": "sess_fake_1", "update": {"sessionUpdate": "future_update_kind", "x": 1}},
            }
        },
        {"send": {"jsonrpc": "2.0", "method": "_vendor/notice", "params": {"text": "hello"}}},
        *steps,
    ]


def _repeated_usage(steps: list[dict]) -> list[dict]:
    """`usage_update` (the context window's fill, not billing) after every step: reported again
    and again; only the prompt result's usage counts, once."""
    update = {
        "send": {
            "jsonrpc": "2.0",
            "method": "session/update",
            "params": {"sessionId": "sess_fake_1", "update": {"sessionUpdate": "usage_update", "used": 17, "size": 1000000}},
        }
    }
    return [x for step in steps for x in (step, update, update)]


def _result_usage(data: dict):
    """The usage a scenario's prompt result reports (Usage), None when it reports none."""
    from harnesscheck.core.contracts import Usage

    raw = data.get("usage")
    if not isinstance(raw, dict):
        return None
    return Usage(
        input=int(raw.get("inputTokens", 0)),
        output=int(raw.get("outputTokens", 0)),
        cache_read=int(raw.get("cachedReadTokens", 0)),
        cache_write=int(raw.get("cachedWriteTokens", 0)),
    )


#: `success` with lines that are no JSON-RPC message between the messages (the host counts and
#: skips them; acp.stdout-only-jsonrpc judges the agent that prints them), or with unknown messages.
SUCCESS_VARIANTS = {
    "noise_lines": _between(("[SandboxDebug] seatbelt profile applied", "Warning: proxy settings ignored")),
    "brace_noise": _between(
        ("{ SandboxDebug: 'profile applied', pid: 4242 }", "{", '{"truncated debug print', '{"level":"debug","msg":"mcp: 1 server connecting {bridge}"}', "{}")
    ),
    "unknown_events": _unknown,
    "repeated_usage": _repeated_usage,
}

#: Why the rest of the canonical scenarios have no ACP form here (the skip's message).
NO_ACP_FORM = (
    "the fake ACP agent has no form of this scenario: ACP carries no such event (stream-format and CLI-exit "
    "scenarios belong to the CLI fakes), or no ACP agent was observed doing it (shared/reference/observed-acp-agents.md)"
)


@dataclass
class AcpRun:
    """One ACP session as an acp.* check sees it."""

    outcome: Any
    evidence: Any  # backends.acp.session.AcpEvidence
    records: list[dict]
    duration_s: float
    effects: Path  # a directory outside the worktree and the run dir for the scenario's marks
    run_dir: Path
    observed: dict = field(default_factory=dict)  # what the check's observer saw mid-session

    def bridge_trace(self) -> list[dict]:
        """The session's dispatch records (the bridge's, and the host's fs/* serving)."""
        from harnesscheck.kit.session import read_trace

        return read_trace(self.run_dir / "bridge-trace.jsonl")

    def kinds(self, kind: str) -> list[dict]:
        return [r for r in self.records if r.get("kind") == kind]


def read_records(path: Path) -> list[dict]:
    out = []
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return out
    for line in text.split("\n"):
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def session_new_servers(run_dir) -> dict[str, dict]:
    """The MCP servers an ACP host named in `session/new`, from its wire log in the run dir
    (backends/acp/transport.py WIRE_LOG): {name: {command, args, env}}; {} when there is none."""
    servers: dict[str, dict] = {}
    for rec in read_records(Path(run_dir) / "acp-wire.jsonl") if run_dir else []:
        msg = rec.get("msg") if rec.get("dir") == "out" else None
        if isinstance(msg, dict) and msg.get("method") == "session/new":
            for entry in (msg.get("params") or {}).get("mcpServers") or []:
                servers[str(entry.get("name"))] = {
                    "command": entry.get("command"),
                    "args": entry.get("args") or [],
                    "env": {e.get("name"): e.get("value") for e in entry.get("env") or [] if isinstance(e, dict)},
                }
    return servers


#: A step's auth / rate-limit / ... JSON-RPC error (the fixtures' forms) -> the FakeScript error class.
_ERROR_WORDS = (("auth", "auth"), ("rate", "rate_limit"), ("overload", "overloaded"), ("too long", "context_overflow"), ("context", "context_overflow"))


def prompt_script(scenario: dict) -> str:
    """A fake ACP agent scenario (steps) as the FakeScript JSON prompt `harnesscheck acp serve
    --backend fake` plays (doc/SPEC-fake.md): text, MCP-named tool calls as its own scoped tools
    (it starts no MCP server: SPEC-acp-serve.md), a local write as `write_file` of that path (its
    scope refuses one outside the session's cwd), a command as a call of `shell` (it has no shell
    tool: refused), a hang as a long delay, an error as that class. A step with no such form
    (noise, spawns, defects of the fake's) is a SkipCell."""
    turns: list[dict] = []
    said: list[str] = []  # text before a call or an error goes with it (a text-only turn is the final answer)

    def turn(**fields) -> None:
        turns.append({"text": " ".join(said), **fields})
        said.clear()

    for step in scenario.get("steps") or []:
        if "say" in step:
            said.append(step["say"] or "...")
        elif "mcp" in step:
            turn(tool_calls=[[step["mcp"], dict(step.get("arguments") or {})]])
        elif "write" in step:
            turn(tool_calls=[["write_file", {"path": step["write"], "content": step.get("content", "")}]])
        elif "shell" in step:
            turn(tool_calls=[["shell", {"command": step["shell"]}]])
        elif "hang" in step:
            turn(delay_s=3600)
        elif "error" in step:
            text = json.dumps(step["error"]).lower()
            error = next((cls for word, cls in _ERROR_WORDS if word in text), "server_error")
            turn(error=error, error_message=str(step["error"].get("message", "")))
        elif "auth_signal" in step:
            continue
        else:
            raise SkipCell(
                "adapter-not-implemented",
                f"{next(iter(step), '?')!r}: a device of the fake ACP agent with no form in the prompt script of harnesscheck's own agent",
            )
    if said or not turns or turns[-1].get("tool_calls"):
        turn() if said else turns.append({"text": "done"})
    return json.dumps({"turns": turns})


class AcpAdapter(BackendUnderTest):
    name = "fake-acp-agent"

    def __init__(self, spec, level, tmp_path):
        super().__init__(spec, level, tmp_path)
        if level != "offline":
            raise SkipCell("env-missing", f"no {level} adapter for the ACP backend {spec.id} is installed here")
        self._runs = 0
        from harnesscheck.backends.registry import build_transport
        from harnesscheck.core.config import Settings

        profile = getattr(build_transport(spec, Settings(backend=spec.id)), "profile")
        self.by_prompt = profile.scripted_by_prompt
        if not (profile.replays_scenarios or profile.scripted_by_prompt):
            raise SkipCell(
                "env-missing",
                f"{spec.id} is a real ACP agent: it needs a model, and the offline level has "
                "none (it drives only an agent that replays scripted turns, `replays_scenarios` in its "
                "profile); its level is loopback, not built for ad-hoc agents yet",
            )

    @property
    def cli_version(self) -> str | None:
        return "fake acp-agent 0.1.0 (offline)"

    def provenance(self) -> str:
        return "the fake ACP agent (fake_clis/acp-agent) replaying fixtures/acp-agent/ or the check's own steps"

    # -- building a run ---------------------------------------------------------------------

    def _transport(self, scenario: dict, *, policy=None, settings: dict | None = None, session_key: str | None = None):
        """The backend's transport, its profile's command extended to replay `scenario`."""
        from harnesscheck.backends.registry import build_transport
        from harnesscheck.core.config import Settings

        self._runs += 1
        folder = self.tmp_path / f"acp{self._runs}"
        folder.mkdir(parents=True, exist_ok=True)
        scenario_path, record_path = folder / "scenario.json", folder / "record.jsonl"
        scenario_path.write_text(json.dumps(scenario), encoding="utf-8")
        # Offline, the fake agent runs with the process guard alone (containment: guards, on every
        # outcome): the acp.* checks read pids the fake records of itself and its tool children
        # while it runs, and effects it leaves on host paths it is told of on its command line;
        # inside a PID namespace those pids are the namespace's. The real agents at loopback are
        # sandboxed (AcpLoopbackLevel); a check asks for a sandbox itself with settings={"sandbox": ...}.
        run = self.run_settings(dict(settings or {}))
        run.setdefault("sandbox", "off")
        transport = build_transport(self.spec, Settings(backend=self.spec.id, **run))
        profile = transport.profile
        if self.by_prompt:
            import sys

            from harnesscheck.loopback.adapter import write_wrapper

            script = prompt_script(scenario)
            played = transport.run_session

            def run_session(request, **kwargs):  # the model's script is the prompt the agent gets
                if request.system:
                    raise SkipCell(
                        "adapter-not-implemented",
                        "harnesscheck's own ACP agent is scripted by its prompt; "
                        "a system text (sent before the task: ACP v1 has no system channel) would break the script",
                    )
                # the check's own task rides along in the script (FakeScript reads only "turns")
                given = json.dumps({**json.loads(script), "task": request.prompt})
                self._script = given
                return played(request.model_copy(update={"prompt": given}), **kwargs)

            transport.run_session = run_session
            # its invocation (argv, env, pid) recorded by an exec wrapper around the interpreter, as at loopback
            wrapper, record_path = write_wrapper(folder / "bin", Path(sys.executable), "python")
            transport.profile = profile.model_copy(update={"command": [str(wrapper), *profile.command[1:]]})
            self._script = script
        else:
            transport.profile = profile.model_copy(update={"command": [*profile.command, "--scenario", str(scenario_path), "--record", str(record_path)]})
        if policy is not None:
            transport.policy = policy
        if session_key is not None:
            transport._key = session_key
        if run.get("linger_s") is not None:
            transport.linger_s = run["linger_s"]  # the check's own, whatever the profile's or the default
        return transport, record_path

    def prepare(self, scenario, ws, *, tool_calls, model, timeout_s, echo) -> Setup:
        from harnesscheck.testing.fakes import fixture_path

        if self.by_prompt and scenario not in FIXTURE_SCENARIOS:
            raise SkipCell(
                "adapter-not-implemented",
                f"{scenario}: harnesscheck's own ACP agent is scripted here only for "
                "the acp.* checks and the canonical fixtures (text, errors, a stall): its tools act in the "
                "session's cwd (the host's scratch dir, not the worktree) and it starts no bridge, so the "
                "bridge and worktree evidence those checks read does not exist (doc/SPEC-acp-serve.md)",
            )
        if scenario == "tools":
            steps = [{"mcp": c.name, "arguments": dict(c.args)} for c in tool_calls or []]
            data = {"steps": [*steps, {"say": "done"}], "stop": "end_turn"}
            facts = Facts()
        elif scenario in FIXTURE_SCENARIOS:
            path = fixture_path("acp-agent", scenario)
            data = json.loads(path.read_text(encoding="utf-8"))
            facts = Facts(usage=_result_usage(data))
            if scenario == "timeout_mid_stream" and not self.by_prompt:  # a FakeScript turn stalls before its text
                facts.partial_text = next((s["say"] for s in data["steps"] if "say" in s), None)
        elif scenario in SUCCESS_VARIANTS:
            data = json.loads(fixture_path("acp-agent", "success").read_text(encoding="utf-8"))
            data["steps"] = SUCCESS_VARIANTS[scenario](data["steps"])
            facts = Facts(usage=_result_usage(data))
        elif scenario == "timeout_tree":
            # The stall with a tree under it: helpers of the agent's own in its group, one escaped by
            # setsid, one by setsid with an empty environment, the bridge, and SIGTERM ignored from the hang on.
            data = json.loads(fixture_path("acp-agent", "timeout_mid_stream").read_text(encoding="utf-8"))
            data["steps"] = [
                {"spawn": "sleep 1000"},
                {"spawn": "sleep 1000", "setsid": True},
                {"spawn": "env -i sleep 1000", "setsid": True},
                {"mcp": "list_dir", "arguments": {"path": "."}},
                *data["steps"][:-1],
                {"ignore_sigterm": True},
                data["steps"][-1],
            ]
            facts = Facts(partial_text=next((s["say"] for s in data["steps"] if "say" in s), None))
        else:
            raise SkipCell("adapter-not-implemented", f"{scenario}: {NO_ACP_FORM}")
        if echo:
            data = {**data, "steps": [{"say": ""}, *data["steps"]]}
        transport, record = self._transport(data)
        return Setup(transport, facts, model=model, extra={"record": record})

    def collect(self, run: SessionRun, setup: Setup, request) -> None:
        from harnesscheck.kit.session import read_trace

        records = read_records(setup.extra["record"])
        run.run_dir = request.run_dir
        run.children = self._children(records)
        if self.by_prompt:  # the exec wrapper's records; the prompt reaches an ACP agent on stdin
            run.children = [{**rec, "stdin": getattr(self, "_script", ""), "grandchildren": [], "mcp_server_pids": []} for rec in records if "pid" in rec]
        run.cli_pids = [c["pid"] for c in run.children]
        trace = []
        for name in ("session-trace.jsonl", "bridge-trace.jsonl"):
            trace.extend(read_trace(Path(request.run_dir) / name) if request.run_dir else [])
        run.trace = trace
        results = [r for r in records if r.get("kind") == "tool_result"]
        run.model_saw = [str(r.get("text", "")) for r in results]
        run.extra_tool_results = results

    def tool_errors(self, run: SessionRun) -> list[tuple[str, str]]:
        """The MCP results the fake agent (standing in for the model's side) got back as errors."""
        return [(r.get("name", ""), r.get("text", "")) for r in getattr(run, "extra_tool_results", []) if r.get("is_error")]

    def mcp_servers(self, run: SessionRun) -> dict[str, dict]:
        """The MCP servers the host named in `session/new` (its wire log)."""
        return session_new_servers(run.run_dir)

    @staticmethod
    def _children(records: list[dict]) -> list[dict]:
        """The fake's invocation records, each with its tool children and MCP servers (pids)."""
        children = []
        for rec in records:
            if rec.get("kind") != "invocation":
                continue
            pid = rec.get("pid")
            mine = [r for r in records if r.get("agent_pid") == pid]
            prompts = [r.get("text", "") for r in mine if r.get("kind") == "prompt"]
            children.append(
                {
                    **rec,
                    "stdin": "\n".join(prompts),  # the prompt reaches an ACP agent in session/prompt, on stdin
                    "grandchildren": [{"pid": r["pid"]} for r in mine if r.get("kind") in ("tool_child", "spawn")],
                    "mcp_server_pids": [r["pid"] for r in mine if r.get("kind") == "mcp_server"],
                }
            )
        return children

    # -- ACP sessions for the acp.* checks ----------------------------------------------------

    def acp_run(
        self,
        steps: list[dict],
        *,
        timeout_s: float = 30.0,
        read_only: bool = False,
        policy: Callable | None = None,
        cancel_when: Callable | None = None,
        observer: Callable | None = None,
        plant: Callable | None = None,
        parent_env: dict[str, str] | None = None,
        linger_s: float | None = None,
        session_key: str | None = None,
        decided: Callable | None = None,
    ) -> AcpRun:
        """One ACP session whose agent performs `steps` (fake_clis/acp-agent's step format;
        `{effects}` in any string is the run's effects dir, outside the worktree and the run dir).

        `policy(tool_call, session) -> allow?` replaces the host's permission policy (default:
        bridge tools only); `cancel_when(evidence, record) -> bool`, polled, cancels the session as
        a host would; `observer(direction, message, evidence, observed)` runs in the host's reading
        thread for each agent message before the host acts on it; `plant(ws, run_dir)` writes
        files before the session; `linger_s`: how long the host waits for the agent to exit by
        itself after it closed stdin (Settings.linger_s); `session_key`: the session's own model
        credential (`{key}` of the profile), as a host hands it over; `decided(evidence) -> bool`,
        polled: the check's verdict can no longer change (its evidence is in), so the host cancels
        the session then instead of letting it run to its deadline."""
        ws = self.workspace()
        effects = ws.base / "effects"
        effects.mkdir()
        filled = json.loads(json.dumps(steps).replace("{effects}", str(effects)))
        settings = {} if linger_s is None else {"linger_s": linger_s}
        transport, record = self._transport({"steps": filled, "stop": "end_turn"}, policy=policy, settings=settings, session_key=session_key)
        transport.bind_in_sandbox(writable=[effects])  # where a step's side effects land, sandboxed or not
        return run_acp_session(
            self,
            transport,
            record,
            ws,
            effects,
            timeout_s=timeout_s,
            read_only=read_only,
            cancel_when=cancel_when,
            observer=observer,
            plant=plant,
            parent_env=parent_env,
            decided=decided,
        )


def run_acp_session(
    but: BackendUnderTest,
    transport,
    record: Path | None,
    ws,
    effects: Path,
    *,
    timeout_s: float,
    read_only: bool,
    cancel_when: Callable | None,
    observer: Callable | None,
    plant: Callable | None,
    parent_env: dict[str, str] | None,
    decided: Callable | None = None,
) -> AcpRun:
    """One session of an ACP transport in workspace `ws`, with the evidence an acp.* check reads.
    `cancel_when(evidence, record)` and `decided(evidence)` (AcpAdapter.acp_run), polled, cancel it."""
    from harnesscheck.backends.acp.session import AcpEvidence
    from harnesscheck.core.contracts import AgentSessionRequest
    from harnesscheck.kit.session import patched_environ

    run_dir = ws.base / "run"
    if plant is not None:
        plant(ws, run_dir)
    evidence = AcpEvidence()
    observed: dict = {"record": record}
    cancel = threading.Event()
    stop_poll = threading.Event()

    def poll() -> None:
        while not stop_poll.wait(0.02):
            if (cancel_when is not None and cancel_when(evidence, record)) or (decided is not None and decided(evidence)):
                cancel.set()
                return

    poller = threading.Thread(target=poll, daemon=True) if cancel_when is not None or decided is not None else None
    watch = (lambda d, m, ev: observer(d, m, ev, observed)) if observer is not None else None
    request = AgentSessionRequest(prompt="Do the task.", scope=ws.scope(read_only=read_only), timeout_s=timeout_s, run_dir=run_dir, session_id=uuid.uuid4().hex)
    env = {**but.host_isolation(ws), **(parent_env or {})}
    with patched_environ(env):
        transport.parent_env = dict(os.environ)
        started = time.monotonic()
        if poller is not None:
            poller.start()
        try:
            outcome = transport.run_session(request, cancel=cancel, evidence=evidence, observer=watch)
        finally:
            stop_poll.set()
    if getattr(outcome, "containment", None):  # the cell says how its sessions were contained
        but.__dict__.setdefault("containments", set()).add(str(outcome.containment))
    return AcpRun(
        outcome=outcome,
        evidence=evidence,
        records=read_records(record) if record else [],
        duration_s=time.monotonic() - started,
        effects=effects,
        run_dir=run_dir,
        observed=observed,
    )


# ---------------------------------------------------------------------------------------------
# The loopback level: a real ACP agent (its profile's npm pin) against a scripted model server


def loopback_turns(steps: list[dict], agent: str, builtin_calls: dict | None = None) -> list:
    """An acp.* check's steps as the model's turns: text, a bridge call, an auth failure (401),
    and a local write or command where the agent's profile names the built-in that does it
    (`builtin_calls`: a profile with built-ins on). Anything else (a hang, a defect of the
    fake's, a write or command with no such built-in) is skipped, saying which."""
    from harnesscheck.loopback.scenario import ToolCall, Turn, status_turn

    builtin_calls = builtin_calls or {}
    turns = []
    for step in steps:
        if "say" in step:
            turns.append(Turn(text=step["say"] or "..."))
        elif "mcp" in step:
            turns.append(Turn(tool_calls=(ToolCall(step["mcp"], dict(step.get("arguments") or {})),)))
        elif "error" in step and "auth" in json.dumps(step["error"]).lower():
            turns.append(status_turn(401))
        elif "auth_signal" in step:
            continue  # the agent's own signal, if it has one, comes from its 401
        elif "write" in step and "write" in builtin_calls:
            values = {"path": str(step["write"]), "content": str(step.get("content", ""))}
            call = builtin_calls["write"]
            turns.append(Turn(tool_calls=(ToolCall(call.name, call.filled(values), builtin=True),)))
        elif "shell" in step and "shell" in builtin_calls:
            call = builtin_calls["shell"]
            turns.append(Turn(tool_calls=(ToolCall(call.name, call.filled({"command": str(step["shell"])}), builtin=True),)))
        else:
            action = next(iter(step), "?")
            raise SkipCell(
                "adapter-not-implemented",
                f"the real {agent} cannot be scripted to do {action!r} at "
                "loopback: only text, bridge calls, auth failures and the built-ins its profile names "
                f"(builtin_calls: {', '.join(builtin_calls) or 'none'}) are",
            )
    if not turns or turns[-1].tool_calls:
        turns.append(Turn(text="done"))
    return turns


def own_command(spec) -> Path | None:
    """The executable an ACP profile with no npm pin starts (its command's first word: a path, or
    found on PATH), or None."""
    import shutil

    from harnesscheck.backends.acp.profile import profile_for

    word = profile_for(spec.id).command[0]
    if "/" in word:
        path = Path(word).expanduser().absolute()
        return path if path.is_file() and os.access(path, os.X_OK) else None
    found = shutil.which(word)
    return Path(found) if found else None


#: The arguments that make a tool the agent's shell, or its file write, whatever its name: learned
#: from its input schema at the wire (an agent with no profile).
SHELL_ARGS = ("command", "cmd")
PATH_ARGS = ("file_path", "path", "filePath", "absolute_path")


def learn_builtin_calls(bodies: list[str], scope_tools: set[str]) -> dict:
    """The agent's own shell and write tools, from the tools it offered the model (request bodies
    of any wire: `tools[]` with `input_schema`, `parameters` or `function.parameters`, the
    Google GenAI wire's `functionDeclarations`): a tool whose required arguments are a command (SHELL_ARGS) is its
    shell; one taking a path (PATH_ARGS) and `content` and nothing else required is its write.
    The bridge's own tools (the scope's names, however the agent prefixes them) are never taken."""
    from harnesscheck.backends.acp.profile import BuiltinCall
    from harnesscheck.loopback.adapter import wire_to_scope_name

    schemas: dict[str, dict] = {}
    for text in bodies:
        try:
            body = json.loads(text or "")
        except ValueError:
            continue
        for tool in (body.get("tools") or []) if isinstance(body, dict) else []:
            if not isinstance(tool, dict):
                continue
            for decl in tool.get("functionDeclarations") or [tool.get("function") or tool]:
                if isinstance(decl, dict) and isinstance(decl.get("name"), str):
                    schema = decl.get("input_schema") or decl.get("parameters") or decl.get("parametersJsonSchema") or {}
                    schemas.setdefault(decl["name"], schema if isinstance(schema, dict) else {})
    learned: dict = {}
    for name, schema in schemas.items():
        if wire_to_scope_name(name) in scope_tools:
            continue
        props = set((schema.get("properties") or {}))
        required = set(schema.get("required") or [])
        command = next((a for a in SHELL_ARGS if a in required), None)
        path = next((a for a in PATH_ARGS if a in props), None)
        if command and "shell" not in learned:
            learned["shell"] = BuiltinCall(name=name, arguments={command: "{command}"})
        elif path and "content" in props and required <= {path, "content"} and "write" not in learned:
            learned["write"] = BuiltinCall(name=name, arguments={path: "{path}", "content": "{content}"})
    return learned


def _loopback_base():
    from harnesscheck.kit.loopback_adapter import LoopbackAdapter

    return LoopbackAdapter


class AcpLoopbackLevel:
    """The loopback level of an ACP agent: the CLI loopback adapter (the real pinned agent, the
    scripted servers, the catalog's scenarios) plus `acp_run` for the acp.* checks it can script.
    Built lazily, like kit.levels.LoopbackLevel."""

    @staticmethod
    def available(spec) -> tuple[bool, str]:
        """A profile with an npm pin: that release in the CLI cache (as a CLI's); an agent given
        by its command line (or a profile file with no pin): its command, found."""
        if spec.cli_package:
            return _loopback_base().available(spec)
        found = own_command(spec)
        return (True, "") if found else (False, f"{spec.id}: its command is not found (not a file, not on PATH)")

    def __call__(self, spec, level, tmp_path):
        base = _loopback_base()

        class AcpLoopbackAdapter(base):  # type: ignore[misc, valid-type]
            name = "acp-loopback"

            def __init__(self, spec, level, tmp_path):
                if spec.cli_package:  # a pinned release from the CLI cache
                    super().__init__(spec, level, tmp_path)
                    return
                # no pin (acp:<command line>, a profile file): the agent's own command, as given
                super(base, self).__init__(spec, level, tmp_path)
                from harnesscheck.loopback.clis import PinnedBinary

                path = own_command(spec)
                if path is None:
                    raise SkipCell("env-missing", f"{spec.id}: its command is not found (not a file, not on PATH)")
                self.binary = PinnedBinary(spec.id, path, "", "command line")
                self._servers, self._wrappers, self.trace_opens = [], 0, False
                self._learned: dict | None = None

            def script_profile(self):
                """The kit profile of the CLI the agent runs (when it runs a registered CLI), its
                loopback built-in read, where it states none, taken from the ACP profile's `shell`
                built-in (`cat <path>` through it); an agent whose profile declares no shell built-in
                has no built-in call scripted: `native_tool_use` skips."""
                import dataclasses

                from harnesscheck.backends.registry import build_transport
                from harnesscheck.core.config import Settings

                profile = super().script_profile()
                if profile.loopback_builtin_read is not None:
                    return profile
                shell = build_transport(self.spec, Settings(backend=self.spec.id)).profile.builtin_calls.get("shell")
                if shell is None:
                    return profile

                def builtin_read(path: str) -> tuple[str, dict]:
                    return shell.name, shell.filled({"command": f"cat {path}"})

                return dataclasses.replace(profile, loopback_builtin_read=builtin_read)

            def builtin_calls(self, profile) -> dict:
                """The profile's built-ins, else (an agent with no profile) those learned from what it
                offered the model in a first session at the wire (learn_builtin_calls)."""
                if profile.builtin_calls or self.spec.cli_package:
                    return dict(profile.builtin_calls)
                if getattr(self, "_learned", None) is None:
                    self._learned = self.learn_tools()
                return self._learned

            def learn_tools(self) -> dict:
                from harnesscheck.backends.loopback_endpoint import DUMMY_KEY, LoopbackEndpoint
                from harnesscheck.backends.registry import build_transport
                from harnesscheck.core.config import Settings
                from harnesscheck.loopback.adapter import SHORT_SESSION_ENV
                from harnesscheck.loopback.scenario import Scenario, Turn
                from harnesscheck.loopback.server import ScriptedModelServer

                server = ScriptedModelServer(Scenario("learn", (Turn(text="done"),)), expected_key=DUMMY_KEY).start()
                try:
                    settings = Settings(backend=self.spec.id)
                    built = build_transport(self.spec, settings)
                    transport = type(built)(
                        self.spec, settings, profile=built.profile, loopback=LoopbackEndpoint(server.base_url), injections=SHORT_SESSION_ENV
                    )
                    ws = self.workspace()
                    run_acp_session(
                        self,
                        transport,
                        None,
                        ws,
                        ws.base,
                        timeout_s=60 + self.startup_allowance_s(),
                        read_only=False,
                        cancel_when=None,
                        observer=None,
                        plant=None,
                        parent_env=None,
                    )
                    scope_tools = set(ws.scope(read_only=False).tool_names())
                    return learn_builtin_calls([r.body_text for r in server.requests], scope_tools)
                finally:
                    server.stop()

            replays_fixtures = False  # the real agent only (a third-party ACP agent has no fake CLI)

            def acp_run(
                self,
                steps,
                *,
                timeout_s=60.0,
                read_only=False,
                policy=None,
                cancel_when=None,
                observer=None,
                plant=None,
                parent_env=None,
                linger_s=None,
                session_key=None,
                decided=None,
            ):
                from harnesscheck.backends.loopback_endpoint import DUMMY_KEY, LoopbackEndpoint
                from harnesscheck.backends.registry import build_transport
                from harnesscheck.core.config import Settings
                from harnesscheck.loopback.adapter import SHORT_SESSION_ENV
                from harnesscheck.loopback.scenario import Scenario
                from harnesscheck.loopback.server import ScriptedModelServer

                if cancel_when is not None:
                    raise SkipCell(
                        "adapter-not-implemented",
                        "the loopback level keeps no record naming the pid of the "
                        "agent's running tool (the fake ACP agent's record, offline): when to cancel and "
                        "whether that process is gone cannot be told here",
                    )
                built = build_transport(self.spec, Settings(backend=self.spec.id))  # the backend's own class and profile
                ws = self.workspace()
                effects = ws.base / "effects"
                effects.mkdir()
                filled = json.loads(json.dumps(steps).replace("{effects}", str(effects)))
                turns = loopback_turns(filled, self.spec.cli_name or self.spec.id, self.builtin_calls(built.profile))
                # the session's own credential (the check's, as a host hands it over) is the one the server serves
                key = session_key if session_key is not None else DUMMY_KEY
                server = ScriptedModelServer(Scenario("acp", tuple(turns)), expected_key=key).start()
                try:
                    endpoint = LoopbackEndpoint(server.base_url, api_key=key)
                    linger = {} if linger_s is None else {"linger_s": linger_s}  # the check's own wins over the profile's
                    transport = type(built)(
                        self.spec,
                        Settings(backend=self.spec.id),
                        profile=built.profile,
                        loopback=endpoint,
                        policy=policy,
                        injections=SHORT_SESSION_ENV,  # as the exec wrapper gives a CLI at loopback
                        **linger,
                    )
                    # the check's effects dir (outside the worktree): a built-in's write lands there in
                    # the agent's sandbox as it would without one, so the host's refusal is what stops it
                    transport.bind_in_sandbox(writable=[effects])
                    return run_acp_session(
                        self,
                        transport,
                        None,
                        ws,
                        effects,
                        timeout_s=timeout_s + self.startup_allowance_s(),
                        read_only=read_only,
                        cancel_when=cancel_when,
                        observer=observer,
                        plant=plant,
                        parent_env=parent_env,
                        decided=decided,
                    )
                finally:
                    server.stop()

        return AcpLoopbackAdapter(spec, level, tmp_path)
