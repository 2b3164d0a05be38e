"""`harnesscheck record --backend ID --scenario NAME [--out FILE]`: run one loopback
scenario through the backend's real transport and the pinned real CLI, and store the CLI's
raw stdout (and its stderr tail) as a fake-CLI scenario (fake_clis/_fakecli.py format) with
provenance.

The recordings ARE the offline fixtures: the default output is `fixtures/<cli>/<scenario>.json`,
the very file the fake CLIs replay at the offline level. Scenarios the real CLI cannot be
made to show (fake-only traps: malformed/truncated/oversize lines, lingering, crashes,
unknown events...) are not in `RECORDABLE` and stay hand-written (fixtures/<cli>/README.md
says why, per scenario), so `record` never overwrites one of them.

How each fixture is produced is its `Recipe`: the scripted model (`recording_script`) and
the transport's setup (no credential, an API key, a bridge that cannot start, a model name,
the retry ladder run out).

Scrubbing (before anything is written): the dummy keys and every secret the env policy
knows are redacted; the session's temp dir becomes `<run-dir>`, the CLI's cwd `{{cwd}}`, the
home dir `<home>`, the checkout `<repo>`, the server port `PORT`; claude's init `tools` /
`mcp_servers` / `model` and the echoed model become the fake's placeholders (only where they
say what the transport asked for), so the recording replays under any argv the transport builds.

Over 800 lines for a reason: each fixture's `Recipe` (scripted model plus transport setup) sits
beside the code that runs it, so what a recording claims is checked in one place; the recipes
table is the seam.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any, Iterator

# ---------------------------------------------------------------------------------------
# What can be recorded, and how


@dataclass(frozen=True)
class Recipe:
    """How one fixture is recorded.

    `credential`: what the CLI is given to authenticate with: `token` (the loopback dummy as
    a subscription token / the provider key: the normal loopback setup), `none` (nothing at
    all: the CLI's own not-logged-in path), `api_key` (claude: a dummy ANTHROPIC_API_KEY,
    the transport in api_key mode). `broken_bridge`: the bridge command in the CLI's MCP
    config is one that cannot start. `model`: the model the request names."""

    credential: str = "token"
    broken_bridge: bool = False
    #: Seconds the bridge waits before it starts (a slow bridge); when the CLI printed nothing
    #: until then, the fixture starts with that wait as a `delay` step.
    slow_bridge_s: float = 0.0
    model: str | None = None
    #: Let the CLI run its whole retry ladder (the transport's retry_stop_after=None), so
    #: the fixture holds every notice and the final failure, not only the first notice.
    full_ladder: bool = False
    max_iters: int = 8
    timeout_s: float = 60.0
    #: Shared kit scenario whose script this fixture serves (default: its own name).
    script: str | None = None


#: A model name no scripted server knows (model_not_found asks for it).
MISSING_MODEL = {"claude": "claude-nope-9", "codex": "gpt-nope-9", "gemini": "gemini-nope-9"}

#: Fixture name -> recipe, per CLI. Everything else in fixtures/<cli>/ is hand-written.
RECIPES: dict[str, dict[str, Recipe]] = {
    "claude": {
        "success": Recipe(),
        "tool_calls": Recipe(),
        "max_turns": Recipe(max_iters=2),
        "not_logged_in": Recipe(credential="none"),
        "auth_401": Recipe(),
        "rate_limit_429": Recipe(),
        "overloaded_529": Recipe(),
        "context_overflow": Recipe(),
        "model_not_found": Recipe(model=MISSING_MODEL["claude"]),
        "served_model_mismatch": Recipe(),
        "timeout_mid_stream": Recipe(timeout_s=6.0),
        "native_tool_use": Recipe(),
        "mcp_failed": Recipe(broken_bridge=True),
        "api_key_source": Recipe(credential="api_key"),
        # root-cause precedence (doc/SPEC-claude-code.md): a 429 ladder the deadline cuts short
        # is a rate limit, not a timeout; a bridge that cannot start under a 401 server
        "rate_limit_429_deadline": Recipe(full_ladder=True, timeout_s=45.0, script="rate_limit_429"),
        "auth_401_bridge_failed": Recipe(broken_bridge=True, script="auth_401"),
    },
    "codex": {
        "success": Recipe(),
        "tool_calls": Recipe(),
        # A 401 ends where the transport stops it (the first notice: auth is never retried,
        # whatever retry_stop_after says). codex's 429/529 ladders take seconds: recorded
        # whole; claude's 529 ladder takes minutes, so it ends at the transport's stop.
        "not_logged_in": Recipe(credential="none"),
        "auth_401": Recipe(),
        "rate_limit_429": Recipe(full_ladder=True),
        "overloaded_529": Recipe(full_ladder=True),
        "context_overflow": Recipe(),
        "model_not_found": Recipe(model=MISSING_MODEL["codex"]),
        "served_model_mismatch": Recipe(),
        "timeout_mid_stream": Recipe(timeout_s=6.0),
        "mcp_failed": Recipe(broken_bridge=True),
        # A required bridge slow to start: codex waits for it, then runs normally.
        "mcp_slow": Recipe(slow_bridge_s=0.5, script="tool_calls"),
        # root-cause precedence (doc/SPEC-codex.md): a 429 ladder the deadline cuts short
        "rate_limit_429_deadline": Recipe(full_ladder=True, timeout_s=12.0, script="rate_limit_429"),
        "auth_401_bridge_failed": Recipe(broken_bridge=True, script="auth_401"),
    },
    "gemini": {
        "success": Recipe(),
        "tool_calls": Recipe(),
        "not_logged_in": Recipe(credential="none"),
        "auth_401": Recipe(),
        "rate_limit_429": Recipe(),
        "overloaded_529": Recipe(),
        "context_overflow": Recipe(),
        "model_not_found": Recipe(model=MISSING_MODEL["gemini"]),
        "served_model_mismatch": Recipe(),
        "timeout_mid_stream": Recipe(timeout_s=45.0),
        "native_tool_use": Recipe(),
        "mcp_failed": Recipe(broken_bridge=True),
        # root-cause precedence (doc/SPEC-gemini.md): a 401 with a bridge that never started
        "auth_401_bridge_failed": Recipe(broken_bridge=True, script="auth_401"),
    },
}

#: Scenarios the real CLIs can be made to show (fixture names).
RECORDABLE: dict[str, tuple[str, ...]] = {cli: tuple(recipes) for cli, recipes in RECIPES.items()}

DEFAULT_TIMEOUT_S = 60.0


def recipe_for(cli: str, scenario: str) -> Recipe:
    recipe = RECIPES.get(cli, {}).get(scenario)
    if recipe is None:
        known = ", ".join(RECORDABLE.get(cli, ())) or "none"
        raise ValueError(f"{scenario!r} cannot be recorded for {cli} at the loopback level (recordable: {known})")
    return recipe


def recording_script(cli: str, scenario: str, ws: Any):
    """The scripted model a fixture is recorded against. The kit's loopback scenarios where
    they are the same; the error answers the vendors document otherwise."""
    from harnesscheck.backends.registry import kit_profile_of_cli
    from harnesscheck.loopback.adapter import loopback_scenario
    from harnesscheck.loopback.scenario import Scenario, ServedUsage, ToolCall, Turn

    profile = kit_profile_of_cli(cli)
    usage = ServedUsage(input=120, output=30, cache_read=7, cache_write=3 if profile.wire_cache_write else 0)
    recipe = recipe_for(cli, scenario)
    if scenario == "not_logged_in" and cli == "codex":
        # codex without a login sends no Authorization header; the Responses API answers
        # 401 with this message (cli-formats §2.C "bad credential / not logged in").
        turn = Turn(status=401, error_type="invalid_request_error", error_message="Missing bearer or basic authentication in header")
        return Scenario(scenario, (turn,), repeat_last=True)
    if scenario in ("not_logged_in", "api_key_source", "mcp_failed"):
        return loopback_scenario(cli, "success", ws, profile=profile)
    if scenario == "timeout_mid_stream":
        # A complete first turn (text + a bridge call: printed by every CLI), then the model
        # stalls mid-answer: the partial text a host must keep is the first turn's.
        first = Turn(text="Reading the files first.", tool_calls=(ToolCall("read_file", {"path": "README.md"}),), usage=usage)
        return Scenario(scenario, (first, Turn(text="partial", hang=True)), repeat_last=True)
    if scenario == "context_overflow":
        if cli == "claude":  # Anthropic Messages: 400 invalid_request_error "prompt is too long"
            turn = Turn(status=400, error_type="invalid_request_error", error_message="prompt is too long: 215000 tokens > 200000 maximum")
        elif cli == "gemini":  # Gemini API: 400 INVALID_ARGUMENT naming the token limit
            turn = Turn(
                status=400,
                error_type="invalid_request_error",
                error_message="The input token count (1215000) exceeds the maximum number of tokens allowed (1048576).",
            )
        else:  # OpenAI Responses: 400 with code context_length_exceeded
            turn = Turn(
                status=400,
                error_type="invalid_request_error",
                error_code="context_length_exceeded",
                error_message="Your input exceeds the context window of this model. Please adjust your input and try again.",
            )
        return Scenario(scenario, (turn,), repeat_last=True)
    if scenario == "model_not_found":
        model = MISSING_MODEL[cli]
        if cli == "claude":  # Anthropic Messages: 404 not_found_error naming the model
            turn = Turn(status=404, error_type="not_found_error", error_message=f"model: {model}")
        elif cli == "gemini":  # Gemini API: 404 NOT_FOUND naming the model
            turn = Turn(
                status=404,
                error_type="not_found_error",
                error_message=f"models/{model} is not found for API version v1beta, or is not supported for generateContent.",
            )
        else:  # OpenAI Responses: 400 invalid_request_error, code model_not_found
            turn = Turn(
                status=400,
                error_type="invalid_request_error",
                error_code="model_not_found",
                error_message=f"The model `{model}` does not exist or you do not have access to it.",
            )
        return Scenario(scenario, (turn,), repeat_last=True)
    return loopback_scenario(cli, recipe.script or scenario, ws, profile=profile)


# ---------------------------------------------------------------------------------------
# Running one loopback session


@dataclass
class Recording:
    """One loopback session: the CLI's raw stdout lines, how it ended, and where it ran."""

    backend: str
    cli: str
    scenario: str
    cli_version: str
    lines: list[str]
    exit_code: int | None
    ended_by_host: bool
    outcome: Any
    requests: list = field(default_factory=list)
    machine_paths: list[tuple[str, str]] = field(default_factory=list)
    port: int | None = None
    stderr_tail: str = ""
    recipe: Recipe = field(default_factory=Recipe)
    #: Seconds from the session's start to the CLI's first stdout line.
    first_line_s: float | None = None
    #: What the CLI created in its private temp and runtime dirs while it ran (`tmp/...`,
    #: `runtime/...`; pids, uuids and the cwd's mangled name normalised; sockets end in `=`).
    side_effects: list[str] = field(default_factory=list)


class _PrivateDirWatch:
    """Polls the session's private temp and runtime dirs (envpolicy.private_temp_dirs) while
    the CLI runs: they are removed with the session, so what it made there is seen live."""

    def __init__(self, run_dir: Path, interval_s: float = 0.05):
        import threading

        self.run_dir, self.interval_s = run_dir, interval_s
        self.seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="record-private-dirs")

    def __enter__(self) -> "_PrivateDirWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        import stat as st

        while not self._stop.is_set():
            for name in ("tmp", "runtime"):
                root = self.run_dir / name
                for top, dirs, files in os.walk(root):
                    for entry in dirs + files:
                        path = os.path.join(top, entry)
                        try:
                            sock = st.S_ISSOCK(os.lstat(path).st_mode)
                        except OSError:
                            continue
                        rel = os.path.relpath(path, self.run_dir)
                        self.seen.add(normalise_side_effect(rel, self.run_dir) + ("=" if sock else ""))
            self._stop.wait(self.interval_s)


def normalise_side_effect(rel: str, run_dir: Path) -> str:
    """`tmp/claude-0/-tmp-...-run-cwd/<uuid>/started` -> `tmp/claude-<uid>/<cwd>/<uuid>/started`."""
    rel = rel.replace(_mangled(run_dir / "cwd"), "<cwd>").replace(f"claude-{os.getuid()}", "claude-<uid>")
    rel = re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "<uuid>", rel)
    rel = re.sub(r"(fswatch-probe|tmp)-[A-Za-z0-9_]{6,}", r"\1-<rand>", rel)  # mkdtemp-style suffixes, before digits
    return re.sub(r"\d{3,}", "<n>", rel)


class _Tee:
    def __init__(self, inner: Any, lines: list[str], box: dict):
        self._inner, self._lines, self._box = inner, lines, box

    def feed(self, line: str):
        if not self._lines:
            self._box["first_line"] = time.monotonic()
        self._lines.append(line)
        return self._inner.feed(line)

    def outcome(self, result: Any):
        self._box["result"] = result
        return self._inner.outcome(result)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _workspace(base: Path) -> Any:
    """A worktree like the kit's: README.md inside, a sentinel outside."""

    class Ws:
        pass

    ws = Ws()
    ws.root = base / "work"
    ws.root.mkdir(parents=True)
    (ws.root / "README.md").write_text("hello from the worktree\n", encoding="utf-8")
    outside = base / "outside"
    outside.mkdir()
    ws.secret = outside / "secret.txt"
    ws.secret.write_text("sentinel outside the worktree\n", encoding="utf-8")
    ws.canary = "HC-RECORD-SENTINEL"
    return ws


#: A bridge command that cannot start (no such executable; found on no PATH).
BROKEN_BRIDGE = "harnesscheck-bridge-that-cannot-start"


@contextlib.contextmanager
def _bridge_override(cli: str, recipe: Recipe) -> Iterator[None]:
    """While recording `mcp_failed` / `mcp_slow`: the transport's MCP config names a bridge
    command that cannot start, or the real bridge behind a start-up wait (the CLI's own
    reaction to it is what gets recorded)."""
    if not (recipe.broken_bridge or recipe.slow_bridge_s):
        yield
        return
    import importlib

    module = importlib.import_module(
        {"claude": "harnesscheck.backends.claude_code", "codex": "harnesscheck.backends.codex", "gemini": "harnesscheck.backends.gemini"}[cli]
    )
    real = module.bridge_command

    def override(spec_path: Path) -> tuple[list[str], dict[str, str]]:
        if recipe.broken_bridge:
            return [BROKEN_BRIDGE], {}
        argv, env = real(spec_path)
        return ["/bin/sh", "-c", f'sleep {recipe.slow_bridge_s:g}; exec "$0" "$@"', *argv], env

    module.bridge_command = override
    try:
        yield
    finally:
        module.bridge_command = real


def _without_credentials(transport: Any, names: tuple[str, ...]) -> None:
    """Take the loopback credential away: the CLI gets no token and no key at all."""
    for name in names:
        transport.injections.pop(name, None)
    invocation = transport.invocation

    def stripped(*args: Any, **kwargs: Any):
        inv = invocation(*args, **kwargs)
        for name in names:
            inv.injections.pop(name, None)
        codex_home = inv.injections.get("CODEX_HOME")
        if codex_home:  # the provider then sends no key at all, as codex without a login does
            config = Path(codex_home) / "config.toml"
            kept = [line for line in config.read_text(encoding="utf-8").splitlines() if not line.startswith("env_key =")]
            config.write_text("\n".join(kept) + "\n", encoding="utf-8")
        return inv

    transport.invocation = stripped


def _transport(spec: Any, backend: str, cli: str, binary: Any, base_url: str, recipe: Recipe):
    from harnesscheck.backends.loopback_endpoint import CODEX_KEY_VAR, DUMMY_KEY, LoopbackEndpoint
    from harnesscheck.core.config import Settings
    from harnesscheck.loopback.adapter import loopback_transport

    kwargs: dict[str, Any] = {}
    if recipe.credential == "api_key":
        if cli != "claude":
            raise ValueError("an API-key recording is claude's only")
        kwargs = {"auth_mode": "api_key", "injections": {"ANTHROPIC_API_KEY": DUMMY_KEY}}
    if recipe.full_ladder:
        kwargs["retry_stop_after"] = None
    transport = loopback_transport(spec, Settings(backend=backend), cli_path=binary.path, endpoint=LoopbackEndpoint(base_url), **kwargs)
    if recipe.credential == "none":
        _without_credentials(transport, ("CLAUDE_CODE_OAUTH_TOKEN", CODEX_KEY_VAR, "GEMINI_API_KEY"))
    elif recipe.credential == "api_key":
        _without_credentials(transport, ("CLAUDE_CODE_OAUTH_TOKEN",))  # the key is the only credential
    return transport


def run_loopback(backend: str, scenario: str, *, timeout_s: float | None = None) -> Recording:
    """Run `scenario` once through the real transport and the pinned CLI; keep its output."""
    from harnesscheck.backends.loopback_endpoint import DUMMY_KEY
    from harnesscheck.backends.registry import get_spec
    from harnesscheck.contain.process import Ending
    from harnesscheck.core.contracts import AgentSessionRequest
    from harnesscheck.core.paths import data_root
    from harnesscheck.core.scope import ToolScope
    from harnesscheck.loopback.clis import require_pinned_cli
    from harnesscheck.loopback.server import ScriptedModelServer

    spec = get_spec(backend)
    cli = spec.cli_name or backend
    recipe = recipe_for(cli, scenario)
    binary, why = require_pinned_cli(backend)
    if binary is None:
        raise RuntimeError(why)
    base = Path(tempfile.mkdtemp(prefix="harnesscheck-record-"))
    try:
        ws = _workspace(base)
        script = recording_script(cli, scenario, ws)
        with ScriptedModelServer(script, expected_key=DUMMY_KEY) as server, _bridge_override(cli, recipe):
            transport = _transport(spec, backend, cli, binary, server.base_url, recipe)
            lines: list[str] = []
            box: dict = {"started": time.monotonic()}
            make_parser = transport.make_parser
            transport.make_parser = lambda *a, **k: _Tee(make_parser(*a, **k), lines, box)
            request = AgentSessionRequest(
                prompt="Say hello.",
                scope=ToolScope(name="record", root=ws.root, read_only=True),
                max_iters=recipe.max_iters,
                timeout_s=timeout_s or recipe.timeout_s,
                model=recipe.model,
                run_dir=base / "run",
            )
            with _PrivateDirWatch(base / "run") as private:
                outcome = transport.run_session(request)
            requests = server.turn_requests()
            port = server.port
        result = box.get("result")
        ended_by_host = result is not None and result.ending not in (Ending.exited, Ending.linger)
        home = os.path.expanduser("~")
        return Recording(
            backend=backend,
            cli=cli,
            scenario=scenario,
            cli_version=binary.version,
            lines=lines,
            exit_code=None if result is None else result.exit_code,
            ended_by_host=ended_by_host,
            outcome=outcome,
            requests=requests,
            machine_paths=[
                (_mangled(base / "run" / "cwd"), "-run-dir-run-cwd"),  # claude's project dir name
                (str(base / "run" / "cwd"), "{{cwd}}"),
                (str(base), "<run-dir>"),
                (os.path.realpath(str(base)), "<run-dir>"),
                (str(data_root()), "<repo>"),
                (sys.prefix, "<python>"),
                (home, "<home>"),
                (os.path.realpath(home), "<home>"),
            ],
            port=port,
            stderr_tail="" if result is None else (result.stderr_tail or ""),
            recipe=recipe,
            first_line_s=(box["first_line"] - box["started"]) if "first_line" in box else None,
            side_effects=sorted(private.seen),
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _mangled(path: Path) -> str:
    """Claude names a project's state dir after its cwd with every other char as `-`."""
    return re.sub(r"[^A-Za-z0-9]", "-", str(path))


def outcome_summary(outcome: Any) -> dict:
    """What the transport made of the live session: replaying the recording offline must
    give the same (tests/loopback/test_loopback_recordings.py)."""
    u = outcome.usage
    return {
        "status": outcome.status.value,
        "error_class": outcome.error_class.value if outcome.error_class else None,
        "usage": {"input": u.input, "output": u.output, "cache_read": u.cache_read, "cache_write": u.cache_write},
        "served_model": outcome.served_model,
        "model_verdict": outcome.model_verdict.value,
        "tools_used": list(outcome.tools_used),
        "native_tool_calls": list(outcome.native_tool_calls),
        "refusals": len(outcome.refusals),
    }


# ---------------------------------------------------------------------------------------
# Scrubbing and the fixture format

_PORT_RE = re.compile(r"(127\.0\.0\.1|localhost|\[::1\]):\d{2,5}")


def scrub_line(line: str, machine_paths: list[tuple[str, str]]) -> str:
    """Secrets redacted, machine paths and the port replaced by stable placeholders."""
    from harnesscheck.backends.loopback_endpoint import DUMMY_KEY
    from harnesscheck.contain.envpolicy import redact

    out = line
    for value, placeholder in machine_paths:
        if value and value not in ("/", "."):
            out = out.replace(value, placeholder)
    out = _PORT_RE.sub(r"\1:PORT", out)
    out = _RUNTIME_RE.sub("<runtime-dir>", out)  # a short private runtime dir outside a deep run dir
    return redact(out, extra_secrets=[DUMMY_KEY])


#: envpolicy.private_temp_dirs' runtime dir when the run dir is too deep for a socket path
#: (claude 2.1.332's init `messaging_socket_path` names a socket in it).
_RUNTIME_RE = re.compile(r"/tmp/hc-rt-[A-Za-z0-9_]+")


def server_fields(servers: Any) -> dict | None:
    """The fields beside `{name, status: connected}` that every server of an init's
    `mcp_servers` shares (2.1.332: `{"source": "dynamic"}`; 2.1.197: `{}`), or None when
    the list is empty, a server is not connected (failed, pending) or the servers differ:
    then the list must stay literal."""
    if not isinstance(servers, list) or not servers:
        return None
    extras = []
    for server in servers:
        if not isinstance(server, dict) or server.get("status") != "connected" or not isinstance(server.get("name"), str):
            return None
        extras.append({k: v for k, v in server.items() if k not in ("name", "status")})
    return extras[0] if all(e == extras[0] for e in extras) else None


def _claude_placeholders(event: dict, default_model: str | None, fields: dict | None = None) -> dict:
    """init echoes argv (tools, MCP servers, model): make it the fake's placeholders, but
    only where it says what the transport asked for (a failed bridge, a missing tool stay
    literal: a replay must show the same failure). `fields` (filled in): the extra fields
    the templated servers carried, which the fixture keeps as `mcp_server_fields`."""
    if event.get("type") == "system" and event.get("subtype") == "init":
        event = dict(event)
        tools = event.get("tools")
        if isinstance(tools, list) and tools and all(str(t).startswith("mcp__bridge__") for t in tools):
            event["tools"] = "{{allowed_tools}}"
        # the placeholder replays each configured server `connected`, with the fields every
        # recorded server shared (2.1.332's `source`) kept in `mcp_server_fields`; any other
        # status (failed, pending) or servers that differ stay literal (a classification reads them)
        extras = server_fields(event.get("mcp_servers"))
        if extras is not None and (fields is None or not fields or fields == extras):
            event["mcp_servers"] = "{{mcp_server_names}}"
            if fields is not None:
                fields.update(extras)
        if event.get("model") == default_model:
            event["model"] = "{{model}}"
    if event.get("type") == "result" and isinstance(event.get("modelUsage"), dict) and default_model:
        event = dict(event)
        event["modelUsage"] = {("{{model}}" if k == default_model else k): v for k, v in event["modelUsage"].items()}
    if event.get("type") == "assistant" and default_model:
        msg = event.get("message")
        if isinstance(msg, dict) and msg.get("model") == default_model.split("[", 1)[0]:
            event = dict(event, message=dict(msg, model="{{model_base}}"))
    return event


def gemini_placeholders(event: dict, model: str | None) -> dict:
    """gemini: the requested model (init `model`, a `stats.models` key equal to it) becomes
    `{{model}}`, so the replay answers with whatever model the transport asks for; a served
    model other than the requested one stays as recorded."""
    if not model:
        return event
    if event.get("type") == "init" and event.get("model") == model:
        event = {**event, "model": "{{model}}"}
    stats = event.get("stats")
    if event.get("type") == "result" and isinstance(stats, dict) and isinstance(stats.get("models"), dict):
        models = {("{{model}}" if k == model else k): v for k, v in stats["models"].items()}
        event = {**event, "stats": {**stats, "models": models}}
    return event


def _default_model(cli: str, lines: list[str]) -> str | None:
    if cli != "claude":
        return None
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("subtype") == "init":
            return event.get("model")
    return None


def _transport_setup(recipe: Recipe) -> dict:
    """What the replay must set up like the live run (tests/loopback/test_loopback_recordings.py)."""
    out: dict[str, Any] = {"max_iters": recipe.max_iters}
    if recipe.model:
        out["model"] = recipe.model
    if recipe.credential == "api_key":
        out["auth_mode"] = "api_key"
    if recipe.full_ladder:
        out["retry_stop_after"] = None
    return out


_RECIPE_NOTES = {
    "none": "no credential at all (no token, no key, no login; codex: a provider without env_key)",
    "api_key": "a dummy ANTHROPIC_API_KEY (scrubbed), the transport in api_key mode, no subscription token",
}


def to_fixture(rec: Recording) -> dict:
    """The recording as a fake-CLI scenario with provenance."""
    from harnesscheck import __version__

    default_model = _default_model(rec.cli, rec.lines)
    fields: dict = {}  # the fields the templated mcp_servers carried (mcp_server_fields)
    steps: list[dict] = []
    if rec.recipe.slow_bridge_s and rec.first_line_s is not None and rec.first_line_s >= rec.recipe.slow_bridge_s:
        steps.append({"delay": rec.recipe.slow_bridge_s})  # the CLI printed nothing until its bridge was up
    for raw in rec.lines:
        line = scrub_line(raw, rec.machine_paths)
        try:
            event = json.loads(line)
        except ValueError:
            steps.append({"noise": line})
            continue
        if not isinstance(event, dict):
            steps.append({"raw": line, "newline": True})
            continue
        if rec.cli == "claude":
            event = _claude_placeholders(event, default_model, fields)
        if rec.cli == "gemini":
            from harnesscheck.backends.gemini import BRIDGE_PREFIX, DEFAULT_MODEL

            event = gemini_placeholders(event, rec.recipe.model or DEFAULT_MODEL)
            name = str(event.get("tool_name") or "")
            if event.get("type") == "tool_use" and name.startswith(BRIDGE_PREFIX) and not rec.recipe.broken_bridge:
                # the real CLI called the bridge here: so does the replay (its trace is the host's record)
                steps.append({"mcp_calls": [{"name": name[len(BRIDGE_PREFIX) :], "arguments": event.get("parameters") or {}}], "server": "bridge"})
        steps.append({"emit": event})
    stderr = scrub_line(rec.stderr_tail, rec.machine_paths).strip("\n")
    if stderr:
        steps.append({"stderr": stderr})  # the tail the transport saw (its order against stdout is not kept)
    if rec.ended_by_host:
        steps.append({"hang": True})  # the real CLI was still running when the host ended it
    else:
        steps.append({"exit": rec.exit_code if rec.exit_code is not None else 0})
    notes = ["raw stdout (and the stderr tail) of the real CLI, scrubbed (secrets, temp paths, home, port)"]
    if rec.recipe.credential in _RECIPE_NOTES:
        notes.append("the CLI was given " + _RECIPE_NOTES[rec.recipe.credential])
    if rec.recipe.broken_bridge:
        notes.append(f"the bridge command in its MCP config was {BROKEN_BRIDGE!r}, which cannot start")
    if rec.recipe.slow_bridge_s:
        notes.append(
            f"the bridge waited {rec.recipe.slow_bridge_s:g} s before starting (the delay step); "
            f"the first stdout line came {rec.first_line_s or 0:.1f} s after the start"
        )
    if rec.recipe.full_ladder:
        notes.append("the host let the CLI run its retry ladder out (retry_stop_after=None)")
    if rec.recipe.script and rec.recipe.script != rec.scenario:
        notes.append(f"the scripted model served the {rec.recipe.script!r} scenario")
    if rec.recipe.timeout_s != DEFAULT_TIMEOUT_S:
        notes.append(f"the session deadline was {rec.recipe.timeout_s:g} s")
    if rec.recipe.model:
        notes.append(f"the request named the model {rec.recipe.model!r}")
    if rec.ended_by_host:
        notes.append("the host ended the session (deadline or early stop): replay ends in a hang")
    fixture: dict = {
        "provenance": {
            "cli": rec.cli,
            "cli_version": rec.cli_version,
            "source": "loopback-recording",
            "level": "loopback",
            "scenario": rec.scenario,
            "date": date.today().isoformat(),
            "recorded_by": f"harnesscheck {__version__} record (scripted model server on 127.0.0.1)",
            "transport": _transport_setup(rec.recipe),
            "live_outcome": outcome_summary(rec.outcome),
            "notes": "; ".join(notes),
        },
        "version": _printed_version(rec),
        "stdin": "read",
        "steps": steps,
    }
    if default_model:
        fixture["default_model"] = default_model
    if fields:
        fixture["mcp_server_fields"] = fields
    if rec.cli == "gemini":
        from harnesscheck.backends.gemini import DEFAULT_MODEL

        fixture["default_model"] = rec.recipe.model or DEFAULT_MODEL  # what `{{model}}` stood for
    if rec.cli == "gemini" and not rec.recipe.broken_bridge and rec.recipe.credential != "none":
        # gemini awaits its MCP servers before the first request (the bridge's tools were in it):
        # the replay starts the configured bridge too, so the bridge trace the transport reads
        # for readiness is real (a slow start on a loaded machine is waited out)
        fixture["mcp"], fixture["mcp_timeout"] = "connect", 60
        fixture["provenance"]["notes"] += '; replayed with the configured bridge started ("mcp": "connect")'
    return fixture


def _printed_version(rec: Recording) -> str:
    return {"claude": f"{rec.cli_version} (Claude Code)", "codex": f"codex-cli {rec.cli_version}"}.get(rec.cli, rec.cli_version)


def default_out(cli: str, scenario: str) -> Path:
    """The offline fixture itself: fixtures/<cli>/<scenario>.json (what the fakes replay)."""
    from harnesscheck.core.paths import fixtures_dir

    return fixtures_dir() / cli / f"{scenario}.json"


def is_recording(path: Path) -> bool:
    """A fixture written by `record` (provenance source `loopback-recording`)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (data.get("provenance") or {}).get("source") == "loopback-recording"


def write_fixture(fixture: dict, out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(fixture, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return out


def installed_package_dirs() -> list[Path]:
    """The interpreter's package directories (site-packages, user site): an installed
    harnesscheck's shipped fixtures live there, and `record` never writes there unasked."""
    import site
    import sysconfig

    dirs = {sysconfig.get_paths().get(k) for k in ("purelib", "platlib")}
    dirs.update(site.getsitepackages() if hasattr(site, "getsitepackages") else [])
    dirs.add(site.getusersitepackages() if hasattr(site, "getusersitepackages") else None)
    return [Path(d).resolve() for d in dirs if d]


def overwrite_refusal(path: Path, force: bool) -> str | None:
    """Why `record` must not write `path` without --force (an existing fixture, or anything
    inside an installed package), else None."""
    if force:
        return None
    target = Path(path).absolute()
    resolved = target.resolve()
    if any(resolved.is_relative_to(d) for d in installed_package_dirs()):
        return f"{target}: inside an installed package (site-packages); record never writes there unless told"
    if target.exists():
        from harnesscheck.core.paths import fixtures_dir

        shipped = resolved.is_relative_to(fixtures_dir().resolve())
        return f"{target}: exists{' (a shipped fixture)' if shipped else ''}; record never overwrites a file unless told"
    return None


def record_command(backend: str, scenario: str, out: Path | None, force: bool = False) -> int:
    """Entry point of `harnesscheck record`. Exit 0 written, 2 usage, 3 environment.

    Nothing is overwritten unless `force`: an existing fixture (the shipped ones are the
    default target) or any path inside an installed package is refused before anything
    is recorded."""
    from harnesscheck.backends.registry import get_spec

    try:
        spec = get_spec(backend)
    except Exception as exc:  # UnknownBackend names the known ids
        print(f"harnesscheck record: {exc}", file=sys.stderr)
        return 2
    cli = spec.cli_name or backend
    names = list(RECORDABLE.get(cli, ())) if scenario == "all" else [scenario]
    if not names:
        print(
            f"harnesscheck record: --backend {backend}: has no loopback scenarios\n  fix: use one of {', '.join(c.backend for c in _recordable_backends())}",
            file=sys.stderr,
        )
        return 2
    if out is not None and len(names) > 1:
        print("harnesscheck record: --out names one file, --scenario all records several\n  fix: record one scenario at a time with --out", file=sys.stderr)
        return 2
    unknown = [n for n in names if n not in RECORDABLE.get(cli, ())]
    if unknown:
        print(
            f"harnesscheck record: --scenario {unknown[0]}: not a recordable {cli} scenario\n  fix: use one of {', '.join(RECORDABLE.get(cli, ()))}, or all",
            file=sys.stderr,
        )
        return 2
    for name in names:
        why = overwrite_refusal(out or default_out(cli, name), force)
        if why:
            print(f"harnesscheck record: {why}\n  fix: pass --out NEW_FILE, or --force to overwrite", file=sys.stderr)
            return 2
    for name in names:
        try:
            rec = run_loopback(backend, name)
        except ValueError as exc:
            print(f"harnesscheck record: {exc}", file=sys.stderr)
            return 2
        except RuntimeError as exc:
            print(f"harnesscheck record: {exc}", file=sys.stderr)
            return 3
        try:
            path = write_fixture(to_fixture(rec), out or default_out(cli, name))
        except OSError as exc:
            print(
                f"harnesscheck record: {out or default_out(cli, name)}: cannot be written ({exc.strerror or exc})\n  fix: pass --out FILE somewhere writable",
                file=sys.stderr,
            )
            return 3
        print(
            f"{backend} {name}: {len(rec.lines)} lines, {rec.outcome.status.value}"
            f"{'/' + rec.outcome.error_class.value if rec.outcome.error_class else ''} -> {path}"
        )
    return 0


def _recordable_backends():
    from harnesscheck.loopback.install import pinned_clis

    return [c for c in pinned_clis() if c.cli_name in RECORDABLE]
