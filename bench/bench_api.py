"""Per-turn overhead of the api provider's loop over the bare SDK calls (target < 10%).

Both sides hit the same respx-mocked endpoint, send the same request bodies and get the
same streamed replies, measured side by side in alternating paired rounds (AB BA AB ...):

- loop:  ApiTransport.run_session(...) through resolve_provider: a 5-turn session (four
         turns that each call list_dir, then a final answer): watchdog, tool definitions,
         stream accumulation, history, dispatch with its trace, outcome, cost;
- bare:  the vendor SDK's streaming create(...) with exactly the bodies the loop sent
         (captured once), events iterated, and the same four dispatch calls with a trace
         (the tool work and its evidence are the same on both sides; the loop's own work
         is what differs).

The figure is the median over pairs of loop/bare - 1 in CPU time of this process (all its
threads), which a loaded, shared 2-core machine does not distort; the wall-clock figure is
printed beside it. A one-turn session (plain answer, per-session costs not amortized) is
printed too, for information.

    .venv/bin/python bench/bench_api.py
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

import api_wire as W  # noqa: E402
import respx  # noqa: E402
import respx_httpx2  # noqa: E402,F401

from harnesscheck.backends.registry import resolve_provider  # noqa: E402
from harnesscheck.choke.dispatch import dispatch  # noqa: E402
from harnesscheck.choke.trace import Trace  # noqa: E402
from harnesscheck.core.config import Settings  # noqa: E402
from harnesscheck.core.contracts import AgentSessionRequest  # noqa: E402
from harnesscheck.core.scope import ToolScope  # noqa: E402

TARGET = 0.10
ROUNDS = 15
SESSIONS_PER_ROUND = 8
PROMPT = "What is in this repository?"
TOOL_TURNS = 4


def turns() -> list[W.Turn]:
    out = [W.Turn(text=f"Looking ({i}). ", tool_calls=[(f"call_{i}", "list_dir", {"path": "."})]) for i in range(TOOL_TURNS)]
    return out + [W.Turn(text="It holds src/ with a few small Python files. " * 4)]


def sdk_create(mode: str, client, body: dict):
    kwargs = {k: v for k, v in body.items() if k != "stream"}
    if mode == "anthropic_messages":
        return client.messages.create(stream=True, **kwargs)
    if mode == "chat_completions":
        return client.chat.completions.create(stream=True, **kwargs)
    return client.responses.create(stream=True, **kwargs)


def measure(mode: str, workdir: Path, n_turns: int) -> tuple[tuple[float, float, float], tuple[float, float, float]]:
    key_var, url_var = W.KEY_VARS[mode]
    os.environ[key_var], os.environ[url_var] = W.CANARY_KEY, W.base_url(mode)
    root = workdir / "repo"
    (root / "src").mkdir(parents=True, exist_ok=True)
    for i in range(5):
        (root / "src" / f"m{i}.py").write_text(f"x = {i}\n")
    scope = ToolScope(root=root)
    transport = resolve_provider(Settings(backend="api", api_mode=mode, model=W.MODELS[mode]))
    client = transport.llm.client()  # the same SDK client object on both sides
    script = turns()[-n_turns:]
    replies = [W.events(mode, t) for t in script]
    counter = {"n": 0}

    def side_effect(request):
        chunks = replies[counter["n"] % len(replies)]
        counter["n"] += 1
        return W.sse_response(list(chunks))

    def loop_session() -> None:
        out = transport.run_session(AgentSessionRequest(prompt=PROMPT, scope=scope, run_dir=workdir / "run"))
        assert out.ok and out.iterations == len(script), out.message

    wall: dict[str, list[float]] = {"bare": [], "loop": []}
    cpu: dict[str, list[float]] = {"bare": [], "loop": []}

    with respx.mock(using="httpx2", assert_all_mocked=True) as router:
        route = router.post(W.url(mode)).mock(side_effect=side_effect)
        loop_session()
        bodies = [json.loads(call.request.content) for call in route.calls]

        bare_trace = Trace(workdir / "bare-trace.jsonl", session_id="bare")

        def bare_session() -> None:
            for i, body in enumerate(bodies):
                for _ in sdk_create(mode, client, body):
                    pass
                if i < len(bodies) - 1:
                    dispatch("list_dir", {"path": "."}, scope, bare_trace, session_id="bare")

        def run_round(name: str) -> None:
            fn = bare_session if name == "bare" else loop_session
            w0, c0 = time.perf_counter(), time.process_time()
            for _ in range(SESSIONS_PER_ROUND):
                fn()
            wall[name].append((time.perf_counter() - w0) / (SESSIONS_PER_ROUND * len(script)))
            cpu[name].append((time.process_time() - c0) / (SESSIONS_PER_ROUND * len(script)))

        run_round("bare"), run_round("loop")  # warm up
        for samples in (wall, cpu):
            for side in samples.values():
                side.clear()
        for r in range(ROUNDS):
            for name in ("bare", "loop") if r % 2 == 0 else ("loop", "bare"):
                run_round(name)

    def paired(samples: dict[str, list[float]]) -> tuple[float, float, float]:
        ratios = [loop / bare for bare, loop in zip(samples["bare"], samples["loop"])]
        return statistics.median(samples["bare"]), statistics.median(samples["loop"]), statistics.median(ratios) - 1.0

    return paired(cpu), paired(wall)


def main() -> int:
    for mode in W.PATHS:
        for n_turns, label in ((TOOL_TURNS + 1, "5-turn session"), (1, "1-turn session, info")):
            with tempfile.TemporaryDirectory(prefix="bench-api-") as tmp:
                (cb, cl, co), (wb, wl, wo) = measure(mode, Path(tmp), n_turns)
            verdict = ("PASS" if co < TARGET else "MISS") if n_turns > 1 else "(info)"
            print(
                f"api loop per-turn overhead [{mode}, {label}]: {co * 100:+.1f}% CPU "
                f"(bare {cb * 1e3:.3f} ms/turn, loop {cl * 1e3:.3f} ms/turn); wall {wo * 100:+.1f}% "
                f"({wb * 1e3:.3f} vs {wl * 1e3:.3f} ms); {ROUNDS} paired rounds; target < {TARGET * 100:.0f}% {verdict}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
