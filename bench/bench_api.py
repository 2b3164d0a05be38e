"""Per-turn overhead of the api provider's loop over the bare SDK call (target < 10%).

Both sides hit the same respx-mocked endpoint with the same request and the same streamed
reply, measured side by side in alternating paired rounds (AB BA AB ...); the figure is the
median over pairs of loop/bare - 1 (pairing cancels the drift of a shared, noisy machine):

- bare:  the vendor SDK's streaming create(...) for the same body, events iterated;
- loop:  ApiTransport.run_session(...) for a one-turn answer through resolve_provider
         (watchdog, trace, tool definitions, stream accumulation, outcome, cost).

    .venv/bin/python bench/bench_api.py
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

import respx  # noqa: E402

import api_wire as W  # noqa: E402
import respx_httpx2  # noqa: E402,F401
from harnesscheck.config import Settings  # noqa: E402
from harnesscheck.contracts import AgentSessionRequest  # noqa: E402
from harnesscheck.llm import to_anthropic_messages, to_chat_messages, to_responses_input, tool_param  # noqa: E402
from harnesscheck.providers.api import tool_specs  # noqa: E402
from harnesscheck.registry import resolve_provider  # noqa: E402
from harnesscheck.scope import ToolScope  # noqa: E402

TARGET = 0.10
ROUNDS = 15
CALLS_PER_ROUND = 20
PROMPT = "What does src/a.py print?"
REPLY = W.Turn(text="It prints hello. " * 20)


def bare_call(mode: str, client, tools: list[dict]):
    model = W.MODELS[mode]
    messages = [{"role": "user", "content": PROMPT}]
    if mode == "anthropic_messages":
        stream = client.messages.create(model=model, max_tokens=4096, messages=to_anthropic_messages(messages),
                                        tools=[tool_param(mode, t) for t in tools], stream=True)
    elif mode == "chat_completions":
        stream = client.chat.completions.create(model=model, messages=to_chat_messages(None, messages), max_completion_tokens=4096,
                                                stream_options={"include_usage": True}, tools=[tool_param(mode, t) for t in tools], stream=True)
    else:
        stream = client.responses.create(model=model, input=to_responses_input(messages), max_output_tokens=4096, store=False,
                                         tools=[tool_param(mode, t) for t in tools], stream=True)
    for _ in stream:
        pass


def measure(mode: str, workdir: Path) -> tuple[float, float]:
    key_var, url_var = W.KEY_VARS[mode]
    os.environ[key_var], os.environ[url_var] = W.CANARY_KEY, W.base_url(mode)
    root = workdir / "repo"
    (root / "src").mkdir(parents=True, exist_ok=True)
    (root / "src" / "a.py").write_text("print('hello')\n")
    scope = ToolScope(root=root)
    tools = tool_specs(scope)
    transport = resolve_provider(Settings(backend="api", api_mode=mode, model=W.MODELS[mode]))
    client = transport.llm.client()  # the same SDK client object on both sides
    chunks = W.events(mode, REPLY)
    ratios: list[float] = []
    bare_times: list[float] = []
    loop_times: list[float] = []

    def bare_round() -> float:
        t0 = time.perf_counter()
        for _ in range(CALLS_PER_ROUND):
            bare_call(mode, client, tools)
        return (time.perf_counter() - t0) / CALLS_PER_ROUND

    def loop_round() -> float:
        t0 = time.perf_counter()
        for i in range(CALLS_PER_ROUND):
            out = transport.run_session(AgentSessionRequest(prompt=PROMPT, scope=scope, run_dir=workdir / "run"))
            assert out.ok, out.message
        return (time.perf_counter() - t0) / CALLS_PER_ROUND

    with respx.mock(using="httpx2", assert_all_mocked=True) as router:
        router.post(W.url(mode)).mock(side_effect=lambda req: W.sse_response(list(chunks)))
        bare_round(), loop_round()  # warm up imports and caches
        for r in range(ROUNDS):
            if r % 2 == 0:
                bare, loop = bare_round(), loop_round()
            else:
                loop, bare = loop_round(), bare_round()
            bare_times.append(bare)
            loop_times.append(loop)
            ratios.append(loop / bare)
    return statistics.median(bare_times), statistics.median(loop_times), statistics.median(ratios) - 1.0


def main() -> int:
    misses = 0
    for mode in W.PATHS:
        with tempfile.TemporaryDirectory(prefix="bench-api-") as tmp:
            bare, loop, overhead = measure(mode, Path(tmp))
        verdict = "PASS" if overhead < TARGET else "MISS"
        misses += verdict == "MISS"
        print(
            f"api loop per-turn overhead [{mode}]: {overhead * 100:+.1f}% "
            f"(bare SDK {bare * 1e3:.2f} ms, loop {loop * 1e3:.2f} ms, median of {ROUNDS} paired rounds x {CALLS_PER_ROUND} calls) "
            f"target < {TARGET * 100:.0f}% {verdict}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
