"""opencode transport: `opencode run --format json` with the host's tools through the MCP bridge.

Requirements kept here (doc/SPEC-opencode.md):
- argv `opencode run --format json --title <session> --print-logs --log-level ERROR
  [-m PROVIDER/MODEL]`; the prompt, whatever its size, goes on stdin, then EOF (`opencode
  run` reads a piped stdin to EOF before anything else): never on argv, which every local
  user can read in /proc/<pid>/cmdline (issue 30). `--title` names the
  session, so opencode makes no tool-less title request before the turn.
- The config is one file in the run dir, named by `OPENCODE_CONFIG`: every built-in off
  (`"tools": {name: false}` for the ten 1.18 offers, backed by `"permission"` deny rules),
  the bridge as the only `mcp` server (`type: local`, `command: [...]`, `environment`),
  and, at the loopback level, an `@ai-sdk/openai-compatible` provider on 127.0.0.1.
- HOME and the four XDG dirs are the session's (`<run>/home`): `~/.config/opencode`,
  `~/.local/share/opencode` (its auth.json, its session db) are never read or written.
  Project config (`.opencode/`, `opencode.json` in the cwd), the models catalog fetch,
  autoupdate, default plugins, LSP downloads, sharing and the `~/.claude` fallbacks are off
  by `OPENCODE_DISABLE_*` variables.
- The plugin package opencode installs into every config dir at start (`@opencode-ai/plugin`,
  its own version, through npm's Arborist: a registry download on each fresh HOME) is
  pre-installed by `harnesscheck install-clis` (`<prefix>/opencode-plugin-deps/`); the
  session's config dir gets its manifest and lock and a link to its node_modules, so
  opencode finds it installed and contacts no registry. A missing pre-fill refuses the
  session with the fix (ConfigError) instead of letting it download.
- The parser is pure. `step_finish` with a reason other than `tool-calls` is the terminal
  event (the process gets a short linger, then its tree is killed: opencode has been seen
  never to exit after a fatal provider error); an `error` event is terminal too and
  classified (auth blocks, never retried). Exit 0 without a final `step_finish` is a
  protocol error, never success. Usage and cost are the sums over `step_finish`; a step that
  used tokens but costs 0 is unpriced (opencode prices tokens from its model catalog and prints
  0 for a model it has no price for): a session with no priced step reports cost unknown, never $0.
- A 429 / 5xx / overload is retried by opencode itself, forever, honouring retry-after, and
  `run --format json` prints nothing while it does: the only sign is its log line on stderr
  (`--print-logs --log-level ERROR`: `message="stream error" ... error.error="AI_APICallError:
  <the server's message>"`). The first such line whose words say rate limit, overload, server
  error or quota ends the session with that class (retryable where the class is; retry-after
  unknown: opencode prints none), as claude-code and codex stop at the CLI's first retry: the
  host decides about retrying.
- opencode reports no served model: the verdict is unverified.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from harnesscheck.backends import _text
from harnesscheck.backends._args import safe_model
from harnesscheck.backends._bounded import CallLog, TextTail
from harnesscheck.backends._errortext import classify_text
from harnesscheck.backends._eventlog import SessionAudit
from harnesscheck.backends._harness import (
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
from harnesscheck.contain.rundir import write_private as _write_private  # a fresh 0600 file, never following a link
from harnesscheck.core.contracts import (
    BLOCKING,
    RETRYABLE,
    AgentOutcome,
    ConfigError,
    Cost,
    CostSource,
    ErrorClass,
    ModelVerdict,
    OutcomeStatus,
    Usage,
)

BRIDGE_SERVER = "bridge"

#: The built-in tools opencode 1.18.33 offered the model by default (loopback, observed).
BUILTIN_TOOLS = ("bash", "edit", "glob", "grep", "read", "skill", "task", "todowrite", "webfetch", "write")
#: Further built-ins other configurations or builds register; switched off too.
OTHER_BUILTINS = ("list", "patch", "apply_patch", "multiedit", "todoread", "websearch", "codesearch", "lsp", "question", "batch")
#: Permission keys denied as the backstop of `tools: false` (opencode's permission names).
DENIED_PERMISSIONS = (
    "edit",
    "bash",
    "webfetch",
    "websearch",
    "codesearch",
    "read",
    "glob",
    "grep",
    "list",
    "task",
    "skill",
    "todowrite",
    "todoread",
    "lsp",
    "external_directory",
    "question",
)

#: The plugin package opencode installs into each config dir at start, at its own version.
PLUGIN_PACKAGE = "@opencode-ai/plugin"
#: The pre-filled config-deps directory, beside the CLI's npm prefix (install-clis writes it).
PLUGIN_DEPS_DIR = "opencode-plugin-deps"

#: Variables that switch off what would reach outside the run dir or read the user's files.
OFF_SWITCHES = {
    "OPENCODE_DISABLE_PROJECT_CONFIG": "1",
    "OPENCODE_DISABLE_MODELS_FETCH": "1",
    "OPENCODE_DISABLE_AUTOUPDATE": "1",
    "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
    "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
    "OPENCODE_DISABLE_SHARE": "1",
    "OPENCODE_DISABLE_CLAUDE_CODE": "1",
    "OPENCODE_DISABLE_EXTERNAL_SKILLS": "1",
    "OPENCODE_DISABLE_EMBEDDED_WEB_UI": "1",
}

#: The provider id of the loopback provider (the part of `-m` before `/`).
LOOPBACK_PROVIDER = "harnesscheck"
#: The model id asked of the loopback server when the request names none.
LOOPBACK_MODEL = "loopback-model"
#: A prompt longer than this goes on stdin (one argv string is capped at 128 KiB on Linux).
MAX_ARGV_PROMPT_BYTES = 100_000
BRIDGE_TIMEOUT_MS = 30_000

#: error.name -> class, for the names opencode gives its errors.
_ERROR_NAMES = {
    "ProviderAuthError": ErrorClass.auth,
    "MessageOutputLengthError": ErrorClass.context_overflow,
    "MessageAbortedError": ErrorClass.unknown,
}
#: HTTP status in an APIError -> class.
_STATUS = {
    401: ErrorClass.auth,
    403: ErrorClass.auth,
    429: ErrorClass.rate_limit,
    529: ErrorClass.overloaded,
    503: ErrorClass.overloaded,
    404: ErrorClass.model_unavailable,
    400: ErrorClass.invalid_request,
}


#: A stream error in opencode's log line (`error.error="..."`, quotes escaped).
_STREAM_ERROR = re.compile(r'error\.error="((?:[^"\\]|\\.)*)"')
#: Error classes whose stream errors opencode retries by itself (the session would run to its deadline).
_RETRIED_BY_OPENCODE = frozenset({ErrorClass.rate_limit, ErrorClass.overloaded, ErrorClass.server_error, ErrorClass.quota})


# ---------------------------------------------------------------------------------------
# The pure parser


class OpencodeParser:
    """Folds `opencode run --format json` lines into an AgentOutcome. No I/O, no clock."""

    def __init__(self, *, requested_model: str | None = None, bridge_server: str = BRIDGE_SERVER):
        self.requested_model = requested_model
        self.bridge_prefix = bridge_server + "_"
        self.session_id: str | None = None
        self.texts = TextTail(sep="\n\n")  # every text part (bounded), for partial text
        self.step_text = TextTail(sep="\n\n")  # the text parts of the current step
        self.final_text: str | None = None
        self.usage = Usage()
        self.cost_usd: float | None = None
        self.steps = 0
        self.finish_reason: str | None = None
        self.terminal: str | None = None  # "finished" | "error"
        self.error: dict | None = None
        self.calls = CallLog()
        self.tool_errors = 0
        self.decoder = EventDecoder()
        self.on_text = None  # optional callback: each text part as it completes

    def feed(self, line: str) -> LineAction | None:
        event = self.decoder.decode(line)
        if event is None:
            return None
        if self.terminal is not None:
            return None  # one terminal outcome; anything after it changes nothing
        if isinstance(event.get("sessionID"), str):
            self.session_id = event["sessionID"]
        kind = event.get("type")
        part = event.get("part") if isinstance(event.get("part"), dict) else {}
        if kind == "step_start":
            self.step_text = TextTail(sep="\n\n")
        elif kind == "text":
            text = part.get("text")
            if isinstance(text, str) and text:
                self.texts.append(text)
                self.step_text.append(text)
                if self.on_text is not None:
                    self.on_text(text)
        elif kind == "tool_use":
            self._tool(part)
        elif kind == "step_finish":
            return self._step_finish(part)
        elif kind == "error":
            self.error = event.get("error") if isinstance(event.get("error"), dict) else {"name": str(event.get("error"))}
            self.terminal = "error"
            return LineAction.TERMINAL
        return None

    def feed_err(self, line: str) -> LineAction | None:
        """A stderr log line (`--print-logs`): a stream error opencode will retry by itself
        (rate limit, overload, server error, quota) ends the session with its class, at once
        (STOP, not TERMINAL): opencode does not exit after it but retries, so waiting the
        linger for its exit would only add linger_s + term_grace_s to every such session."""
        if self.terminal is not None or 'message="stream error"' not in line:
            return None
        m = _STREAM_ERROR.search(line)
        if m is None:
            return None
        text = m.group(1).replace('\\"', '"')
        text = text.split(": ", 1)[1] if text.startswith("AI_") and ": " in text else text
        if classify_text(text) not in _RETRIED_BY_OPENCODE:
            return None  # auth, bad request...: opencode prints their `error` event on stdout
        self.error = {"name": "APIError", "data": {"message": text}}
        self.terminal = "error"
        return LineAction.STOP

    def _tool(self, part: dict) -> None:
        name = str(part.get("tool") or "")
        if not name:
            return
        state = part.get("state") if isinstance(part.get("state"), dict) else {}
        if name.startswith(self.bridge_prefix):
            self.calls.bridge(name[len(self.bridge_prefix) :])
        else:
            self.calls.native(name)
        if state.get("status") == "error":
            self.tool_errors += 1

    def _step_finish(self, part: dict) -> LineAction | None:
        self.steps += 1
        self.usage = self.usage + _usage(part.get("tokens"))
        cost = priced_cost(part)
        if cost is not None:
            self.cost_usd = (self.cost_usd or 0.0) + cost
        reason = part.get("reason")
        self.finish_reason = reason if isinstance(reason, str) else None
        if self.finish_reason in ("tool-calls", "tool_calls"):
            return None
        self.final_text = self.step_text.text()
        self.terminal = "finished"
        return LineAction.TERMINAL

    # -- the outcome --------------------------------------------------------------------

    def outcome(self, result: ProcessResult) -> AgentOutcome:
        finished = self.terminal == "finished"
        out = AgentOutcome(
            status=OutcomeStatus.ok,
            text=(self.final_text or "") if finished else self.texts.text(),
            iterations=self.steps,
            tool_calls=self.calls.bridge_calls,
            tools_used=self.calls.tools_used,
            native_tool_calls=self.calls.native_calls,
            usage=self.usage,
            cost=Cost(usd=self.cost_usd, source=CostSource.reported) if self.cost_usd is not None else Cost(),
            requested_model=self.requested_model,
            served_model=None,
            model_verdict=ModelVerdict.unverified,
            session_id=self.session_id,
            exit_code=result.exit_code,
            signal=result.signal,
            duration_s=result.duration_s,
            terminal_event_seen=self.terminal is not None,
            orphan_suspected=result.orphan_suspected,
            stderr_tail=result.stderr_tail,
        )
        status, cls, message = self._classify(result)
        out.status, out.error_class, out.message = status, cls, redact(message)
        out.retryable = cls in RETRYABLE if cls is not None else False
        if status is not OutcomeStatus.ok:
            out.cost = out.cost.model_copy(update={"partial": status is OutcomeStatus.truncated})
        return out

    def _classify(self, result: ProcessResult) -> tuple[OutcomeStatus, ErrorClass | None, str]:
        notes = self._notes(result)
        if result.ending is Ending.cancelled:
            return OutcomeStatus.cancelled, None, "cancelled by the host" + notes
        if result.ending is Ending.deadline and self.terminal is None:
            return OutcomeStatus.truncated, ErrorClass.timeout, "wall-clock budget reached" + notes
        if result.ending is Ending.oversize:
            return (OutcomeStatus.error, ErrorClass.protocol, f"a stdout line exceeded the {result.oversize_limit}-byte line limit (max_line_bytes)" + notes)
        if self.terminal == "error":
            cls, text = error_class(self.error or {}, result.stderr_tail)
            return _failed(cls), cls, short(text) + notes
        if self.terminal == "finished":
            if not (self.final_text or "").strip():
                return OutcomeStatus.error, ErrorClass.protocol, "the final step finished without an answer" + notes
            if self.finish_reason == "length":
                return OutcomeStatus.truncated, ErrorClass.context_overflow, "the model hit its output limit" + notes
            return OutcomeStatus.ok, None, notes.lstrip("; ")
        cause = tail_cause(result.stderr_tail)  # the root among the tail's lines (doc/SPEC-opencode.md)
        if cause is not None:
            return _failed(cause[0]), cause[0], short(cause[1]) + notes
        if self.decoder.malformed or result.partial_tail:
            return OutcomeStatus.error, ErrorClass.protocol, "the stream ended inside an event (no final step_finish)" + notes
        fallback = ending_outcome(result, terminal_seen=False)
        assert fallback is not None
        message = fallback[2]
        if fallback[1] is ErrorClass.protocol and result.exit_code == 0:
            message = "opencode exited 0 without a final step_finish"
        return fallback[0], fallback[1], message + notes

    def _notes(self, result: ProcessResult) -> str:
        parts = []
        if self.decoder.malformed:
            parts.append(f"{self.decoder.malformed} malformed line(s) skipped")
        if result.partial_tail:
            parts.append("truncated last line dropped")
        return "".join(f"; {p}" for p in parts)


def error_class(error: dict, stderr_tail: str = "") -> tuple[ErrorClass, str]:
    """An `error` event's class and text: a named error first (ProviderAuthError...), then
    the HTTP status an APIError carries, then its words; unknown otherwise."""
    name = str(error.get("name") or "")
    data = error.get("data") if isinstance(error.get("data"), dict) else {}
    text = str(data.get("message") or name or "opencode reported an error")
    if name in _ERROR_NAMES and _ERROR_NAMES[name] is not ErrorClass.unknown:
        return _ERROR_NAMES[name], text
    status = data.get("statusCode")
    worded = classify_text(text)
    if isinstance(status, int) and not isinstance(status, bool):
        if status in _STATUS and not (status in (400, 403, 404) and worded is not None):
            return _STATUS[status], text  # a 400/403/404 whose words say more (context, quota, model) is read by them
        if 500 <= status < 600 and worded is None:
            return ErrorClass.server_error, text
    return worded or classify_text(stderr_tail) or ErrorClass.unknown, text


def priced_cost(part: dict) -> float | None:
    """A step_finish's `cost` when it is a price: None when absent, negative, or 0 for a step
    that used tokens (opencode prints 0 for a model without a price: unknown, not free)."""
    cost = part.get("cost")
    if not isinstance(cost, (int, float)) or isinstance(cost, bool) or cost < 0:
        return None
    if cost == 0 and _usage(part.get("tokens")).total > 0:
        return None
    return float(cost)


def _usage(raw) -> Usage:
    """step_finish tokens -> Usage (opencode's `input` already excludes the cached part)."""
    if not isinstance(raw, dict):
        return Usage()

    def num(value) -> int:
        return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else 0

    cache = raw.get("cache") if isinstance(raw.get("cache"), dict) else {}
    return Usage(
        input=num(raw.get("input")),
        output=num(raw.get("output")),
        reasoning=num(raw.get("reasoning")),
        cache_read=num(cache.get("read")),
        cache_write=num(cache.get("write")),
    )


def _failed(cls: ErrorClass) -> OutcomeStatus:
    return OutcomeStatus.blocked if cls in BLOCKING else OutcomeStatus.error


# ---------------------------------------------------------------------------------------
# The config, the pre-filled plugin dir and the invocation


def render_config(*, bridge: tuple[list[str], dict[str, str]] | None, provider: dict | None = None, model: str | None = None) -> dict:
    """The session's opencode.json: built-ins off, the bridge as the only MCP server."""
    config: dict = {
        "$schema": "https://opencode.ai/config.json",
        "autoupdate": False,
        "share": "disabled",
        "snapshot": False,
        "tools": {name: False for name in (*BUILTIN_TOOLS, *OTHER_BUILTINS)},
        "permission": {name: "deny" for name in DENIED_PERMISSIONS},
        "mcp": {},
    }
    if bridge is not None:
        argv, env = bridge
        config["mcp"][BRIDGE_SERVER] = {"type": "local", "command": list(argv), "environment": dict(env), "enabled": True, "timeout": BRIDGE_TIMEOUT_MS}
    if provider:
        config["provider"] = provider
    if model:
        config["model"] = model
    return config


#: The price the loopback model is given (USD per million tokens, opencode's `cost` keys), so the
#: real opencode computes and prints a vendor figure the kit can compare (usage.vendor-cost-reported).
LOOPBACK_PRICE = {"input": 3.0, "output": 15.0, "cache_read": 0.3, "cache_write": 3.75}


def loopback_provider(endpoint, model: str) -> dict:
    """An `@ai-sdk/openai-compatible` provider on the scripted server (Chat Completions), its
    model priced (LOOPBACK_PRICE)."""
    return {
        LOOPBACK_PROVIDER: {
            "npm": "@ai-sdk/openai-compatible",
            "name": "harnesscheck loopback",
            "options": {"baseURL": endpoint.v1_url, "apiKey": endpoint.api_key},
            "models": {model: {"name": model, "tool_call": True, "cost": dict(LOOPBACK_PRICE)}},
        }
    }


def plugin_deps_candidates(cli: Path, version: str | None) -> list[Path]:
    """Where the pre-filled plugin dir may be: beside the CLI (a fake's layout), at the npm
    prefix of `<prefix>/node_modules/.bin/opencode`, then in the CLI cache for `version`."""
    from harnesscheck.core.paths import cli_cache_dir

    out = [cli.parent / PLUGIN_DEPS_DIR]
    if cli.parent.name == ".bin" and cli.parent.parent.name == "node_modules":
        out.append(cli.parent.parent.parent / PLUGIN_DEPS_DIR)
    if version:
        out.append(cli_cache_dir() / f"opencode@{version}" / PLUGIN_DEPS_DIR)
    return list(dict.fromkeys(out))


def plugin_deps_ready(path: Path, version: str) -> bool:
    """Whether `path` holds `@opencode-ai/plugin` at `version`, installed, with a lock that
    lists it (what opencode checks before it reinstalls: node_modules present and every
    dependency in package-lock.json)."""
    try:
        lock = json.loads((path / "package-lock.json").read_text(encoding="utf-8"))
        manifest = json.loads((path / "node_modules" / PLUGIN_PACKAGE / "package.json").read_text(encoding="utf-8"))
        wanted = json.loads((path / "package.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    root = ((lock.get("packages") or {}).get("") or {}).get("dependencies") or {}
    return PLUGIN_PACKAGE in root and manifest.get("version") == version and (wanted.get("dependencies") or {}).get(PLUGIN_PACKAGE) == version


def find_plugin_deps(cli: Path, version: str | None) -> Path:
    """The pre-filled plugin dir for this CLI, or ConfigError naming the fix: a session
    without it would download the plugin from the registry."""
    from harnesscheck.backends.registry import parse_version

    parsed = parse_version(version or "")
    release = ".".join(map(str, parsed)) if parsed else None
    tried = plugin_deps_candidates(cli, release)
    for path in tried:
        if release and plugin_deps_ready(path, release):
            return path
    raise ConfigError(
        f"opencode's plugin package {PLUGIN_PACKAGE}@{release or '?'} is not pre-installed "
        f"(looked in {', '.join(str(p) for p in tried)}): the session would download it from the registry",
        "run `harnesscheck install-clis --backend opencode` (it pre-fills the plugin dir beside the CLI)",
    )


def prefill_config_dir(config_dir: Path, deps: Path, root: Path | None = None) -> None:
    """The session's opencode config dir, seen by opencode as already installed: the
    pre-fill's manifest and lock (copied) and its node_modules (a link, never written). Made
    with rundir.place_private from `root` (the run dir; default the config dir's parent), so a
    link the CLI left in the HOME a run dir keeps between sessions is replaced, never followed."""
    from harnesscheck.contain.rundir import place_private

    root = Path(root) if root is not None else config_dir.parent
    rel = config_dir.relative_to(root).as_posix()
    for name in ("package.json", "package-lock.json"):
        place_private(root, f"{rel}/{name}", data=(deps / name).read_bytes())
    place_private(root, f"{rel}/node_modules", link_to=str(deps / "node_modules"))
    place_private(root, f"{rel}/.gitignore", data=b"node_modules\npackage.json\npackage-lock.json\nbun.lock\n.gitignore\n")


def compose_prompt(system: str | None, prompt: str, tool_names: tuple[str, ...]) -> str:
    """opencode has no system-prompt flag: the contract goes first, then the task."""
    return _text.compose_prompt(system, prompt, (f"{BRIDGE_SERVER}_{t}" for t in tool_names))


def user_auth_file(parent_env: dict[str, str]) -> Path | None:
    """The user's opencode provider logins (`~/.local/share/opencode/auth.json`), if any."""
    base = parent_env.get("XDG_DATA_HOME") or (str(Path(parent_env["HOME"]) / ".local" / "share") if parent_env.get("HOME") else "")
    if not base:
        return None
    path = Path(base) / "opencode" / "auth.json"
    return path if path.is_file() else None


class OpencodeTransport(HarnessTransport):
    """`opencode run --format json` with a per-run HOME and config. See the module docstring."""

    counts_turns = True

    def turn_event(self, event: dict) -> str | None:
        """opencode --format json begins each model request with a `step_start` event."""
        return "step" if event.get("type") == "step_start" else None

    #: opencode's stream says nothing about MCP servers: the bridge's own trace is the
    #: readiness signal (bridge/readiness.py bridge_listed), read after the session.
    readiness_from_trace = True

    def __init__(self, spec, settings=None, *, loopback=None, **kwargs):
        """`loopback`: a harnesscheck.loopback.LoopbackEndpoint. The session then talks to that
        scripted server on 127.0.0.1 through a provider in the session's config, with the
        dummy key; no login is linked."""
        super().__init__(spec, settings, **kwargs)
        self.loopback = loopback
        self.audit_worktree = False  # hash the worktree before/after (the run command sets it)
        self._audit = SessionAudit("opencode")

    def invocation(self, ctx: SessionContext, request, cli: Path, *, tool_less: bool) -> Invocation:
        model = request.model or self.settings.model
        if model:
            safe_model(model)  # refuse before anything is written or spawned
        deps = find_plugin_deps(cli, self.cli().version)
        home = ctx.run_dir / "home"
        dirs = {
            "XDG_CONFIG_HOME": home / ".config",
            "XDG_DATA_HOME": home / ".local" / "share",
            "XDG_CACHE_HOME": home / ".cache",
            "XDG_STATE_HOME": home / ".local" / "state",
        }
        for path in (home, *dirs.values()):
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.prefill(dirs["XDG_CONFIG_HOME"] / "opencode", deps, root=ctx.run_dir)
        tool_names = () if tool_less else request.scope.tool_names()
        bridge = None if tool_less or ctx.spec_path is None else bridge_command(ctx.spec_path)
        provider, full_model = None, model
        if self.loopback is not None:
            wire_model = model or LOOPBACK_MODEL
            provider = loopback_provider(self.loopback, wire_model)
            full_model = f"{LOOPBACK_PROVIDER}/{wire_model}"
        elif model and "/" not in model:
            raise ConfigError(f"opencode needs a model as PROVIDER/MODEL, got {model!r}", "e.g. --model anthropic/claude-sonnet-4-5")
        config = self.session_config(bridge=bridge, provider=provider, model=full_model)
        config_path = ctx.run_dir / "opencode.json"
        _write_private(config_path, json.dumps(config, indent=2) + "\n")
        link = dirs["XDG_DATA_HOME"] / "opencode" / "auth.json"
        auth = None if self.loopback is not None else user_auth_file(self.parent_env)
        if auth is not None:
            link.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(auth)
        argv = [
            str(cli),
            "run",
            "--format",
            "json",
            "--title",
            f"harnesscheck {ctx.session_id}",
            "--print-logs",
            "--log-level",
            "ERROR",
        ]  # its retried stream errors show only there (feed_err)
        if full_model:
            argv += ["-m", full_model]
        injections = {"HOME": str(home), **{k: str(v) for k, v in dirs.items()}, "OPENCODE_CONFIG": str(config_path), **OFF_SWITCHES}
        prompt = compose_prompt(request.system, request.prompt, tool_names)
        data = prompt.encode("utf-8")
        self._audit.before(ctx, request, worktree=self.audit_worktree)
        # Always on stdin (then EOF), whatever its size: a command line is readable by every
        # local user (/proc/<pid>/cmdline), a pipe is not (issue 30).
        return Invocation(argv=argv, injections=injections, stdin_bytes=data)

    def session_config(self, *, bridge, provider, model) -> dict:
        """The session's opencode.json (render_config)."""
        return render_config(bridge=bridge, provider=provider, model=model)

    def prefill(self, config_dir: Path, deps: Path, root: Path | None = None) -> None:
        """The session's config dir with the pre-installed plugin (prefill_config_dir)."""
        prefill_config_dir(config_dir, deps, root=root)

    def make_parser(self, ctx: SessionContext, request, *, tool_less: bool, on_text=None):
        from harnesscheck.backends._eventlog import EVENT_LOG_NAME, LoggedParser

        parser = OpencodeParser(requested_model=request.model or self.settings.model)
        parser.on_text = on_text
        return LoggedParser(parser, ctx.run_dir / EVENT_LOG_NAME)

    def after_session(self, ctx: SessionContext, outcome: AgentOutcome) -> AgentOutcome:
        link = ctx.run_dir / "home" / ".local" / "share" / "opencode" / "auth.json"
        if link.is_symlink() or link.exists():
            # The run dir outlives the session; no credential may stay in it.
            link.unlink()
        outcome = outcome.model_copy(update={"session_id": ctx.session_id})
        return self._audit.after(ctx, self.spec, outcome)
