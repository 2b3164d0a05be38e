"""A session against the CLI's own floor and the official SDK, side by side in one run.

    .venv/bin/python bench/bench_vs_sdk.py [--rounds 5] [--backend claude-code --backend codex]
        [--claude PATH] [--codex PATH] [--tenth-rounds 3] [--no-install]

Against the scripted loopback server (harnesscheck.loopback, scenario `tool_calls`: one
read_file through the bridge, then the answer), per backend and per round, in random order:

- `floor`: the bare CLI turn plus a minimal MCP server: the argv, env, cwd and stdin one
  library session gave its CLI, replayed by hand with a fresh config home, the MCP config
  pointing at bench/_min_mcp.py (standard library only: the least bridge a CLI can start);
- `lib`: a fresh Python host's first `run_session` (library), timed in the host from before
  the transport is built (after the imports) to the outcome;
- `warm`: as `lib`, in a host that called `harnesscheck.warm_up()` at its start (after its
  imports, before the timer: the bridge forkserver's `import mcp` paid up front, as the
  official Python SDK's host pays it in its own import before `query()`);
- `cmd`: `harnesscheck run` as a process (the launcher and cli.py, with the provider
  resolved to the loopback transport), whole process;
- `sdk`: the official SDK's turn over the same binary and server: claude-agent-sdk's
  `query()` with its in-process MCP tool (bench/_sdk_claude.py), @openai/codex-sdk's
  `thread.run()` with the minimal MCP server (bench/_sdk_codex.mjs); in the host (after its
  imports) and as a whole process. Installed in the bench's own bench/.venv-sdk and
  bench/.node-sdk (created here unless --no-install), never a project dependency.

Then a library host's tenth sequential session against the floor (`--tenth-rounds`, each
beside two floor turns); one loopback cell of the kit, stamped stage by stage, beside a floor
turn (`--cell-rounds`: where a cell's time goes beyond the bare turn); and `harnesscheck
verify --level offline --level loopback` against its floor (fake-CLI runs x a bare
interpreter start, plus the loopback CLI runs the cells made x the floor turn, 2 at a time,
plus the waits the checks require). `--only sessions|cell|verify` runs a part. Medians over
rounds, the load average before and after: this is a shared 2-core VM, only ratios of
interleaved runs mean anything.

Targets (doc/performance.md): lib within 1.15x of the floor for claude-code, 1.3x for
codex; lib faster than the SDK in the host (ratio < 1.0); the tenth session within 1.1x of
the floor; verify within 1.5x of its floor. The CLI path is an argument (--claude, --codex):
a bumped pin is measured the same way.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SDK_VENV = HERE / ".venv-sdk"
SDK_NODE = HERE / ".node-sdk"
PROMPT = "Say hello."


def pinned_cli_path(backend: str) -> str:
    """The pinned release install-clis put in the cache (one prefix per release), or the
    reason it is missing: the bench measures what the matrix verifies."""
    from harnesscheck.loopback.clis import require_pinned_cli

    binary, why = require_pinned_cli(backend)
    return str(binary.path) if binary else f"(missing: {why})"


TARGETS = {"claude-code": 1.15, "codex": 1.3}
TENTH_TARGET = 1.1


# ---------------------------------------------------------------------------------------
# Workers (run in a fresh interpreter: `--worker lib|cmd`)


def _transport(backend: str, cli: str, base_url: str, settings=None):
    from harnesscheck.backends.loopback_endpoint import LoopbackEndpoint
    from harnesscheck.backends.registry import get_spec
    from harnesscheck.core.config import Settings

    spec = get_spec(backend)
    if backend == "claude-code":
        from harnesscheck.backends.claude_code import ClaudeCodeTransport as cls
    else:
        from harnesscheck.backends.codex import CodexTransport as cls
    return cls(spec, settings or Settings(backend=backend), cli_path=cli, loopback=LoopbackEndpoint(base_url))


def worker_lib(ns: argparse.Namespace) -> None:
    import harnesscheck.backends._harness  # noqa: F401 - what a host has imported before its first session
    from harnesscheck.core.contracts import AgentSessionRequest
    from harnesscheck.core.scope import ToolScope

    if ns.backend == "claude-code":
        import harnesscheck.backends.claude_code  # noqa: F401
    else:
        import harnesscheck.backends.codex  # noqa: F401
    times, ok = [], True
    if ns.worker == "warm":  # a host that calls warm_up() at its start, as the SDK imports mcp before its turn
        import harnesscheck

        ok = harnesscheck.warm_up()
    t0 = time.perf_counter()
    transport = _transport(ns.backend, ns.cli, ns.base_url)
    for i in range(ns.sessions):
        request = AgentSessionRequest(
            prompt=PROMPT, scope=ToolScope(name="bench", root=Path(ns.root), read_only=True), run_dir=Path(ns.out) / f"s{i}", timeout_s=300
        )
        outcome = transport.run_session(request)
        t1 = time.perf_counter()
        times.append(t1 - t0)
        t0 = t1
        ok = ok and outcome.ok and outcome.tool_calls == 1
    print(json.dumps({"sessions": times, "ok": ok}), flush=True)


def worker_cmd(ns: argparse.Namespace) -> None:
    """`harnesscheck run` exactly (launcher -> typer app -> runner.run_command), except that
    the registry resolves the backend to its loopback transport."""
    from harnesscheck.apps import launcher
    from harnesscheck.backends import registry

    registry.resolve_provider = lambda settings: _transport(ns.backend, ns.cli, ns.base_url, settings)
    sys.argv = ["harnesscheck", "run", "--backend", ns.backend, "--root", ns.root, "--prompt", PROMPT, "--cli", ns.cli, "--run-dir", ns.out]
    launcher.main()


# ---------------------------------------------------------------------------------------
# The parent


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def ensure_sdks(install: bool) -> dict[str, str | None]:
    """Why each SDK is not there (None: ready). Installs them into the bench's own dirs."""
    why: dict[str, str | None] = {"claude-code": None, "codex": None}
    py = SDK_VENV / "bin" / "python"
    if not py.exists() and install:
        subprocess.run([sys.executable, "-m", "venv", str(SDK_VENV)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "claude-agent-sdk"], check=False)
    if subprocess.run([str(py), "-c", "import claude_agent_sdk"], capture_output=True).returncode != 0 if py.exists() else True:
        why["claude-code"] = f"claude-agent-sdk not installed: {py} -m pip install claude-agent-sdk"
    index = SDK_NODE / "node_modules" / "@openai" / "codex-sdk" / "dist" / "index.js"
    if not index.exists() and install and shutil.which("npm"):
        SDK_NODE.mkdir(exist_ok=True)
        subprocess.run(["npm", "install", "--prefix", str(SDK_NODE), "--no-audit", "--no-fund", "@openai/codex-sdk"], check=False, capture_output=True)
    if not index.exists() or not shutil.which("node"):
        why["codex"] = f"@openai/codex-sdk not installed: npm install --prefix {SDK_NODE} @openai/codex-sdk"
    return why


class Bench:
    def __init__(self, backend: str, cli: str, base_url: str, base: Path):
        self.backend, self.cli, self.base_url, self.base = backend, cli, base_url, base
        base.mkdir(parents=True, exist_ok=True)
        self.root = base / "work"
        self.root.mkdir()
        (self.root / "hello.txt").write_text("hello from the bench\n")
        self.n = 0
        self._capture()

    def _dir(self, name: str) -> Path:
        self.n += 1
        path = self.base / f"{name}{self.n}"
        path.mkdir(mode=0o700)
        return path

    def _capture(self) -> None:
        """One library session in this process: its CLI invocation, replayed by `floor`."""
        from harnesscheck.choke.dispatch import tool_definitions
        from harnesscheck.contain import process
        from harnesscheck.core.contracts import AgentSessionRequest
        from harnesscheck.core.scope import ToolScope

        captured: dict = {}
        real = process.run_process

        def capture(argv, **kwargs):
            captured.update(argv=list(argv), env=dict(kwargs["env"]), stdin=kwargs.get("stdin_bytes") or b"")
            return real(argv, **kwargs)

        scope = ToolScope(name="bench", root=self.root, read_only=True)
        process.run_process = capture
        try:
            outcome = _transport(self.backend, self.cli, self.base_url).run_session(
                AgentSessionRequest(prompt=PROMPT, scope=scope, run_dir=self._dir("capture"), timeout_s=300)
            )
        finally:
            process.run_process = real
        if not outcome.ok or outcome.tool_calls != 1:
            raise SystemExit(f"{self.backend}: the warm-up session failed: {outcome.status} {outcome.message}")
        self.captured = captured
        self.tool_names = scope.tool_names()
        tools = [{"name": d.name, "description": d.description, "inputSchema": d.input_schema} for d in tool_definitions(scope)]
        self.tools_json = self.base / "tools.json"
        self.tools_json.write_text(json.dumps(tools))
        self.min_mcp = [sys.executable, "-I", "-S", str(HERE / "_min_mcp.py"), str(self.tools_json), str(self.root)]

    def _codex_home(self) -> Path:
        from harnesscheck.backends.codex import render_config
        from harnesscheck.backends.loopback_endpoint import LoopbackEndpoint, codex_provider_table, codex_provider_top

        home = self._dir("codex-home")
        ep = LoopbackEndpoint(self.base_url)
        (home / "config.toml").write_text(
            render_config(bridge=(self.min_mcp, {}), bridge_tools=self.tool_names, extra_toml=codex_provider_table(ep), top_toml=codex_provider_top(ep))
        )
        return home

    def floor(self) -> dict:
        argv, env = list(self.captured["argv"]), dict(self.captured["env"])
        home, cwd = self._dir("home"), self._dir("cwd")
        env["HOME"] = str(home)
        if self.backend == "claude-code":
            env["CLAUDE_CONFIG_DIR"] = str(home)
            config = home / "mcp.json"
            config.write_text(json.dumps({"mcpServers": {"bridge": {"type": "stdio", "command": self.min_mcp[0], "args": self.min_mcp[1:], "env": {}}}}))
            argv[argv.index("--mcp-config") + 1] = str(config)
            done = b'"type":"result"'
        else:
            env["CODEX_HOME"] = str(self._codex_home())
            done = b'"turn.completed"'
        t0 = time.perf_counter()
        proc = subprocess.run(argv, env=env, cwd=cwd, input=self.captured["stdin"], capture_output=True, timeout=300, start_new_session=True)
        wall = time.perf_counter() - t0
        ok = proc.returncode == 0 and done in proc.stdout and b"hello from the bench" in proc.stdout
        return {"wall": wall, "in_host": wall, "ok": ok}

    def _worker(self, kind: str, sessions: int = 1, python: str | None = None) -> dict:
        out = self._dir(kind)
        argv = [
            python or sys.executable,
            str(Path(__file__).resolve()),
            "--worker",
            kind,
            "--backend",
            self.backend,
            "--cli",
            self.cli,
            "--base-url",
            self.base_url,
            "--root",
            str(self.root),
            "--out",
            str(out),
            "--sessions",
            str(sessions),
        ]
        t0 = time.perf_counter()
        proc = subprocess.run(argv, capture_output=True, timeout=600, cwd=self.base)
        wall = time.perf_counter() - t0
        if kind == "cmd":
            report = out / "RUN_REPORT.json"
            ok = proc.returncode == 0 and report.exists() and '"tool_calls": 1' in report.read_text()
            return {"wall": wall, "in_host": wall, "ok": ok}
        lines = proc.stdout.decode(errors="replace").strip().splitlines()
        data = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {"sessions": [], "ok": False}
        if not data["ok"]:
            sys.stderr.write(proc.stderr.decode(errors="replace")[-2000:])
        return {"wall": wall, "in_host": data["sessions"][0] if data["sessions"] else float("nan"), "sessions": data["sessions"], "ok": data["ok"]}

    def lib(self) -> dict:
        return self._worker("lib")

    def warm(self) -> dict:
        return self._worker("warm")

    def cmd(self) -> dict:
        return self._worker("cmd")

    def before(self) -> dict:
        """`lib` on another tree's interpreter (--compare-python: e.g. the code before a change)."""
        return self._worker("lib", python=self.compare_python)

    def sdk(self) -> dict:
        home, cwd = self._dir("sdk-home"), self._dir("sdk-cwd")
        if self.backend == "claude-code":
            argv = [str(SDK_VENV / "bin" / "python"), str(HERE / "_sdk_claude.py"), self.cli, self.base_url, str(self.root), str(home)]
        else:
            argv = ["node", str(HERE / "_sdk_codex.mjs"), self.cli, str(self._codex_home()), str(home), str(cwd)]
        t0 = time.perf_counter()
        proc = subprocess.run(argv, capture_output=True, timeout=300, cwd=cwd)
        wall = time.perf_counter() - t0
        lines = proc.stdout.decode(errors="replace").strip().splitlines()
        try:
            data = json.loads(lines[-1])
        except (IndexError, ValueError):
            sys.stderr.write(proc.stderr.decode(errors="replace")[-2000:])
            return {"wall": wall, "in_host": float("nan"), "ok": False}
        return {"wall": wall, "in_host": data["in_host_s"], "ok": bool(data.get("ok"))}


def run_backend(backend: str, cli: str, base_url: str, rounds: int, tenth_rounds: int, sdk_why: str | None, compare_python: str | None = None) -> list[str]:
    base = Path(tempfile.mkdtemp(prefix=f"bench-vs-sdk-{backend}-"))
    misses: list[str] = []
    try:
        bench = Bench(backend, cli, base_url, base)
        bench.compare_python = compare_python
        kinds = ["floor", "lib", "warm", "cmd"] + ([] if sdk_why else ["sdk"]) + (["before"] if compare_python else [])
        got: dict[str, list[dict]] = {k: [] for k in kinds}
        bench.floor()  # warm-up: page cache, the CLI's first start
        for _ in range(rounds):
            order = kinds[:]
            random.shuffle(order)
            for kind in order:
                got[kind].append(getattr(bench, kind)())
        failed = {k: sum(not r["ok"] for r in v) for k, v in got.items() if any(not r["ok"] for r in v)}
        med = {k: (_median([r["in_host"] for r in v]), _median([r["wall"] for r in v])) for k, v in got.items()}
        floor = med["floor"][0]
        print(f"\n{backend} ({cli}), {rounds} rounds in random order, medians; load {_load()}")
        print(f"  {'':34} {'in the host':>12} {'process':>10} {'vs floor':>9}")
        label = {
            "floor": "bare CLI turn + minimal MCP server",
            "lib": "run_session, host's first",
            "warm": "host's first, after warm_up()",
            "cmd": "harnesscheck run (command)",
            "sdk": "official SDK, one turn",
            "before": "run_session, --compare-python",
        }
        for kind in kinds:
            host, wall = med[kind]
            print(f"  {label[kind]:34} {host * 1000:10.0f} ms {wall * 1000:7.0f} ms {host / floor:8.2f}x")
        if sdk_why:
            print(f"  official SDK: SKIP ({sdk_why})")
        if failed:
            print(f"  runs that did not end ok (kept in the medians): {failed}")
        target = TARGETS[backend]
        ratio = med["lib"][0] / floor
        verdict = "PASS" if ratio <= target else "MISS"
        misses += [] if verdict == "PASS" else [f"{backend} first session"]
        print(f"{backend} host's first session vs floor {ratio:.2f}x  target <= {target}x  {verdict}")
        print(f"{backend} harnesscheck run (process) vs floor {med['cmd'][1] / floor:.2f}x  (no target: a process start and imports more)")
        if not sdk_why:
            vs = med["lib"][0] / med["sdk"][0]
            verdict = "PASS" if vs < 1.0 else "MISS"
            misses += [] if verdict == "PASS" else [f"{backend} vs SDK"]
            print(f"{backend} host's first session vs official SDK (in the host) {vs:.2f}x  target < 1.0  {verdict}")
            print(f"{backend} harnesscheck run vs official SDK (whole processes) {med['cmd'][1] / med['sdk'][1]:.2f}x")
            print(
                f"{backend} host's first session after warm_up() vs official SDK (in the host) "
                f"{med['warm'][0] / med['sdk'][0]:.2f}x  (the bridge's imports paid before the timer"
                f"{', as claude-agent-sdk pays its own in its import' if backend == 'claude-code' else ''})"
            )
        print(
            f"{backend} host's first session after warm_up() vs floor {med['warm'][0] / floor:.2f}x  target <= {target}x  "
            f"{'PASS' if med['warm'][0] / floor <= target else 'MISS'}"
        )
        if tenth_rounds:
            tenth, floors = [], []
            for _ in range(tenth_rounds):
                floors.append(bench.floor()["wall"])
                res = bench._worker("lib", sessions=10)
                tenth.append(res["sessions"][-1] if len(res["sessions"]) == 10 else float("nan"))
                floors.append(bench.floor()["wall"])
            ratio = _median(tenth) / _median(floors)
            verdict = "PASS" if ratio <= TENTH_TARGET else "MISS"
            misses += [] if verdict == "PASS" else [f"{backend} tenth session"]
            print(
                f"{backend} host's tenth sequential session {_median(tenth) * 1000:.0f} ms vs floor "
                f"{_median(floors) * 1000:.0f} ms: {ratio:.2f}x  target <= {TENTH_TARGET}x  {verdict}  (load {_load()})"
            )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return misses


# ---------------------------------------------------------------------------------------
# One loopback cell, stamped (`--cell`), and verify against its floor (`--verify`)


def cell_account(bench: Bench, rounds: int) -> None:
    """Where a loopback cell's time goes beyond the bare turn: the kit's LoopbackAdapter runs
    the `tool_calls` cell as the suite does, each stage stamped, beside a floor turn per round."""
    from harnesscheck.backends import _harness, registry
    from harnesscheck.backends.registry import get_spec
    from harnesscheck.contain import process
    from harnesscheck.kit import loopback_adapter as la

    stamps: dict[str, float] = {}

    def stamped(owner, name: str) -> None:
        real = getattr(owner, name)

        def wrapper(*args, **kwargs):
            stamps.setdefault(">" + name, time.perf_counter())
            try:
                return real(*args, **kwargs)
            finally:
                stamps.setdefault("<" + name, time.perf_counter())

        setattr(owner, name, wrapper)

    for owner, name in (
        (registry, "probe_version"),
        (_harness, "start_bridge"),
        (process, "run_process"),
        (la.LoopbackAdapter, "prepare"),
        (la.LoopbackAdapter, "collect"),
    ):
        stamped(owner, name)
    spans: dict[str, list[float]] = {}
    floors: list[float] = []
    for i in range(rounds + 1):
        stamps.clear()
        but = la.LoopbackAdapter(get_spec(bench.backend), "loopback", bench._dir("cell"))
        t0 = time.perf_counter()
        run = but.run("tool_calls")
        end = time.perf_counter()
        if not run.outcome.ok:
            raise SystemExit(f"the loopback cell failed: {run.outcome.status} {run.outcome.message}")
        floor = bench.floor()["wall"]
        if i == 0:
            continue  # warm-up
        floors.append(floor)
        probe = stamps.get("<probe_version", stamps["<start_bridge"]) - stamps.get(">probe_version", stamps["<start_bridge"])
        row = {
            "cell total": end - t0,
            "  kit: server, exec wrapper, /proc watcher (prepare)": stamps["<prepare"] - stamps[">prepare"],
            "  host: version probe": probe,
            "  host: session set-up (run dir, spec, config, env)": stamps[">run_process"]
            - stamps[">prepare"]
            - (stamps["<prepare"] - stamps[">prepare"])
            - probe,
            "  the CLI's run (wrapper, CLI, relay, bridge child)": stamps["<run_process"] - stamps[">run_process"],
            "  host: release, trace fold, outcome": stamps[">collect"] - stamps["<run_process"],
            "  kit: evidence (watcher, server stop, records)": stamps["<collect"] - stamps[">collect"],
        }
        for key, value in row.items():
            spans.setdefault(key, []).append(value)
    floor = _median(floors)
    print(f"\n{bench.backend}: one loopback cell (tool_calls), {rounds} rounds beside a floor turn, medians; load {_load()}")
    print(f"  {'bare CLI turn + minimal MCP server (floor)':54} {floor * 1000:8.0f} ms")
    for key, values in spans.items():
        print(f"  {key:54} {_median(values) * 1000:8.0f} ms  {_median(values) / floor:5.2f}x of the floor")


def verify_vs_floor(benches: dict[str, Bench], jobs: str) -> list[str]:
    """`harnesscheck verify --level offline --level loopback` for these backends (its child
    pytest, as kit/verify.py starts it) against its floor: the offline floor (fake-CLI
    invocations x a bare interpreter start, bench_suite.py) plus, per backend, the loopback
    CLI runs the cells made (the exec wrappers' records) x that backend's bare turn + minimal
    MCP server, 2 at a time on the 2 cores, plus the waits the checks require."""
    sys.path.insert(0, str(HERE))
    import bench_suite

    from harnesscheck.kit.verify import bridge_template, child_env, pytest_args

    backends = list(benches)
    floors = {b: _median([bench.floor()["wall"] for _ in range(3)]) for b, bench in benches.items()}
    startup = bench_suite.python_startup_s()
    with tempfile.TemporaryDirectory() as work_dir:
        work = Path(work_dir)
        basetemp = work / "tmp"
        t0 = time.perf_counter()
        with bridge_template(backends) as template:
            cmd = pytest_args(backends, ["offline", "loopback"], work, None, jobs, template) + ["--basetemp", str(basetemp)]
            proc = subprocess.run(cmd, cwd=HERE.parent, env=child_env(), capture_output=True, stdin=subprocess.DEVNULL)
        wall = time.perf_counter() - t0
        if not (work / "conformance-report.json").exists():
            print(
                f"\nverify: SKIP (its pytest wrote no report, exit {proc.returncode}): "
                f"{proc.stdout.decode(errors='replace')[-1500:]}{proc.stderr.decode(errors='replace')[-1500:]}"
            )
            return ["verify"]
        report = json.loads((work / "conformance-report.json").read_text())
        offline_runs, loopback_runs = 0, {b: 0 for b in backends}
        for record in basetemp.rglob("*.record.jsonl"):
            runs = sum(1 for line in record.read_text(errors="replace").splitlines() if '"kind": "invocation"' in line and '"--version"' not in line)
            if record.parent.name.startswith("loopback-bin"):
                loopback_runs["claude-code" if record.name.startswith("claude") else "codex"] += runs
            else:
                offline_runs += runs
        waits = bench_suite.required_waits({"cells": [c for c in report["cells"] if c["level"] == "offline"]}, basetemp)
    ran = [c for c in report["cells"] if c["level"] == "loopback" and c["outcome"] in ("passed", "failed", "xfailed")]
    deadline = sum(c["check"] == "time.runaway-ends-by-wall-clock" for c in ran) * 2.0
    offline_floor = offline_runs * startup + sum(waits.values())
    loopback_floor = sum(loopback_runs[b] * floors[b] for b in backends) / 2 + deadline
    floor = offline_floor + loopback_floor
    print(f"\nverify --level offline --level loopback ({', '.join(backends)}, -n {jobs}): {wall:.1f} s; load {_load()}")
    print(f"  offline floor: {offline_runs} fake-CLI runs x {startup * 1000:.0f} ms + {sum(waits.values()):.1f} s required waits = {offline_floor:.1f} s")
    for b in backends:
        print(f"  loopback {b}: {loopback_runs[b]} CLI runs x {floors[b] * 1000:.0f} ms (floor turn)")
    print(f"  loopback floor: the runs 2 at a time + {deadline:.1f} s of runaway deadlines = {loopback_floor:.1f} s")
    ratio = wall / floor
    print(f"verify offline+loopback vs floor {ratio:.2f}x  target <= 1.5x  {'PASS' if ratio <= 1.5 else 'MISS'}")
    return [] if ratio <= 1.5 else ["verify"]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", choices=("lib", "warm", "cmd"))
    parser.add_argument("--backend", action="append")
    parser.add_argument("--cli")
    parser.add_argument("--base-url")
    parser.add_argument("--root")
    parser.add_argument("--out")
    parser.add_argument("--sessions", type=int, default=1)
    parser.add_argument("--claude")
    parser.add_argument("--codex")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tenth-rounds", type=int, default=3)
    parser.add_argument("--no-install", action="store_true")
    parser.add_argument("--cell-rounds", type=int, default=3, help="rounds of the loopback cell's account")
    parser.add_argument("--only", action="append", choices=("sessions", "cell", "verify"), help="run only these parts (default: all)")
    parser.add_argument("--jobs", default="2", help="verify's pytest-xdist workers")
    parser.add_argument("--compare-python", help="another tree's venv python: its run_session as a column too")
    ns = parser.parse_args(argv)
    if ns.worker:
        ns.backend = ns.backend[0]
        (worker_cmd if ns.worker == "cmd" else worker_lib)(ns)
        return 0
    from harnesscheck.loopback.scenario import named_scenario
    from harnesscheck.loopback.server import ScriptedModelServer

    backends = ns.backend or ["claude-code", "codex"]
    clis = {"claude-code": ns.claude or pinned_cli_path("claude-code"), "codex": ns.codex or pinned_cli_path("codex")}
    missing = [b for b in backends if not Path(clis[b]).exists()]
    for b in missing:
        print(f"{b}: SKIP (no CLI at {clis[b]}: --claude/--codex PATH names another)")
    parts = set(ns.only or ("sessions", "cell", "verify"))
    sdk_why = ensure_sdks(not ns.no_install) if "sessions" in parts else {}
    print(f"load average before: {_load()}")
    misses: list[str] = []
    with ScriptedModelServer(named_scenario("tool_calls")) as srv:
        present = [b for b in backends if b not in missing]
        if "sessions" in parts:
            for backend in present:
                misses += run_backend(backend, clis[backend], srv.base_url, ns.rounds, ns.tenth_rounds, sdk_why[backend], ns.compare_python)
        if parts & {"cell", "verify"} and present:
            base = Path(tempfile.mkdtemp(prefix="bench-vs-sdk-"))
            try:
                benches = {b: Bench(b, clis[b], srv.base_url, base / b) for b in present}
                if "cell" in parts:
                    for bench in benches.values():
                        cell_account(bench, ns.cell_rounds)
                if "verify" in parts:
                    misses += verify_vs_floor(benches, ns.jobs)
            finally:
                shutil.rmtree(base, ignore_errors=True)
    print(f"\nload average after: {_load()}; targets missed: {misses or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
