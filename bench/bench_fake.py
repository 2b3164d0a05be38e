"""Start-up of the fake CLIs vs a bare interpreter (issue #6: the offline suite's floor is
fake-CLI spawns x `python -c pass`).

Commands measured side by side in alternating rounds, medians compared (this machine is
shared and noisy, so only the ratios mean something):

- `python -c pass` and `python -I -S -c pass`: the floors (the per-run wrappers run the
  engine with `-I -S`, so the second is what a fake cannot go below);
- `python -I -S -c "import json"`: what the engine cost before it stopped importing json;
- `<fake claude> --version`: what a transport's version probe costs;
- `<fake claude>` replaying the `success` fixture (stdin /dev/null, record written): one
  whole offline session's CLI;
- `<fake claude>` in a `tools` session, as the kit's `tools` scenario builds it (the success
  fixture with an `mcp_calls` step after its first line): the fake starts the MCP server of
  its `--mcp-config`, initializes it, calls one tool and closes it. The server is a trivial
  stdio responder written here (`python -I -S`, no imports, canned answers), not the real
  bridge (bench/bench_bridge.py measures that), so the row is the fake's own cost plus one
  bare interpreter: its floor is 2 x `python -I -S -c pass`.

Then, where a tools session's time goes inside the fake (extra runs with os.posix_spawn
wrapped to write the monotonic clock, read beside the fake's own progress records): from
its first stdout line to its spawn of the MCP server, the spawn itself, and from its last
record to its exit (reaped by the bench), beside a bare interpreter's write -> reaped.
(strace -f shows the same order of events but inflates every gap by following the child.)

The fakes are per-run wrappers from `harnesscheck.testing.fakes.install_fake_cli`, as the tests and
the kit use them.

    .venv/bin/python bench/bench_fake.py            # 31 rounds each
    .venv/bin/python bench/bench_fake.py --rounds 61
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: `--version` of a fake within this factor of `python -I -S -c pass` (medians). The engine
#: reads its sidecar and scenario (JSON) and answers; what it may add to the bare interpreter
#: is importing itself (its byte code and the _json C module: ~0.5 ms of ~8.5) and that
#: reading; 1.10x leaves room for this machine's noise. (`import os` alone costs ~1.2 ms.)
TARGET_VERSION_RATIO = 1.10

#: A stdio MCP server that costs one bare interpreter: canned answers, the request id cut
#: out of the line (the fake writes `"id": N, ` with json's default separators).
RESPONDER = r"""
import sys
INIT = b'{"protocolVersion": "2025-06-18", "capabilities": {"tools": {}}, "serverInfo": {"name": "r", "version": "0"}}'
LIST = b'{"tools": [{"name": "read_file", "inputSchema": {"type": "object"}}]}'
CALL = b'{"content": [{"type": "text", "text": "hello"}], "isError": false}'
out = sys.stdout.buffer
for line in sys.stdin.buffer:
    start = line.find(b'"id": ')
    if start < 0:
        continue
    rid = line[start + 6 : line.find(b",", start)]
    result = INIT if b'"initialize"' in line else LIST if b'"tools/list"' in line else CALL
    out.write(b'{"jsonrpc": "2.0", "id": ' + rid + b', "result": ' + result + b"}\n")
    out.flush()
"""


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def medians(commands: dict[str, list[str]], rounds: int) -> dict[str, float]:
    for argv in commands.values():  # warm the page cache
        timed(argv)
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(rounds):
        for name, argv in commands.items():
            times[name].append(timed(argv))
    return {name: statistics.median(t) for name, t in times.items()}


def tools_fake(tmp: Path, install_fake_cli, load_fixture):
    """The kit's `tools` session (harness_adapter.install_fake): success + one mcp_calls step."""
    responder = tmp / "responder.py"
    responder.write_text(RESPONDER, encoding="utf-8")
    config = tmp / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"bridge": {"command": sys.executable, "args": ["-I", "-S", str(responder)]}}}))
    scenario = load_fixture("claude", "success")
    steps = scenario["steps"]
    first_emit = next(i for i, step in enumerate(steps) if "emit" in step)
    steps.insert(first_emit + 1, {"mcp_calls": [{"name": "read_file", "arguments": {"path": "README.md"}}]})
    return install_fake_cli("claude", scenario, tmp / "tools"), ["--mcp-config", str(config)]


#: Runs a per-run wrapper as its shebang does (`python -I -S wrapper args...`), with
#: posix.posix_spawn (the engine's os.posix_spawn) wrapped to write the monotonic clock to
#: stderr just before and after it.
MARKING_LAUNCHER = """\
import posix, sys, time
sys.argv = sys.argv[1:]
_posix_spawn = posix.posix_spawn
def posix_spawn(*args, **kwargs):
    posix.write(2, b"spawn-called %r\\n" % time.monotonic())
    pid = _posix_spawn(*args, **kwargs)
    posix.write(2, b"spawn-returned %r\\n" % time.monotonic())
    return pid
posix.posix_spawn = posix_spawn
exec(compile(open(sys.argv[0]).read(), sys.argv[0], "exec"), {"__name__": "__main__", "__file__": sys.argv[0]})
"""


def tools_timeline(fake, args: list[str], runs: int) -> dict[str, float]:
    """Median ms inside the fake's tools session, on the system-wide monotonic clock: from its
    first stdout line (the progress record written right after it) to its posix_spawn call;
    the spawn itself (returns once the server has exec'd); and from its last progress record
    to the moment this process has reaped it. The exit's floor: the same for a bare
    `python -I -S` that writes the clock and exits."""
    steps: dict[str, list[float]] = {
        "first output -> spawn call": [],
        "spawn call -> server exec'd": [],
        "last record -> reaped": [],
        "floor: last write -> reaped": [],
    }
    for _ in range(runs):
        fake.record_path.unlink(missing_ok=True)
        proc = subprocess.run(
            [sys.executable, "-I", "-S", "-c", MARKING_LAUNCHER, str(fake.path), *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            check=True,
        )
        reaped = time.monotonic()
        marks = dict(line.split() for line in proc.stderr.decode().splitlines() if line.startswith("spawn-"))
        progress = [r for r in map(json.loads, fake.record_path.read_text().splitlines()) if r["kind"] == "step"]
        first_out = next(r["mono"] for r in progress if r["action"] == "emit")
        steps["first output -> spawn call"].append(float(marks["spawn-called"]) - first_out)
        steps["spawn call -> server exec'd"].append(float(marks["spawn-returned"]) - float(marks["spawn-called"]))
        steps["last record -> reaped"].append(reaped - progress[-1]["mono"])
        proc = subprocess.run(
            [sys.executable, "-I", "-S", "-c", "import os, time; os.write(1, b'%r' % time.monotonic())"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            check=True,
        )
        steps["floor: last write -> reaped"].append(time.monotonic() - float(proc.stdout))
    return {name: statistics.median(values) * 1000 for name, values in steps.items()}


def main(argv: list[str]) -> int:
    from harnesscheck.testing.fakes import install_fake_cli, load_fixture

    rounds = int(argv[argv.index("--rounds") + 1]) if "--rounds" in argv else 31
    with tempfile.TemporaryDirectory(prefix="bench-fake-") as tmp:
        fake = install_fake_cli("claude", "success", Path(tmp))
        tools, tools_args = tools_fake(Path(tmp), install_fake_cli, load_fixture)
        session = ["-p", "--output-format", "stream-json", "--verbose"]
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "python -I -S -c pass": [sys.executable, "-I", "-S", "-c", "pass"],
            "python -I -S import json": [sys.executable, "-I", "-S", "-c", "import json"],
            "fake claude --version": [str(fake.path), "--version"],
            "fake claude success": [str(fake.path), *session],
            "fake claude tools": [str(tools.path), *session, *tools_args],
        }
        result = medians(commands, rounds)
        replays = len(fake.records())
        calls = [r for r in map(json.loads, tools.record_path.read_text().splitlines()) if r["kind"] == "mcp_result"]
        if not calls or any(r.get("error") or r["is_error"] for r in calls):
            raise SystemExit(f"the tools session did not call its MCP server: {calls[:1]}")
        timeline = tools_timeline(tools, [*session, *tools_args], rounds)
    floor, floor_isolated = result["python -c pass"], result["python -I -S -c pass"]
    print(f"medians over {rounds} alternating rounds ({replays} success replays, {len(calls)} tool calls recorded):")
    for name, median in result.items():
        print(f"  {name:<24} {median * 1000:7.2f} ms   {median / floor:5.2f}x python -c pass   {median / floor_isolated:5.2f}x python -I -S -c pass")
    print(f"  fake claude tools = {result['fake claude tools'] / (2 * floor_isolated):.2f}x its floor (2 x python -I -S -c pass: the fake and its MCP server)")
    print(f"inside the fake's tools session (median of {rounds}, monotonic clock):")
    for name, ms in timeline.items():
        print(f"  {name:<30} {ms:6.2f} ms")
    ratio = result["fake claude --version"] / floor_isolated
    verdict = "PASS" if ratio <= TARGET_VERSION_RATIO else "MISS"
    print(
        f"fake --version / python -I -S -c pass = {ratio:.2f}x  target <= {TARGET_VERSION_RATIO}x  {verdict}"
        f"  ({result['fake claude --version'] / floor:.2f}x python -c pass)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
