"""The fake-CLI engine: replays a scenario the way a vendor CLI would, and records how it was run.

Standard library only (a fake must start fast and must not depend on the package under test).
The offline suite starts a fake some 175 times per run, so on its common paths (--version,
a replay, an MCP session, spawn / ignore-SIGTERM / hang) it imports nothing beyond sys, time
and the C modules ``posix``, ``_stat``, ``_signal``, ``_json`` (and ``select`` once it speaks
MCP):

- ``posix`` instead of ``os`` (whose import costs ~1.2 ms: _collections_abc, posixpath):
  ``ENVIRON`` is os.environ built the way os builds it, and the few os.path functions the
  engine needs are small helpers;
- JSON through ``_json`` directly (``json_loads``/``json_dumps``: the json module's own C
  scanner and encoder, so the same bytes; ``json`` itself would bring re, enum, functools);
- ``{{placeholders}}`` with str methods instead of a regex; ``_signal`` instead of ``signal``;
- processes with ``os.posix_spawn`` instead of subprocess (``_spawn``: Popen's PATH search,
  close_fds, restore_signals and errors); a spawn command split on whitespace unless it
  quotes or escapes (then ``shlex``);
- a codex ``config.toml`` read by a small reader of the subset the transport writes
  (``toml_loads``; anything else goes to ``tomllib``);
- ``os._exit`` once everything is flushed, instead of the interpreter's teardown.

The per-test wrappers run it with ``python -I -S``. tests/testing/test_fakecli.py pins the imports
and proves each stand-in equivalent (Hypothesis properties against json, re, shlex, tomllib);
bench/bench_fake.py measures start-up and an MCP session against a bare interpreter.

How a fake finds its scenario
=============================
The transports never pass unknown environment variables to a CLI (the env policy strips
them, and it is never weakened for tests), so a fake reads a sidecar file next to the path
it was started as: ``<argv0>.scenario.json``::

    {"scenario": "/abs/path/scenario.json", "record": "/abs/path/claude.record.jsonl"}

``harnesscheck.testing.fakes.install_fake_cli`` writes a per-test wrapper and this sidecar. Without
a sidecar the fake replays ``fixtures/<cli>/success.json`` and records nothing, so
``harnesscheck run --backend claude-code --cli fake_clis/claude`` works from a checkout.

Scenario format (JSON)
======================
::

    {
      "provenance": {"cli": "claude", "cli_version": "2.1.197",
                     "source": "observed-here | loopback-recording | reference:<doc section>",
                     "date": "2026-11-29", "notes": "..."},
      "version": "2.1.197 (Claude Code)",     # what `--version` / `-v` prints (default per CLI)
      "stdin": "read" | "ignore",             # read stdin to EOF before the steps (default "read")
      "default_model": "claude-opus-4-8",     # {{model}} when no --model/-m was passed
      "sigterm_exit": 143,                    # exit code on SIGTERM (the real CLIs exit 143)
      "steps": [ <step>, ... ]
    }

Steps run in order. Each is an object with exactly one action key, plus modifiers:

``{"emit": <object or string>, "split": [offsets], "gap": s}``
    Write one stdout line. An object is written as compact JSON; a string verbatim. The
    line (with its newline) is written in pieces cut at the given byte offsets, with a
    flush (and an optional ``gap`` sleep) between pieces.
``{"delay": s}``
    Sleep ``s`` seconds.
``{"noise": "text"}``
    A non-JSON stdout line (``[SandboxDebug] ...``, banners).
``{"oversize": n_bytes, "template": <object>}``
    One valid JSON line of exactly ``n_bytes`` bytes before its newline: ``template`` (default:
    a user/tool_result message) with its ``"{{pad}}"`` string grown to fit.
``{"raw": "text", "newline": false}``
    Write text as is (e.g. a truncated last line); ``newline`` defaults to false.
``{"invalid_utf8": true}``
    A stdout line holding bytes that are not valid UTF-8.
``{"stderr": "text", "repeat": n, "newline": bool}``
    Write text to stderr ``repeat`` times (default 1), each followed by a newline unless
    ``newline`` is false (a flood without newlines).
``{"spawn": "sleep 1000", "setsid": bool}``
    Start a grandchild that inherits stdout/stderr (holding the pipes open); with ``setsid``
    it escapes the process group. Its pid is appended to the record file.
``{"ignore_sigterm": true}``
    From now on SIGTERM is ignored (only SIGKILL ends the fake).
``{"hang": true}``
    Sleep forever.
``{"exit": code}``
    Flush and exit with ``code``. Falling off the end of the steps exits 0.
``{"mcp_call": {"server": "<name>", "tool": "read_file", "arguments": {...}}}``
    Only with ``"mcp": "connect"``: call a tool on a connected MCP server (the one named;
    without ``server``, the only one connected, else the first that lists the tool) (JSON-RPC
    ``tools/call`` over its stdio); the reply fills ``{{mcp_result_text}}`` (the text content
    joined) and ``{{mcp_result_is_error}}`` for the following steps.

With ``"mcp": "connect"`` at the top level (and ``"mcp_timeout": s``, default 10), the fake
starts every stdio server named in its ``--mcp-config`` file(s) the way Claude Code does
(command, args, the config's ``env`` over the fake's own env, cwd = the fake's cwd), does
``initialize`` + ``tools/list``, and closes their stdin when it exits. Then
``{{mcp_server_names}}`` carries each server's real status (``connected`` or ``failed``)
and ``{{mcp_tools}}`` the ``mcp__<server>__<tool>`` names actually listed.
``{"mcp_calls": [{"name": "read_file", "arguments": {...}}, ...], "server": "<name>"}``
    Act like the CLI calling its MCP servers: start the servers the backend configured, of
    any name and any number (claude ``--mcp-config`` files or inline JSON; codex
    ``$CODEX_HOME/config.toml``, else ``~/.codex/config.toml``, with every ``-c``/``--config``
    ``mcp_servers.<name>.<key>=<TOML value>`` override on top; cursor ``$HOME/.cursor/mcp.json``
    and the project's ``.cursor/mcp.json`` (``--workspace``, else the cwd; the project's wins); gemini ``mcpServers`` of ``$HOME/.gemini/settings.json`` and
    ``./.gemini/settings.json``, both also copied into the record's ``mcp_configs``; opencode the ``mcp``
    entries of ``$OPENCODE_CONFIG`` or ``$OPENCODE_CONFIG_CONTENT``) with the fake's own env plus the config's ``env`` (as the real
    CLIs do), speak MCP over stdio (initialize, tools/call each; a call goes to the server
    named by ``server``, else the only one, else the first that lists the tool), and append one
    ``{"kind": "mcp_result", "name", "arguments", "server", "is_error", "text"}`` record per
    call (or ``{"kind": "mcp_result", "error": ...}`` when no server can be started; with
    ``"starting": true`` when a server was still running, unanswered, when the wait ran out:
    slow to start, not failed). Around each call codex prints its ``mcp_tool_call`` items and
    claude (``--output-format stream-json``) an assistant ``tool_use`` / user ``tool_result``
    pair, as the real CLIs print them (``announce_tool_call``).
``{"mcp_probe": {"probes": [{"label", "line", "id", "malformed"}, ...], "bound_s": s}}``
    Act like a CLI (or a model) that sends its MCP servers requests they must answer: start
    every stdio server configured (as ``mcp_calls``), initialize it, then send each probe's
    ``line`` as it is (raw text, one line) and wait at most ``bound_s`` (default 15) for its
    answer: a response (``result`` or ``error``) whose ``id`` is the probe's ``id`` (or null,
    for a ``malformed`` probe), or a JSON array (a batch's answer); server requests and
    notifications in between are skipped. One ``{"kind": "mcp_probe", "server", "label",
    "answer"}`` record per probe (``answer`` null: none came within the bound; the probes after
    the first unanswered one are not sent). ``{"kind": "mcp_probe", "server", "error"}`` when
    the server cannot be started or never answers ``initialize``.
``{"mcp_stall": {"name": "read_file", "arguments": {...}}}``
    A bridge that stops answering mid-session: start and initialize every configured stdio
    server (as ``mcp_calls``), stop the one the call routes to with SIGSTOP, then send it the
    ``tools/call`` (announced as ``mcp_calls`` announces it) and go on without its answer
    (follow with ``{"hang": true}``: the CLI waits on it). One ``{"kind": "mcp_stalled",
    "pid", "server", "child_pid", "mono"}`` record; the stopped server stays the fake's child.

How gemini is driven
====================
As 0.61.0 behaves headless (observed against the scripted server): without ``--skip-trust``
(or ``GEMINI_CLI_TRUST_WORKSPACE=true``) it prints the untrusted-folder message on stderr and
exits 55 with no stdout; with ``-m auto`` or no ``-m`` it stalls (the real router retried
its routing call for a minute and more). Otherwise the scenario is replayed.

How claude is driven
====================
``--output-format stream-json`` (and the default here): every ``emit`` line is written.
``--output-format json``: only the ``result`` event is printed (one JSON object), the
other emitted events are not, as ``claude -p --output-format json`` does.
``--input-format stream-json``: stdin is read line by line, never to EOF first. A
``control_request`` is answered at once with ``{"type": "control_response", "response":
{"subtype": "success", "request_id": ...}}`` (``initialize`` gets ``{"commands": [],
"models": [], "account": {}}``, synthetic); the first ``user`` message's text is the prompt
and starts the steps; during a ``hang`` an ``interrupt`` request is answered and ends the
turn with ``{"type": "result", "subtype": "error_during_execution", "is_error": true}``
(synthetic). After the steps the fake keeps reading (and answering) until stdin closes,
as the real CLI waits for further messages: a backend that never closes it keeps the CLI.

Placeholders, replaced in every string (values and keys) of an emitted object, and in
raw/noise text:
``{{model}}`` the ``--model``/``-m`` value (else ``default_model``), ``{{model_base}}`` the same
without a ``[1m]``-style suffix (what the API echoes back), ``{{cwd}}`` the process cwd,
``{{session_id}}`` a per-invocation uuid, ``{{pid}}`` the fake's pid, ``{{prompt}}`` the prompt
(stdin, or the positional argument). A string that is exactly ``"{{allowed_tools}}"`` becomes
the list given to ``--allowedTools`` (comma-separated, one argument), and exactly
``"{{mcp_server_names}}"`` becomes ``[{"name": n, "status": "connected"}]`` for each server
named in the ``--mcp-config`` file(s) (the fake does not connect; scenarios that need a
failing server say so literally), each with the top-level ``"mcp_server_fields"`` added
(a recording's fields beside name and status, e.g. claude 2.1.332's ``{"source": "dynamic"}``).

What a fake records
===================
One JSON line per invocation, appended to the record file before any step runs::

    {"kind": "invocation", "cli": "claude", "pid": 123, "argv": [...], "env": {...},
     "cwd": "...", "stdin_type": "devnull|pipe|tty|file|socket|closed|other", "stdout_type": (the same words),
     "stdin": "<text read, up to 1 MiB>", "stdin_bytes": n, "mcp_configs": {path: content},
     "cwd_entries": [names in the cwd at start],
     "instructions": {path: text of each instruction file the CLI loads at start},
     "config_dirs": {"CLAUDE_CONFIG_DIR": {"name": "file|dir|link:<target>"}, ...},
     "ts": <time.time()>, "mono": <time.monotonic()>}

(``stdin_eof_mono``: when stdin reached EOF before the steps, else null; ``stdin_read_mono``:
when the fake began reading stdin to EOF, ``stdin_data_mono``: when its last byte of data came
(null: none came), so a pipe held open after the prompt shows as ``stdin_eof_mono`` minus the
later of the two; a later
``{"kind": "stdin_eof", "pid", "mono"}`` line when it closes during a stream-json session),
one ``{"kind": "spawn", "pid": <fake pid>, "child_pid": n, "setsid": bool}`` line per
grandchild, one ``{"kind": "mcp_server", "pid", "child_pid", "name"}`` line per MCP
server the fake started (the session's tree holds them as the real CLI's does), and for an
``mcp_calls`` step one ``{"kind": "mcp_connected", "pid", "name", "mono"}`` line per server
that answered ``initialize`` (so a bridge slow to start tells apart from a call that hangs).
``harnesscheck.testing.fakes.FakeCli.records()`` folds them into one dict per invocation.

While it reads stdin to EOF: one ``{"kind": "stdin_wait", "pid", "mono", "bytes": 0}`` line as it
begins and one ``{"kind": "stdin_data", "pid", "mono", "bytes": n}`` line per chunk read, so a pipe
held open shows while the fake still waits on it (before its invocation line, written at EOF).

Progress: one ``{"kind": "step", "pid": <fake pid>, "index": i, "action": "<step key>",
"mono": <time.monotonic()>, "ts": <time.time()>}`` line per step the fake has performed, so a
test asserts on what really happened instead of guessing from the clock. It is written
(unbuffered, one ``O_APPEND`` write) *after* the step is done (an ``emit`` line is flushed
into the pipe first, a ``spawn``'s grandchild exists), except for ``hang`` and ``exit``,
whose line is written *before*: a ``hang`` line means "every earlier step is done and the
fake now stalls". ``mono`` is the system-wide monotonic clock, comparable with the test
process's ``time.monotonic()`` on the same machine. ``index`` counts the scenario's steps
from 0. ``FakeCli.records()`` ignores these lines.

Model requests: a step with ``"requests": n`` (the model requests the real CLI made before that
line: a retry notice follows a failed request) writes ``{"kind": "model_requests", "pid",
"index", "n", "mono"}`` *before* the step is performed, so a host that stopped the CLI at the
line it saw is counted for exactly the requests behind it. ``harnesscheck.kit.harness_adapter.
model_requests`` sums them (a run's ``model_calls``; None when the scenario states none).
``mcp_configs`` copies the files named by ``--mcp-config`` at start, because the transport may
delete its run dir afterwards.

Over 800 lines for a reason: every fake CLI process runs this one file with `python -I -S`, and
each module it imported instead would be paid on every fake session's start-up
(bench/bench_fake.py measures it; the stand-ins below exist for the same reason). The seam, if
start-up ever allows it: the engine vs. each vendor's stream shapes.
"""

import _signal  # `signal` wraps these same functions in enums, and enum costs ms to import
import _stat as stat
import posix  # the C half of os: `import os` costs ~1.2 ms (_collections_abc, posixpath, ...)
import sys
import time

try:
    import _json  # the C half of the json module, without its pure-Python half (re, enum, ...)
except ImportError:  # an interpreter built without it: the json module does everything
    _json = None


#: os.environ as the os module builds it from posix.environ (str, undecodable bytes escaped).
ENVIRON = {
    key.decode(sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()): value.decode(sys.getfilesystemencoding(), sys.getfilesystemencodeerrors())
    for key, value in posix.environ.items()
}
DEVNULL = "/dev/null"


def _pidns() -> str:
    """This process's PID namespace ("pid:[N]"), or "" where /proc does not say."""
    try:
        return posix.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def _pidns_born() -> int | None:
    """When this PID namespace began (its init's start time, sandbox.pidns_born)."""
    try:
        fd = posix.open("/proc/1/stat", posix.O_RDONLY)
        try:
            stat = posix.read(fd, 4096)
        finally:
            posix.close(fd)
        return int(stat[stat.rfind(b")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _mode(path: str, follow: bool = True) -> int:
    try:
        return (posix.stat(path) if follow else posix.lstat(path)).st_mode
    except (OSError, ValueError):
        return 0


def _isfile(path: str) -> bool:
    """os.path.isfile"""
    return stat.S_ISREG(_mode(path))


def _isdir(path: str) -> bool:
    """os.path.isdir"""
    return stat.S_ISDIR(_mode(path))


def _islink(path: str) -> bool:
    """os.path.islink"""
    return stat.S_ISLNK(_mode(path, follow=False))


def _join(base: str, name: str) -> str:
    """os.path.join(base, name)"""
    if name.startswith("/"):
        return name
    return base + name if not base or base.endswith("/") else base + "/" + name


def _normpath(path: str) -> str:
    """os.path.normpath of an absolute path (no symlinks resolved)."""
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts:
                parts.pop()
            continue
        parts.append(part)
    return "/" + "/".join(parts)


def _exists(path: str) -> bool:
    """os.path.exists (a file or a directory: a worktree's `.git` is a file)."""
    return _mode(path) != 0


def _up_to_marker(cwd: str, markers: list[str]) -> list[str]:
    """The directories an instruction-file walk searches, root first: from the nearest ancestor
    of `cwd` (itself included) holding one of `markers` down to `cwd`; just `cwd` when none
    holds one (or `markers` is empty)."""
    chain = [cwd]
    directory = cwd
    while markers:
        if any(_exists(_join(directory, m)) for m in markers):
            return chain[::-1]
        parent = directory.rsplit("/", 1)[0] or "/"
        if parent == directory:
            break
        directory = parent
        chain.append(directory)
    return [cwd]


def _first_file(directory: str, names: list[str]) -> list[str]:
    """[the first of `names` that is a file in `directory`] (codex takes one per directory)."""
    for name in names:
        path = _join(directory, name)
        if _isfile(path):
            return [path]
    return []


def _exec_path(env) -> list[str]:
    """os.get_exec_path(env): where Popen looks for a bare command name."""
    return (env.get("PATH") if env.get("PATH") is not None else "/bin:/usr/bin").split(":")


VERSIONS = {
    "claude": "2.1.332 (Claude Code)",
    "codex": "codex-cli 0.171.0",
    "cursor-agent": "2026.08.11-e8db854",
    "deepseek": "deepseek-harness-sdk 0.2.1rc2",
    "gemini": "0.61.0",
    "opencode": "1.18.33",
    "zcode": "0.16.9",
}

DEFAULT_OVERSIZE_TEMPLATE = {
    "type": "user",
    "message": {
        "role": "user",
        "content": [{"tool_use_id": "toolu_oversize", "type": "tool_result", "content": "{{pad}}"}],
    },
    "parent_tool_use_id": None,
    "session_id": "{{session_id}}",
}

RECORDED_STDIN_LIMIT = 1 << 20
MCP_PROTOCOL_VERSION = "2025-06-18"


# -- JSON: the json module's own C scanner and encoder, driven directly ---------------------
# `import json` costs ~8 ms (json.decoder imports re, which imports enum, functools and
# collections), more than the rest of a fake run. `json.loads`/`json.dumps` are thin Python
# over `_json`; these helpers are that same thin layer, so they parse and write exactly what
# the json module does (tests/testing/test_fakecli.py proves it with a Hypothesis property).


class _DecoderSettings:
    """What `_json.make_scanner` reads from a `json.JSONDecoder()` with default arguments."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}.__getitem__
    memo: dict = {}


_JSON_WHITESPACE = " \t\n\r"  # json's WHITESPACE; str.strip() would also eat other Unicode spaces


def _not_serializable(o):
    raise TypeError(f"Object of type {o.__class__.__name__} is not JSON serializable")


if _json is not None:
    _scan_once = _json.make_scanner(_DecoderSettings())

    def json_loads(text):
        """`json.loads(text)` for a str or UTF-8 bytes (other encodings: the json module)."""
        if isinstance(text, (bytes, bytearray)):
            if text[:3] == b"\xef\xbb\xbf" or text[:2] in (b"\xff\xfe", b"\xfe\xff") or b"\x00" in text[:4]:
                import json  # a BOM or UTF-16/32: json.detect_encoding decides, as json.loads does

                return json.loads(text)
            text = text.decode("utf-8", "surrogatepass")
        if text.startswith("\ufeff"):
            raise ValueError("Unexpected UTF-8 BOM (decode using utf-8-sig)")
        start = len(text) - len(text.lstrip(_JSON_WHITESPACE))
        try:
            value, end = _scan_once(text, start)
        except StopIteration as exc:
            raise ValueError(f"Expecting value: char {exc.value}") from None
        if len(text.rstrip(_JSON_WHITESPACE)) > end:
            raise ValueError(f"Extra data: char {end}")
        return value

    def json_dumps(obj, separators=(", ", ": "), ensure_ascii=True) -> str:
        """`json.dumps(obj, separators=..., ensure_ascii=...)` (no indent, keys unsorted)."""
        quote = _json.encode_basestring_ascii if ensure_ascii else _json.encode_basestring
        if isinstance(obj, str):
            return quote(obj)
        encode = _json.make_encoder({}, _not_serializable, quote, None, separators[1], separators[0], False, False, True)
        return "".join(encode(obj, 0))

else:  # pragma: no cover - CPython always builds _json

    def json_loads(text):
        import json

        return json.loads(text)

    def json_dumps(obj, separators=(", ", ": "), ensure_ascii=True) -> str:
        import json

        return json.dumps(obj, separators=separators, ensure_ascii=ensure_ascii)


# -- processes: posix_spawn (os.posix_spawn) instead of subprocess (~6 ms of imports) -------

#: Reset to their defaults in a child, as subprocess.Popen(restore_signals=True) does
#: (Python ignores SIGPIPE, and an ignored signal stays ignored across exec).
_RESTORED_SIGNALS = tuple(getattr(_signal, name) for name in ("SIGPIPE", "SIGXFZ", "SIGXFSZ") if hasattr(_signal, name))


def _high_pipe() -> tuple[int, int]:
    """`posix.pipe()` (close-on-exec ends) with both ends above fd 2: when the fake's own stdio
    is closed the pipe would land on 0-2, and a posix_spawn dup2 onto the same number keeps
    close-on-exec in libcs older than POSIX.1-2024 (glibc < 2.29); subprocess guards alike."""
    ends, low = [], []
    for fd in posix.pipe():
        while fd < 3:
            low.append(fd)
            fd = posix.dup(fd)
        ends.append(fd)
    for fd in low:
        posix.close(fd)
    return ends[0], ends[1]


def _inherited_fds() -> list[int]:
    """Inheritable fds above 2 (from whoever started the fake): subprocess's close_fds closes
    them in a child; posix_spawn has no such flag, so they become close actions. The fake's
    own fds are close-on-exec already (PEP 446)."""
    try:
        names = posix.listdir("/proc/self/fd")
    except OSError:
        return []
    out = []
    for name in names:
        fd = int(name)
        try:
            if fd > 2 and posix.get_inheritable(fd):
                out.append(fd)
        except OSError:  # the directory listing's own fd, closed since
            pass
    return out


def _await_exec(pid: int, launcher: str, bound_s: float = 5.0) -> None:
    """Wait (at most bound_s) until `pid` has exec'd past `launcher` (`env -i sleep` is `sleep`
    with an empty environment only once env has exec'd): what a step after it observes is then
    the same on an idle machine and a loaded one."""
    import time as _time

    deadline = _time.monotonic() + bound_s
    while _time.monotonic() < deadline:
        try:
            fd = posix.open(f"/proc/{pid}/cmdline", posix.O_RDONLY)
            try:
                first = posix.read(fd, 4096).split(b"\0", 1)[0]
            finally:
                posix.close(fd)
        except OSError:
            return
        if first and first.rsplit(b"/", 1)[-1] != launcher.encode():
            return
        _time.sleep(0.005)


def _spawn(argv: list[str], env, file_actions: list, setsid: bool = False) -> int:
    """Start argv like subprocess.Popen(argv, env=env, close_fds=True, start_new_session=setsid):
    the executable searched on the PATH of `env`, every candidate tried in order (ENOENT and
    ENOTDIR move on; another error is reported if nothing starts), other inherited fds closed
    in the child. Returns the pid; raises OSError as Popen does."""
    if not argv:
        raise ValueError("empty command")
    program = argv[0]
    candidates = [program] if "/" in program else [_join(d, program) for d in _exec_path(env)]
    actions = [(posix.POSIX_SPAWN_CLOSE, fd) for fd in _inherited_fds()] + file_actions
    first_error = last_error = None
    for path in candidates:
        try:
            return posix.posix_spawn(path, argv, env, file_actions=actions, setsid=setsid, setsigdef=_RESTORED_SIGNALS)
        except OSError as exc:
            last_error = exc
            if exc.errno not in (2, 20) and first_error is None:  # ENOENT, ENOTDIR
                first_error = exc
    error = first_error or last_error
    if error is None:  # an empty PATH
        error = FileNotFoundError(2, posix.strerror(2))
    error.filename = program
    raise error


def _wait_exit(pid: int, timeout: float) -> int:
    """`posix.waitpid(pid)` within `timeout` seconds (TimeoutError), waking the moment the process
    exits (a pidfd; without one, polling as Popen.wait(timeout) does). Returns the wait status."""
    try:
        pidfd = posix.pidfd_open(pid)
    except (AttributeError, OSError):
        deadline, delay = time.monotonic() + timeout, 0.0005
        while True:
            done, status = posix.waitpid(pid, posix.WNOHANG)
            if done:
                return status
            if time.monotonic() >= deadline:
                raise TimeoutError(f"process {pid} still running after {timeout} s")
            delay = min(delay * 2, 0.05)
            time.sleep(delay)
    try:
        import select  # a small C module (~0.3 ms); selectors/subprocess are the heavy ones

        if not select.select([pidfd], [], [], timeout)[0]:
            raise TimeoutError(f"process {pid} still running after {timeout} s")
        return posix.waitpid(pid, 0)[1]
    finally:
        posix.close(pidfd)


class McpClient:
    """A minimal MCP stdio client (newline-delimited JSON-RPC), enough to list and call tools.

    The server is started the way the CLIs do: command + args, the fake's own env plus the
    config's `env`, the fake's cwd; its stderr is discarded (the CLIs log it elsewhere); it
    inherits no other fd of the fake.
    """

    def __init__(self, name: str, entry: dict, timeout: float):
        self.name = name
        self.timeout = timeout
        self.next_id = 0
        self.tools: list[str] = []
        self._buf = b""
        env = {**ENVIRON, **{str(k): str(v) for k, v in (entry.get("env") or {}).items()}}
        argv = [entry["command"], *[str(a) for a in entry.get("args") or []]]
        stdin_r, self.stdin = _high_pipe()
        self.stdout, stdout_w = _high_pipe()
        try:
            self.pid = _spawn(
                argv, env, [(posix.POSIX_SPAWN_DUP2, stdin_r, 0), (posix.POSIX_SPAWN_DUP2, stdout_w, 1), (posix.POSIX_SPAWN_OPEN, 2, DEVNULL, posix.O_RDWR, 0)]
            )
        except BaseException:
            for fd in (self.stdin, self.stdout):
                posix.close(fd)
            raise
        finally:
            posix.close(stdin_r)
            posix.close(stdout_w)

    def request(self, method: str, params: dict) -> dict:
        """Send a request and return its whole response message (result or error)."""
        self.next_id += 1
        self._send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        deadline = time.monotonic() + self.timeout
        while True:
            msg = self._next_message(deadline)
            if msg.get("id") == self.next_id:
                return msg

    def _send(self, msg: dict) -> None:
        data = memoryview((json_dumps(msg) + "\n").encode())
        while data:
            data = data[posix.write(self.stdin, data) :]

    def _next_message(self, deadline: float) -> dict:
        import select

        while True:
            while b"\n" in self._buf:
                line, self._buf = self._buf.split(b"\n", 1)
                try:
                    msg = json_loads(line)
                except ValueError:
                    continue
                if isinstance(msg, dict):
                    return msg
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.stdout], [], [], left)[0]:
                raise TimeoutError(f"MCP server {self.name} did not answer in time")
            chunk = posix.read(self.stdout, 65536)
            if not chunk:
                raise EOFError(f"MCP server {self.name} closed its stdout")
            self._buf += chunk

    def probe(self, line: str, sent_id, malformed: bool, bound_s: float):
        """Send `line` as it is; return the message that answers it (see ``mcp_probe``), or
        None when none came within `bound_s`."""
        import select

        data = memoryview(line.encode("utf-8", "surrogatepass") + b"\n")
        while data:
            data = data[posix.write(self.stdin, data) :]
        deadline = time.monotonic() + bound_s
        while True:
            while b"\n" in self._buf:
                raw, self._buf = self._buf.split(b"\n", 1)
                try:
                    msg = json_loads(raw)
                except ValueError:
                    continue
                if isinstance(msg, list):
                    return msg
                if not isinstance(msg, dict) or "method" in msg or not ("result" in msg or "error" in msg):
                    continue  # a server request or notification: not an answer
                rid = msg.get("id")
                if (rid == sent_id and type(rid) is type(sent_id)) or (malformed and rid is None):
                    return msg
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.stdout], [], [], left)[0]:
                return None
            chunk = posix.read(self.stdout, 65536)
            if not chunk:
                return None
            self._buf += chunk

    def connect(self, client_name: str = "fakecli") -> None:
        init = self.request("initialize", {"protocolVersion": MCP_PROTOCOL_VERSION, "capabilities": {}, "clientInfo": {"name": client_name, "version": "0"}})
        if "error" in init:
            raise RuntimeError(f"initialize: {init['error']}")
        self._send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def list_tools(self) -> list[str]:
        listed = self.request("tools/list", {}).get("result") or {}
        self.tools = [t["name"] for t in listed.get("tools", []) if isinstance(t, dict) and "name" in t]
        return self.tools

    def call(self, tool: str, arguments: dict) -> tuple[str, bool, object]:
        """(text, is_error, protocol_error) of one tools/call."""
        msg = self.request("tools/call", {"name": tool, "arguments": arguments})
        result = msg.get("result") or {}
        text = "".join(c.get("text", "") for c in result.get("content", []) if isinstance(c, dict))
        return text, bool(result.get("isError")) or "error" in msg, msg.get("error")

    def close(self) -> None:
        """Close the server's stdin and wait (at most 5 s) for it to exit, then kill it."""
        if self.stdin < 0:
            return
        try:
            posix.close(self.stdin)
            _wait_exit(self.pid, 5.0)
        except (OSError, TimeoutError):
            try:
                posix.kill(self.pid, _signal.SIGKILL)
                posix.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        finally:
            self.stdin = -1
            posix.close(self.stdout)


# -- TOML: the subset a codex config.toml is written in, else tomllib (re, datetime: ~10 ms) ---

_TOML_BARE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_TOML_END = " \t,]}#"


class _NotSimpleToml(Exception):
    """The text leaves the subset `_simple_toml` reads: tomllib decides."""


def toml_loads(text: str) -> dict:
    """`tomllib.loads(text)`, without importing tomllib for the subset the transports write."""
    try:
        return _simple_toml(text)
    except _NotSimpleToml:
        import tomllib

        return tomllib.loads(text)


def _simple_toml(text: str) -> dict:
    """One line at a time: comments, `[bare.dotted]` headers, `bare = value` with a value that
    is a string without escapes ("..." or '...'), a decimal integer, true/false, or a
    one-line array / inline table of those. Anything else (and anything TOML forbids, e.g.
    a key or table defined twice) raises _NotSimpleToml."""
    if "\r" in text:
        raise _NotSimpleToml
    root: dict = {}
    table, defined, inline = root, set(), set()
    for line in text.split("\n"):
        if any((c < " " and c != "\t") or c == "\x7f" for c in line):
            raise _NotSimpleToml
        line = line.strip(" \t")
        if not line or line[0] == "#":
            continue
        if line[0] == "[":
            close = line.find("]")
            if line[1:2] == "[" or close < 0 or line[close + 1 :].lstrip(" \t")[:1] not in ("", "#"):
                raise _NotSimpleToml
            path = tuple(part.strip(" \t") for part in line[1:close].split("."))
            if path in defined or not all(part and _TOML_BARE.issuperset(part) for part in path):
                raise _NotSimpleToml
            defined.add(path)
            table = root
            for part in path:
                table = table.setdefault(part, {})
                if not isinstance(table, dict) or id(table) in inline:
                    raise _NotSimpleToml
            continue
        eq = line.find("=")
        key = line[:eq].rstrip(" \t")
        if eq < 0 or not key or not _TOML_BARE.issuperset(key) or key in table:
            raise _NotSimpleToml
        table[key], end = _toml_value(line, len(line) - len(line[eq + 1 :].lstrip(" \t")), inline)
        if line[end:].lstrip(" \t")[:1] not in ("", "#"):
            raise _NotSimpleToml
    return root


def _toml_value(line: str, i: int, inline: set):
    """(value, index after it) of the value starting at line[i]."""
    first = line[i : i + 1]
    if first in ('"', "'"):
        end = line.find(first, i + 1)
        if end < 0 or line[i : i + 3] == first * 3 or (first == '"' and "\\" in line[i:end]):
            raise _NotSimpleToml
        return line[i + 1 : end], end + 1
    if first in ("[", "{"):
        closer, items, i, comma = "]" if first == "[" else "}", [], i + 1, False
        while True:
            i = len(line) - len(line[i:].lstrip(" \t"))
            if line[i : i + 1] == closer and (first == "[" or not comma):  # TOML: no trailing comma in {}
                break
            if first == "{":
                if line[i : i + 1] == '"':
                    key, i = _toml_value(line, i, inline)  # "" is a key too
                else:
                    start = i
                    while line[i : i + 1] and line[i] in _TOML_BARE:
                        i += 1
                    key = line[start:i] or None
                i = len(line) - len(line[i:].lstrip(" \t"))
                if key is None or line[i : i + 1] != "=":
                    raise _NotSimpleToml
                i = len(line) - len(line[i + 1 :].lstrip(" \t"))
            value, i = _toml_value(line, i, inline)
            items.append((key, value) if first == "{" else value)
            i = len(line) - len(line[i:].lstrip(" \t"))
            comma = line[i : i + 1] == ","
            if comma:
                i += 1
            elif line[i : i + 1] != closer:
                raise _NotSimpleToml
        if first == "[":
            return items, i + 1
        table = dict(items)
        if len(table) != len(items):
            raise _NotSimpleToml
        inline.add(id(table))
        return table, i + 1
    end = i
    while end < len(line) and line[end] not in _TOML_END:
        end += 1
    word = line[i:end]
    if word in ("true", "false"):
        return word == "true", end
    digits = word[1:] if word[:1] in ("+", "-") else word
    if not digits or not all("0" <= c <= "9" for c in digits) or (len(digits) > 1 and digits[0] == "0"):
        raise _NotSimpleToml
    return int(word), end


def _placeholder_name(text: str, start: int, end: int) -> bool:
    """Whether text[start:end] is a placeholder name: one or more \\w characters (as the
    former `\\{\\{(\\w+)\\}\\}` regex read them)."""
    return end > start and all(c == "_" or c.isalnum() for c in text[start:end])


def _fill_text(text: str, ph: dict) -> str:
    """Every `{{name}}` whose value in `ph` is a string replaced by it, left to right; the
    others (unknown names, list values) stay as written."""
    if "{{" not in text:
        return text
    out, done, i = [], 0, text.find("{{")
    while i >= 0:
        j = text.find("}}", i + 2)
        if j < 0:
            break
        if _placeholder_name(text, i + 2, j):
            value = ph.get(text[i + 2 : j])
            if isinstance(value, str):
                out += (text[done:i], value)
                done = j + 2
            i = text.find("{{", j + 2)
        else:
            i = text.find("{{", i + 1)
    out.append(text[done:])
    return "".join(out)


def _whole_placeholder(text: str) -> str | None:
    """The name when `text` is exactly one `{{name}}`."""
    if text.startswith("{{") and text.endswith("}}") and _placeholder_name(text, 2, len(text) - 2):
        return text[2:-2]
    return None


def _split_command(command: str) -> list[str]:
    """`shlex.split(command)`: plain words split on whitespace here, quoting and escapes
    (and unusual whitespace) by shlex itself."""
    if any(c in "'\"\\" or (c.isspace() and c not in " \t\r\n") for c in command):
        import shlex

        return shlex.split(command)
    return command.split()


def _read_text(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def _uuid4() -> str:
    """A random version-4 uuid in the text form of `str(uuid.uuid4())` (the uuid module costs
    milliseconds to import, on every start of the fake)."""
    raw = bytearray(posix.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
    raw[8] = (raw[8] & 0x3F) | 0x80  # RFC 4122 variant
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _stdin_type(fd: int = 0) -> str:
    """What fd 0 (or `fd`) is, by fstat: the transports must pass /dev/null or a closed pipe
    as stdin; stdout is a pipe, or a file for a transport that spools it (gemini)."""
    try:
        st = posix.fstat(fd)
    except OSError:
        return "closed"
    if stat.S_ISCHR(st.st_mode):
        try:
            if st.st_rdev == posix.stat(DEVNULL).st_rdev:
                return "devnull"
        except OSError:
            pass
        return "tty" if posix.isatty(fd) else "other"
    if stat.S_ISFIFO(st.st_mode):
        return "pipe"
    if stat.S_ISREG(st.st_mode):
        return "file"
    if stat.S_ISSOCK(st.st_mode):
        return "socket"
    return "other"


#: Env vars naming a config home whose contents the record lists (names only, never contents).
CONFIG_DIR_VARS = ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "CURSOR_CONFIG_DIR", "XDG_CONFIG_HOME", "HOME")


def _config_dirs() -> dict:
    """{var: {entry: "file" | "dir" | "link:<target>"}} for each config home in the env."""
    out: dict = {}
    for var in CONFIG_DIR_VARS:
        path = ENVIRON.get(var)
        if not path or not _isdir(path):
            continue
        entries = {}
        for name in sorted(posix.listdir(path)):
            full = _join(path, name)
            if _islink(full):
                entries[name] = "link:" + posix.readlink(full)
            else:
                entries[name] = "dir" if _isdir(full) else "file"
        out[var] = entries
    return out


def _flag_value(argv: list[str], *names: str) -> str | None:
    """The value of --name VALUE or --name=VALUE (last one wins), stopping at `--`."""
    value = None
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            break
        for name in names:
            if arg == name and i + 1 < len(argv):
                value = argv[i + 1]
                i += 1
                break
            if arg.startswith(name + "="):
                value = arg[len(name) + 1 :]
                break
        i += 1
    return value


def _flag_values(argv: list[str], name: str) -> list[str]:
    out = []
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        if arg == name and i + 1 < len(argv):
            out.append(argv[i + 1])
        elif arg.startswith(name + "="):
            out.append(arg[len(name) + 1 :])
    return out


def _mentions(value, text: str) -> bool:
    """Whether `text` occurs in a string (key or value) anywhere inside `value`."""
    if isinstance(value, str):
        return text in value
    if isinstance(value, list):
        return any(_mentions(v, text) for v in value)
    if isinstance(value, dict):
        return any(_mentions(k, text) or _mentions(v, text) for k, v in value.items())
    return False


def _positional_prompt(argv: list[str]) -> str | None:
    """The argument after `--`, if any (how transports pass a prompt that must never be a flag)."""
    if "--" in argv:
        rest = argv[argv.index("--") + 1 :]
        return " ".join(rest) if rest else None
    return None


class Fake:
    def __init__(self, cli: str, argv0: str, argv: list[str], scenario: dict | None = None):
        self.cli = cli
        self.argv0 = argv0
        self.argv = argv
        self.record_path: str | None = None
        self.scenario = scenario if scenario is not None else self._load_scenario()
        self.session_id = _uuid4()
        self.stdin_text = ""
        self.mcp: dict[str, McpClient] = {}
        self.mcp_status: list[dict] | None = None
        # claude's documented ways to be driven: `--output-format json` prints only the final
        # result object; `--input-format stream-json` reads newline-delimited messages (control
        # requests, user messages) as they come instead of one prompt to EOF
        self.json_output = cli == "claude" and _flag_value(argv, "--output-format") == "json"
        self.stream_input = cli == "claude" and _flag_value(argv, "--input-format") == "stream-json"
        self.stdin_eof = False
        self.stdin_bytes = 0
        self._in_buf = b""
        self.out = sys.stdout.buffer
        self.err = sys.stderr.buffer

    # -- set-up -------------------------------------------------------------------------

    def _load_scenario(self) -> dict:
        sidecar = self.argv0 + ".scenario.json"
        if _isfile(sidecar):
            spec = json_loads(_read_text(sidecar))
            if spec.get("record"):
                self.record_path = spec["record"]
            scenario = spec.get("scenario")
            if isinstance(scenario, dict):
                return scenario
            return json_loads(_read_text(scenario))
        import os.path  # a run from a checkout, without a sidecar (never the suite's per-run wrappers)

        checkout = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
        default = os.path.join(checkout, "fixtures", _fixture_dir(self.cli), "success.json")
        if _isfile(default):
            return json_loads(_read_text(default))
        return {"steps": []}

    def placeholders(self) -> dict:
        model = _flag_value(self.argv, "--model", "-m") or (self._zcode_model() if self.cli == "zcode" else None) or self.scenario.get("default_model") or ""
        allowed = _flag_value(self.argv, "--allowedTools", "--allowed-tools")
        servers = self.mcp_status
        if servers is None:
            # Read the MCP configs only for a scenario that shows them: a codex config.toml
            # costs a tomllib import, some 10 ms on every codex run otherwise.
            shown = _mentions(self.scenario.get("steps"), "{{mcp_server_names}}")
            servers = [{"name": n, "status": "connected"} for n in self._mcp_servers()] if shown else []
        fields = self.scenario.get("mcp_server_fields")
        if isinstance(fields, dict) and fields:
            servers = [{**s, **fields} for s in servers]  # what every recorded server also said (claude 2.1.332: source)
        return {
            "model": model,
            "model_base": model.split("[", 1)[0],
            "cwd": posix.getcwd(),
            "session_id": self.session_id,
            "pid": str(posix.getpid()),
            "prompt": self.stdin_text or _positional_prompt(self.argv) or self._flag_prompt(),
            "allowed_tools": [t for t in (allowed or "").split(",") if t],
            "mcp_server_names": servers,
            "mcp_tools": [f"mcp__{n}__{t}" for n, c in self.mcp.items() for t in c.tools],
        }

    def _flag_prompt(self) -> str:
        """zcode: the `--prompt=` argument, then each `--attach` file's text (PROMPT.md)."""
        if self.cli != "zcode":
            return ""
        parts = [_flag_value(self.argv, "--prompt") or ""]
        for path in _flag_values(self.argv, "--attach"):
            try:
                parts.append(_read_text(path))
            except OSError:
                pass
        return "\n".join(p for p in parts if p)

    def _zcode_model(self) -> str | None:
        """zcode has no --model: the personal provider config (ZCODE_PERSONAL_PROVIDER_CONFIG_FILE)
        pins it, and only with `options.reasoningLevel` (without it zcode falls back to its first
        catalog model without a word: here the scenario's default_model)."""
        path = ENVIRON.get("ZCODE_PERSONAL_PROVIDER_CONFIG_FILE")
        if not path or not _isfile(path):
            return None
        try:
            pick = json_loads(_read_text(path))["config"]["defaultModelSelection"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if not isinstance(pick, dict) or not (pick.get("options") or {}).get("reasoningLevel"):
            return None
        return pick.get("modelId") if isinstance(pick.get("modelId"), str) else None

    def _zcode_servers(self) -> dict:
        """zcode: `mcp.servers` of the user config (`$ZCODE_DATA_BASE_DIR/config.json`, else
        `~/.zcode/config.json`), then of the project config `<cwd>/.zcode/config.json` (the
        `--cwd` dir, else the process cwd) on top."""
        data = ENVIRON.get("ZCODE_DATA_BASE_DIR") or _join(ENVIRON.get("HOME", "/nonexistent"), ".zcode")
        project = _flag_value(self.argv, "--cwd") or posix.getcwd()
        servers: dict = {}
        for path in (_join(data, "config.json"), _join(_join(project, ".zcode"), "config.json")):
            if _isfile(path):
                try:
                    found = (json_loads(_read_text(path)).get("mcp") or {}).get("servers") or {}
                    servers.update({k: v for k, v in found.items() if isinstance(v, dict)})
                except (OSError, ValueError, AttributeError):
                    pass
        return servers

    def _mcp_servers(self) -> dict:
        """{name: entry} from wherever this CLI reads MCP servers: claude `--mcp-config` (file
        or inline JSON), codex `$CODEX_HOME/config.toml`, cursor `$HOME/.cursor/mcp.json` or
        `./.cursor/mcp.json`."""
        servers: dict = {}
        for value in self._mcp_configs():
            try:
                text = value if value.lstrip().startswith("{") else _read_text(value)
                servers.update(json_loads(text).get("mcpServers") or {})
            except (OSError, ValueError, AttributeError):
                pass
        if self.cli == "codex":
            servers.update(self._codex_servers())
        if self.cli == "deepseek":
            servers.update(self._deepseek_servers())
        if self.cli == "opencode":
            servers.update(self._opencode_servers())
        if self.cli == "zcode":
            servers.update(self._zcode_servers())
        # cursor: the user's `~/.cursor/mcp.json`, then the project's (the `--workspace` dir, else
        # the cwd), which wins for a server of the same name: a worktree's own file that names
        # a server like the bridge replaces it, and the checks see the replacement
        project = (_flag_values(self.argv, "--workspace") or [posix.getcwd()])[-1]
        for base, wins in ((ENVIRON.get("HOME", "/nonexistent"), False), (project, True)) if self.cli == "cursor-agent" else ():
            path = _join(_join(base, ".cursor"), "mcp.json")
            if _isfile(path):
                try:
                    cfg = json_loads(_read_text(path))
                    servers.update({k: v for k, v in (cfg.get("mcpServers") or {}).items() if wins or k not in servers})
                except (OSError, ValueError, AttributeError):
                    pass
        return servers

    def _deepseek_servers(self) -> dict:
        """deepseek (the SDK driver): the stdio servers of every `@deepseek-ai/dsh-mcp-client`
        entry inserted by the Cordis patch files named in the driver request on stdin (JSON)."""
        servers: dict = {}
        try:
            patches = json_loads(self.stdin_text or "{}").get("patches") or []
        except (ValueError, AttributeError):
            return servers
        for path in patches:
            try:
                entries = json_loads(_read_text(path))
            except (OSError, ValueError):
                continue
            for patch in entries if isinstance(entries, list) else []:
                for entry in (patch.get("insert") or []) if isinstance(patch, dict) else []:
                    cfg = entry.get("config") if isinstance(entry, dict) else None
                    if (
                        isinstance(cfg, dict)
                        and entry.get("name") == "@deepseek-ai/dsh-mcp-client"
                        and cfg.get("transport") == "stdio"
                        and entry.get("disabled") is not True
                    ):
                        servers[str(cfg.get("serverName"))] = {"command": cfg.get("command"), "args": cfg.get("args") or [], "env": cfg.get("env") or {}}
        return servers

    def _codex_servers(self) -> dict:
        """codex: `[mcp_servers.<name>]` of its configuration (`_codex_config`)."""
        servers = self._codex_config().get("mcp_servers") or {}
        return {k: v for k, v in servers.items() if isinstance(v, dict)} if isinstance(servers, dict) else {}

    def _codex_config(self) -> dict:
        """codex: `$CODEX_HOME/config.toml` (else `~/.codex`), then each `-c`/`--config
        key=value` override on top (the value parsed as TOML, else a string), as `codex`
        itself merges them."""
        codex_home = ENVIRON.get("CODEX_HOME") or _join(ENVIRON.get("HOME", "/nonexistent"), ".codex")
        codex_config = _join(codex_home, "config.toml")
        cfg: dict = {}
        if _isfile(codex_config):
            try:
                cfg = toml_loads(_read_text(codex_config))
            except (OSError, ValueError):
                cfg = {}
        for override in _flag_values(self.argv, "-c") + _flag_values(self.argv, "--config"):
            key, eq, raw = override.partition("=")
            if not eq:
                continue
            try:
                value = toml_loads("v = " + raw.strip())["v"]
            except (ValueError, KeyError):
                value = raw.strip()
            parts = [k.strip().strip('"').strip("'") for k in key.strip().split(".")]
            node = cfg
            for part in parts[:-1]:
                node = node.setdefault(part, {}) if isinstance(node.get(part, {}), dict) else {}
            node[parts[-1]] = value
        return cfg

    def _opencode_config(self) -> dict:
        """opencode: the config named by `OPENCODE_CONFIG` (a file), else `OPENCODE_CONFIG_CONTENT`."""
        for text in (_read_text(ENVIRON["OPENCODE_CONFIG"]) if _isfile(ENVIRON.get("OPENCODE_CONFIG", "")) else "", ENVIRON.get("OPENCODE_CONFIG_CONTENT", "")):
            if text.strip():
                try:
                    cfg = json_loads(text)
                except ValueError:
                    continue
                if isinstance(cfg, dict):
                    return cfg
        return {}

    def _opencode_servers(self) -> dict:
        """opencode: `mcp.<name>` entries of type local (`command: [argv...]`, `environment`)."""
        out: dict = {}
        for name, entry in (self._opencode_config().get("mcp") or {}).items():
            if isinstance(entry, dict) and entry.get("type") == "local" and entry.get("enabled", True) is not False:
                command = [str(a) for a in entry.get("command") or []]
                if command:
                    out[name] = {"command": command[0], "args": command[1:], "env": entry.get("environment") or {}}
        return out

    def opencode_plugin_install(self) -> None:
        """What opencode 1.18.33 does at start in its config dir (`$XDG_CONFIG_HOME/opencode`):
        unless node_modules is there and package-lock.json lists `@opencode-ai/plugin`, it
        installs the plugin from the registry (observed: npm's cache under `$HOME/.npm`). The
        fake leaves the same trace, and records the fetch."""
        config_home = ENVIRON.get("XDG_CONFIG_HOME") or _join(ENVIRON.get("HOME", "/nonexistent"), ".config")
        config_dir = _join(config_home, "opencode")
        installed = False
        if _isdir(_join(config_dir, "node_modules")) and _isfile(_join(config_dir, "package-lock.json")):
            try:
                lock = json_loads(_read_text(_join(config_dir, "package-lock.json")))
                root = ((lock.get("packages") or {}).get("") or {}).get("dependencies") or {}
                installed = "@opencode-ai/plugin" in root
            except (OSError, ValueError, AttributeError):
                installed = False
        if installed:
            return
        home = ENVIRON.get("HOME", "")
        if home and _isdir(home):
            cache = home
            for part in (".npm", "_cacache", "index-v5"):
                cache = _join(cache, part)
                if not _isdir(cache):
                    posix.mkdir(cache, 0o755)
        if self.record_path is not None:
            self._append({"kind": "registry_fetch", "pid": posix.getpid(), "package": "@opencode-ai/plugin", "dir": config_dir})

    def _record_mcp_server(self, client) -> None:
        """The MCP server's pid: the CLI's child, so the session's tree (survivor checks)."""
        if self.record_path is not None:
            self._append({"kind": "mcp_server", "pid": posix.getpid(), "child_pid": client.pid, "name": client.name})

    def _route(self, clients: dict, tool: str):
        """The connected server a call to `tool` goes to: the only one, else the first that
        lists the tool (listing each once), else the first. Any server name, any number."""
        if len(clients) == 1:
            return next(iter(clients.values()))
        for client in clients.values():
            if not client.tools:
                try:
                    client.list_tools()
                except (OSError, ValueError, TimeoutError, EOFError):
                    continue
            if tool in client.tools:
                return client
        return next(iter(clients.values()))

    def connect_mcp(self) -> None:
        """Start and initialize each configured stdio server, as the CLI would."""
        timeout = float(self.scenario.get("mcp_timeout", 10))
        self.mcp_status = []
        for name, entry in self._mcp_servers().items():
            status = "failed"
            try:
                client = McpClient(name, entry, timeout)
                self._record_mcp_server(client)
                try:
                    client.connect(f"fake-{self.cli}")
                    client.list_tools()
                    self.mcp[name] = client
                    status = "connected"
                    if self.record_path is not None:
                        self._append({"kind": "mcp_connected", "pid": posix.getpid(), "name": name, "mono": time.monotonic(), "tools": list(client.tools)})
                except (OSError, ValueError, RuntimeError, TimeoutError, EOFError):
                    client.close()
            except (OSError, KeyError, TypeError):
                pass
            self.mcp_status.append({"name": name, "status": status})

    def close_mcp(self) -> None:
        for client in self.mcp.values():
            client.close()

    def _mcp_configs(self) -> list[str]:
        out: list[str] = []
        for value in _flag_values(self.argv, "--mcp-config"):
            out.append(value)
        if self.cli == "deepseek":  # the Cordis patch files of the driver request (stdin)
            try:
                out.extend(str(p) for p in json_loads(self.stdin_text or "{}").get("patches") or [])
            except (ValueError, AttributeError):
                pass
        if self.cli == "gemini":  # user settings, then the workspace's (gemini merges both)
            for base in (ENVIRON.get("HOME", "/nonexistent"), posix.getcwd()):
                path = _join(_join(base, ".gemini"), "settings.json")
                if _isfile(path) and path not in out:
                    out.append(path)
        return out

    def record_invocation(
        self, stdin_type: str, stdin_bytes: int, stdin_eof_mono: float | None = None, stdin_read_mono: float | None = None, stdin_data_mono: float | None = None
    ) -> None:
        if self.record_path is None:
            return
        configs = {}
        for n, name in enumerate(self._mcp_configs(), 1):
            if name.lstrip().startswith("{"):  # claude's --mcp-config also takes the JSON itself
                configs[f"--mcp-config #{n} (inline JSON)"] = name
                continue
            try:
                configs[name] = _read_text(name)
            except OSError as exc:
                configs[name] = f"<unreadable: {exc.__class__.__name__}>"
        self._append(
            {
                "kind": "invocation",
                "cli": self.cli,
                "pid": posix.getpid(),
                "pidns": _pidns(),  # a sandboxed fake's pids are its namespace's (fakes.FakeCli.records)
                "pidns_born": _pidns_born(),  # ... of that namespace, not a later one with its number
                "argv": [self.argv0, *self.argv],
                "env": dict(ENVIRON),
                "cwd": posix.getcwd(),
                "stdin_type": stdin_type,
                "stdout_type": _stdin_type(1),
                "stdin": self.stdin_text[:RECORDED_STDIN_LIMIT],
                "stdin_bytes": stdin_bytes,
                "stdin_eof_mono": stdin_eof_mono,
                "stdin_read_mono": stdin_read_mono,
                "stdin_data_mono": stdin_data_mono,
                "mcp_configs": configs,
                "attachments": self._attachments(),
                "instructions": self._instructions(),
                "cwd_entries": sorted(posix.listdir(".")),
                "config_dirs": _config_dirs(),
                "ts": time.time(),
                "mono": time.monotonic(),
            }
        )

    def _instructions(self) -> dict:
        """The instruction files this CLI loads at start: {path: text (up to 1 MiB)}, as the real
        CLI finds them (doc/SPEC-fakecli.md "Instruction files"):

        - claude: `CLAUDE.md` and `CLAUDE.local.md` in its cwd and every parent up to `/`
          (unless `CLAUDE_CODE_DISABLE_CLAUDE_MDS` is set);
        - cursor-agent: `AGENTS.md` in its cwd;
        - codex: `$CODEX_HOME/AGENTS.override.md`, else `AGENTS.md` (the global file), then,
          unless `project_doc_max_bytes` is 0, in each directory from the project root down to
          its cwd (`-C`/`--cd`, else the process cwd) the first of `AGENTS.override.md`,
          `AGENTS.md` and the `project_doc_fallback_filenames`; the project root is the nearest
          ancestor holding one of `project_root_markers` (default `.git`; an empty list
          disables the walk), without one only the cwd is searched;
        - gemini: `$GEMINI_CLI_HOME` (else `$HOME`) `/.gemini/GEMINI.md`, then each `GEMINI.md`
          (plus the `context.fileName` names) from its cwd up to the nearest ancestor holding
          one of `context.memoryBoundaryMarkers` (default `.git`; an empty list disables the
          walk), without one only the cwd;
        - deepseek (the dsh runtime's `agent-instructions` plugin, unless a patch disables it):
          `AGENTS.md` in the DSH home (the request's `dsh_home`, else `$DSH_HOME`, else
          `~/.dsh`) and the agents home (`$DSH_AGENTS_HOME`, else `~/.agents`), then every
          `AGENTS.md`, `CLAUDE.md`, `AGENTS.local.md`, `CLAUDE.local.md` from the nearest
          ancestor of the request's `cwd` holding a `.git` down to it (none: the cwd alone)."""
        out: dict = {}
        if self.cli == "deepseek":
            for path in self._deepseek_instruction_paths():
                self._read_instruction(out, path)
            return out
        if self.cli == "codex":
            for path in self._codex_instruction_paths():
                self._read_instruction(out, path)
            return out
        if self.cli == "gemini":
            for path in self._gemini_instruction_paths():
                self._read_instruction(out, path)
            return out
        names: tuple = ()
        walk = False
        if self.cli == "claude" and not ENVIRON.get("CLAUDE_CODE_DISABLE_CLAUDE_MDS"):
            names, walk = ("CLAUDE.md", "CLAUDE.local.md"), True
        elif self.cli == "cursor-agent":
            names = ("AGENTS.md",)
        directory = posix.getcwd()
        while names:
            for name in names:
                path = _join(directory, name)
                if _isfile(path):
                    self._read_instruction(out, path)
            parent = directory.rsplit("/", 1)[0] or "/"
            if not walk or parent == directory:
                break
            directory = parent
        return out

    @staticmethod
    def _read_instruction(out: dict, path: str) -> None:
        try:
            out[path] = _read_text(path)[:RECORDED_STDIN_LIMIT]
        except OSError:
            pass

    def _codex_instruction_paths(self) -> list[str]:
        """codex's AGENTS.md discovery (codex-rs core agents_md.rs): see `_instructions`."""
        codex_home = ENVIRON.get("CODEX_HOME") or _join(ENVIRON.get("HOME", "/nonexistent"), ".codex")
        found: list[str] = []
        for name in ("AGENTS.override.md", "AGENTS.md"):
            path = _join(codex_home, name)
            try:
                if _isfile(path) and _read_text(path).strip():
                    found.append(path)
                    break
            except OSError:
                continue
        cfg = self._codex_config()
        budget = cfg.get("project_doc_max_bytes", 32 * 1024)
        if budget == 0:
            return found
        cwd = _flag_value(self.argv, "-C", "--cd") or posix.getcwd()
        cwd = _normpath(_join(posix.getcwd(), cwd))
        markers = cfg.get("project_root_markers", [".git"])
        markers = [m for m in markers if isinstance(m, str) and m] if isinstance(markers, list) else [".git"]
        names = ["AGENTS.override.md", "AGENTS.md"]
        fallbacks = cfg.get("project_doc_fallback_filenames") or []
        names += [n for n in fallbacks if isinstance(n, str) and n and n not in names] if isinstance(fallbacks, list) else []
        return found + [p for d in _up_to_marker(cwd, markers) for p in _first_file(d, names)]

    def _deepseek_instruction_paths(self) -> list[str]:
        """The dsh runtime's workspace-instruction discovery: see `_instructions`."""
        try:
            request = json_loads(self.stdin_text or "{}")
        except ValueError:
            request = {}
        request = request if isinstance(request, dict) else {}
        for path in request.get("patches") or []:
            try:
                entries = json_loads(_read_text(path))
            except (OSError, ValueError):
                continue
            for entry in entries if isinstance(entries, list) else []:
                if isinstance(entry, dict) and entry.get("id") == "agent-instructions" and entry.get("disabled") is True:
                    return []
        home = ENVIRON.get("HOME", "/nonexistent")
        dsh_home = request.get("dsh_home") or ENVIRON.get("DSH_HOME") or _join(home, ".dsh")
        agents_home = ENVIRON.get("DSH_AGENTS_HOME") or _join(home, ".agents")
        found = [p for p in (_join(str(dsh_home), "AGENTS.md"), _join(agents_home, "AGENTS.md")) if _isfile(p)]
        cwd = _normpath(_join(posix.getcwd(), str(request.get("cwd") or posix.getcwd())))
        names = ("AGENTS.md", "CLAUDE.md", "AGENTS.local.md", "CLAUDE.local.md")
        for directory in _up_to_marker(cwd, [".git"]):
            found += [p for p in (_join(directory, n) for n in names) if _isfile(p) and p not in found]
        return found

    def _gemini_instruction_paths(self) -> list[str]:
        """gemini's GEMINI.md discovery (gemini-cli core memoryDiscovery.ts): see `_instructions`."""
        home = ENVIRON.get("GEMINI_CLI_HOME") or ENVIRON.get("HOME", "/nonexistent")
        context: dict = {}
        for base in (home, posix.getcwd()):  # user settings, then the workspace's on top
            path = _join(_join(base, ".gemini"), "settings.json")
            if _isfile(path):
                try:
                    found = json_loads(_read_text(path)).get("context")
                except (OSError, ValueError, AttributeError):
                    continue
                if isinstance(found, dict):
                    context.update(found)
        extra = context.get("fileName")
        extra = [extra] if isinstance(extra, str) else extra if isinstance(extra, list) else []
        names = [n for n in [*[e for e in extra if isinstance(e, str) and e.strip()], "GEMINI.md"]]
        names = [n for i, n in enumerate(names) if n not in names[:i]]
        found = [p for p in (_join(_join(home, ".gemini"), n) for n in names) if _isfile(p)]
        markers = context.get("memoryBoundaryMarkers", [".git"])
        markers = [m for m in markers if isinstance(m, str) and m] if isinstance(markers, list) else [".git"]
        markers = [m for m in markers if not m.startswith("/") and ".." not in m]
        global_dir = _join(home, ".gemini")
        walked: list[str] = []
        for directory in reversed(_up_to_marker(posix.getcwd(), markers)):  # from the cwd upwards
            if directory == global_dir:
                break  # the walk stops at the global dir (its file is the global one)
            walked[:0] = [p for p in (_join(directory, n) for n in names) if _isfile(p) and p not in found]
        return found + walked

    def _attachments(self) -> dict:
        """zcode `--attach` files at start: {path: text (up to 1 MiB)}."""
        out = {}
        for path in _flag_values(self.argv, "--attach") if self.cli == "zcode" else ():
            try:
                out[path] = _read_text(path)[:RECORDED_STDIN_LIMIT]
            except OSError as exc:
                out[path] = f"<unreadable: {exc.__class__.__name__}>"
        return out

    def _stdin_progress(self, kind: str, mono: float, nbytes: int) -> None:
        """While reading stdin to EOF: began waiting (`stdin_wait`), a chunk came (`stdin_data`),
        so the kit sees a pipe held open while the CLI still waits on it (kit/watchdog.py)."""
        if self.record_path is not None:
            self._append({"kind": kind, "pid": posix.getpid(), "mono": mono, "bytes": nbytes})

    def record_step(self, index: int, step: dict) -> None:
        """One progress line: this step is done (for hang/exit: about to happen)."""
        if self.record_path is None:
            return
        action = next((k for k in step if k in _ACTIONS), "?")
        self._append({"kind": "step", "pid": posix.getpid(), "index": index, "action": action, "mono": time.monotonic(), "ts": time.time()})

    def _contain_probe(self, probe: dict) -> None:
        """What a hostile CLI tries against its containment (conformance contain.*), each
        recorded as what it could do, never what it read: one `contain_probe` record.
        `read`: a file (the worktree's) read directly; `environ_canary`: whether any
        /proc/<pid>/environ it can read holds that value (another session's token);
        `tamper_self`: a line appended to its own executable; `open_up`: TMPDIR and the run
        dir (HOME's parent) chmod 0777 with a mode-0 subdir left in TMPDIR."""
        out = {"kind": "contain_probe", "pid": posix.getpid()}
        path = probe.get("read")
        if isinstance(path, str) and path:
            try:
                fd = posix.open(path, posix.O_RDONLY)
                out["read_ok"] = bool(posix.read(fd, 64) is not None)
                posix.close(fd)
            except OSError:
                out["read_ok"] = False
        canary = probe.get("environ_canary")
        if isinstance(canary, str) and canary:
            needle = canary.encode()
            hits = readable = 0
            for entry in posix.listdir("/proc"):
                if not entry.isdigit() or int(entry) == posix.getpid():
                    continue
                try:
                    fd = posix.open("/proc/" + entry + "/environ", posix.O_RDONLY)
                except OSError:
                    continue
                try:
                    data = b""
                    while True:
                        chunk = posix.read(fd, 65536)
                        if not chunk:
                            break
                        data += chunk
                except OSError:
                    data = b""
                finally:
                    posix.close(fd)
                readable += 1 if data else 0
                hits += 1 if needle in data else 0
            out["environ_readable"] = readable
            out["environ_hits"] = hits
        if probe.get("tamper_self"):
            try:
                fd = posix.open(self.argv0, posix.O_WRONLY | posix.O_APPEND)
                posix.write(fd, b"\n# harnesscheck contain_probe: planted\n")
                posix.close(fd)
                out["tamper_ok"] = True
            except OSError:
                out["tamper_ok"] = False
        if probe.get("open_up"):
            opened = []
            tmp = ENVIRON.get("TMPDIR") or ""
            home = ENVIRON.get("HOME") or ""
            for target in ([tmp] if tmp else []) + ([home.rstrip("/").rsplit("/", 1)[0]] if home else []):
                try:
                    posix.chmod(target, 0o777)
                    opened.append(target)
                except OSError:
                    pass
            if tmp:
                try:
                    posix.mkdir(tmp + "/locked", 0o700)
                    posix.mkdir(tmp + "/locked/deeper", 0o777)
                    posix.chmod(tmp + "/locked", 0)
                except OSError:
                    pass
            out["opened"] = len(opened)
        self._append(out)

    def _append(self, record: dict) -> None:
        assert self.record_path is not None
        data = (json_dumps(record) + "\n").encode()
        fd = posix.open(self.record_path, posix.O_WRONLY | posix.O_APPEND | posix.O_CREAT, 0o600)
        try:
            posix.write(fd, data)
        finally:
            posix.close(fd)

    # -- output helpers -----------------------------------------------------------------

    def fill(self, value, ph: dict):
        if isinstance(value, str):
            name = _whole_placeholder(value)
            if name is not None and name in ph and not isinstance(ph[name], str):
                return ph[name]
            return _fill_text(value, ph)
        if isinstance(value, list):
            return [self.fill(v, ph) for v in value]
        if isinstance(value, dict):
            return {self.fill(k, ph): self.fill(v, ph) for k, v in value.items()}
        return value

    def write(self, data: bytes, *, split: list[int] | None = None, gap: float = 0.0) -> None:
        cuts = sorted({c for c in (split or []) if 0 < c < len(data)})
        start = 0
        for cut in [*cuts, len(data)]:
            self.out.write(data[start:cut])
            self.out.flush()
            start = cut
            if gap and cut != len(data):
                time.sleep(gap)

    # -- the run ------------------------------------------------------------------------

    def run(self) -> int:
        if self.argv[:1] and self.argv[0] in ("--version", "-v", "-V"):
            sys.stdout.write((self.scenario.get("version") or VERSIONS.get(self.cli, "0.0.0")) + "\n")
            return 0
        if self.cli == "gemini" and "--skip-trust" not in self.argv and ENVIRON.get("GEMINI_CLI_TRUST_WORKSPACE") != "true":
            # observed on 0.61.0: an untrusted folder in headless mode prints this (in red) and exits 55, no stdout
            sys.stderr.write(
                "Gemini CLI is not running in a trusted directory. To proceed, either use "
                "`--skip-trust`, set the `GEMINI_CLI_TRUST_WORKSPACE=true` environment variable, "
                "or trust this directory in interactive mode.\n"
            )
            return 55
        if self.cli == "gemini" and (_flag_value(self.argv, "--model", "-m") or "auto") == "auto":
            # observed on 0.61.0: the `auto` router retries its routing call (a minute and more) before any output
            self.record_invocation(_stdin_type(), 0)
            while True:
                time.sleep(3600)
        sigterm_exit = int(self.scenario.get("sigterm_exit", 143))
        _signal.signal(_signal.SIGTERM, lambda *_: posix._exit(sigterm_exit))
        stdin_type = _stdin_type()
        eof_mono = read_mono = data_mono = None
        if self.stream_input and stdin_type not in ("tty", "closed"):
            # answer control requests (initialize, ...) until the first user message: never read to EOF
            while not self.stdin_eof:
                line = self._stdin_line()
                if line is not None and self._stream_message(line) == "user":
                    break
            eof_mono = time.monotonic() if self.stdin_eof else None
        elif self.scenario.get("stdin", "read") == "read" and stdin_type not in ("tty", "closed"):
            # read to EOF as `claude -p` does, noting when the last prompt byte came and when EOF
            # did: a pipe held open after the prompt shows as the wait between the two
            read_mono = time.monotonic()
            self._stdin_progress("stdin_wait", read_mono, 0)
            chunks = []
            while True:
                chunk = posix.read(0, 65536)
                if not chunk:
                    break
                chunks.append(chunk)
                data_mono = time.monotonic()
                self._stdin_progress("stdin_data", data_mono, len(chunk))
            raw = b"".join(chunks)
            self.stdin_bytes = len(raw)
            self.stdin_text = raw.decode("utf-8", "replace")
            eof_mono = time.monotonic()
            self.stdin_eof = True
        self.record_invocation(stdin_type, self.stdin_bytes, eof_mono, read_mono, data_mono)
        if self.cli == "opencode":
            self.opencode_plugin_install()
        if self.scenario.get("mcp") == "connect":
            self.connect_mcp()
        ph = self._ph = self.placeholders()
        try:
            for index, step in enumerate(self.scenario.get("steps", [])):
                blocking = "hang" in step or "exit" in step
                if isinstance(step.get("requests"), int) and self.record_path is not None:
                    # the real CLI made these model requests before this line: said before it is written
                    self._append({"kind": "model_requests", "pid": posix.getpid(), "index": index, "n": step["requests"], "mono": time.monotonic()})
                if blocking:
                    self.record_step(index, step)
                code = self.step(step, ph)
                if not blocking:
                    self.record_step(index, step)
                if code is not None:
                    return code
            if self.stream_input:  # the real CLI takes more messages until its stdin closes
                while not self.stdin_eof:
                    line = self._stdin_line()
                    if line is not None:
                        self._stream_message(line)
            return 0
        finally:
            self.close_mcp()

    # -- `--input-format stream-json` -----------------------------------------------------

    def _stdin_line(self) -> bytes | None:
        """The next stdin line (blocking), None at EOF (noted once in the record)."""
        while b"\n" not in self._in_buf:
            chunk = posix.read(0, 65536)
            if not chunk:
                self.stdin_eof = True
                if self.record_path is not None:
                    self._append({"kind": "stdin_eof", "pid": posix.getpid(), "mono": time.monotonic()})
                line, self._in_buf = self._in_buf, b""
                return line or None
            self._in_buf += chunk
            self.stdin_bytes += len(chunk)
        line, self._in_buf = self._in_buf.split(b"\n", 1)
        return line

    def _stream_message(self, line: bytes) -> str | None:
        """One stream-json input message: a control request is answered (success); a user
        message's text becomes the prompt. Returns "user", "interrupt" or None."""
        try:
            msg = json_loads(line.decode("utf-8", "replace"))
        except ValueError:
            return None
        if not isinstance(msg, dict):
            return None
        if msg.get("type") == "control_request":
            request = msg.get("request") or {}
            subtype = request.get("subtype")
            body = {"commands": [], "models": [], "account": {}} if subtype == "initialize" else {}
            self.write(
                self._dumps_line({"type": "control_response", "response": {"subtype": "success", "request_id": msg.get("request_id"), "response": body}})
            )
            return "interrupt" if subtype == "interrupt" else None
        if msg.get("type") == "user":
            content = (msg.get("message") or {}).get("content")
            if isinstance(content, list):
                content = "".join(b.get("text", "") for b in content if isinstance(b, dict))
            self.stdin_text += str(content or "")
            return "user"
        return None

    @staticmethod
    def _dumps_line(obj: dict) -> bytes:
        return json_dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n"

    def step(self, step: dict, ph: dict) -> int | None:
        if "emit" in step:
            payload = self.fill(step["emit"], ph)
            if isinstance(payload, dict) and isinstance(payload.get("session_id"), str):
                self._printed_session = payload["session_id"]  # the session the CLI's own events name
            if self.json_output and isinstance(payload, dict) and payload.get("type") != "result":
                return None  # `--output-format json`: only the final result object is printed
            line = payload if isinstance(payload, str) else json_dumps(payload, separators=(",", ":"), ensure_ascii=False)
            self.write(line.encode("utf-8") + b"\n", split=step.get("split"), gap=float(step.get("gap", 0)))
        elif "delay" in step:
            time.sleep(float(step["delay"]))
        elif "noise" in step:
            self.write(self.fill(step["noise"], ph).encode("utf-8") + b"\n")
        elif "oversize" in step:
            self.write_oversize(int(step["oversize"]), step.get("template"), ph)
        elif "raw" in step:
            text = self.fill(step["raw"], ph).encode("utf-8")
            self.write(text + (b"\n" if step.get("newline", False) else b""), split=step.get("split"))
        elif "invalid_utf8" in step:
            self.write(b"\xff\xfe\xfd not utf-8 \xc3\x28 \xed\xa0\x80\n")
        elif "stderr" in step:
            chunk = self.fill(step["stderr"], ph).encode("utf-8") + (b"\n" if step.get("newline", True) else b"")
            for _ in range(int(step.get("repeat", 1))):
                self.err.write(chunk)
            self.err.flush()
        elif "spawn" in step:
            setsid = bool(step.get("setsid", False))
            # like subprocess.Popen(shlex.split(...), start_new_session=setsid, stdin=DEVNULL):
            # stdout and stderr are the fake's own (the grandchild holds the pipes open)
            argv = _split_command(step["spawn"])
            child_pid = _spawn(argv, ENVIRON, [(posix.POSIX_SPAWN_OPEN, 0, DEVNULL, posix.O_RDWR, 0)], setsid=setsid)
            if argv and argv[0].rsplit("/", 1)[-1] == "env":
                _await_exec(child_pid, "env")  # the escapee is what it claims before the next step, however loaded the machine
            if self.record_path is not None:
                self._append({"kind": "spawn", "pid": posix.getpid(), "child_pid": child_pid, "setsid": setsid})
        elif "contain_probe" in step:
            self._contain_probe(self.fill(step["contain_probe"], ph))
        elif "ignore_sigterm" in step:
            _signal.signal(_signal.SIGTERM, _signal.SIG_IGN if step["ignore_sigterm"] else _signal.SIG_DFL)
        elif "hang" in step:
            while self.stream_input and not self.stdin_eof:
                line = self._stdin_line()
                if line is not None and self._stream_message(line) == "interrupt":
                    self.write(
                        self._dumps_line(
                            {
                                "type": "result",
                                "subtype": "error_during_execution",
                                "is_error": True,
                                "num_turns": 1,
                                "result": "",
                                "session_id": self.session_id,
                            }
                        )
                    )
                    return None
            while True:
                time.sleep(3600)
        elif "mcp_call" in step:
            call = self.fill(step["mcp_call"], ph)
            client = self.mcp.get(call["server"]) if call.get("server") else (self._route(self.mcp, call.get("tool", "")) if self.mcp else None)
            if client is None:
                ph["mcp_result_text"], ph["mcp_result_is_error"] = "MCP server not connected", True
            else:
                ph["mcp_result_text"], ph["mcp_result_is_error"], _ = client.call(call["tool"], call.get("arguments") or {})
        elif "exit" in step:
            self.out.flush()
            self.err.flush()
            return int(step["exit"])
        elif "mcp_calls" in step:
            self.mcp_calls(step["mcp_calls"], step.get("server"), float(step.get("timeout", 60)))
        elif "mcp_probe" in step:
            self.mcp_probe(step["mcp_probe"])
        elif "mcp_stall" in step:
            self.mcp_stall(step["mcp_stall"])
        else:
            raise SystemExit(f"fake {self.cli}: unknown scenario step {sorted(step)}")
        return None

    # -- the "mcp_calls" step ----------------------------------------------------------

    def mcp_calls(self, calls: list[dict], name: str | None, timeout_s: float = 60.0) -> None:
        """Call tools like the CLI would; one `mcp_result` record per call. Reuses the
        connections made by `"mcp": "connect"`, else starts the configured servers for this
        step: the one named, or every stdio server configured (any name), each call routed to
        the server that lists its tool."""
        record = self._append if self.record_path is not None else (lambda rec: None)
        clients: dict = {}
        own: list = []
        if name and name in self.mcp:
            clients[name] = self.mcp[name]
        elif not name and self.mcp:
            clients = dict(self.mcp)
        else:
            configured = self._mcp_servers()
            names = [name] if name else [n for n, e in configured.items() if isinstance(e, dict) and e.get("command")]
            if not names:
                record({"kind": "mcp_result", "error": "no stdio MCP server configured"})
                return
            errors: list[str] = []
            slow = False  # a server still starting when the wait ran out (not one that failed)
            for server in names:
                entry = configured.get(server)
                if not entry or not entry.get("command"):
                    record({"kind": "mcp_result", "error": f"no MCP server {server!r} configured"})
                    return
                try:
                    client = McpClient(server, entry, timeout_s)
                except OSError as exc:
                    errors.append(f"cannot start {entry['command']}: {exc.strerror}")
                    continue
                self._record_mcp_server(client)
                own.append(client)
                try:
                    client.connect(f"fake-{self.cli}")
                except TimeoutError:
                    slow = True
                    errors.append(f"the MCP server {server!r} never answered initialize (still running after {timeout_s:g} s)")
                    continue
                except (EOFError, RuntimeError, OSError):
                    errors.append(f"the MCP server {server!r} never answered initialize")
                    continue
                clients[server] = client
                record({"kind": "mcp_connected", "pid": posix.getpid(), "name": server, "mono": time.monotonic()})
            # like the CLI: a server that fails to start is reported and the others serve the calls;
            # only when none could be reached do the calls fail
            for error in errors:
                record(
                    {
                        "kind": "mcp_result" if not clients else "mcp_server_failed",
                        "error": error,
                        **({"starting": True} if slow and "still running" in error else {}),
                    }
                )
            if not clients:
                for client in own:
                    client.close()
                return
        try:
            for call in calls:
                args = call.get("arguments", {})
                client = self._route(clients, call["name"])
                self.announce_tool_call(client.name, call["name"], args)
                try:
                    text, is_error, protocol_error = client.call(call["name"], args)
                except (TimeoutError, EOFError):
                    text, is_error, protocol_error = "", True, "no answer"
                self.announce_tool_call(client.name, call["name"], args, done=(text, protocol_error == "no answer"), is_error=bool(is_error))
                record(
                    {
                        "kind": "mcp_result",
                        "name": call["name"],
                        "arguments": args,
                        "server": client.name,
                        "is_error": is_error,
                        "text": text,
                        "protocol_error": protocol_error,
                    }
                )
        except (BrokenPipeError, OSError) as exc:
            record({"kind": "mcp_result", "error": f"MCP session broke: {exc.__class__.__name__}"})
        finally:
            for client in own:
                client.close()

    def mcp_stall(self, call: dict) -> None:
        """Stop the server `call` routes to (SIGSTOP) and send it the call (see ``mcp_stall``)."""
        if not self.mcp:
            self.connect_mcp()
        if not self.mcp:
            if self.record_path is not None:
                self._append({"kind": "mcp_result", "error": "no stdio MCP server could be started"})
            return
        client = self._route(self.mcp, call["name"])
        posix.kill(client.pid, _signal.SIGSTOP)
        if self.record_path is not None:
            self._append({"kind": "mcp_stalled", "pid": posix.getpid(), "server": client.name, "child_pid": client.pid, "mono": time.monotonic()})
        self.announce_tool_call(client.name, call["name"], call.get("arguments") or {})
        client.next_id += 1
        client._send(
            {"jsonrpc": "2.0", "id": client.next_id, "method": "tools/call", "params": {"name": call["name"], "arguments": call.get("arguments") or {}}}
        )

    def mcp_probe(self, spec: dict) -> None:
        """Send every configured stdio server (any name) the probes, one at a time, and record
        what answered each (see ``mcp_probe`` in the module docstring)."""
        record = self._append if self.record_path is not None else (lambda rec: None)
        bound = float(spec.get("bound_s", 15))
        configured = self._mcp_servers()
        names = [n for n, e in configured.items() if isinstance(e, dict) and e.get("command")]
        if not names:
            record({"kind": "mcp_probe", "server": None, "error": "no stdio MCP server configured"})
        for server in names:
            entry = configured[server]
            try:
                client = McpClient(server, entry, float(spec.get("start_s", 60)))
            except OSError as exc:
                record({"kind": "mcp_probe", "server": server, "error": f"cannot start {entry['command']}: {exc.strerror}"})
                continue
            self._record_mcp_server(client)
            try:
                try:
                    client.connect(f"fake-{self.cli}")
                except (TimeoutError, EOFError, RuntimeError, OSError):
                    record({"kind": "mcp_probe", "server": server, "error": "never answered initialize"})
                    continue
                for probe in spec.get("probes") or []:
                    try:
                        answer = client.probe(probe["line"], probe.get("id"), bool(probe.get("malformed")), bound)
                    except OSError:
                        answer = None  # the server closed its stdin: it will answer nothing more
                    if isinstance(answer, dict) and isinstance(answer.get("result"), dict):
                        # keep the record small: what a check judges is the kind of answer
                        result = answer["result"]
                        answer = {
                            **answer,
                            "result": {
                                "isError": result.get("isError"),
                                "tools": [t.get("name") for t in result.get("tools") or [] if isinstance(t, dict)],
                                "text": "".join(c.get("text", "") for c in result.get("content") or [] if isinstance(c, dict))[:400],
                            },
                        }
                    record({"kind": "mcp_probe", "server": server, "label": probe.get("label"), "answer": answer})
                    if answer is None:
                        break
            finally:
                client.close()

    def announce_tool_call(self, server: str, tool: str, args: dict, done: tuple[str, bool] | None = None, is_error: bool = False) -> None:
        """Print the event the real CLI prints around an MCP tool call, where its shape was
        recorded: codex 0.171.0's `item.started` / `item.completed` `mcp_tool_call` items
        (fixtures/codex/tool_calls.json), arguments included, as a transport's event log and
        audit then see them; claude's assistant `tool_use` block named `mcp__<server>__<tool>`
        before the call and the user `tool_result` after it (`is_error` for a tool error or no
        answer), with `--output-format stream-json`, as 2.1.332 prints them (fixtures/claude/tool_calls.json).
        Other CLIs: nothing (their shapes are in their fixtures only)."""
        if self.cli == "claude" and _flag_value(self.argv, "--output-format") == "stream-json":
            self._announce_claude_tool_call(server, tool, args, done, is_error)
            return
        if self.cli != "codex" or self.json_output:
            return
        self._tool_items = getattr(self, "_tool_items", 0) + (0 if done else 1)
        item = {
            "id": f"item_mcp_{self._tool_items}",
            "type": "mcp_tool_call",
            "server": server,
            "tool": tool,
            "arguments": args,
            "result": None,
            "error": None,
            "status": "in_progress",
        }
        if done is not None:
            text, failed = done  # an MCP tool error is a completed call carrying its error text
            if failed:
                item.update(error={"message": text}, status="failed")
            else:
                item.update(result={"content": [{"type": "text", "text": text}], "structured_content": None}, status="completed")
        event = {"type": "item.completed" if done is not None else "item.started", "item": item}
        self.write(json_dumps(event, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n")

    def _announce_claude_tool_call(self, server: str, tool: str, args: dict, done: tuple[str, bool] | None, is_error: bool) -> None:
        """claude's pair of events around one MCP tool call (shapes of fixtures/claude/tool_calls.json)."""
        ph = getattr(self, "_ph", None) or {}
        session = getattr(self, "_printed_session", None) or self.session_id
        if done is None:
            self._tool_items = getattr(self, "_tool_items", 0) + 1
        use_id = f"toolu_fake{self._tool_items:04d}"
        if done is None:
            event = {
                "type": "assistant",
                "message": {
                    "id": f"msg_fake_tool{self._tool_items:04d}",
                    "type": "message",
                    "role": "assistant",
                    "model": ph.get("model_base") or "",
                    "stop_reason": None,
                    "stop_sequence": None,
                    "content": [{"type": "tool_use", "id": use_id, "name": f"mcp__{server}__{tool}", "input": args}],
                },
                "parent_tool_use_id": None,
                "session_id": session,
                "uuid": _uuid4(),
            }
        else:
            text, failed = done
            content = [{"type": "text", "text": text}]
            result = {"tool_use_id": use_id, "type": "tool_result", "content": content}
            if failed or is_error:
                result["is_error"] = True
            event = {
                "type": "user",
                "message": {"role": "user", "content": [result]},
                "parent_tool_use_id": None,
                "session_id": session,
                "uuid": _uuid4(),
                "tool_use_result": {"content": content},
            }
        self.write(json_dumps(event, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n")

    def write_oversize(self, size: int, template: dict | None, ph: dict) -> None:
        """One stdout line of exactly `size` bytes and its newline: the template, its "{{pad}}"
        string filled with "A"s. Written in 1 MiB pieces: the fake never holds the whole line."""
        obj = self.fill(template or DEFAULT_OVERSIZE_TEMPLATE, {**ph, "pad": "{{pad}}"})
        head, marker, tail = json_dumps(obj, separators=(",", ":")).encode().partition(b"{{pad}}")
        if not marker:
            raise SystemExit('oversize template needs a "{{pad}}" string')
        fill = size - len(head) - len(tail)
        if fill < 0:
            raise SystemExit(f"oversize {size} is smaller than the template")
        piece = b"A" * min(fill, 1 << 20)
        self.out.write(head)
        while fill > 0:
            self.out.write(piece if fill >= len(piece) else piece[:fill])
            fill -= len(piece)
        self.out.write(tail + b"\n")
        self.out.flush()


#: The action keys of a step (the other keys are modifiers), as named in progress records.
_ACTIONS = ("emit", "delay", "noise", "oversize", "raw", "invalid_utf8", "stderr", "spawn", "ignore_sigterm", "hang", "exit", "mcp_call", "mcp_calls")

#: Steps that only write stdout (render() replays them; the others are side effects).
_OUTPUT_STEPS = ("emit", "noise", "oversize", "raw", "invalid_utf8")


def render(cli: str, scenario: dict, argv: list[str] | None = None, *, stdin_text: str = "", cwd: str = "/scratch") -> tuple[bytes, int | None]:
    """The stdout bytes a scenario writes and its exit code (None: it hangs), without running it.

    No sleeping, spawning or signals: for parser tests and benchmarks.
    """
    import io

    fake = Fake(cli, cli, list(argv or []), scenario=scenario)
    fake.out = io.BytesIO()
    fake.err = io.BytesIO()
    fake.stdin_text = stdin_text
    ph = {**fake.placeholders(), "cwd": cwd}
    for step in scenario.get("steps", []):
        if "hang" in step:
            return fake.out.getvalue(), None
        if "exit" in step:
            return fake.out.getvalue(), int(step["exit"])
        if any(k in step for k in _OUTPUT_STEPS):
            fake.step(step, ph)
    return fake.out.getvalue(), 0


def _fixture_dir(cli: str) -> str:
    return {"cursor-agent": "cursor"}.get(cli, cli)


def main(cli: str, argv0: str | None = None) -> int:
    """Entry point of fake_clis/<cli> and of the per-test wrappers."""
    fake = Fake(cli, argv0 or sys.argv[0], sys.argv[1:])
    try:
        code = fake.run()
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:
        posix._exit(141)
    # Everything is out: stdout/stderr flushed just now (and after every step), records
    # written with unbuffered posix.write, MCP servers closed and reaped by run(). What is left
    # is the interpreter's teardown (module and object finalization, a few ms on every run
    # of the fake), which has nothing to write: skip it.
    posix._exit(code)
