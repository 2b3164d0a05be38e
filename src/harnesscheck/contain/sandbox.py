"""The sandbox: every CLI or agent in namespaces of its own (doc/SPEC-sandbox.md).

Requirements kept here:
- `Sandbox` is the process-layer option a transport passes to `run_process(sandbox=...)`:
  the host paths the process may read (`read_only`) and write (`writable`), each bound at its
  own path, and whether it shares the host's network (`network`; the loopback model server is
  on the host's 127.0.0.1, so every level shares it today); dirs inside a writable bind that are
  an empty tmpfs of the sandbox's own instead (`scratch`: written in memory, gone with it).
- `status()` says once per host process whether a sandbox can be had here: Linux, bubblewrap
  (`bwrap`) on the system PATH, and a trial run with the flags sessions use. Where it cannot
  (no bwrap, user/PID namespaces refused, not Linux, or disabled with
  `HARNESSCHECK_SANDBOX=0`) the session runs with the process guard alone and says so
  (`containment: "guards"`); `doctor` names the fix.
- `bwrap_argv()` builds the command: a new PID, IPC, UTS (and, where allowed, user and cgroup)
  namespace; a mount namespace holding only the system directories and a short allowlist
  of /etc read-only, a fresh /proc, a minimal /dev, an empty tmpfs /tmp, and the given binds;
  no capabilities (`--cap-drop ALL` when the host runs as root), no new privileges (bwrap
  always sets it), `--die-with-parent` (the namespace ends with the bwrap process the
  supervisor started), `--new-session` (no controlling terminal to inject into). The user's
  HOME, other users' files, /tmp of the host and the worktree are simply not there.
- `--info-fd` reports the pid of the namespace's init as the host sees it: its process group
  is the CLI's (bwrap's init and the command share the session `--new-session` makes), so
  the graceful SIGTERM reaches the CLI and not bwrap (whose death would SIGKILL the namespace
  at once).
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

#: Set to 0/false/no/off to run every session with the process guard alone (debugging).
DISABLE_VAR = "HARNESSCHECK_SANDBOX"
#: Where bwrap is looked for: the system PATH only, never the (child or user) PATH a
#: repository could influence.
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: The system, read-only (a symlink, e.g. a merged /usr's /bin -> usr/bin, is recreated as one).
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
#: What of /etc a CLI needs (name resolution, TLS roots, users, time zone, the loader, node's
#: os.userInfo()); nothing else of /etc (no shadow files, no host keys, no sudoers).
ETC_ALLOWLIST = (
    "resolv.conf",
    "hosts",
    "host.conf",
    "nsswitch.conf",
    "gai.conf",
    "services",
    "protocols",
    "passwd",
    "group",
    "localtime",
    "timezone",
    "ssl",
    "ca-certificates",
    "ca-certificates.conf",
    "pki",
    "crypto-policies",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "alternatives",
    "os-release",
    "lsb-release",
    "debian_version",
    "mime.types",
    "terminfo",
    "inputrc",
)
#: Fix text, for doctor and outcomes.
INSTALL_FIX = "install bubblewrap (`apt-get install bubblewrap`, or your system's package) and allow user namespaces"
_PROBE_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class Sandbox:
    """One process's sandbox: host paths bound in at their own path. A path that does not
    exist is left out (a CLI without a config home, say)."""

    read_only: tuple[str, ...] = ()
    writable: tuple[str, ...] = ()
    #: Share the host's network namespace: needed for 127.0.0.1 (the loopback model server,
    #: a live CLI's vendor API). False gives a namespace with only its own loopback.
    network: bool = True
    #: Refuse to run unsandboxed (a spawn error) instead of falling back to the guards.
    required: bool = False
    #: Paths hidden behind an empty read-only tmpfs inside a bound directory.
    hidden: tuple[str, ...] = field(default=())
    #: Directories inside a writable bound one that are an empty writable tmpfs instead: in
    #: memory, the sandbox's own, gone with it (what a CLI writes there never reaches the disk).
    scratch: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class SandboxStatus:
    available: bool
    bwrap: str | None
    user_namespace: bool  # bwrap could add --unshare-user
    reason: str  # why not (empty when available)
    version: str | None = None

    @property
    def containment(self) -> str:
        return "bwrap" if self.available else "guards"


def _find_bwrap() -> str | None:
    for directory in SYSTEM_PATH.split(":"):
        path = os.path.join(directory, "bwrap")
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def _disabled() -> bool:
    return os.environ.get(DISABLE_VAR, "1").strip().lower() in ("0", "false", "no", "off")


def _namespace_flags(user_namespace: bool) -> list[str]:
    flags = ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--die-with-parent", "--new-session"]
    if user_namespace:
        flags.append("--unshare-user")
    if os.geteuid() == 0:
        flags += ["--cap-drop", "ALL"]  # root in the sandbox keeps no capability
    return flags


def _system_binds() -> list[str]:
    args: list[str] = []
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    args += ["--dir", "/etc"]
    for name in ETC_ALLOWLIST:
        path = "/etc/" + name
        if not (os.path.lexists(path) and os.path.exists(path)):
            continue
        if os.path.islink(path) and _inside_system(os.path.realpath(path)):
            # kept a link, as on the host: /etc/localtime -> /usr/share/zoneinfo/<zone> names the
            # zone (a bound copy would not, and a CLI would read /etc/timezone instead)
            args += ["--symlink", os.readlink(path), path]
        else:
            args += ["--ro-bind", path, path]
    args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--dir", "/var/tmp", "--dir", "/run"]
    return args


def _inside_system(real: str) -> bool:
    """Whether a resolved path lies in the system directories bound read-only (SYSTEM_DIRS)."""
    return any(real.startswith(os.path.realpath(d) + "/") for d in SYSTEM_DIRS if os.path.isdir(d))


def _trial(bwrap: str, user_namespace: bool) -> tuple[bool, str]:
    """Run `sh -c "exit 0"` in the sandbox once. bwrap runs in a process group of its own, and
    the whole group is killed on a timeout: killing bwrap alone left the child it had cloned
    waiting forever for the uid map bwrap was to write (seen: an orphan blocked on its eventfd)."""
    argv = [bwrap, *_namespace_flags(user_namespace), *_system_binds(), "--", "/bin/sh", "-c", "exit 0"]
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env={"PATH": SYSTEM_PATH},
            cwd="/",
            start_new_session=True,
        )
    except OSError as exc:
        return False, f"bwrap did not run: {exc}"
    try:
        _, err = proc.communicate(timeout=_PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        return False, f"bwrap did not run: {exc}"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # whatever of the group is left, bwrap's clone included
        except OSError:
            pass  # nothing left: the usual case
        proc.wait()
    if proc.returncode != 0:
        return False, (err or b"").decode("utf-8", "replace").strip()[:300] or f"exit {proc.returncode}"
    return True, ""


@functools.lru_cache(maxsize=1)
def status() -> SandboxStatus:
    """Whether sessions can be sandboxed on this machine (probed once per process)."""
    if not sys.platform.startswith("linux"):
        return SandboxStatus(False, None, False, "not Linux: bubblewrap needs Linux namespaces")
    if _disabled():
        return SandboxStatus(False, None, False, f"disabled with {DISABLE_VAR}=0")
    bwrap = _find_bwrap()
    if bwrap is None:
        return SandboxStatus(False, None, False, "bubblewrap (bwrap) is not installed")
    version = None
    try:
        out = subprocess.run([bwrap, "--version"], capture_output=True, timeout=_PROBE_TIMEOUT_S, check=False, env={"PATH": SYSTEM_PATH})
        version = out.stdout.decode("utf-8", "replace").strip().split()[-1] if out.stdout.strip() else None
    except (OSError, subprocess.TimeoutExpired, IndexError):
        pass
    ok, why = _trial(bwrap, True)
    if ok:
        return SandboxStatus(True, bwrap, True, "", version)
    ok2, why2 = _trial(bwrap, False)
    if ok2:
        return SandboxStatus(True, bwrap, False, "", version)
    return SandboxStatus(False, bwrap, False, f"bwrap cannot create the namespaces here ({why or why2})", version)


def reset() -> None:
    """Forget the probe (tests, or after installing bubblewrap)."""
    status.cache_clear()


def _depth(path: str) -> int:
    return path.rstrip("/").count("/")


def _existing(paths: Iterable[str]) -> list[str]:
    out: list[str] = []
    for path in paths:
        real = os.path.abspath(os.fspath(path))
        if os.path.exists(real) and real not in out:
            out.append(real)
    return out


def bwrap_argv(sandbox: Sandbox, argv: Sequence[str], *, cwd: str, info_fd: int | None, state: SandboxStatus | None = None) -> list[str]:
    """The bwrap command that runs `argv` (argv[0] absolute) in `sandbox`, cwd `cwd`."""
    state = state or status()
    if not state.available or state.bwrap is None:
        raise RuntimeError(f"no sandbox here: {state.reason}")
    args = [state.bwrap, *_namespace_flags(state.user_namespace)]
    if not sandbox.network:
        args.append("--unshare-net")
    args += _system_binds()
    binds = [(p, "--ro-bind") for p in _existing(sandbox.read_only)]
    binds += [(p, "--bind") for p in _existing(sandbox.writable)]
    # Parents before children: a writable dir inside a read-only one is bound over it.
    binds.sort(key=lambda item: (_depth(item[0]), item[1] == "--bind"))
    for path, flag in binds:
        args += [flag, path, path]
    for path in _existing(sandbox.hidden):
        args += ["--tmpfs", path, "--remount-ro", path]
    for path in _existing(sandbox.scratch):
        args += ["--tmpfs", path]
    if info_fd is not None:
        args += ["--info-fd", str(info_fd)]
    args += ["--chdir", os.fspath(cwd), "--", *argv]
    return args


def parse_child_pid(info: bytes) -> int:
    """The host pid of the namespace's init from bwrap's --info-fd JSON (0 when absent)."""
    key = b'"child-pid"'
    at = info.find(key)
    if at < 0:
        return 0
    rest = info[at + len(key) :].lstrip(b" \t\r\n:")
    digits = b""
    for ch in rest:
        if 48 <= ch <= 57:
            digits += bytes((ch,))
        else:
            break
    return int(digits) if digits else 0


# --- pids recorded inside a sandbox --------------------------------------------------------


def own_pidns() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def start_ticks(stat: bytes) -> int | None:
    """The start time (clock ticks since boot, field 22) from a /proc/<pid>/stat's bytes."""
    fields = stat[stat.rfind(b")") + 2 :].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def pidns_born() -> int | None:
    """When this process's PID namespace began: its init's (`/proc/1`) start time. A recorded
    namespace is named by `pidns` *and* this: the kernel gives a dead namespace's inode number
    to the next one made (another session's sandbox, seconds later), and a pid mapped through
    the number alone would name that session's process (which a survivor sweep then kills)."""
    try:
        with open("/proc/1/stat", "rb") as fh:
            return start_ticks(fh.read())
    except OSError:
        return None


def host_pid(pid: int, pidns: str, born: int | None = None) -> int:
    """The host's pid of the process that is `pid` in PID namespace `pidns` (as a sandboxed
    process records itself; `born`: the namespace's pidns_born, when recorded), or, once that
    process or its namespace is gone, a number no process can have (pid_max + pid: every
    process of a namespace dies with its init, so a survivor check over it finds nothing, as it
    must). A pid of our own namespace is itself."""
    found = find_host_pid(pid, pidns, born)
    if found is not None:
        return found
    try:
        with open("/proc/sys/kernel/pid_max") as fh:
            pid_max = int(fh.read())
    except (OSError, ValueError):
        pid_max = 1 << 22
    return pid_max + pid


def find_host_pid(pid: int, pidns: str, born: int | None = None) -> int | None:
    """The host's pid of the live process that is `pid` in PID namespace `pidns` (its
    `/proc/<host pid>/status` NSpid ends with `pid`), None when there is none (gone, or its
    namespace is). With `born` (the namespace's pidns_born), a namespace of that inode whose
    init started at another time is a later one that reused the number: None. A pid of our own
    namespace (or of none named) is itself."""
    if not pidns or pidns == own_pidns():
        return pid
    try:
        entries = os.listdir("/proc")
    except OSError:
        entries = []
    found, init_started = None, None
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{entry}/ns/pid") != pidns:
                continue
            with open(f"/proc/{entry}/status", encoding="ascii", errors="replace") as fh:
                ns_pid = next((int(line.split()[-1]) for line in fh if line.startswith("NSpid:")), None)
            if ns_pid == pid:
                found = int(entry)
            if ns_pid == 1 and born is not None:
                with open(f"/proc/{entry}/stat", "rb") as fh:
                    init_started = start_ticks(fh.read())
        except (OSError, ValueError):
            continue
        if found is not None and (born is None or init_started is not None):
            break
    if born is not None and init_started != born:
        return None  # the namespace of the record is gone; this one only has its number
    return found


# --- what a session binds in ------------------------------------------------------------


def python_paths() -> list[str]:
    """The interpreter this host runs on (its prefix and base prefix, read-only): the bridge
    relay and the fake CLIs run on it."""
    out = []
    for prefix in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix):
        if prefix and prefix not in out:
            out.append(prefix)
    exe = os.path.realpath(sys.executable) if sys.executable else ""
    if exe and not any(exe.startswith(p.rstrip("/") + "/") for p in out):
        out.append(os.path.dirname(exe))
    return out


def package_paths() -> list[str]:
    """harnesscheck's own files a sandboxed process may run: the package (the bridge relay's
    source), the fake CLIs and their fixtures (the offline level)."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # harnesscheck/ (this module is in contain/)
    out = [here]
    from harnesscheck.core.paths import fake_clis_dir, fixtures_dir

    try:
        out += [str(fake_clis_dir()), str(fixtures_dir())]
    except OSError:
        pass
    return out


def sidecar_paths(cli_path: str | os.PathLike[str]) -> tuple[list[str], list[str]]:
    """(read-only, writable) paths a sandboxed per-test fake needs beyond its own directory:
    the scenario its sidecar names, and its record file (created empty here when absent, so
    it can be bound in). Nothing for a path without a sidecar (a real CLI). The sidecar is
    what testing/fakes.py `install_fake_cli` writes; it is read here, in the layer that binds
    the paths, so a backend's sandbox needs nothing from the layer above it."""
    import json

    sidecar = str(cli_path) + ".scenario.json"
    try:
        with open(sidecar, encoding="utf-8") as f:
            spec = json.load(f)
    except (OSError, ValueError):
        return [], []
    if not isinstance(spec, dict):
        return [], []
    read = [str(spec["scenario"])] if isinstance(spec.get("scenario"), str) else []
    write: list[str] = []
    record = spec.get("record")
    if isinstance(record, str) and record:
        try:
            fd = os.open(record, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            os.close(fd)
            write.append(record)
        except OSError:
            pass
    return read, write


def install_root(cli_path: str | os.PathLike[str]) -> list[str]:
    """The CLI's own install, read-only: the package dir of the CLI cache it lies in
    (`<cache>/clis/<name>@<version>`), else the root of the node_modules tree holding it, else
    its directory. Both the path as given (a .bin symlink) and its target count."""
    from harnesscheck.core.paths import cli_cache_dir

    cache = os.path.realpath(str(cli_cache_dir()))
    out: list[str] = []
    for path in {os.path.abspath(os.fspath(cli_path)), os.path.realpath(os.fspath(cli_path))}:
        real = os.path.realpath(os.path.dirname(path))
        if real == cache or real.startswith(cache + "/"):
            rel = os.path.relpath(real, cache).split(os.sep)
            root = os.path.join(cache, rel[0]) if rel and rel[0] not in (".", "") else real
        else:
            parts = real.split(os.sep)
            root = os.sep.join(parts[: parts.index("node_modules")]) if "node_modules" in parts else real
        root = root or real
        if root not in out:
            out.append(root)
    return out


def cache_installs(words: Iterable[str]) -> list[str]:
    """The CLI-cache installs that `words` (a command's arguments, env values) name by absolute
    path, each as install_root gives it: an agent run through an interpreter (`node
    <cache>/<pkg>/.../index.js`) or pointed at another cached CLI by its environment
    (`CLAUDE_CODE_EXECUTABLE=<cache>/claude@.../claude`). Paths outside the cache are not taken:
    what a profile names there is the host's, never bound on its word."""
    from harnesscheck.core.paths import cli_cache_dir

    cache = os.path.realpath(str(cli_cache_dir()))
    out: list[str] = []
    for word in words:
        if not isinstance(word, str) or not os.path.isabs(word) or not os.path.exists(word):
            continue
        real = os.path.realpath(word)
        if real != cache and real.startswith(cache + "/"):
            out.extend(r for r in install_root(word) if r not in out)
    return out


def for_session(
    *,
    run_dir: str | os.PathLike[str],
    cli: str | os.PathLike[str],
    writable: Iterable[str] = (),
    read_only: Iterable[str] = (),
    bridge: Iterable[str] = (),
    state_dirs: Sequence[str] = ("config-homes", "home", "cwd", "tmp", "runtime"),
) -> Sandbox:
    """The sandbox of one agent session, for any transport (the harness base uses it; an ACP
    transport passes the same to run_process): read-only the run dir, the agent's install
    (`cli`), the host's interpreter and harnesscheck's files, and `bridge` (what
    forkserver.relay_binds returned: the socket and the relay); writable the run dir's
    `state_dirs` and `writable` (temp dirs outside it, a credential file); plus `read_only`."""
    run = os.fspath(run_dir)
    ro = [run, *install_root(cli), *python_paths(), *package_paths(), *bridge, *read_only]
    rw = [os.path.join(run, name) for name in state_dirs] + [os.fspath(p) for p in writable]
    return Sandbox(read_only=tuple(ro), writable=tuple(rw))


__all__ = ["Sandbox", "for_session", "SandboxStatus", "bwrap_argv", "install_root", "parse_child_pid", "status"]
