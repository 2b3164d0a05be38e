"""The deepseek session driver: runs the DeepSeek Harness SDK in a child process of the host.

Requirements kept here (doc/SPEC-deepseek.md, "The driver"):
- Runs as `python -I _dsh_driver.py --sdk <dir>` in the session's own process group, spawned
  by harnesscheck's process layer (process.py), so the whole tree (this driver -> the `dsh`
  runtime -> the runtime's MCP bridge and anything else) is contained like a CLI's: killed
  whole at the deadline or on cancel. It imports the SDK from `<dir>` (install-clis's
  `pip install --target` cache) and nothing of harnesscheck (standard library + the SDK and
  its pydantic).
- Reads ONE JSON request from stdin (the API key travels there, never in argv): prompt,
  model, provider, base_url, api_key, cwd, dsh_home, patches, initialize_timeout_s.
- The runtime gets this process's environment, which is the env the host constructed
  (envpolicy.build_child_env): the SDK copies `os.environ` and adds only what it is given.
- Writes every JSON-RPC notification the runtime sent for the session as one stdout line
  `{"jsonrpc": "2.0", "method": ..., "params": ...}` as it arrives (an assistant message's
  streamed `stream` chunk list is dropped: the message itself and its usage are kept), then one
  terminal line: `{"type": "run_result", "session_id", "final_response", "finish_reason",
  "events", "notifications"}` from the SDK's RunResult, or `{"type": "run_error", "error":
  <exception class>, "code", "message"}` when the SDK raised. Exit 0 after a result, 1 after
  an error, 2 for a bad request. `--version` prints the SDK's version.
"""

from __future__ import annotations

import json
import sys


def _emit(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj, separators=(",", ":"), ensure_ascii=False) + "\n")
    sys.stdout.flush()


def _slim(payload: dict) -> dict:
    event = payload.get("event")
    if isinstance(event, dict) and event.get("type") == "assistant/message" and isinstance(event.get("data"), dict) and "stream" in event["data"]:
        data = {k: v for k, v in event["data"].items() if k != "stream"}
        payload = {**payload, "event": {**event, "data": data}}
    return payload


def _sdk_version(sdk_dir: str) -> str:
    from importlib.metadata import PathDistribution
    from pathlib import Path

    for info in Path(sdk_dir).glob("deepseek_harness_sdk-*.dist-info"):
        version = PathDistribution(info).version
        if version:
            return version
    raise FileNotFoundError(f"no deepseek-harness-sdk in {sdk_dir}")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--sdk" not in argv or argv.index("--sdk") + 1 >= len(argv):
        print("usage: _dsh_driver.py --sdk DIR [--version]", file=sys.stderr)
        return 2
    sdk_dir = argv[argv.index("--sdk") + 1]
    if "--version" in argv:
        print(f"deepseek-harness-sdk {_sdk_version(sdk_dir)}")
        return 0
    sys.path.insert(0, sdk_dir)
    try:
        request = json.loads(sys.stdin.read() or "{}")
        prompt = request["prompt"]
    except (ValueError, KeyError, TypeError) as exc:
        _emit({"type": "run_error", "error": "BadRequest", "code": None, "message": f"bad driver request: {exc}"})
        return 2
    from deepseek_harness import DeepSeekHarness

    options = {
        "cwd": request["cwd"],
        "dsh_home": request["dsh_home"],
        "patches": tuple(request.get("patches") or ()),
        "initialize_timeout_seconds": float(request.get("initialize_timeout_s") or 30.0),
        "request_timeout_seconds": None,  # the host's process deadline bounds the session
        "api_key": request.get("api_key"),
        "base_url": request.get("base_url"),
    }
    for key in ("model", "provider", "max_tokens"):
        if request.get(key):
            options[key] = request[key]
    harness = DeepSeekHarness(**options)

    def forward(notification) -> None:
        _emit({"jsonrpc": "2.0", "method": notification.method, "params": _slim(notification.payload)})

    try:
        try:
            result = harness.run(prompt, on_notification=forward)
        except BaseException as exc:  # every failure is reported, typed, on stdout: never swallowed
            _emit({"type": "run_error", "error": type(exc).__name__, "code": getattr(exc, "code", None), "message": str(exc)[-4000:]})
            return 1
        # the terminal line first: the host lingers briefly for the runtime's own shutdown, then kills the group
        _emit(
            {
                "type": "run_result",
                "session_id": result.session_id,
                "final_response": result.final_response,
                "finish_reason": result.finish_reason,
                "events": len(result.events),
                "notifications": len(result.notifications),
            }
        )
        return 0
    finally:
        try:
            harness.close()
        except BaseException:
            pass  # the runtime is gone already; the host kills the group anyway


if __name__ == "__main__":
    sys.exit(main())
