"""`harnesscheck record --backend ID --scenario NAME [--out FILE]`: run one loopback
scenario through the backend's real transport and the pinned real CLI, and store the CLI's
raw stdout (and its stderr tail) as a fake-CLI scenario (fake_clis/_fakecli.py format) with
provenance.

The recordings ARE the offline fixtures: the default output is `fixtures/<cli>/<scenario>.json`,
the very file the fake CLIs replay at the offline level. Scenarios the real CLI cannot be
made to show (fake-only traps: malformed/truncated/oversize lines, lingering, crashes,
unknown events...) are not in `RECORDABLE` and stay hand-written (fixtures/<cli>/README.md
says why, per scenario), so `record` never overwrites one of them.

What the recorder knows of one CLI is its backend's recording profile
(backends/_recording_profile.py, `KitProfile.recording`): this module names no CLI
(tests/test_layers.py). How each fixture is produced is its `Recipe` there: the scripted
model (`recording_script`: the kit's loopback scenario, or an error answer the vendor
documents) and the transport's setup (no credential, an API key, a bridge that cannot start, a
model name, the retry ladder run out).

Scrubbing (before anything is written): the dummy keys and every secret the env policy
knows are redacted; the session's temp dir becomes `<run-dir>`, the CLI's cwd `{{cwd}}`, the
home dir `<home>`, the checkout `<repo>`, the server port `PORT`; where the profile says so, what
the CLI echoes of the transport's request (its tools, MCP servers, model) becomes the fake's
placeholders, so the recording replays under any argv the transport builds.
"""

from __future__ import annotations

import contextlib
import functools
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
from typing import Any, Callable, Iterator, Mapping

from harnesscheck.backends._recording_profile import Recipe, RecordingProfile

# ---------------------------------------------------------------------------------------
# What can be recorded, and how


@functools.cache
def recording_profiles() -> dict[str, RecordingProfile]:
    """CLI name -> its recording profile, for every registered backend's CLI that has one
    (registry order, built-ins first; the profile `kit_profile_of_cli` finds). Read at first
    use, not at import: importing this module reads no backend's profile."""
    from harnesscheck.backends.registry import kit_profile_of_cli, known_specs

    out: dict[str, RecordingProfile] = {}
    for spec in known_specs().values():
        if spec.cli_name and spec.cli_name not in out:
            recording = kit_profile_of_cli(spec.cli_name).recording
            if recording is not None:
                out[spec.cli_name] = recording
    return out


def _recipes() -> dict[str, dict[str, Recipe]]:
    """Fixture name -> recipe, per CLI. Everything else in fixtures/<cli>/ is hand-written."""
    return {cli: dict(profile.recipes) for cli, profile in recording_profiles().items()}


def _recordable() -> dict[str, tuple[str, ...]]:
    """Scenarios the real CLIs can be made to show (fixture names), per CLI."""
    return {cli: tuple(recipes) for cli, recipes in _recipes().items()}


def __getattr__(name: str) -> Any:
    """PROFILES, RECIPES and RECORDABLE: views of the registered recording profiles, read when
    first asked for (PEP 562)."""
    views = {"PROFILES": recording_profiles, "RECIPES": _recipes, "RECORDABLE": _recordable}
    if name in views:
        return views[name]()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


DEFAULT_TIMEOUT_S = 60.0


def _profile(cli: str) -> RecordingProfile:
    profile = recording_profiles().get(cli)
    if profile is None:
        raise ValueError(f"{cli} has no recording profile: its fixtures cannot be recorded at the loopback level")
    return profile


def recipe_for(cli: str, scenario: str) -> Recipe:
    recipe = _recipes().get(cli, {}).get(scenario)
    if recipe is None:
        known = ", ".join(_recordable().get(cli, ())) or "none"
        raise ValueError(f"{scenario!r} cannot be recorded for {cli} at the loopback level (recordable: {known})")
    return recipe


def recording_script(cli: str, scenario: str, ws: Any):
    """The scripted model a fixture is recorded against. The kit's loopback scenarios where
    they are the same; the error answers the vendors document otherwise (the profile's
    `error_answers`)."""
    from harnesscheck.backends.registry import kit_profile_of_cli
    from harnesscheck.loopback.adapter import loopback_scenario
    from harnesscheck.loopback.scenario import Scenario, ServedUsage, ToolCall, Turn

    profile = kit_profile_of_cli(cli)
    usage = ServedUsage(input=120, output=30, cache_read=7, cache_write=3 if profile.wire_cache_write else 0)
    recipe = recipe_for(cli, scenario)
    recording = _profile(cli)
    answer = recording.error_answers.get(scenario)
    if answer is not None:
        message = answer.message.replace("{model}", recording.missing_model)
        turn = Turn(status=answer.status, error_type=answer.error_type, error_code=answer.code, error_message=message)
        return Scenario(scenario, (turn,), repeat_last=True)
    if scenario in ("not_logged_in", "api_key_source", "mcp_failed"):
        return loopback_scenario(cli, "success", ws, profile=profile)
    if scenario == "timeout_mid_stream":
        # A complete first turn (text + a bridge call: printed by every CLI), then the model
        # stalls mid-answer: the partial text a host must keep is the first turn's.
        first = Turn(text="Reading the files first.", tool_calls=(ToolCall("read_file", {"path": "README.md"}),), usage=usage)
        return Scenario(scenario, (first, Turn(text="partial", hang=True)), repeat_last=True)
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

    def __init__(self, run_dir: Path, uid_dirs: tuple[str, ...] = (), interval_s: float = 0.05):
        import threading

        self.run_dir, self.uid_dirs, self.interval_s = run_dir, uid_dirs, interval_s
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
                        self.seen.add(normalise_side_effect(rel, self.run_dir, self.uid_dirs) + ("=" if sock else ""))
            self._stop.wait(self.interval_s)


def normalise_side_effect(rel: str, run_dir: Path, uid_dirs: tuple[str, ...] = ()) -> str:
    """`tmp/cli-0/-tmp-...-run-cwd/<uuid>/started` -> `tmp/cli-<uid>/<cwd>/<uuid>/started`
    (`cli` one of `uid_dirs`: the profile's `side_effect_uid_dirs`)."""
    rel = rel.replace(_mangled(run_dir / "cwd"), "<cwd>")
    for name in uid_dirs:
        rel = rel.replace(f"{name}-{os.getuid()}", f"{name}-<uid>")
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
def _bridge_override(recording: RecordingProfile, recipe: Recipe) -> Iterator[None]:
    """While recording `mcp_failed` / `mcp_slow`: the transport's MCP config names a bridge
    command that cannot start, or the real bridge behind a start-up wait (the CLI's own
    reaction to it is what gets recorded)."""
    if not (recipe.broken_bridge or recipe.slow_bridge_s):
        yield
        return
    import importlib

    module = importlib.import_module(recording.bridge_module)
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


def _without_credentials(transport: Any, names: tuple[str, ...], edit_config: Callable[[Mapping[str, str]], None] | None) -> None:
    """Take the loopback credential away: the variables `names` (the profile's
    `credential_vars`) and, with `edit_config` (its `strip_credential_config`), what the CLI's
    config says of it, so it gets no token and no key at all."""
    for name in names:
        transport.injections.pop(name, None)
    invocation = transport.invocation

    def stripped(*args: Any, **kwargs: Any):
        inv = invocation(*args, **kwargs)
        for name in names:
            inv.injections.pop(name, None)
        if edit_config is not None:
            edit_config(inv.injections)
        return inv

    transport.invocation = stripped


def _transport(spec: Any, backend: str, cli: str, binary: Any, base_url: str, recipe: Recipe):
    from harnesscheck.backends.loopback_endpoint import DUMMY_KEY, LoopbackEndpoint
    from harnesscheck.core.config import Settings
    from harnesscheck.loopback.adapter import loopback_transport

    recording = _profile(cli)
    kwargs: dict[str, Any] = {}
    if recipe.credential == "api_key":
        if recording.api_key_var is None:
            raise ValueError(f"{cli} has no API-key recording (its recording profile names no api_key_var)")
        kwargs = {"auth_mode": "api_key", "injections": {recording.api_key_var: DUMMY_KEY}}
    if recipe.full_ladder:
        kwargs["retry_stop_after"] = None
    transport = loopback_transport(spec, Settings(backend=backend), cli_path=binary.path, endpoint=LoopbackEndpoint(base_url), **kwargs)
    if recipe.credential == "none":
        _without_credentials(transport, recording.credential_vars, recording.strip_credential_config)
    elif recipe.credential == "api_key":
        _without_credentials(transport, recording.credential_vars, None)  # the key is the only credential
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
    recipe, recording = recipe_for(cli, scenario), _profile(cli)
    binary, why = require_pinned_cli(backend)
    if binary is None:
        raise RuntimeError(why)
    base = Path(tempfile.mkdtemp(prefix="harnesscheck-record-"))
    try:
        ws = _workspace(base)
        script = recording_script(cli, scenario, ws)
        with ScriptedModelServer(script, expected_key=DUMMY_KEY) as server, _bridge_override(recording, recipe):
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
            with _PrivateDirWatch(base / "run", recording.side_effect_uid_dirs) as private:
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
                (_mangled(base / "run" / "cwd"), "-run-dir-run-cwd"),  # a state dir named after the cwd
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
    """The path as a CLI names a project's state dir after its cwd: every character but
    letters and digits as `-`."""
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
#: (a CLI's init event may name a socket in it, e.g. a `messaging_socket_path`).
_RUNTIME_RE = re.compile(r"/tmp/hc-rt-[A-Za-z0-9_-]+")


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


def to_fixture(rec: Recording) -> dict:
    """The recording as a fake-CLI scenario with provenance."""
    from harnesscheck import __version__

    recording = _profile(rec.cli)
    # the model the fake's `{{model}}` stands for (kept as `default_model`)
    model = recording.placeholder_model(rec.recipe, rec.lines) if recording.placeholder_model else None
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
        if recording.placeholders is not None:
            event = recording.placeholders(event, model, fields)
        call = recording.replayed_bridge_call(event) if recording.replayed_bridge_call else None
        if call is not None and not rec.recipe.broken_bridge:
            # the real CLI called the bridge here: so does the replay (its trace is the host's record)
            steps.append({"mcp_calls": [call], "server": "bridge"})
        steps.append({"emit": event})
    stderr = scrub_line(rec.stderr_tail, rec.machine_paths).strip("\n")
    if stderr:
        steps.append({"stderr": stderr})  # the tail the transport saw (its order against stdout is not kept)
    if rec.ended_by_host:
        steps.append({"hang": True})  # the real CLI was still running when the host ended it
    else:
        steps.append({"exit": rec.exit_code if rec.exit_code is not None else 0})
    notes = ["raw stdout (and the stderr tail) of the real CLI, scrubbed (secrets, temp paths, home, port)"]
    if rec.recipe.credential in recording.credential_notes:
        notes.append("the CLI was given " + recording.credential_notes[rec.recipe.credential])
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
        "version": recording.version_line.format(version=rec.cli_version),
        "stdin": "read",
        "steps": steps,
    }
    if model:
        fixture["default_model"] = model
    if fields:
        fixture["mcp_server_fields"] = fields
    if recording.replay_connects_bridge and not rec.recipe.broken_bridge and rec.recipe.credential != "none":
        # the CLI awaits its MCP servers before the first request (the bridge's tools were in it):
        # the replay starts the configured bridge too, so the bridge trace the transport reads
        # for readiness is real (a slow start on a loaded machine is waited out)
        fixture["mcp"], fixture["mcp_timeout"] = "connect", 60
        fixture["provenance"]["notes"] += '; replayed with the configured bridge started ("mcp": "connect")'
    return fixture


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
    names = list(_recordable().get(cli, ())) if scenario == "all" else [scenario]
    if not names:
        print(
            f"harnesscheck record: --backend {backend}: has no loopback scenarios\n  fix: use one of {', '.join(c.backend for c in _recordable_backends())}",
            file=sys.stderr,
        )
        return 2
    if out is not None and len(names) > 1:
        print("harnesscheck record: --out names one file, --scenario all records several\n  fix: record one scenario at a time with --out", file=sys.stderr)
        return 2
    unknown = [n for n in names if n not in _recordable().get(cli, ())]
    if unknown:
        print(
            f"harnesscheck record: --scenario {unknown[0]}: not a recordable {cli} scenario\n  fix: use one of {', '.join(_recordable().get(cli, ()))}, or all",
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

    return [c for c in pinned_clis() if c.cli_name in _recordable()]
