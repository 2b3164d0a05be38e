"""DeepSeek Harness transport: the `deepseek-harness-sdk` driving its bundled `dsh` runtime.

Requirements kept here (doc/SPEC-deepseek.md):
- The SDK runs in a child Python (backends/deepseek/_dsh_driver.py) spawned through run_process like
  any CLI, so the tree driver -> runtime -> bridge is one contained process group: killed
  whole at the deadline, on cancel, after the terminal line's linger. Nothing of the SDK runs
  in the host's process. The SDK and runtime come from install-clis's pip cache
  (`<cache>/deepseek@<pin>/`, `pip install --target`), never from the host's site-packages.
- Built-ins off through the composition: a `--patch` overlay (JSON, which the runtime's YAML
  loader reads) disables every tool plugin of the `sdk` profile (25 tools offered by default:
  bash, edit, write, read, web_fetch, subagent, workflow, ...) and the plugins that phone
  home (telemetry, the session-log delivery, account/web search) and the workspace-instructions
  loader (AGENTS.md / CLAUDE.md from the cwd up to a git root); it inserts the bundled
  `@deepseek-ai/dsh-mcp-client` with the bridge as its one stdio server (`serverName:
  bridge`: the model sees `mcp__bridge__read_file`, ...), `failOnStartupError: true`. What the
  runtime really offers is verified at the wire (audit.builtins-off-at-wire).
- The child env is the host's constructed env (build_child_env) plus explicit injections:
  a private HOME and XDG dirs, a private DSH_HOME, `DSH_MAX_TOKENS_AS_SUCCESS=false` (so a
  max-tokens stop is never reported as completed). The SDK would otherwise hand the runtime
  the whole caller environment: the driver's environment *is* the constructed one.
- API-keyed: the key is `HARNESS_DEEPSEEK_API_KEY` (Settings.deepseek_api_key), handed to the
  driver on stdin (never argv, never the host's ANTHROPIC_/OPENAI_ keys); the SDK puts it in
  the runtime's own env as DEEPSEEK_API_KEY; the bridge the runtime starts gets its scrubbed
  env. Every outcome and run file is redacted with it.
- Outcome: `run_result` with `finish_reason: completed` and a non-empty answer is ok; an empty
  answer or `finish_reason: error` is an error classified from the runtime's `turn/end`
  reason (401/403 -> blocked/auth, 429 rate_limit, 529/503 overloaded, 5xx server_error, ...),
  never success; `max-tokens` -> truncated; a `run_error` line (the SDK raised) is classified
  too; endings without a terminal line map as for every CLI (`ending_outcome`).
- Turn cap: the transport counts the root session's `step/start` events and stops the tree
  when a step beyond `max_iters` begins (truncated/max_turns).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from harnesscheck.backends._args import safe_model
from harnesscheck.backends._bounded import CallLog, TextTail
from harnesscheck.backends._errortext import classify_text
from harnesscheck.backends._harness import (
    BRIDGE_SERVER,
    EventDecoder,
    HarnessTransport,
    Invocation,
    SessionContext,
    bridge_command,
    ending_outcome,
)
from harnesscheck.backends._rootcause import tail_cause
from harnesscheck.backends._text import short
from harnesscheck.contain.envpolicy import redact
from harnesscheck.contain.process import Ending, LineAction, ProcessResult
from harnesscheck.core.contracts import (
    BLOCKING,
    RETRYABLE,
    AgentOutcome,
    CliNotFound,
    ErrorClass,
    OutcomeStatus,
    Usage,
)

SDK_PACKAGE = "deepseek-harness-sdk"
RUNTIME_PACKAGE = "deepseek-harness-runtime-bin"
PINNED_VERSION = "0.2.1rc2"
DRIVER = Path(__file__).with_name("_dsh_driver.py")

#: The sdk profile's tool plugins (Cordis entry ids, 0.2.1rc2 `--dump-config`): each is
#: disabled by the patch. Together they offer the 25 built-ins (bash, edit, write, read,
#: read_image, glob, grep, web_fetch, web_search, subagent, subagent_fork, workflow, skill,
#: todo_write, job_*, *_goal, exit_plan_mode, send_message, interrupt_agent, list_agents,
#: working_directory) and the MCP resource tools.
TOOL_PLUGINS = (
    "tool-bash",
    "tool-pwsh",
    "tool-jobs",
    "tool-fs",
    "tool-fs-search",
    "tool-skill",
    "plan-mode",
    "tool-subagent-control",
    "tool-subagent-list-agents",
    "tool-subagent",
    "tool-subagent-fork",
    "tool-workflow",
    "tool-todo",
    "tool-goal",
    "tool-web",
    "tool-working-directory",
    "mcp-resources",
)
#: Plugins that reach DeepSeek's own services outside the model call: the OTLP telemetry
#: exporter, the session-log delivery, account sign-in, the web search/fetch providers.
NETWORK_PLUGINS = (
    "session-telemetry-otel",
    "session-log-deepseek",
    "deepseek-account",
    "web-search-deepseek",
    "web-deepseek-api",
    "web-fetch-http",
)
#: The runtime's own retry ladder (429/529 answered six times, about a minute): off, so a
#: retryable failure ends the session at once, classified retryable; the host owns retries.
RETRY_PLUGINS = ("llm-retry",)
#: Workspace instructions (`@deepseek-ai/dsh-agent-instructions`): the runtime reads AGENTS.md /
#: CLAUDE.md (and their .local variants) from its cwd up to the nearest `.git` and hands them to
#: the model; with the run dir inside a checkout that is the checkout's (observed at loopback,
#: env.planted-files-not-loaded): off.
INSTRUCTION_PLUGINS = ("agent-instructions",)
MCP_CLIENT_PLUGIN = "@deepseek-ai/dsh-mcp-client"


def sdk_dir(version: str = PINNED_VERSION) -> Path:
    """Where install-clis puts the SDK and its runtime: `<cache>/deepseek@<version>/`."""
    from harnesscheck.core.paths import cli_cache_dir

    return cli_cache_dir() / f"deepseek@{version}"


def installed_sdk_version(path: Path) -> str | None:
    """The deepseek-harness-sdk version installed in `path` (a pip --target dir), or None
    when the SDK or its runtime executable is missing there."""
    path = Path(path)
    if not (path / "deepseek_harness" / "__init__.py").is_file():
        return None
    if not list((path / "deepseek_harness_runtime" / "runtime").glob("deepseek-harness-sdk-runtime-*")):
        return None
    for info in sorted(path.glob("deepseek_harness_sdk-*.dist-info")):
        for line in (info / "METADATA").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip()
    return None


LAUNCHER = """#!{python} -I
# harnesscheck: the deepseek driver on the SDK in {sdk!r} (a program speaking the driver protocol)
import runpy, sys
sys.argv = [{driver!r}, "--sdk", {sdk!r}] + (["--version"] if "--version" in sys.argv[1:] else [])
runpy.run_path({driver!r}, run_name="__main__")
"""


#: The launcher's name inside the SDK dir (install-clis writes it; `ensure_launcher`).
LAUNCHER_NAME = "harnesscheck-dsh-driver"


def write_launcher(path: Path, sdk: Path) -> Path:
    """An executable `path` running the driver on the SDK in `sdk` (whatever arguments it is
    given, but `--version`): what HARNESS_BACKEND_CLI or the loopback level's exec wrapper
    starts when they need one program rather than an SDK directory. Written only when its
    content differs (atomically: concurrent sessions each see a whole file)."""
    import os

    path = Path(path)
    text = LAUNCHER.format(python=sys.executable, sdk=str(sdk), driver=str(DRIVER))
    try:
        if path.read_text(encoding="utf-8") == text and os.access(path, os.X_OK):
            return path
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    tmp.chmod(0o755)
    os.replace(tmp, path)
    return path


def ensure_launcher(sdk: Path) -> Path:
    """The launcher beside the SDK it runs (`<sdk>/harnesscheck-dsh-driver`), for this host's
    interpreter and driver."""
    return write_launcher(Path(sdk) / LAUNCHER_NAME, Path(sdk))


def host_sdk_dir() -> Path | None:
    """The site-packages dir holding an SDK installed in the host (`harnesscheck[deepseek]`),
    found without importing it; None when there is none."""
    import importlib.util

    try:
        found = importlib.util.find_spec("deepseek_harness")
    except (ImportError, ValueError):
        return None
    if found is None or not found.origin:
        return None
    return Path(found.origin).resolve().parent.parent


def composition_patch(*, bridge: tuple[list[str], dict[str, str]] | None, system: str | None) -> list[dict]:
    """The Cordis patch list (JSON is YAML): every tool plugin, every phone-home plugin and the
    workspace-instructions loader off, the system prompt as the persona, and the bridge as the
    one MCP server (None: no tools)."""
    patch: list[dict] = [{"id": pid, "disabled": True} for pid in (*TOOL_PLUGINS, *NETWORK_PLUGINS, *RETRY_PLUGINS, *INSTRUCTION_PLUGINS)]
    if system and system.strip():
        patch.append({"id": "system-prompt", "config": {"personaPrefix": system.strip()}})
    if bridge is not None:
        argv, env = bridge
        patch.append(
            {
                "insert": [
                    {
                        "id": "harnesscheck-bridge",
                        "name": MCP_CLIENT_PLUGIN,
                        "config": {
                            "transport": "stdio",
                            "serverName": BRIDGE_SERVER,
                            "command": argv[0],
                            "args": argv[1:],
                            "env": dict(env),
                            "failOnStartupError": True,
                        },
                    }
                ]
            }
        )
    return patch


# ---------------------------------------------------------------------------------------
# The parser of the driver's lines


class DeepSeekParser:
    """Folds the driver's stdout (the runtime's JSON-RPC notifications, then `run_result` or
    `run_error`) into an AgentOutcome. Pure."""

    def __init__(self, *, requested_model: str | None = None, max_steps: int | None = None):
        self.requested_model = requested_model
        self.max_steps = max_steps
        self.root: str | None = None  # the SDK's session id (the first notification's)
        self.texts = TextTail()
        self.last_text = ""
        self.usage = Usage()
        self._messages: set[str] = set()
        self.steps = 0
        self.started_steps = 0
        self.turn_end: dict | None = None
        self.attempt_failure: dict | None = None
        self.result: dict | None = None
        self.error: dict | None = None
        self.calls = CallLog()
        self.early: ErrorClass | None = None
        self.early_message = ""
        self.decoder = EventDecoder()
        self.on_text = None

    def feed(self, line: str) -> LineAction | None:
        msg = self.decoder.decode(line)
        if msg is None or self.result is not None or self.error is not None:
            return None
        kind = msg.get("type")
        if kind == "run_result":
            self.result = msg
            return LineAction.TERMINAL
        if kind == "run_error":
            self.error = msg
            return LineAction.TERMINAL
        params = msg.get("params")
        if msg.get("method") != "session.event" or not isinstance(params, dict):
            return None
        sid = params.get("sessionId")
        if self.root is None and isinstance(sid, str):
            self.root = sid
        event = params.get("event")
        if sid != self.root or not isinstance(event, dict):
            return None  # a subagent's events (subagents are off) are not the session's
        return self._event(event)

    def _event(self, event: dict) -> LineAction | None:
        etype = event.get("type")
        data = event.get("data") if isinstance(event.get("data"), dict) else {}
        if etype == "step/start":
            self.started_steps += 1
            if self.max_steps and self.started_steps > self.max_steps:
                self.early = ErrorClass.max_turns
                self.early_message = f"the turn cap ({self.max_steps} model steps) was reached; the session was ended"
                return LineAction.STOP
        elif etype == "step/end":
            self.steps += 1
        elif etype == "assistant/message":
            self._assistant(data)
        elif etype == "assistant/attempt":
            for chunk in data.get("stream") or []:
                reason = ((chunk or {}).get("chunk") or {}).get("reason") if isinstance(chunk, dict) else None
                if isinstance(reason, dict) and isinstance(reason.get("failure"), dict):
                    self.attempt_failure = reason["failure"]
        elif etype == "tool/call":
            name = str(data.get("name") or "?")
            prefix = f"mcp__{BRIDGE_SERVER}__"
            if name.startswith(prefix):
                self.calls.bridge(name[len(prefix) :])
            else:
                self.calls.native(name)
        elif etype == "turn/end":
            self.turn_end = data
        return None

    def _assistant(self, data: dict) -> None:
        message = data.get("message") if isinstance(data.get("message"), dict) else data
        mid = message.get("id") if isinstance(message, dict) else None
        if isinstance(mid, str):
            if mid in self._messages:
                return  # one message counted once
            if len(self._messages) < 100_000:
                self._messages.add(mid)
        content = message.get("content") if isinstance(message, dict) else None
        text = "".join(b.get("text") or "" for b in content or [] if isinstance(b, dict) and b.get("type") == "text")
        if text:
            self.texts.append(text)
            self.last_text = text
            if self.on_text is not None:
                self.on_text(text)
        u = data.get("usage")
        if isinstance(u, dict):
            self.usage = self.usage + Usage(
                input=_int(u.get("inputTokens")),
                output=_int(u.get("outputTokens")),
                cache_read=_int(u.get("cacheReadTokens")),
                cache_write=_int(u.get("cacheWriteTokens")),
            )

    # -- the outcome --------------------------------------------------------------------

    def outcome(self, result: ProcessResult) -> AgentOutcome:
        res = self.result or {}
        final = res.get("final_response") if isinstance(res.get("final_response"), str) else None
        out = AgentOutcome(
            status=OutcomeStatus.ok,
            text=final if final else self.last_text,
            iterations=self.steps,
            tool_calls=self.calls.bridge_calls,
            tools_used=self.calls.tools_used,
            native_tool_calls=self.calls.native_calls,
            usage=self.usage,
            requested_model=self.requested_model,
            session_id=self.root,
            exit_code=result.exit_code,
            signal=result.signal,
            duration_s=result.duration_s,
            terminal_event_seen=self.result is not None or self.error is not None,
            orphan_suspected=result.orphan_suspected,
            stderr_tail=result.stderr_tail,
        )
        status, cls, message = self._classify(result)
        out.status, out.error_class, out.message = status, cls, redact(message)
        out.retryable = cls in RETRYABLE if cls is not None else False
        if status is OutcomeStatus.truncated:
            out.cost = out.cost.model_copy(update={"partial": True})
        return out

    def _classify(self, result: ProcessResult) -> tuple[OutcomeStatus, ErrorClass | None, str]:
        notes = f"; {self.decoder.malformed} malformed line(s) skipped" if self.decoder.malformed else ""
        if self.early is not None and result.ending is Ending.early_stop:
            return OutcomeStatus.truncated, self.early, self.early_message + notes
        terminal = self.result is not None or self.error is not None
        fallback = ending_outcome(result, terminal_seen=terminal)
        if fallback is not None:
            status, cls, message = fallback
            if not terminal:
                cause = tail_cause(result.stderr_tail)  # the root among the tail's lines (doc/SPEC-deepseek.md)
                if cause is not None and status is OutcomeStatus.error:
                    return _failed(cause[0]), cause[0], short(cause[1]) + notes
            return status, cls, message + notes
        if self.error is not None:
            return self._run_error(self.error, notes)
        res = self.result or {}
        reason = res.get("finish_reason")
        final = res.get("final_response") if isinstance(res.get("final_response"), str) else ""
        if reason == "max-tokens":
            return OutcomeStatus.truncated, ErrorClass.budget, "the model stopped at its output-token limit (finish_reason max-tokens)" + notes
        if reason == "error" or (reason == "completed" and not final.strip()):
            return self._turn_error(reason, notes)
        if reason != "completed":
            return OutcomeStatus.error, ErrorClass.protocol, f"the run ended with finish_reason {reason!r}" + notes
        return OutcomeStatus.ok, None, notes.lstrip("; ")

    def _turn_error(self, reason, notes: str) -> tuple[OutcomeStatus, ErrorClass | None, str]:
        """An empty answer or finish_reason error: classified from the runtime's own failure."""
        failure = None
        if isinstance(self.turn_end, dict):
            r = self.turn_end.get("reason")
            failure = r.get("error") if isinstance(r, dict) else None
        failure = failure if isinstance(failure, dict) else self.attempt_failure
        if not isinstance(failure, dict):
            what = "an empty answer" if reason == "completed" else "finish_reason error"
            return OutcomeStatus.error, ErrorClass.protocol, f"the run ended with {what} and no failure stated" + notes
        status = failure.get("status")
        text = str(failure.get("message") or "")
        code = str(failure.get("code") or "")
        # a failure with neither status nor code is the runtime not understanding the answer: protocol
        fallback = ErrorClass.unknown if (code or status) else ErrorClass.protocol
        cls = _status_class(status) or CODE_CLASSES.get(code) or classify_text(f"{code} {text}") or fallback
        detail = f"finish_reason error: {failure.get('code') or ''} {status or ''} {text}".strip()
        return _failed(cls), cls, short(detail) + notes

    def _run_error(self, err: dict, notes: str) -> tuple[OutcomeStatus, ErrorClass | None, str]:
        name = str(err.get("error") or "")
        text = str(err.get("message") or "")
        if name == "TransportClosedError":
            cls = classify_text(text) or ErrorClass.cli_crash
        elif name == "TimeoutError":
            cls = ErrorClass.timeout
        elif name in ("JsonRpcError", "SdkProtocolError", "BadRequest"):
            cls = classify_text(text) or ErrorClass.protocol
        elif name == "FileNotFoundError":
            cls = ErrorClass.cli_missing
        else:
            cls = classify_text(text) or ErrorClass.unknown
        return _failed(cls), cls, short(f"the SDK raised {name}: {text}") + notes


#: The runtime's own failure codes (turn/end reason.error.code, 0.2.1rc2) that say more than a
#: status: no key at all is MISSING_CREDENTIAL (no HTTP status), an API-keyed session's login gap.
CODE_CLASSES: dict[str, ErrorClass] = {"AUTH": ErrorClass.auth, "MISSING_CREDENTIAL": ErrorClass.auth, "RATE_LIMIT": ErrorClass.rate_limit}


def _status_class(status) -> ErrorClass | None:
    if not isinstance(status, int) or isinstance(status, bool):
        return None
    if status in (401, 403):
        return ErrorClass.auth
    if status == 429:
        return ErrorClass.rate_limit
    if status in (503, 529):
        return ErrorClass.overloaded
    if status == 404:
        return ErrorClass.model_unavailable
    if status == 413:
        return ErrorClass.context_overflow
    if status >= 500:
        return ErrorClass.server_error
    return None


def _int(value) -> int:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else 0


def _failed(cls: ErrorClass) -> OutcomeStatus:
    return OutcomeStatus.blocked if cls in BLOCKING else OutcomeStatus.error


# ---------------------------------------------------------------------------------------
# The transport


class DeepSeekTransport(HarnessTransport):
    """The SDK in a child driver process; see the module docstring."""

    #: The runtime reports no MCP status the host can read before work: the bridge's own trace
    #: must show its tools listed after a session with tools (bridge/readiness.py).
    readiness_from_trace = True
    #: The runtime's own home (`DSH_HOME`: its session logs) is CLI state too (forget_cli_state).
    cli_state_dirs = (*HarnessTransport.cli_state_dirs, "dsh-home")
    #: The runtime (a Node single-executable app built with pkg) copies the package of each
    #: native addon it loads out of its snapshot into `$HOME/.cache/pkg/<hash>/` at every start
    #: (0.2.1rc2: 2,677 files, 81 MB) and reads them from there. On the run dir's disk that cost
    #: about 1 CPU-s a session, most of it in the kernel, with three sessions at once; in the
    #: sandbox's own tmpfs next to nothing (the loopback column: 168-199 -> 122 CPU-s,
    #: doc/performance.md). Nothing the host reads is written there.
    sandbox_scratch = ("home/.cache/pkg",)

    def __init__(self, spec, settings=None, *, loopback=None, **kwargs):
        super().__init__(spec, settings, **kwargs)
        self.loopback = loopback

    # -- the SDK ------------------------------------------------------------------------

    def cli(self):
        """The SDK dir (install-clis's pip cache, or HARNESS_BACKEND_CLI naming one), or a
        program speaking the driver's protocol (HARNESS_BACKEND_CLI; the offline fake)."""
        from harnesscheck.backends.registry import CliInfo, find_cli, version_range, version_supported
        from harnesscheck.core.contracts import CliVersionUnsupported

        with self._lock:
            if self._cli_info is not None:
                return self._cli_info
            given = self._cli_path or self.settings.cli
            if given is not None and not Path(given).is_dir():
                settings = self.settings.model_copy(update={"cli": Path(given)})
                self._cli_info = find_cli(self.spec, settings, check_version=self.check_version)
                return self._cli_info
            candidates = [Path(given)] if given is not None else [sdk_dir(self.spec.pinned_version or PINNED_VERSION)]
            if given is None:
                host = host_sdk_dir()
                if host is not None:
                    candidates.append(host)
            found = [(p, installed_sdk_version(p)) for p in candidates]
            path, version = next(((p, v) for p, v in found if v is not None), (candidates[0], None))
            if version is None:
                raise CliNotFound(self.spec.id, SDK_PACKAGE, [str(p) for p in candidates], None)
            if self.check_version and not version_supported(self.spec, version):
                raise CliVersionUnsupported(self.spec.id, version, version_range(self.spec))
            self._cli_info = CliInfo(path=path, version=version)
            return self._cli_info

    def api_key(self) -> str | None:
        """The DeepSeek key: the loopback dummy, else HARNESS_DEEPSEEK_API_KEY. Never a host
        ANTHROPIC_/OPENAI_ key, never the runtime's own DEEPSEEK_API_KEY fallback."""
        if self.loopback is not None:
            return self.loopback.api_key
        key = self.settings.deepseek_api_key
        return key.get_secret_value() if key is not None else None

    def _secrets(self, injections):
        secrets = super()._secrets(injections)
        key = self.api_key()
        if key:
            secrets.add(key)
        return secrets

    # -- one session ------------------------------------------------------------------

    def invocation(self, ctx: SessionContext, request, cli: Path, *, tool_less: bool) -> Invocation:
        from harnesscheck.contain.rundir import write_private

        model = request.model or self.settings.model
        if model:
            safe_model(model)
        home = ctx.run_dir / "home"
        dsh_home = ctx.run_dir / "dsh-home"
        for sub in (home, home / ".config", home / ".cache", dsh_home):
            sub.mkdir(mode=0o700, exist_ok=True)
        bridge = None
        if not tool_less and ctx.spec_path is not None and request.scope.tool_names():
            bridge = bridge_command(ctx.spec_path)
        patch_path = write_private(ctx.run_dir / "dsh-patch.yml", json.dumps(composition_patch(bridge=bridge, system=request.system), indent=1) + "\n")
        body = {
            "prompt": request.prompt,
            "model": model,
            "api_key": self.api_key(),
            "base_url": self.loopback.base_url if self.loopback is not None else None,
            "cwd": str(ctx.cwd),
            "dsh_home": str(dsh_home),
            "patches": [str(patch_path)],
            "initialize_timeout_s": max(30.0, min(float(request.timeout_s), 600.0)),
        }
        injections = {
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_CACHE_HOME": str(home / ".cache"),
            "XDG_DATA_HOME": str(home / ".local" / "share"),
            "XDG_STATE_HOME": str(home / ".local" / "state"),
            "DSH_MAX_TOKENS_AS_SUCCESS": "false",
            "DSH_TELEMETRY_MODE": "off",
        }
        if Path(cli).is_dir():
            argv = [sys.executable, "-I", str(DRIVER), "--sdk", str(cli)]
        else:
            argv = [str(cli), "--sdk", "-"]  # a program speaking the driver protocol (the offline fake)
        return Invocation(argv=argv, injections=injections, stdin_bytes=json.dumps(body).encode("utf-8"))

    def make_parser(self, ctx: SessionContext, request, *, tool_less: bool, on_text=None):
        from harnesscheck.backends._eventlog import EVENT_LOG_NAME, LoggedParser

        parser = DeepSeekParser(requested_model=request.model or self.settings.model, max_steps=None if tool_less else request.max_iters or None)
        parser.on_text = on_text
        return LoggedParser(parser, ctx.run_dir / EVENT_LOG_NAME)

    def after_session(self, ctx: SessionContext, outcome: AgentOutcome) -> AgentOutcome:
        return outcome.model_copy(update={"session_id": ctx.session_id})
