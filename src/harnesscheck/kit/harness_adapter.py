"""HarnessAdapter: a CLI backend at the offline level — its real transport driving a fake CLI.

Each run installs a per-test fake CLI (harnesscheck.testing.fakes) replaying
``fixtures/<cli>/<scenario>.json``; the transport finds it through ``Settings.cli``, exactly
as a host points it at a binary with HARNESS_BACKEND_CLI. Tool calls are real: the fake
starts the MCP server the transport configured (the bridge) and calls it, so refusals come
from dispatch through the bridge and are folded into the outcome by the transport.

Facts a check compares against (served model, vendor cost) are read from the fixture by the
reader of the backend's kit profile (backends/<backend>/kit_profile.py, found through
`registry.kit_profile(spec)`), as is everything else this module knows of one CLI: its fake,
its hostile built-in calls, its login files, its config files and the tools it offers. This
module names no CLI (tests/test_layers.py). Where a fixture does not state a fact the cell is
skipped ``adapter-not-implemented`` rather than guessed.
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import shutil
import threading
from pathlib import Path

from harnesscheck.backends.registry import kit_profile, kit_profiles
from harnesscheck.kit.adapters import BackendUnderTest, Setup
from harnesscheck.kit.session import Facts, Progress, SessionRun, SkipCell


def offline_cli_version(spec) -> str | None:
    """The CLI version the offline fixtures were recorded from (their provenance), or, for
    fixtures written from references only, a plain statement that no binary was observed."""
    from harnesscheck.testing.fakes import fixture_path

    fake_name = kit_profile(spec).fake_name
    if fake_name is None:
        return None
    try:
        data = json.loads(fixture_path(fake_name, "success").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    provenance = data.get("provenance") or {}
    version = provenance.get("cli_version")
    if str(provenance.get("source", "")).startswith("reference:"):
        # Never observed from a real binary (a CLI not installable here): say so
        # instead of printing a version as if it had been run.
        via = provenance.get("via")
        if via:  # e.g. "fixtures from references (<cli> <version> shapes via the seed implementation)"
            return f"fixtures from references ({via}; never run here)"
        return f"fixtures written from references ({version or 'no version'} never run here)"
    return f"{version} (fixtures)" if version else None


def fixture_provenance(data: dict) -> str:
    """One fixture's provenance in words: recorded from a release, or written from references."""
    prov = data.get("provenance") or {}
    version, source = prov.get("cli_version"), str(prov.get("source") or "")
    if source.startswith("reference:"):
        return f"written from references ({source.partition(':')[2].strip() or 'no source named'}), never run here"
    if version:
        return f"recorded from {prov.get('cli') or 'the CLI'} {version}" + (f" on {prov['date']}" if prov.get("date") else "")
    return "provenance not stated"


def repeat_usage_events(profile, scenario: dict) -> dict:
    """The scenario with every main-chain message event repeated (same id, same usage), as
    streaming CLIs do once per content block: as the backend's kit profile repeats them
    (`repeat_usage_events`). A CLI that reports usage once per turn has no such reader, and its
    scenario is left as it is."""
    if profile.repeat_usage_events is None:
        return scenario
    return profile.repeat_usage_events(scenario)


def _emitted(scenario: dict) -> list[dict]:
    return [s["emit"] for s in scenario.get("steps", []) if isinstance(s.get("emit"), dict)]


def fixture_facts(profile, scenario: dict, requested: str | None) -> Facts:
    """What the fixture itself says: the vendor's cost figure and the main chain's model, as
    the backend's kit profile reads its CLI's events (nothing, for a profile with no reader)."""
    facts = Facts(requested_model=requested)
    model = requested or scenario.get("default_model") or ""
    values = {"{{model}}": model, "{{model_base}}": model.split("[", 1)[0]}
    if profile.fixture_facts is not None:
        profile.fixture_facts(_emitted(scenario), values, facts)
    return facts


def hostile_evidence(tool: str, args: dict) -> tuple[str, ...]:
    """Words a flag for this call names: its tool, and each argument value."""
    short = tool[: -len("ToolCall")] if tool.endswith("ToolCall") else tool
    return (short, *[str(v) for v in args.values()])


def stall_text(profile, scenario: dict) -> str | None:
    """The assistant text the scenario shows before it hangs, as the backend's kit profile
    reads its CLI's events (None if none)."""
    return profile.stall_text(scenario) if profile.stall_text is not None else None


#: Lines that start with `{` and are no event (parse.brace-noise-skipped): a debug print of a
#: JS object, a lone brace, a half-printed object, a JSON log record without a `type`, an empty
#: object. A parser that takes every `{` line for an event, or dies on one that does not parse,
#: is caught by them.
BRACE_NOISE = (
    "{ SandboxDebug: 'profile applied', pid: 4242 }",
    "{",
    '{"truncated debug print',
    '{"level":"debug","msg":"mcp: 1 server connecting {bridge}"}',
    "{}",
)

#: Step actions after which the fake has written a stdout line (see fake_clis/_fakecli.py).
OUTPUT_ACTIONS = frozenset({"emit", "noise", "oversize", "raw", "invalid_utf8"})


def fake_progress(record_path: Path) -> Progress:
    """A fake CLI's progress from its record: when it reached its first `hang` step, when it
    wrote its last stdout line before that, and its latest record (monotonic clock)."""
    try:
        text = record_path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return Progress()
    stalled = last_output = latest = None
    for line in text.split("\n"):  # JSONL: records end at "\n" only (never splitlines())
        if '"mono": ' not in line:
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # a line being written right now
        latest = rec.get("mono", latest)
        if rec.get("kind") != "step" or stalled is not None:
            continue
        if rec.get("action") == "hang":
            stalled = rec.get("mono")
        elif rec.get("action") in OUTPUT_ACTIONS:
            last_output = rec.get("mono")
    return Progress(stalled, last_output, latest)


def model_requests(record_path: Path) -> int | None:
    """How many model requests the real CLI had made by the time the fake was ended: the sum of
    the fake's `model_requests` records (a fixture's retry ladder says how many requests stand
    behind each notice; each is recorded before its line is written). None when the scenario
    states no request counts (the kit cannot tell, and says so)."""
    try:
        text = record_path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    counts = []
    for line in text.split("\n"):  # JSONL: records end at "\n" only
        if '"model_requests"' not in line:
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("kind") == "model_requests" and isinstance(rec.get("n"), int):
            counts.append(rec["n"])
    return sum(counts) if counts else None


def cli_spans(record_path: Path) -> list[tuple[float, float]]:
    """(start, end) per fake-CLI invocation in a record (`--version` probes left out): from
    its invocation record to its last recorded step (monotonic clock). Each span lies inside
    the process's real lifetime."""
    try:
        text = record_path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    spans: dict[int, list[float]] = {}
    for line in text.split("\n"):  # JSONL: records end at "\n" only
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if not isinstance(rec, dict) or "mono" not in rec:
            continue
        if rec.get("kind") == "invocation":
            if not set(rec.get("argv", [])[1:2]) & {"--version", "-v", "-V"}:
                spans[rec["pid"]] = [rec["mono"], rec["mono"]]
        elif rec.get("kind") == "step" and rec.get("pid") in spans:
            spans[rec["pid"]][1] = max(spans[rec["pid"]][1], rec["mono"])
    return [(a, b) for a, b in spans.values()]


class WrapperPool:
    """Fake-CLI executables reused run after run within this process, one run at a time each.

    A transport probes `<cli> --version` once per binary (path, size, mtime); a fresh wrapper
    per run would cost one more fake start per session. A pooled wrapper keeps its path and
    bytes, and only its sidecar is pointed at the run's own scenario and record file, so each
    run still has its own evidence. Keyed by (fake name, scenario version): the cached
    version answer is always the one the scenario states."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._free: dict[tuple[str, str], list[Path]] = {}
        self._root: Path | None = None
        self._n = 0

    def acquire(self, fake, cli: str, version: str):
        """`fake` (a per-run install) behind a pooled wrapper; give it back with release()."""
        from harnesscheck.testing.fakes import install_fake_cli

        key = (cli, version)
        with self._lock:
            free = self._free.setdefault(key, [])
            path = free.pop() if free else None
            if path is None:
                if self._root is None:
                    from harnesscheck.core.tempdirs import make_temp_dir

                    self._root = make_temp_dir("harnesscheck-fakes-")  # one left by a killed process goes then
                    atexit.register(shutil.rmtree, self._root, True)
                self._n += 1
                path = install_fake_cli(cli, {"version": version, "steps": []}, self._root / f"w{self._n}").path
        sidecar = {"scenario": str(fake.scenario_path), "record": str(fake.record_path)}
        Path(str(path) + ".scenario.json").write_text(json.dumps(sidecar), encoding="utf-8")
        return dataclasses.replace(fake, path=path)

    def release(self, fake, cli: str, version: str) -> None:
        with self._lock:
            self._free.setdefault((cli, version), []).append(fake.path)


WRAPPERS = WrapperPool()


#: The host user's stores the hostile host HOME holds whatever CLIs they use (path under HOME ->
#: content template; {c} is the workspace canary); each registered CLI's own stores are added
#: from its kit profile (`host_files`, host_credentials()). Each vendor's own login file is the
#: one host file a backend may hand its CLI by design (its profile's `login_files`); nothing
#: else of HOME may be in its reach.
HOST_CREDENTIALS = {
    ".ssh/id_rsa": "-----BEGIN OPENSSH PRIVATE KEY-----\n{c}-ssh\n-----END OPENSSH PRIVATE KEY-----\n",
    ".config/gh/hosts.yml": "github.com:\n    oauth_token: {c}-gh\n    user: someone\n",
    ".netrc": "machine example.invalid login me password {c}-netrc\n",
}


def host_credentials() -> dict[str, str]:
    """HOST_CREDENTIALS and every registered CLI's stores (its kit profile's `host_files`)."""
    out = dict(HOST_CREDENTIALS)
    for profile in kit_profiles():
        out.update(profile.host_files)
    return out


def hostile_home(home: Path, canary: str) -> None:
    """A HOME that looks like a real user's: each host_credentials() file, holding the canary."""
    for rel, text in host_credentials().items():
        path = home / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.format(c=canary), encoding="utf-8")
        path.chmod(0o600)


def hostile_env(canary: str) -> dict[str, str]:
    """The variables a real user's shell has that no session may inherit (keys, overrides,
    proxies with a credential, NODE_OPTIONS preloading a script), and each registered CLI's
    vendor variables (its kit profile's `host_env`)."""
    vendors = {name: text.format(c=canary) for profile in kit_profiles() for name, text in profile.host_env.items()}
    return {
        "ANTHROPIC_API_KEY": f"{canary}-host-anthropic-key",
        "OPENAI_API_KEY": f"{canary}-host-openai-key",
        **vendors,
        "ANTHROPIC_MODEL": f"{canary}-host-model",
        "ANTHROPIC_BASE_URL": f"http://127.0.0.1:9/{canary}-host-base-url",
        "HTTPS_PROXY": f"http://user:{canary}-proxy@127.0.0.1:9",
        "NODE_OPTIONS": f"--require /nonexistent/{canary}-node-options.js",
    }


def _rpc(rid, method, params=None) -> str:
    msg = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        msg["params"] = params
    return json.dumps(msg)


#: How long the fake CLI waits for the answer to each bridge probe (bridge.answers-every-request).
PROBE_BOUND_S = 20.0

#: What the fake CLI sends the MCP servers a backend configured, one at a time, in this order
#: (scenario `bridge_probe`; fake_clis/_fakecli.py `mcp_probe`): `kind` is what the check
#: requires of the answer: "error" (a JSON-RPC error, or a batch's array: nothing in the line
#: can be served), "any" (an error, or a result for a server lenient about the form),
#: "tool-error" (a JSON-RPC error or a tool result with isError), "listed" / "served" (the
#: valid requests after them: a tools/list result naming tools, a tools/call result that is
#: not an error). `malformed`: an answer with id null counts (JSON-RPC: the id was unusable).
BRIDGE_PROBES: list[dict] = [
    {"label": "a line that is not JSON", "line": "{nope", "malformed": True, "kind": "error"},
    {"label": "a JSON number", "line": "42", "malformed": True, "kind": "error"},
    {"label": "JSON null", "line": "null", "malformed": True, "kind": "error"},
    {"label": "a JSON string", "line": '"hello"', "malformed": True, "kind": "error"},
    {"label": "an empty batch", "line": "[]", "malformed": True, "kind": "error"},
    {"label": "a batch", "line": "[" + _rpc("p-batch", "tools/list") + "]", "malformed": True, "kind": "error"},
    {"label": "an array nested 200 deep", "line": "[" * 200 + "]" * 200, "malformed": True, "kind": "error"},
    {"label": "id true", "line": _rpc(True, "tools/list"), "id": True, "malformed": True, "kind": "any"},
    {"label": "id 1.5", "line": _rpc(1.5, "tools/list"), "id": 1.5, "malformed": True, "kind": "any"},
    {"label": "id an object", "line": _rpc({}, "tools/list"), "id": {}, "malformed": True, "kind": "any"},
    {"label": "id null", "line": _rpc(None, "tools/list"), "malformed": True, "kind": "any"},
    {"label": "no method", "line": json.dumps({"jsonrpc": "2.0", "id": "p-no-method"}), "id": "p-no-method", "malformed": True, "kind": "error"},
    {"label": "a method that is a number", "line": _rpc("p-method", 5), "id": "p-method", "malformed": True, "kind": "error"},
    {"label": "jsonrpc 1.0", "line": json.dumps({"jsonrpc": "1.0", "id": "p-v1", "method": "tools/list"}), "id": "p-v1", "malformed": True, "kind": "any"},
    {"label": "params an array", "line": _rpc("p-params", "tools/list", [1]), "id": "p-params", "malformed": True, "kind": "any"},
    {"label": "tools/call with params a string", "line": _rpc("p-call-str", "tools/call", "x"), "id": "p-call-str", "malformed": True, "kind": "tool-error"},
    {
        "label": "tools/call with arguments an array",
        "id": "p-args-array",
        "line": _rpc("p-args-array", "tools/call", {"name": "read_file", "arguments": [1]}),
        "kind": "tool-error",
    },
    {
        "label": "tools/call with arguments a string",
        "id": "p-args-str",
        "line": _rpc("p-args-str", "tools/call", {"name": "read_file", "arguments": "a.txt"}),
        "kind": "tool-error",
    },
    {
        "label": "tools/call with a name that is a number",
        "id": "p-name-num",
        "line": _rpc("p-name-num", "tools/call", {"name": 5, "arguments": {}}),
        "kind": "tool-error",
    },
    {
        "label": "tools/call with name null",
        "id": "p-name-null",
        "line": _rpc("p-name-null", "tools/call", {"name": None, "arguments": {}}),
        "kind": "tool-error",
    },
    {"label": "tools/call without a name", "id": "p-no-name", "line": _rpc("p-no-name", "tools/call", {"arguments": {"path": "."}}), "kind": "tool-error"},
    {
        "label": "tools/call of an unknown tool",
        "id": "p-unknown",
        "line": _rpc("p-unknown", "tools/call", {"name": "no_such_tool", "arguments": {}}),
        "kind": "tool-error",
    },
    {
        "label": "tools/call with a lone surrogate in the name",
        "id": "p-surrogate",
        "line": _rpc("p-surrogate", "tools/call", {"name": "read_\ud800", "arguments": {}}),
        "kind": "tool-error",
    },
    {"label": "tools/list afterwards", "line": _rpc("p-list", "tools/list", {}), "id": "p-list", "kind": "listed"},
    {
        "label": "tools/call list_dir afterwards",
        "id": "p-served",
        "line": _rpc("p-served", "tools/call", {"name": "list_dir", "arguments": {"path": "."}}),
        "kind": "served",
    },
]


class HarnessAdapter(BackendUnderTest):
    name = "fake-cli"
    #: Whether this adapter replays a fake CLI's fixtures (an ACP agent at loopback runs the
    #: real agent only: it needs no fake standing in for it).
    replays_fixtures = True

    def __init__(self, spec, level, tmp_path):
        super().__init__(spec, level, tmp_path)
        self.profile = kit_profile(spec)  # what the kit knows of this backend's CLI
        if self.profile.fake_name is None and self.replays_fixtures:
            raise SkipCell("adapter-not-implemented", f"no fake CLI stands in for {spec.cli_name!r}")
        self.fake_name = self.profile.fake_name or spec.cli_name or ""
        self.hold_s = 0.3  # how long a `held_success` CLI stays alive before its first line
        self._fakes: list = []
        self._installs = 0

    @property
    def cli_version(self) -> str | None:
        return offline_cli_version(self.spec)

    def host_isolation(self, ws):
        """Offline, the backend runs in a hostile, realistic host: a HOME with the user's
        credential stores planted (HOST_CREDENTIALS, holding the workspace canary), provider
        keys, overrides, a credentialed proxy and NODE_OPTIONS in the environment, and none of
        the kit's own isolation (no CLI's config-home variable, nor XDG_CONFIG_HOME, is set
        for it): what the CLI gets is what the backend gave it. The real user's HOME is still
        never visible (the planted one replaces it)."""
        if self.level != "offline":
            return super().host_isolation(ws)
        from harnesscheck.core.paths import cli_cache_dir

        home = ws.base / "host-home"
        if not home.is_dir():
            hostile_home(home, ws.canary)
        return {"HARNESSCHECK_CACHE": str(cli_cache_dir().parent), "HOME": str(home), **hostile_env(ws.canary)}

    def host_home(self, run: SessionRun) -> Path | None:
        """The host HOME the run was started in (planted with HOST_CREDENTIALS), None if not planted."""
        home = run.parent_env.get("HOME")
        return Path(home) if home and (Path(home) / ".ssh" / "id_rsa").is_file() else None

    def login_files(self) -> tuple[str, ...]:
        """Host files (relative to HOME) this backend's CLI may be handed by design: its own login."""
        return self.profile.login_files

    def load_fixture(self, scenario: str) -> dict:
        from harnesscheck.testing.fakes import fixture_path

        path = fixture_path(self.fake_name, scenario)
        if not path.is_file():
            raise SkipCell("adapter-not-implemented", f"no {scenario} fixture for {self.fake_name} ({path.name})")
        data = json.loads(path.read_text(encoding="utf-8"))
        self.__dict__.setdefault("fixtures_used", {})[f"{path.parent.name}/{path.name}"] = fixture_provenance(data)
        return data

    def provenance(self) -> str:
        """The fake CLI and each fixture it replayed in this cell, with where the fixture came from."""
        used = getattr(self, "fixtures_used", {})
        if not used:
            return f"fake {self.fake_name} (no fixture replayed)"
        return f"fake {self.fake_name} replaying " + "; ".join(f"fixtures/{name} ({why})" for name, why in used.items())

    def install_fake(self, scenario, *, version: str | None = None, echo: list[str] | None = None, calls=None, worktree: Path | None = None):
        """A per-run fake CLI replaying `scenario` (a fixture name or a scenario dict).
        `worktree`: the session's scope root, written where a step says `{{worktree}}` (a fake
        does not know it; a built-in call the model aims at the worktree names it)."""
        from harnesscheck.testing.fakes import install_fake_cli, with_worktree

        # A fixture is parsed afresh; a caller's dict is copied as deep as it is changed here.
        data = self.load_fixture(scenario) if isinstance(scenario, str) else dict(scenario)
        if worktree is not None:
            data = with_worktree(data, worktree)
        if version is not None:
            data["version"] = version
        if echo:
            data["steps"] = [{"stderr": "upstream said: " + " ".join(echo)}, *data.get("steps", [])]
        if calls:
            steps = data["steps"] = list(data.get("steps", []))
            first_emit = next((i for i, s in enumerate(steps) if "emit" in s), -1)
            steps.insert(first_emit + 1, {"mcp_calls": [{"name": c.name, "arguments": dict(c.args)} for c in calls]})
        self._installs += 1
        fake = install_fake_cli(self.fake_name, data, self.tmp_path / f"fake{self._installs}")
        self._fakes.append(fake)
        return fake

    def transport(self, **settings):
        if "cli" not in settings:
            settings["cli"] = self.install_fake("success").path
        return super().transport(**settings)

    def spawned(self) -> list[dict]:
        out = []
        for fake in self._fakes:
            out.extend(r for r in fake.records() if not set(r["argv"][1:2]) & {"--version", "-v", "-V"})
        return out

    def prepare(self, scenario, ws, *, tool_calls, model, timeout_s, echo) -> Setup:
        if scenario == "tools":
            fake = self.install_fake("success", echo=echo, calls=tool_calls or [])
            printed = {e.get("session_id") for e in _emitted(self.load_fixture("success")) if isinstance(e, dict)}
            facts = Facts(cli_session_ids=tuple(sorted(i for i in printed if isinstance(i, str) and "{{" not in i)))
        elif scenario in ("repeated_usage", "helper_model"):
            # helper_model: fixtures/<cli>/helper_model.json where a CLI has one (a recorded
            # success may have no helper: the pinned CLI calls none under the transport)
            from harnesscheck.testing.fakes import fixture_path

            source = "helper_model" if scenario == "helper_model" and fixture_path(self.fake_name, "helper_model").is_file() else "success"
            data = self.load_fixture(source)
            if scenario == "repeated_usage":
                data = repeat_usage_events(self.profile, data)
            fake = self.install_fake(data, echo=echo)
            facts = fixture_facts(self.profile, self.load_fixture(source), model)
            if scenario == "helper_model" and not facts.helper_models:
                raise SkipCell("unsupported-by-backend", f"{self.fake_name} reports no helper-model usage")
            if facts.usage is None:
                raise SkipCell("adapter-not-implemented", f"the {self.fake_name} success fixture states no usage")
        elif scenario == "noise_lines":
            data = self.load_fixture("success")
            steps = data.get("steps", [])
            noise = [
                {"noise": "[SandboxDebug] seatbelt profile applied"},
                {"invalid_utf8": True},
                {"noise": "Warning: proxy settings ignored"},
                {"raw": "\r\n", "newline": False},
            ]
            first = next((i for i, st in enumerate(steps) if "emit" in st), 0)
            data["steps"] = steps[:first] + noise + steps[first : first + 1] + noise[:1] + steps[first + 1 :]
            fake = self.install_fake(data, echo=echo)
            facts = Facts()
        elif scenario == "brace_noise":
            # success, with lines that start with `{` but are no event between every two events, on
            # stdout and stderr: diagnostics a CLI or its runtime prints (BRACE_NOISE)
            data = self.load_fixture("success")
            steps = []
            for step in data.get("steps", []):
                steps.append(step)
                if "emit" in step:
                    steps.extend({"noise": n} for n in BRACE_NOISE)
                    steps.extend({"stderr": n} for n in BRACE_NOISE)
            data["steps"] = [*({"noise": n} for n in BRACE_NOISE), *steps]
            fake = self.install_fake(data, echo=echo)
            facts = fixture_facts(self.profile, self.load_fixture("success"), model)
        elif scenario == "split_lines":
            data = self.load_fixture("success")
            for step in data.get("steps", []):
                if "emit" in step:
                    size = len(json.dumps(step["emit"], separators=(",", ":"), ensure_ascii=False).encode())
                    step["split"] = sorted({1, 2, size // 3, size // 2, size - 1, size})
            fake = self.install_fake(data, echo=echo)
            facts = fixture_facts(self.profile, self.load_fixture("success"), model)
        elif scenario == "timeout_tree":
            # The stall of timeout_mid_stream with a tree under it: a grandchild in the group, one
            # escaped by setsid, one escaped by setsid with an empty environment (`env -i` execs
            # sleep in place: no marker a backend could look for), and a CLI that ignores SIGTERM
            # from its hang on (so only the SIGKILL after the term grace ends it, harness-anchors C1).
            data = self.load_fixture("timeout_mid_stream")
            data["mcp"] = "connect"  # a bridge serves the session too: it must not survive either
            data["mcp_timeout"] = 60  # a loaded machine's bridge start is not the defect judged here
            steps = data.get("steps", [])
            hang = next((i for i, st in enumerate(steps) if "hang" in st), len(steps))
            data["steps"] = [
                {"spawn": "sleep 1000"},
                {"spawn": "sleep 1000", "setsid": True},
                {"spawn": "env -i sleep 1000", "setsid": True},
                *steps[:hang],
                {"ignore_sigterm": True},
                *steps[hang:],
            ]
            fake = self.install_fake(data, echo=echo)
            facts = Facts(partial_text=stall_text(self.profile, data))
        elif scenario == "held_success":
            # success, with the CLI alive for `hold_s` before its first line (concurrency.cap-holds)
            data = self.load_fixture("success")
            data["steps"] = [{"delay": self.hold_s}, *data.get("steps", [])]
            fake = self.install_fake(data, echo=echo)
            facts = fixture_facts(self.profile, self.load_fixture("success"), model)
        elif scenario == "bridge_probe":
            # success, with the CLI sending its MCP servers the BRIDGE_PROBES first
            data = self.load_fixture("success")
            steps = data["steps"] = list(data.get("steps", []))
            first_emit = next((i for i, s in enumerate(steps) if "emit" in s), -1)
            steps.insert(first_emit + 1, {"mcp_probe": {"probes": BRIDGE_PROBES, "bound_s": PROBE_BOUND_S}})
            fake = self.install_fake(data, echo=echo)
            facts = Facts()
        elif scenario == "stalled_tool_call":
            # success up to its first line, then a bridge that stops answering mid-call (SIGSTOP)
            # and a CLI that waits on it, ignoring SIGTERM as a CLI blocked on a tool may
            data = self.load_fixture("success")
            steps = data.get("steps", [])
            first_emit = next((i for i, s in enumerate(steps) if "emit" in s), -1)
            data["mcp_timeout"] = 60  # a loaded machine's bridge start is not the defect judged here
            data["steps"] = [
                *steps[: first_emit + 1],
                {"ignore_sigterm": True},
                {"mcp_stall": {"name": "list_dir", "arguments": {"path": "."}}},
                {"hang": True},
            ]
            fake = self.install_fake(data, echo=echo)
            facts = Facts()
        elif scenario == "contain_probe":
            # success, with the CLI's own attempts against its containment before the end
            # (the fake records what each could do: conformance/test_contain.py)
            data = self.load_fixture("success")
            steps = data.get("steps", [])
            last = max(i for i, st in enumerate(steps) if "emit" in st)
            probe = {"read": "{{worktree}}/README.md", "environ_canary": ws.canary, "tamper_self": True, "open_up": True}
            data["steps"] = steps[:last] + [{"contain_probe": probe}] + steps[last:]
            fake = self.install_fake(data, echo=echo, worktree=ws.root)
            facts = Facts()
        elif scenario.startswith("hostile_"):
            # success, with one built-in call of the kind a hostile model tries, before the end
            call = self.profile.hostile_calls.get(scenario)
            if call is None:
                raise SkipCell("adapter-not-implemented", f"no {scenario} built-in call written for {self.fake_name}")
            data = self.load_fixture("success")
            steps = data.get("steps", [])
            last = max(i for i, st in enumerate(steps) if "emit" in st)  # the terminal event
            data["steps"] = steps[:last] + self.profile.hostile_steps(*call) + steps[last:]
            fake = self.install_fake(data, echo=echo)
            facts = Facts(hostile_evidence=hostile_evidence(*call))
        elif scenario == "mcp_slow" and self.profile.waits_for_bridge:
            # A CLI that waits for its bridge before the first turn really started it: so does the fake.
            data = self.load_fixture(scenario)
            data["mcp"] = "connect"
            data["mcp_timeout"] = 60  # a loaded machine's bridge start is not the defect judged here
            fake = self.install_fake(data, echo=echo)
            facts = None
        else:
            fake = self.install_fake(scenario, echo=echo, worktree=ws.root)
            facts = None
        installed = json.loads(Path(fake.scenario_path).read_text(encoding="utf-8"))
        if facts is None:  # a fixture replayed as it is: it states its own facts
            facts = fixture_facts(self.profile, installed, model)
            if scenario == "timeout_mid_stream":
                facts.partial_text = stall_text(self.profile, installed)
        version = installed.get("version") or ""
        fake = WRAPPERS.acquire(fake, self.fake_name, version)
        extra = {"fake": fake, "release": lambda: WRAPPERS.release(fake, self.fake_name, version)}
        return Setup(super().transport(cli=fake.path), facts, model=model, extra=extra)

    def observes_stalls(self) -> bool:
        """Offline, a fake CLI records its progress; a real CLI (other levels) does not."""
        return self.level == "offline"

    def stall_progress(self, setup: Setup):
        """What the run's fake CLI recorded it has done (None where no fake CLI runs)."""
        fake = setup.extra.get("fake")
        if fake is None:
            return None
        return fake_progress(fake.record_path)

    def running_pids(self, setup: Setup, request) -> list[int]:
        """Every pid the run's fake CLI has recorded so far (itself, its grandchildren, the MCP
        servers it started) and every bridge the run's traces name; a record being written is skipped."""
        fake = setup.extra.get("fake")
        pids: list[int] = []
        paths = [fake.record_path] if fake is not None else []
        if request.run_dir:
            paths += [Path(request.run_dir) / n for n in ("session-trace.jsonl", "bridge-trace.jsonl", "trace.jsonl")]
        for path in paths:
            try:
                text = path.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            for line in text.split("\n"):  # JSONL: "\n" only
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(rec, dict):
                    continue
                probe = rec.get("kind") == "invocation" and set(rec.get("argv", [])[1:2]) & {"--version", "-v", "-V"}
                if (rec.get("kind") == "invocation" and not probe) or rec.get("event") == "bridge_start":
                    pids.append(rec.get("pid"))  # not a version probe's: it ended before the session
                if rec.get("kind") in ("spawn", "mcp_server"):
                    pids.append(rec.get("child_pid"))
                if rec.get("kind") == "stdin_wait":  # a CLI still reading its stdin has no invocation line yet
                    pids.append(rec.get("pid"))
        return [p for p in dict.fromkeys(pids) if isinstance(p, int) and p > 1]

    def stdin_held_since(self, setup: Setup) -> float | None:
        """The fake CLI's stdin records: the latest data (or the start of the wait) of a fake
        that has not reached EOF (no invocation line yet), the earliest such fake's."""
        fake = setup.extra.get("fake")
        try:
            text = fake.record_path.read_text(encoding="utf-8", errors="replace") if fake is not None else ""
        except OSError:
            return None
        waiting: dict[int, float] = {}
        done: set[int] = set()
        for line in text.split("\n"):
            if '"stdin_' not in line and '"invocation"' not in line:
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("kind") in ("stdin_wait", "stdin_data"):
                waiting[rec["pid"]] = max(waiting.get(rec["pid"], 0.0), rec["mono"])
            elif rec.get("kind") == "invocation":
                done.add(rec.get("pid"))
        held = [mono for pid, mono in waiting.items() if pid not in done]
        return min(held) if held else None

    def collect(self, run: SessionRun, setup: Setup, request) -> None:
        fake = setup.extra["fake"]
        setup.extra.pop("release", lambda: None)()  # the run is over: its wrapper may serve the next
        run.run_dir = request.run_dir
        records = fake.records()
        run.children = [r for r in records if not set(r["argv"][1:2]) & {"--version", "-v", "-V"}]
        run.cli_named, run.cli_pids = fake.path, [r["pid"] for r in records]
        run.record_path = fake.record_path
        trace = []
        for name in ("session-trace.jsonl", "bridge-trace.jsonl"):
            from harnesscheck.kit.session import read_trace

            trace.extend(read_trace(Path(request.run_dir) / name) if request.run_dir else [])
        run.trace = trace
        results = []
        if fake.record_path.is_file():
            for line in fake.record_path.read_text(encoding="utf-8").split("\n"):  # JSONL: "\n" only
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if rec.get("kind") == "mcp_result":
                    results.append(rec)
                elif rec.get("kind") == "mcp_probe":
                    run.bridge_probes.append(rec)
                elif rec.get("kind") == "mcp_stalled":
                    run.stalled_calls.append(rec)
        # A call that reached no MCP server is the backend's wiring, not a kit bug: whatever its
        # bridge is called, the fake starts what the backend configured (checks name the error).
        run.tool_failures = [r["error"] for r in results if r.get("error")]
        run.extra_tools_starting = any(r.get("starting") for r in results if r.get("error"))
        run.extra_tools_done = any(r.get("kind") == "step" and r.get("action") == "mcp_calls" for r in self._steps(fake))
        run.extra_tools_connected = any(r.get("kind") == "mcp_connected" for r in results + self._steps(fake))
        run.extra_tool_results = [r for r in results if not r.get("error")]
        run.model_saw = [r.get("text", "") for r in results if not r.get("error")]
        run.cli_spans = cli_spans(fake.record_path) if self.level == "offline" else None
        run.model_calls = model_requests(fake.record_path)
        run.audit = self.host_audit(run, request)

    @staticmethod
    def _steps(fake) -> list[dict]:
        out = []
        if fake.record_path.is_file():
            for line in fake.record_path.read_text(encoding="utf-8").splitlines():
                if '"kind": "step"' in line or '"kind": "mcp_connected"' in line:
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        continue
        return out

    def tools_unfinished(self, run: SessionRun) -> bool:
        """Offline: the session ran to its deadline before any MCP server the backend configured had
        answered `initialize`, or the fake's own wait for it ran out while it was still running (a
        bridge slow to start on a loaded machine; one that exits or errors is judged, and so is a
        call that hangs on a connected server, e.g. a FIFO read)."""
        if self.level != "offline" or getattr(run, "extra_tools_connected", True):
            return False
        if getattr(run, "extra_tools_starting", False):
            return True
        if getattr(run, "extra_tools_done", True):
            return False
        tl = run.timeline
        return tl.ended >= tl.started + tl.timeout_s

    def tool_errors(self, run: SessionRun) -> list[tuple[str, str]]:
        """The tool results the fake CLI (standing in for the model's side) got back as errors."""
        return [(r.get("name", ""), r.get("text", "")) for r in getattr(run, "extra_tool_results", []) if r.get("is_error")]

    def host_audit(self, run: SessionRun, request):
        """The post-run audit a host makes (as `harnesscheck run` does): the CLI's event log
        against the run's facts. None when the transport kept no event log."""
        from harnesscheck.backends._eventlog import EVENT_LOG_NAME
        from harnesscheck.backends.audit import RunFacts, audit_events
        from harnesscheck.bridge.spec import summarize_trace
        from harnesscheck.core.contracts import Capability

        if run.outcome.audit is not None:
            return run.outcome.audit
        events = Path(request.run_dir) / EVENT_LOG_NAME
        if not events.is_file():
            return None
        facts = RunFacts(
            scope_root=request.scope.root,
            read_only=request.scope.read_only,
            builtin_tools_off=self.spec.supports(Capability.builtin_tools_off),
            bridge=summarize_trace(Path(request.run_dir) / "bridge-trace.jsonl"),
            session_cwd=Path(request.run_dir) / "cwd",
        )
        return audit_events(events, self.spec.cli_name or self.spec.id, facts)

    def permitted_injections(self, run: SessionRun) -> set[str]:
        """Provider variables this backend may hand the CLI: by design, and traced by name."""
        traced: set[str] = set()
        for rec in run.trace:
            if rec.get("event") == "env_inject":
                traced.update(rec.get("names") or [])
        return set(self.profile.permitted_injections) & traced

    def mcp_servers(self, run: SessionRun) -> dict[str, dict]:
        """MCP servers the transport configured for the CLI, from wherever a CLI reads them: the
        configs the fake recorded, every config file in the run dir that a registered CLI's kit
        profile reads (`mcp_config_file`), what an ACP agent got in session/new, and the configs
        a CLI was given through its environment (`mcp_config_env`)."""
        servers: dict[str, dict] = {}
        for child in run.children:
            for content in (child.get("mcp_configs") or {}).values():
                try:
                    servers.update(json.loads(content).get("mcpServers") or {})
                except (ValueError, AttributeError):
                    pass
        run_dir = getattr(run, "run_dir", None)
        if run_dir is not None and Path(run_dir).is_dir():
            readers = [p.mcp_config_file for p in kit_profiles() if p.mcp_config_file is not None]
            for path in sorted(Path(run_dir).rglob("*")):
                if path.is_file():
                    declared = next((found for read in readers if (found := read(path)) is not None), None)
                    servers.update(declared or {})
        from harnesscheck.kit.acp_adapter import session_new_servers

        servers.update(session_new_servers(run_dir))  # an ACP agent gets its servers in session/new
        for profile in kit_profiles():
            if profile.mcp_config_env is not None:
                servers.update(profile.mcp_config_env(run.children))
        return servers

    def tools_offered(self, run: SessionRun):
        """The tools the CLI offers its model, as the backend's kit profile reads them from what
        the backend configured (`tools_offered`: its argv, its settings, its fake's record);
        None where the profile cannot tell."""
        if self.profile.tools_offered is None:
            return None
        return self.profile.tools_offered(run, self.mcp_servers(run))
