"""The loopback level's kit-free parts: the kit's abstract scenarios as scripts for the real
CLIs, the exec wrapper that records a CLI's invocation, the /proc watcher of its
descendants, and the backend's own transport pointed at a scripted model server.

The kit's adapter built on them is `harnesscheck.kit.loopback_adapter.LoopbackAdapter`
(layers: the kit builds on loopback/, never the other way round; tests/test_layers.py).
A scenario or transport the real CLI cannot express raises `CannotScript(reason, message)`;
the kit turns it into a cell skip with that reason code.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
from pathlib import Path
from typing import Any

from harnesscheck.backends._kit_profile import KitProfile
from harnesscheck.backends.loopback_endpoint import LoopbackEndpoint
from harnesscheck.loopback.scenario import BRIDGE_SERVER, Scenario, ServedUsage, ToolCall, Turn, status_turn

_VERSION_FLAGS = {"--version", "-v", "-V"}


class CannotScript(Exception):
    """The real CLI cannot be made to show a scenario (or run a transport) at the loopback
    level; `reason` is a kit reason code (`adapter-not-implemented`)."""

    def __init__(self, reason: str, message: str):
        self.reason, self.message = reason, message
        super().__init__(f"[{reason}] {message}")


# ---------------------------------------------------------------------------------------
# The kit's abstract scenarios, as scripts for the real CLIs


def loopback_scenario(cli: str, name: str, ws: Any, tool_calls: list | None = None, *, profile: KitProfile) -> Scenario:
    """The scripted model for a kit scenario, or CannotScript when the real CLI cannot be made
    to show it by its model server alone (malformed lines, lingering, crashes...). `cli` names
    the CLI in messages; what the script needs of that CLI is its kit `profile`'s (its wire's
    cache-write tokens, the built-in call a hostile model makes), never a branch on its name."""
    usage = ServedUsage(input=120, output=30, cache_read=7, cache_write=3 if profile.wire_cache_write else 0)
    done = Turn(text="done", usage=usage)
    if name == "success":
        return Scenario(name, (Turn(text="The answer is 42.", usage=usage),))
    if name == "tools":
        # a name the scope does not serve is called as the CLI offered it (a built-in, a placeholder)
        scoped = set(ws.scope(read_only=False).tool_names())
        calls = tuple(ToolCall(c.name, dict(c.args), builtin=c.name not in scoped) for c in tool_calls or [])
        return Scenario(name, (Turn(tool_calls=calls, usage=usage), done))
    if name == "tool_calls":
        return Scenario(
            name,
            (Turn(text="Reading.", tool_calls=(ToolCall("read_file", {"path": "README.md"}),), usage=usage), Turn(text="README greets you.", usage=usage)),
        )
    if name == "max_turns":
        return Scenario(name, (Turn(tool_calls=(ToolCall("read_file", {"path": "README.md"}),), usage=usage),), repeat_last=True)
    if name == "auth_401":
        return Scenario(name, (status_turn(401),), repeat_last=True)
    if name == "rate_limit_429":
        return Scenario(name, (status_turn(429, retry_after=1),), repeat_last=True)
    if name == "overloaded_529":
        return Scenario(name, (status_turn(529),), repeat_last=True)
    if name == "served_model_mismatch":
        return Scenario(name, (Turn(text="Served by another model.", usage=usage),), served_model="loopback-other-model")
    if name == "timeout_mid_stream":
        return Scenario(name, (Turn(text="partial", hang=True),), repeat_last=True)
    if name == "timeout_tree":
        # The real CLI's own tree at its stall: a bridge call first (the CLI has started its MCP
        # relay and our bridge child), then the model hangs. Escapees and a CLI that ignores
        # SIGTERM cannot be scripted through a model server: the fake-CLI level covers those.
        call = ToolCall("read_file", {"path": "README.md"})
        return Scenario(name, (Turn(text="Reading.", tool_calls=(call,), usage=usage), Turn(text="partial", hang=True)), repeat_last=True)
    if name == "native_tool_use":
        # a disabled built-in asked to read the sentinel outside the worktree
        if profile.loopback_builtin_read is not None:
            tool, args = profile.loopback_builtin_read(str(ws.secret))
            return Scenario(name, (Turn(tool_calls=(ToolCall(tool, args, builtin=True),), usage=usage), done))
        raise CannotScript(
            "adapter-not-implemented",
            f"no built-in call of {cli} is known to script: its profile names none a hostile model would make "
            "(a kit profile's loopback_builtin_read, an ACP profile's `shell` built-in); a call of a tool it never had would judge nothing",
        )
    raise CannotScript(
        "adapter-not-implemented",
        f"the real {cli} cannot be made to show {name!r} by a scripted model server (offline level only)",
    )


# ---------------------------------------------------------------------------------------
# Observing the real CLI from outside: an exec wrapper and a /proc watcher

_WRAPPER = """#!{python} -IS
# harnesscheck loopback: record how the CLI was started, then become it (same pid).
import json, os, stat, sys, time
def stdin_type():
    try:
        st = os.fstat(0)
    except OSError:
        return "closed"
    if stat.S_ISCHR(st.st_mode):
        if st.st_rdev == os.stat(os.devnull).st_rdev:
            return "devnull"
        return "tty" if os.isatty(0) else "other"
    if stat.S_ISFIFO(st.st_mode):
        return "pipe"
    if stat.S_ISREG(st.st_mode):
        return "file"
    return "socket" if stat.S_ISSOCK(st.st_mode) else "other"
try:
    pidns = os.readlink("/proc/self/ns/pid")  # in a sandbox, pid and ppid are its namespace's
except OSError:
    pidns = ""
try:  # when the namespace began (its init's start time): it, not a later one with its number
    with open("/proc/1/stat", "rb") as fh:
        init_stat = fh.read()
    pidns_born = int(init_stat[init_stat.rfind(b")") + 2:].split()[19])
except (OSError, ValueError, IndexError):
    pidns_born = None
rec = {{"kind": "invocation", "argv": sys.argv, "env": dict(os.environ), "cwd": os.getcwd(), "pid": os.getpid(),
        "ppid": os.getppid(), "pidns": pidns, "pidns_born": pidns_born, "stdin_type": stdin_type(), "ts": time.time(),
        "mcp_configs": {{}}}}
for i, arg in enumerate(sys.argv[:-1]):
    if arg == "--mcp-config" and sys.argv[i + 1].lstrip().startswith("{{"):  # the JSON itself
        rec["mcp_configs"][f"--mcp-config #{{i + 1}} (inline JSON)"] = sys.argv[i + 1]
    elif arg == "--mcp-config" and os.path.isfile(sys.argv[i + 1]):
        with open(sys.argv[i + 1], encoding="utf-8", errors="replace") as fh:
            rec["mcp_configs"][sys.argv[i + 1]] = fh.read()
with open({record!r}, "a", encoding="utf-8") as fh:
    fh.write(json.dumps(rec) + "\\n")
os.environ.update({short_session_env!r})  # after the record: the backend's env is what it gave
if {strace!r} and sys.argv[1:2] not in (["--version"], ["-v"]):
    os.execv({strace!r}, [{strace!r}, "-f", "-qq", "-e", {traced!r}, "-A", "-o", {log!r}, "--", {real!r}] + sys.argv[1:])
os.execv({real!r}, [{real!r}] + sys.argv[1:])
"""


#: What the exec wrapper adds to the env of the CLI it execs, after recording the env the
#: backend gave (so no check takes it for the backend's), and what the kit's ACP sessions at
#: loopback are given as injections. A loopback session lasts seconds. JavaScriptCore, the
#: engine of the Bun-built CLIs (opencode, claude, the claude claude-agent-acp runs), compiles
#: hot code with its top tier, FTL, on background threads; no session of seconds repays that:
#: 13% of `opencode acp`'s CPU to its session/new answer (2.7 -> 2.35 CPU-s) and 9% of the
#: acp-opencode loopback column's (doc/performance.md). The code is the same; only its
#: compiler tier differs. Node and native runtimes ignore the name. A host's own sessions run
#: the CLI as its vendor ships it.
SHORT_SESSION_ENV: dict[str, str] = {"JSC_useFTLJIT": "0"}

#: What a traced CLI's strace records (`-e`): the files it opens (read_opens) and the calls that
#: name a network address (read_network: connect, and the sends that carry one, DNS among them).
#: Buffers print at strace's default 32 bytes (a lookup's name; no more of a request); file names in full.
STRACED = "trace=open,openat,openat2,connect,sendto,sendmsg,sendmmsg"
STRACE_LOG = "strace.log"


def write_wrapper(directory: Path, real: Path, name: str, strace: str | None = None) -> tuple[Path, Path]:
    """An executable `directory/name` that records its invocation and execs `real` (under
    `strace -f` appending the files it opens and the network calls it makes to
    `directory/strace.log`, when `strace` is given: a session that starts the CLI once per
    turn keeps every call's).
    The record and the log are made here, empty, so a session's sandbox can bind them in
    writable (`wrapper_binds`): inside one, the wrapper's directory is read-only."""
    directory.mkdir(parents=True, exist_ok=True)
    record = directory / f"{name}.record.jsonl"
    path = directory / name
    path.write_text(
        _WRAPPER.format(
            python=sys.executable,
            record=str(record),
            real=str(real),
            strace=strace or "",
            traced=STRACED,
            log=str(directory / STRACE_LOG),
            short_session_env=SHORT_SESSION_ENV,
        ),
        encoding="utf-8",
    )
    path.chmod(0o755)
    for made in (record, directory / STRACE_LOG):
        made.touch(mode=0o600, exist_ok=True)
    return path, record


def wrapper_binds(wrapper: Path, real: Path) -> tuple[list[str], list[str]]:
    """(read-only, writable) host paths a sandboxed session run through `wrapper` needs beyond
    the wrapper's own directory (bound read-only as its install): the real CLI's install, which
    the wrapper execs, and the wrapper's record and strace log, which it writes
    (HarnessTransport.bind_in_sandbox)."""
    from harnesscheck.contain.sandbox import install_root

    directory = Path(wrapper).parent
    written = [str(p) for p in directory.iterdir() if p.name.endswith(".record.jsonl") or p.name == STRACE_LOG]
    return install_root(real), written


def read_records(record: Path) -> list[dict]:
    out = []
    try:
        lines = record.read_text(encoding="utf-8").split("\n")  # JSONL: records end at "\n" only
    except OSError:
        return out
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def proc_table() -> dict[int, int]:
    """pid -> ppid for every process (Linux /proc)."""
    table: dict[int, int] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return table
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read().decode("utf-8", "replace")
            table[int(name)] = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return table


def _read_proc(pid: int) -> dict | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = [a.decode("utf-8", "replace") for a in fh.read().split(b"\0") if a]
        with open(f"/proc/{pid}/environ", "rb") as fh:
            pairs = [e.decode("utf-8", "replace") for e in fh.read().split(b"\0") if e]
    except OSError:
        return None
    env = dict(p.split("=", 1) for p in pairs if "=" in p)
    return {"pid": pid, "argv": argv, "env": env}


def host_records(records: list[dict], known: dict[tuple[str, int], int] | None = None) -> list[dict]:
    """The wrapper's records with their pids as the host sees them: a record made inside a
    sandbox names a pid of its PID namespace (`pidns`); it becomes the host's pid (from
    `known`, what a DescendantWatcher resolved while the process ran, else looked up now:
    sandbox.host_pid, a number no process has once it is gone) and keeps the namespace's as
    `ns_pid`. A record of the host's own namespace is returned as it is."""
    from harnesscheck.contain.sandbox import host_pid, own_pidns

    mine = own_pidns()
    out = []
    for rec in records:
        pidns = rec.get("pidns") or ""
        if not pidns or pidns == mine or "pid" not in rec:
            out.append(rec)
            continue
        ns_pid = int(rec["pid"])
        found = (known or {}).get((pidns, ns_pid))
        pid = found if found is not None else host_pid(ns_pid, pidns, rec.get("pidns_born"))
        out.append({**rec, "ns_pid": ns_pid, "pid": pid})
    return out


class DescendantWatcher:
    """Polls /proc while a session runs and remembers every descendant of the CLI it sees
    (pid, argv, exec-time env), so checks can ask who survived and what env they got. A CLI
    that records itself inside a sandbox names a pid of its namespace: the watcher finds its
    host pid while it runs (`host_pids`) and watches from there, outside the namespace. A
    descendant seen before its exec is read again once it has exec'd; `stop()` returns every
    image seen (the one before an exec too: an env a process had and then dropped is evidence)."""

    def __init__(self, record: Path, interval_s: float = 0.2):
        self.record = record
        self.interval_s = interval_s
        self.seen: dict[int, dict] = {}
        #: Earlier images of pids in `seen` (each exec'd again since it was first read).
        self.earlier: list[dict] = []
        #: (pid namespace, pid in it) -> the host's pid, for each sandboxed record resolved.
        self.host_pids: dict[tuple[str, int], int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="loopback-watcher")
        self._roots: set[int] = set()

    def start(self) -> "DescendantWatcher":
        self._thread.start()
        return self

    def stop(self) -> list[dict]:
        self._stop.set()
        self._thread.join(timeout=5)
        return [*self.earlier, *self.seen.values()]

    def _host_pid(self, rec: dict) -> int:
        """The record's pid on the host (resolved once, while the process lives)."""
        from harnesscheck.contain.sandbox import find_host_pid, own_pidns

        pid, pidns = int(rec["pid"]), rec.get("pidns") or ""
        if not pidns or pidns == own_pidns():
            return pid
        key = (pidns, pid)
        if key not in self.host_pids:
            found = find_host_pid(pid, pidns, rec.get("pidns_born"))
            if found is None:
                return -1  # not (or no longer) running: nothing below it to watch
            self.host_pids[key] = found
        return self.host_pids[key]

    def _execd_since(self, pid: int) -> bool:
        """A child first seen between its fork and its exec showed its parent's argv and env:
        once its argv changes, the exec happened and its record is read again."""
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                argv = [a.decode("utf-8", "replace") for a in fh.read().split(b"\0") if a]
        except OSError:
            return False
        return argv != self.seen[pid]["argv"]

    def _loop(self) -> None:
        while not self._stop.is_set():
            for rec in read_records(self.record):
                if "pid" in rec and not set(rec.get("argv", [])[1:2]) & _VERSION_FLAGS:
                    self._roots.add(self._host_pid(rec))
            if self._roots:
                table = proc_table()
                children: dict[int, list[int]] = {}
                for pid, ppid in table.items():
                    children.setdefault(ppid, []).append(pid)
                stack = [c for r in self._roots for c in children.get(r, [])]
                while stack:
                    pid = stack.pop()
                    if pid not in self.seen or self._execd_since(pid):
                        info = _read_proc(pid)
                        if info is not None:
                            if pid in self.seen:  # exec'd since: the image seen before stays evidence
                                self.earlier.append(self.seen[pid])
                            self.seen[pid] = info
                    stack.extend(children.get(pid, []))
            self._stop.wait(self.interval_s)


_OPEN_RE = re.compile(r'^\d+\s+open(?:at2?)?\((?:AT_FDCWD, |\d+, )?"((?:[^"\\]|\\.)*)", ([A-Z_|]+).*\)\s+= (-?\d+)')


def _strace_lines(log: Path) -> list[str]:
    """The lines of a wrapper's strace log; none when it cannot be read."""
    try:
        return Path(log).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []


def read_opens(log: Path) -> list[dict]:
    """Every open the CLI's tree made (strace -f): {path, flags, ok}. Relative paths and
    unfinished lines are skipped."""
    out: list[dict] = []
    for line in _strace_lines(log):
        m = _OPEN_RE.match(line)
        if m and m.group(1).startswith("/"):
            out.append({"path": m.group(1), "flags": m.group(2), "ok": int(m.group(3)) >= 0})
    return out


_NET_CALL_RE = re.compile(r"^\d+\s+(connect|sendto|sendmsg|sendmmsg)\(")
_SOCKADDR_RE = re.compile(r"\{sa_family=AF_INET6?, [^{}]*\}")
_PORT_RE = re.compile(r"sin6?_port=htons\((\d+)\)")
_ADDR_RE = re.compile(r'inet_addr\("([^"]+)"\)|inet_pton\(AF_INET6, "([^"]+)"')
_BUFFER_RE = re.compile(r'"((?:[^"\\]|\\.)*)"')
#: A name lookup: DNS, whatever address its resolver listens on (a stub on 127.0.0.53 asks the
#: network in turn). The loopback server is addressed by its IP, so a session needs none.
DNS_PORT = 53


def read_network(log: Path) -> list[dict]:
    """Every network call the CLI's tree made (strace -f, STRACED): {call, address, port} for a
    connect or send to an IPv4/IPv6 address (attempts count, whatever they returned), and
    {call, lookup} for a send whose buffer is a DNS question (its name, cut where strace cut the
    buffer). Unix and netlink sockets are not network calls and are left out."""
    out: list[dict] = []
    for line in _strace_lines(log):
        call = _NET_CALL_RE.match(line)
        if call is None:
            continue
        for sockaddr in _SOCKADDR_RE.findall(line):
            port, addr = _PORT_RE.search(sockaddr), _ADDR_RE.search(sockaddr)
            if port and addr:
                out.append({"call": call.group(1), "address": addr.group(1) or addr.group(2), "port": int(port.group(1))})
        if call.group(1) != "connect":
            for buffer in _BUFFER_RE.findall(line):
                name = dns_question(buffer)
                if name:
                    out.append({"call": call.group(1), "lookup": name})
    return out


def dns_question(escaped: str) -> str | None:
    """The name a DNS query asks for, from strace's C-escaped print of its buffer; None when the
    buffer is no DNS query (one question, no answers, the standard-query bits)."""
    import ast
    import warnings

    try:
        with warnings.catch_warnings():  # an escape Python does not know is no query either
            warnings.simplefilter("ignore")
            data = ast.literal_eval('b"' + escaped + '"')
    except Exception:  # noqa: BLE001  (whatever does not parse as a bytes literal is no DNS buffer)
        return None
    if len(data) < 13 or data[2] & 0xF8 or data[4:6] != b"\0\1" or data[6:10] != b"\0\0\0\0":
        return None
    labels, i = [], 12
    while i < len(data) and data[i]:
        n = data[i]
        if n > 63:
            return None
        label = data[i + 1 : i + 1 + n]
        labels.append(label.decode("ascii", "replace") + ("..." if len(label) < n else ""))
        i += 1 + n
    return ".".join(labels) or None


def outside_loopback(call: dict) -> bool:
    """Whether a read_network call leaves the machine: an address that is not loopback (127/8,
    ::1, an IPv4-mapped 127/8) nor unspecified (0.0.0.0 and :: connect to this host), or any
    name lookup (DNS_PORT)."""
    import ipaddress

    if call.get("port") == DNS_PORT:
        return True
    try:
        ip = ipaddress.ip_address(str(call.get("address", "")).split("%")[0])
    except ValueError:
        return True
    mapped = getattr(ip, "ipv4_mapped", None)
    if mapped is not None:
        ip = mapped
    return not (ip.is_loopback or ip.is_unspecified)


class _TeeParser:
    """Keeps every stdout line the CLI printed (for facts and recordings), then delegates."""

    def __init__(self, inner: Any, lines: list[str]):
        self._inner = inner
        self._lines = lines

    def feed(self, line: str):
        self._lines.append(line)
        return self._inner.feed(line)

    def outcome(self, result: Any):
        return self._inner.outcome(result)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


# ---------------------------------------------------------------------------------------
# Building the real transport pointed at the server


def loopback_transport(spec, settings, *, cli_path: Path, endpoint: LoopbackEndpoint, **kwargs):
    """The backend's own transport class, pointed at `endpoint` through its explicit
    `loopback=` seam: claude-code gets ANTHROPIC_BASE_URL and a dummy subscription token as
    traced injections (no host credential read or linked); codex gets a loopback provider
    in its per-run config.toml."""
    import importlib
    import inspect

    module, _, attr = spec.factory.partition(":")
    cls = getattr(importlib.import_module(module), attr)
    params = inspect.signature(cls.__init__).parameters
    if "loopback" in params:
        return cls(spec, settings, cli_path=cli_path, loopback=endpoint, **kwargs)
    raise CannotScript("adapter-not-implemented", f"the {spec.id} transport has no loopback seam")


def wire_to_scope_name(name: str) -> str:
    """`mcp__bridge__read_file` / `mcp__bridge/read_file` / `mcp_bridge_read_file` (gemini) /
    `bridge_read_file` (opencode), `mcp__<any server>__read_file` (claude, a foreign backend's
    server) -> `read_file`; others unchanged."""
    flat = f"mcp__{BRIDGE_SERVER}__"
    if name.startswith(flat):
        return name[len(flat) :]
    if name.startswith(f"mcp_{BRIDGE_SERVER}_"):
        return name[len(f"mcp_{BRIDGE_SERVER}_") :]
    if name.startswith(f"{BRIDGE_SERVER}_"):
        return name[len(BRIDGE_SERVER) + 1 :]
    if name.startswith(f"mcp__{BRIDGE_SERVER}/"):
        return name.split("/", 1)[1]
    server, sep, tool = name[len("mcp__") :].partition("__")
    if name.startswith("mcp__") and server and sep and tool:  # claude's form for a server of any name
        return tool
    return name


def facts_from_stdout(profile: KitProfile, lines: list[str]) -> dict:
    """What the CLI itself printed that a check compares against: the vendor cost its kit
    profile reads from a line (`stdout_cost`: claude's result `total_cost_usd`, opencode's
    priced step_finish costs), summed over the lines that state one."""
    out: dict = {}
    if profile.stdout_cost is None:
        return out
    for line in lines:
        if not line.startswith("{"):
            continue
        try:
            event = json.loads(line)
        except ValueError:
            continue
        cost = profile.stdout_cost(event) if isinstance(event, dict) else None
        if cost is not None:
            out["cost_usd"] = out.get("cost_usd", 0.0) + cost
    return out
