"""Bridge forkserver, the process: `python -m harnesscheck.bridge.forkserver_process`, started by
the host side (bridge/forkserver.py `_launch`) or forked ready by a template. Its
single-threaded loop (`_Server`) reads the control channel before the relays' socket, accepts
relays without ever blocking on one, hands each admitted relay to a child (the spare when one
is ready), reaps children and reports their exit status; `_Template` forks ready forkservers
for the hosts that ask. The relay checks, the child and the spare are bridge/forkserver_child.py.

Contract: doc/SPEC-bridge.md, "Forkserver", and the docstring of bridge/forkserver.py.
Over 800 lines for a reason: `_Server` (about 650 of them) is one event loop whose states
(pending, awaiting a binding, served, spare, reaped) are read together; cut into parts, each
part would need the others' state to be understood.
"""

from __future__ import annotations

import argparse
import gc
import hmac
import json
import os
import selectors
import shutil
import signal
import socket
import stat
import sys
import time
from pathlib import Path

from harnesscheck.bridge.forkserver import (
    ACCEPT_PAUSE_S,
    MAX_MESSAGE,
    MAX_PENDING,
    PENDING_TIMEOUT_S,
    REAP_TIMEOUT_S,
    RELEASE_GRACE_S,
    SOCKET_NAME,
    SPARE_DELAY_S,
    WARM_UP_TIMEOUT_S,
    _close_fds,
    _listening,
    _peer_cred,
    env_digest,
)
from harnesscheck.bridge.forkserver_child import (
    _UNBOUND,
    _await_session,
    _Awaiting,
    _Child,
    _close_fds_except,
    _descends_from,
    _dumpable,
    _dup_all,
    _harden_self,
    _hung_up,
    _Peer,
    _preimport,
    _read_regular,
    _Registration,
    _rehearsal_root,
    _report_exit,
    _request_path,
    _Spare,
    _status_text,
    _thread_count,
    _wait_single_threaded,
    _warm_up,
)


class _Server:
    """The forkserver's single-threaded loop: control requests, relay connections, reaping."""

    def __init__(self, control: socket.socket, directory: Path, rehearsal_root: Path | None = None, listener: socket.socket | None = None):
        self.control = control
        self.dir = directory
        self.rehearsal_root = rehearsal_root  # a spare rehearses a session there while it waits
        self.registrations: dict[str, _Registration] = {}
        self.children: dict[int, _Child] = {}
        #: Accepted connections whose request has not arrived: fd -> (conn, deadline), oldest first.
        self.pending: dict[int, tuple[socket.socket, float]] = {}
        #: Relays waiting for their spec's `bind`: fd -> _Awaiting, oldest first (bounded like pending).
        self.awaiting: dict[int, _Awaiting] = {}
        self.accept_paused_until: float | None = None
        self.stopping = False
        self.spare: _Spare | None = None
        #: When to fork the next spare (None: not wanted now). See SPARE_DELAY_S.
        self.spare_due: float | None = None
        # The host binds it before starting us (relays wait in its backlog meanwhile); a
        # forkserver forked by the template binds its own.
        self.listener = listener if listener is not None else _listening(str(directory / SOCKET_NAME))
        self.listener.setblocking(False)
        self.wake_r, self.wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(self.wake_w, warn_on_full_buffer=False)
        _harden_self(self.control)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.control, selectors.EVENT_READ, "control")
        self.selector.register(self.listener, selectors.EVENT_READ, "listener")
        self.selector.register(self.wake_r, selectors.EVENT_READ, "wake")

    # -- loop -----------------------------------------------------------------------------

    def run(self) -> None:
        try:
            self.control.sendall(json.dumps({"ready": True, "pid": os.getpid()}).encode())
        except OSError as exc:  # the host is gone before it heard `ready` (EPIPE): end as on its EOF
            _say(f"bridge forkserver: the host is gone: {type(exc).__name__}: {exc}\n")
            raise SystemExit(1) from None
        self._want_spare()  # after this round: relays already waiting are served first
        while True:
            events = self.selector.select(self._select_timeout())
            # The control channel first, all of it: a relay's registration and binding were
            # sent before its CLI started, so they are there by the time it connects.
            events.sort(key=lambda event: event[0].data != "control")
            for key, _ in events:
                if key.data == "control":
                    if not self._drain_control():
                        self._shutdown()
                        return
                elif key.data == "listener":
                    self._on_connect()
                elif key.data == "pending":
                    self._on_pending(key.fileobj)
                elif isinstance(key.data, tuple):  # ("handoff", pid): a spare's b"taken" or its end
                    self._on_handoff(key.data[1])
                else:
                    try:
                        while os.read(self.wake_r, 512):
                            pass
                    except BlockingIOError:
                        pass
            self._expire_pending()
            self._expire_awaiting()
            self._resume_accepting()
            self._reap(block=False)
            if self.spare_due is not None and time.monotonic() >= self.spare_due:
                self._fork_spare()

    def _want_spare(self, delay_s: float = 0.0) -> None:
        """Have the next spare forked `delay_s` from now (or earlier, if already due so)."""
        due = time.monotonic() + delay_s
        if self.spare is None and (self.spare_due is None or due < self.spare_due):
            self.spare_due = due

    def _select_timeout(self) -> float | None:
        """Until the next pending deadline, the end of an accept pause or the next spare's
        fork; None: no timer."""
        times = [deadline for _, deadline in self.pending.values()][:1]  # oldest first
        times += [waiting.deadline for waiting in self.awaiting.values()][:1]
        if self.accept_paused_until is not None:
            times.append(self.accept_paused_until)
        if self.spare_due is not None:
            times.append(self.spare_due)
        return max(0.0, min(times) - time.monotonic()) if times else None

    def _shutdown(self) -> None:
        """The host is gone (or asked): every child dies, the socket goes."""
        self.stopping = True  # no session is served again from here on
        self._drop_spare()
        for pid in list(self.children):
            self.children[pid].forgo()
            self._kill(pid)
        self._reap_all(list(self.children))
        for fd in list(self.pending):
            self._drop_pending(fd)
        for fd in list(self.awaiting):
            self._refuse_awaiting(fd, "not-registered: the forkserver is stopping")
        self.listener.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- control ----------------------------------------------------------------------------

    def _drain_control(self) -> bool:
        """Every request waiting on the control channel; False: the host is gone."""
        import select

        while self._on_control():
            if not select.select([self.control], [], [], 0)[0]:
                return True
        return False

    def _on_control(self) -> bool:
        try:
            raw = self.control.recv(MAX_MESSAGE)
        except OSError:
            return False
        if not raw:
            return False
        msg: dict = {}
        try:
            msg = json.loads(raw)
            reply = self._handle(msg)
        except Exception as exc:  # noqa: BLE001 - a bad request must not end the server
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        reply["id"] = msg.get("id") if isinstance(msg, dict) else None
        try:
            self.control.sendall(json.dumps(reply).encode())
        except OSError:
            return False
        if isinstance(msg, dict) and msg.get("op") in ("register", "release"):
            self._want_spare()  # the host is between sessions: fork it now (after the reply)
        return True

    def _handle(self, msg: dict) -> dict:
        from harnesscheck.bridge.spec import BridgeSpec

        op = msg.get("op")
        if op == "register":
            content = msg["content"].encode("utf-8")
            spec = BridgeSpec.model_validate_json(content)
            old = self.registrations.get(msg["spec"])
            if old is not None and old.children:
                return {"ok": False, "error": "spec path already registered with live children"}
            if old is not None:
                old.close()
            self.registrations[msg["spec"]] = _Registration(content=content, spec=spec)
            return {"ok": True}
        if op == "bind":
            reg = self.registrations.get(msg["spec"])
            if reg is None:
                return {"ok": False, "error": "not-registered"}
            cli_pid = int(msg["pid"])
            if reg.bound_pid not in (None, cli_pid):
                return {"ok": False, "error": "already bound to another process"}
            if reg.bound is None:
                reg.bound = _Peer.of_pid(cli_pid)
            reg.bound_pid = cli_pid
            for fd in [fd for fd, w in self.awaiting.items() if _request_path(w.msg) == msg["spec"]]:
                waiting = self.awaiting.pop(fd)
                self._answer(waiting.conn, waiting.msg, waiting.fds, waiting.peer)
            return {"ok": True}
        if op == "release":
            for fd in [fd for fd, w in self.awaiting.items() if _request_path(w.msg) == msg["spec"]]:
                self._refuse_awaiting(fd, "not-registered: the session ended before it was bound")
            reg = self.registrations.pop(msg["spec"], None)
            if reg is not None:
                reg.close()
            pids = sorted(reg.children) if reg is not None else []
            self._reap_all(pids, RELEASE_GRACE_S)  # a child that lost its stdin/relay ends on its own
            left = [pid for pid in pids if pid in self.children]
            for pid in left:
                self.children[pid].forgo()
                self._kill(pid)
            self._reap_all(left)
            return {"ok": True, "killed": left}
        if op == "children":
            for child in self.children.values():
                child.took()  # a b"taken" already sent is read first: the answer shows the settled fds
            if self.spare is None:
                self._fork_spare()  # asked about it: the one the next relay would get
            spare = self.spare
            return {
                "ok": True,
                "children": {p: sorted(r.children) for p, r in self.registrations.items()},
                "spare": spare.pid if spare is not None and spare.waiting(WARM_UP_TIMEOUT_S) else None,
            }
        if op == "environ":
            return {"ok": True, "env_sha256": env_digest(os.environ), "dumpable": _dumpable()}
        return {"ok": False, "error": f"unknown op {op!r}"}

    # -- relays -----------------------------------------------------------------------------

    def _on_connect(self) -> None:
        """Accept one waiting connection, never blocking: a relay's request is usually there
        already and is served at once; otherwise the connection waits in the selector (bounded).

        One per wake-up, never a batch: the connection at the head of the backlog was there when
        the selector woke, so its relay was started after its registration and binding were
        sent, and this round drained the control channel before it came here. A second accept
        in the same round could take a relay that connected after that drain, and judge it
        against registrations not read yet (it was refused `not-registered` while its `register`
        sat unread on the control channel). Further connections wake the next round."""
        try:
            conn, _ = self.listener.accept()
        except (BlockingIOError, InterruptedError, ConnectionAbortedError):
            return
        except OSError as exc:  # EMFILE, ENFILE, ENOBUFS...: keep the loop alive
            sys.stderr.write(f"bridge forkserver: accept failed ({exc.strerror or exc}); pausing accepts\n")
            sys.stderr.flush()
            if self.pending:
                self._drop_pending(next(iter(self.pending)))  # frees an fd
            self._pause_accepting()
            return
        conn.setblocking(False)
        if not self._serve(conn):
            self.pending[conn.fileno()] = (conn, time.monotonic() + PENDING_TIMEOUT_S)
            self.selector.register(conn, selectors.EVENT_READ, "pending")
            while len(self.pending) > MAX_PENDING:
                self._drop_pending(next(iter(self.pending)))

    def _on_pending(self, conn: socket.socket) -> None:
        fd = conn.fileno()
        entry = self.pending.pop(fd, None)
        if entry is None:
            return
        self.selector.unregister(conn)
        if not self._serve(conn):  # woken without a message: keep waiting, same deadline
            self.pending[fd] = entry
            self.selector.register(conn, selectors.EVENT_READ, "pending")

    def _drop_pending(self, fd: int) -> None:
        conn, _ = self.pending.pop(fd)
        try:
            self.selector.unregister(conn)
        except (KeyError, ValueError):
            pass
        try:
            conn.send(b"refused timeout: no request on this connection in time")
        except OSError:
            pass
        conn.close()

    def _expire_pending(self) -> None:
        now = time.monotonic()
        for fd, (_conn, deadline) in list(self.pending.items()):
            if deadline > now:
                break  # oldest first: the rest are later
            self._drop_pending(fd)

    def _pause_accepting(self) -> None:
        if self.accept_paused_until is None:
            self.selector.unregister(self.listener)
        self.accept_paused_until = time.monotonic() + ACCEPT_PAUSE_S

    def _resume_accepting(self) -> None:
        if self.accept_paused_until is not None and time.monotonic() >= self.accept_paused_until:
            self.accept_paused_until = None
            self.selector.register(self.listener, selectors.EVENT_READ, "listener")

    def _serve(self, conn: socket.socket) -> bool:
        """Read the relay's request without blocking and answer it (fork a child or refuse).
        False: nothing to read yet (the caller keeps the connection pending). True: handled;
        `conn` is now a child's, or closed."""
        fds: list[int] = []
        try:
            try:
                msg, fds, _flags, _addr = socket.recv_fds(conn, 65536, 3, socket.MSG_CMSG_CLOEXEC)
            except (BlockingIOError, InterruptedError):
                return False
            if not msg and not fds:
                conn.close()  # the peer closed without asking
                return True
            conn.setblocking(True)  # the status send to a child's relay (a few bytes) may wait
            fds, received = [], fds  # from here on _answer owns them (it closes them, or holds them)
            self._answer(conn, msg, received)
        except OSError:
            conn.close()
        except Exception as exc:  # noqa: BLE001 - one bad connection must not end the server
            sys.stderr.write(f"bridge forkserver: connection dropped: {type(exc).__name__}: {exc}\n")
            sys.stderr.flush()
            conn.close()
        finally:
            for fd in fds:
                try:
                    os.close(fd)
                except OSError:
                    pass
        return True

    def _answer(self, conn: socket.socket, msg: bytes, fds: list[int], peer: _Peer | None = None) -> None:
        """Fork this relay's child, refuse it, or hold it until its spec is bound. Takes
        ownership of `conn`, `fds` and `peer`: each is handed to a child, held, or closed."""
        hold = False
        try:
            if peer is None:
                peer = _Peer.of(conn)
            refusal = self._check(msg, fds, peer)
            if refusal is _UNBOUND:
                self.awaiting[conn.fileno()] = _Awaiting(conn, msg, fds, time.monotonic() + PENDING_TIMEOUT_S, peer)
                hold = True
                while len(self.awaiting) > MAX_PENDING:
                    self._refuse_awaiting(next(iter(self.awaiting)), "timeout: too many relays waiting for a binding")
            elif refusal is not None:
                peer.close()  # before the answer: once a relay reads it, nothing of it is held here
                _close_fds(fds)
                fds.clear()
                conn.send(b"refused " + refusal.encode())
                conn.close()
            else:
                self._fork(conn, _request_path(msg), fds)
        except OSError:
            conn.close()
        finally:
            if not hold:
                _close_fds(fds)
                if peer is not None:
                    peer.close()

    def _refuse_awaiting(self, fd: int, reason: str) -> None:
        waiting = self.awaiting.pop(fd)
        _close_fds(waiting.fds)  # before the answer: once a relay reads it, nothing of it is held here
        waiting.peer.close()
        try:
            waiting.conn.send(b"refused " + reason.encode())
        except OSError:
            pass
        waiting.conn.close()

    def _expire_awaiting(self) -> None:
        now = time.monotonic()
        for fd, waiting in list(self.awaiting.items()):
            if waiting.deadline > now:
                break  # oldest first
            self._refuse_awaiting(fd, "not-bound: the host never bound this spec to the CLI's session")

    def _check(self, msg: bytes, fds: list[int], peer: _Peer) -> str | object | None:
        """None when this relay may have a bridge; _UNBOUND when it must wait for its spec's
        binding; else the reason (no secret in it)."""
        if not msg.startswith(b"spec\0") or len(fds) not in (2, 3):
            return "bad-request: expected the spec path and fds 0, 1 (and 2)"
        uid = peer.uid
        if uid != os.getuid():
            return "wrong-user"
        path = msg[5:].decode("utf-8", "surrogateescape")
        reg = self.registrations.get(path)
        if reg is None:
            return "not-registered: no live session registered this spec"
        current = _read_regular(path, len(reg.content))
        if current is None or not hmac.compare_digest(current, reg.content):
            return "spec-changed: the spec file differs from what the host registered"
        if reg.bound_pid is None:
            return _UNBOUND
        # The relay and the CLI must both run before and after the walk: then neither pid was
        # given to another process while it was looked at.
        if not peer.running():
            return "wrong-process: the relay that connected has exited"
        if not reg.cli_running():
            return "wrong-process: the CLI this spec is bound to has exited"
        if not _descends_from(peer.pid, reg.bound_pid):
            return "wrong-process: this spec is served to its CLI and the processes it started only"
        if not (peer.running() and reg.cli_running()):
            return "wrong-process: the relay or the CLI exited while it was checked"
        return None

    def _fork(self, conn: socket.socket, path: str, fds: list[int]) -> None:
        """Start this relay's bridge child: hand the session to the spare child when there is
        one (no fork on the relay's path), else fork one now; then fork the next spare."""
        reg = self.registrations[path]
        copies = _dup_all(fds) if self.spare is not None else []  # before the hand-off: see _Child.fds
        spare = self._hand_to_spare(conn, fds, reg.content)
        if spare is None:
            _close_fds(copies)
            copies = []
        pid = spare.pid if spare is not None else None
        if pid is None:
            if _thread_count() != 1:  # never fork a multi-threaded process
                conn.send(b"refused internal: the forkserver is not single-threaded")
                conn.close()
                return
            pid = os.fork()
            if pid == 0:
                self._child(conn, None, fds, reg.spec)  # never returns
            try:
                os.setpgid(pid, pid)  # also done by the child: whichever runs first wins
            except OSError:
                pass
        reg.children.add(pid)
        if spare is None:
            self.spare_due = None  # forked on the spot: the next spare SPARE_DELAY_S from now
        if spare is not None and copies:
            self.children[pid] = _Child(path, conn, spare.handoff, fds=copies, taken=False, reg=reg)
            self.selector.register(spare.handoff, selectors.EVENT_READ, ("handoff", pid))  # for its b"taken"
        else:  # no copies (EMFILE): as before, a spare dying unconfirmed ends the session loudly
            self.children[pid] = _Child(path, conn, spare.handoff if spare is not None else None)
        self._want_spare(SPARE_DELAY_S)

    # -- spare child ------------------------------------------------------------------------

    def _fork_spare(self) -> None:
        """Fork the child for the next relay ahead of time. It closes everything it inherited
        but its end of a fresh socketpair and waits there for its session: the registered
        spec bytes, the relay connection and the relay's stdio fds. A fork of this process
        (mcp, pydantic imported) costs ~3 ms; so it is paid between sessions, not in one."""
        self.spare_due = None
        if self.spare is not None or _thread_count() != 1:
            return
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            pid = os.fork()
        except OSError as exc:
            ours.close()
            theirs.close()
            sys.stderr.write(f"bridge forkserver: cannot fork a spare child ({exc}); forking per relay\n")
            sys.stderr.flush()
            return
        if pid == 0:
            self._child(None, theirs, [], None)  # never returns
        theirs.close()
        try:
            os.setpgid(pid, pid)
        except OSError:
            pass
        self.spare = _Spare(pid, ours)

    def _hand_to_spare(self, conn: socket.socket, fds: list[int], content: bytes) -> _Spare | None:
        """Give this session to the spare child: the spare, or None (no spare, or it is gone)."""
        spare, self.spare = self.spare, None
        if spare is None:
            return None
        try:
            socket.send_fds(spare.handoff, [content], [conn.fileno(), *fds])
        except OSError:
            self._end_spare(spare)
            return None
        return spare

    def _drop_spare(self) -> None:
        spare, self.spare = self.spare, None
        if spare is not None:
            self._end_spare(spare)

    def _end_spare(self, spare: _Spare) -> None:
        """Kill and reap a spare that will not get a session."""
        self._kill(spare.pid)
        spare.handoff.close()
        try:
            os.waitpid(spare.pid, 0)
        except ChildProcessError:
            pass

    def _child(self, conn: socket.socket | None, handoff: socket.socket | None, fds: list[int], spec) -> None:
        """A bridge child, never returning: forked for `conn` (its relay's stdio `fds`, the
        registered `spec`), or a spare (`handoff`) that first waits for those."""
        code = 70
        try:
            os.setpgid(0, 0)
            signal.set_wakeup_fd(-1)
            for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
                signal.signal(sig, signal.SIG_DFL)
            signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # as in any Python process
            self.selector.close()
            for other in self.children.values():
                other.close()
            for waiting, _ in self.pending.values():
                waiting.close()
            if self.spare is not None:
                self.spare.handoff.close()
            self.listener.close()
            self.control.close()
            os.close(self.wake_r)
            os.close(self.wake_w)
            from harnesscheck.bridge import server

            # `server._prepare()` in two halves: the parent and the environment now (a spare's
            # are the same when its session comes), the protocol fds once they are here.
            initial_ppid = os.getppid()
            server.scrub_environ()
            if handoff is not None:
                _close_fds_except((handoff.fileno(),))
                self._rehearse()
                try:
                    handoff.send(b"ready")
                except OSError:
                    pass  # the forkserver is gone: the wait below reads EOF and ends
                known = {reg.content: reg.spec for reg in self.registrations.values()}
                conn, fds, spec = _await_session(handoff, known)
            for target, fd in enumerate(fds):
                os.dup2(fd, target)  # inheritable, as a spawned bridge's stdio is
            if len(fds) == 2:
                null = os.open(os.devnull, os.O_WRONLY)
                os.dup2(null, 2)
                os.close(null)
            keep = conn.fileno()
            _close_fds_except((keep,))
            fds.clear()
            sys.stderr = open(2, "w", closefd=False, errors="replace")  # noqa: SIM115
            sys.stdout = open(1, "w", closefd=False, errors="replace")  # noqa: SIM115
            proto = server.take_stdio()
            code = server.serve_spec(spec, proto_fds=proto, initial_ppid=initial_ppid, hangup_fd=keep, mode="forkserver")
        except BaseException as exc:  # noqa: BLE001 - report, never fall back into the loop
            _say(f"harnesscheck bridge (forkserver child): {type(exc).__name__}: {exc}\n")
        finally:
            _flush_stderr()
            if conn is not None:
                _report_exit(conn, code)
            os._exit(code)

    def _rehearse(self) -> None:
        """A spare's rehearsal (`server.rehearse`) before it waits: only a speed-up, so a
        failure is noted on stderr (the forkserver's log) and the spare waits all the same."""
        if self.rehearsal_root is None:
            return
        from harnesscheck.bridge import server

        try:
            server.rehearse(self.rehearsal_root)
        except Exception as exc:  # noqa: BLE001
            _say(f"bridge forkserver: a spare's rehearsal failed: {type(exc).__name__}: {exc}\n")
        server._CALL_THREADS.park(2)  # the session's parent watch and first call

    # -- children ---------------------------------------------------------------------------

    def _kill(self, pid: int) -> None:
        for kill in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
            try:
                kill()
            except OSError:
                pass

    def _reap(self, *, block: bool, pid: int = -1) -> None:
        while self.children or self.spare is not None:
            try:
                got, status = os.waitpid(pid, 0 if block else os.WNOHANG)
            except ChildProcessError:
                return
            except InterruptedError:
                continue
            if got == 0:
                return
            self._reaped(got, status)
            if pid != -1:
                return

    def _reap_all(self, pids: list[int], bound_s: float = REAP_TIMEOUT_S) -> None:
        """Wait (at most `bound_s`) until every pid in `pids` is reaped: woken by each child's
        pidfd the moment it exits (a 5 ms poll where pidfds are missing)."""
        import select

        deadline = time.monotonic() + bound_s
        pending = [p for p in pids if p in self.children]
        pidfds: dict[int, int] = {}
        try:
            while pending:
                for pid in list(pending):
                    try:
                        got, status = os.waitpid(pid, os.WNOHANG)
                    except ChildProcessError:
                        self._forget(pid)
                        got = -1
                    if got:
                        if got > 0:
                            self._reaped(got, status)
                        pending.remove(pid)
                        if pid in pidfds:
                            os.close(pidfds.pop(pid))
                    elif pid not in pidfds and hasattr(os, "pidfd_open"):
                        try:
                            pidfds[pid] = os.pidfd_open(pid)
                        except OSError:
                            pass
                left = deadline - time.monotonic()
                if not pending or left <= 0:
                    return
                if len(pidfds) == len(pending):
                    poller = select.poll()
                    for fd in pidfds.values():
                        poller.register(fd, select.POLLIN)
                    poller.poll(left * 1000)  # until one exits (or the bound)
                else:
                    time.sleep(min(0.005, left))
        finally:
            _close_fds(list(pidfds.values()))

    def _reaped(self, pid: int, status: int) -> None:
        if self.spare is not None and pid == self.spare.pid:  # died waiting: fork another soon
            self.spare.handoff.close()
            self.spare = None
            self._want_spare(SPARE_DELAY_S)  # not at once: a spare that dies at start must not spin
            return
        child = self.children.get(pid)
        if child is not None and not child.took() and self._serve_again(pid, child):
            return
        if child is not None:
            try:
                child.conn.send(_status_text(status))
            except OSError:
                pass
            self._want_spare()  # a session ended: its CPU is free for the next spare
        self._forget(pid)

    def _on_handoff(self, pid: int) -> None:
        child = self.children.get(pid)
        if child is None:
            return
        if child.took() or child.hung_up:
            self._unwatch(child)

    def _unwatch(self, child: _Child) -> None:
        if child.handoff is not None:
            try:
                self.selector.unregister(child.handoff)
            except (KeyError, ValueError):
                pass

    def _serve_again(self, pid: int, child: _Child) -> bool:
        """The spare `pid` died before it took its session: fork a child afresh for the same
        relay (its connection and our copies of its stdio fds). False when that cannot be
        done (the spec was released, the process is not single-threaded, fork failed): the
        relay then gets the spare's exit status, as any session whose bridge died."""
        reg = self.registrations.get(child.spec_path)  # a released spec is gone from here
        if reg is None or reg is not child.reg or self.stopping or _thread_count() != 1:
            return False
        if not reg.cli_running() or _hung_up(child.conn):  # nobody left to serve
            return False
        self.children.pop(pid, None)
        reg.children.discard(pid)
        self._unwatch(child)
        if child.handoff is not None:
            child.handoff.close()
            child.handoff = None
        fds, child.fds = child.fds, []
        try:
            new = os.fork()
        except OSError:
            self.children[pid] = child  # forgotten by the caller with its status sent
            child.fds = fds
            return False
        if new == 0:
            self._child(child.conn, None, fds, reg.spec)  # never returns
        _close_fds(fds)
        try:
            os.setpgid(new, new)
        except OSError:
            pass
        reg.children.add(new)
        self.children[new] = _Child(child.spec_path, child.conn)
        sys.stderr.write(f"bridge forkserver: spare {pid} died before it took its session; served by {new}\n")
        sys.stderr.flush()
        return True

    def _forget(self, pid: int) -> None:
        child = self.children.pop(pid, None)
        if child is None:
            return
        self._unwatch(child)
        child.close()
        reg = self.registrations.get(child.spec_path)
        if reg is not None:
            reg.children.discard(pid)


def main(argv: list[str] | None = None) -> int:
    """`python -m harnesscheck.bridge.forkserver --control-fd N --dir D` (started by the host)."""
    parser = argparse.ArgumentParser(prog="python -m harnesscheck.bridge.forkserver")
    parser.add_argument("--control-fd", type=int, required=True)
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--listen-fd", type=int, metavar="LISTEN_FD", help="the relays' socket, bound by the host (a fresh forkserver)")
    parser.add_argument("--template", type=int, metavar="LISTEN_FD", help="fork ready forkservers for the hosts that connect to LISTEN_FD (start_template)")
    ns = parser.parse_args(argv)
    control = socket.socket(fileno=ns.control_fd)
    control.set_inheritable(False)
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # only the host's EOF (or SIGTERM/SIGKILL) ends us
    listener = None
    if ns.template is not None or ns.listen_fd is not None:
        listener = socket.socket(fileno=ns.template if ns.template is not None else ns.listen_fd)
        listener.set_inheritable(False)
    try:
        gc.disable()  # until the freeze below: the imports' collections would only walk what stays
        _preimport()
        rehearsal_root = _rehearsal_root(ns.dir)
        try:
            _warm_up(rehearsal_root)
        except Exception as exc:  # noqa: BLE001 - only a speed-up: children then do it themselves
            sys.stderr.write(f"bridge forkserver: warm-up session failed: {type(exc).__name__}: {exc}\n")
        if not _wait_single_threaded(WARM_UP_TIMEOUT_S):
            raise RuntimeError("threads still run after the warm-up; the forkserver must not fork")
        # Everything alive now lives as long as the forkserver: out of the collector's sight,
        # a child's collections never walk (and so copy-on-write) those pages.
        gc.collect()
        gc.freeze()
        gc.enable()
        if ns.template is not None:
            os.close(os.pidfd_open(os.getpid()))  # no pidfds here (Linux < 5.3): hosts start their own
            try:
                return _Template(control, listener).run()
            finally:  # its starter may be gone (killed): nothing else would remove it
                shutil.rmtree(ns.dir, ignore_errors=True)
        server = _Server(control, ns.dir, rehearsal_root, listener)
    except BaseException as exc:  # noqa: BLE001
        sys.stderr.write(f"bridge forkserver failed to start: {type(exc).__name__}: {exc}\n")
        return 1
    return _serve(server)


def _serve(server: "_Server") -> int:
    def stop(signum, frame):  # noqa: ARG001 - SIGTERM: end like a host EOF, children first
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    try:
        server.run()
    except SystemExit as exc:
        server._shutdown()
        return exc.code if isinstance(exc.code, int) else 0
    return 0


class _Template:
    """The template's single-threaded loop: fork a ready forkserver for each host that asks;
    end on EOF on the control channel."""

    def __init__(self, control: socket.socket, listener: socket.socket):
        self.control = control
        self.listener = listener

    def run(self) -> int:
        import select

        while True:
            readable, _, _ = select.select([self.control, self.listener], [], [], 1.0)
            self._reap()
            if self.control in readable:
                try:
                    if not self.control.recv(MAX_MESSAGE):
                        return 0
                except OSError:
                    return 0
            if self.listener in readable:
                try:
                    conn, _ = self.listener.accept()
                except OSError:
                    time.sleep(ACCEPT_PAUSE_S)
                    continue
                with conn:
                    self._serve_host(conn)

    @staticmethod
    def _reap() -> None:
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return

    def _serve_host(self, conn: socket.socket) -> None:
        """One request: its fd is the forkserver's control end, its message {dir, env}."""
        fds: list[int] = []
        try:
            conn.settimeout(PENDING_TIMEOUT_S)
            if _peer_cred(conn)[1] != os.getuid():
                conn.send(json.dumps({"error": "not our uid"}).encode())
                return
            msg, fds, flags, _addr = socket.recv_fds(conn, MAX_MESSAGE, 2)
            error = _template_request_error(msg, fds, flags)
            if error is None and _thread_count() != 1:
                error = "the template is not single-threaded"
            if error is not None:
                conn.send(json.dumps({"error": error}).encode())
                return
            request = json.loads(msg)
            pid = os.fork()
            if pid == 0:
                for sock in (self.control, self.listener, conn):
                    sock.detach()  # closed by number below: no object may close a reused fd later
                _become_forkserver(fds[0], Path(request["dir"]), request["env"])  # never returns
            try:
                pidfd = os.pidfd_open(pid)  # its parent: it cannot be reaped (its pid reused) before this
            except OSError:
                os.kill(pid, signal.SIGKILL)  # no way to hand it over safely (EMFILE): not half-served
                raise
            try:
                socket.send_fds(conn, [json.dumps({"pid": pid}).encode()], [pidfd])
            finally:
                os.close(pidfd)
        except Exception as exc:  # noqa: BLE001 - a bad request must not end the template
            try:
                conn.send(json.dumps({"error": f"{type(exc).__name__}"}).encode())
            except OSError:
                pass
        finally:
            _close_fds(fds)


def _template_request_error(msg: bytes, fds: list[int], flags: int = 0) -> str | None:
    """Why a host's request cannot be served (None: it can): one fd, a SEQPACKET socket; a
    private directory of ours (0700, not a link) by absolute path; an env of strings."""
    if len(fds) != 1 or flags & (socket.MSG_CTRUNC | socket.MSG_TRUNC):
        return "send exactly one fd, the forkserver's end of the control pair"
    try:
        if not stat.S_ISSOCK(os.fstat(fds[0]).st_mode):
            return "the fd is not a socket"
        dup = os.dup(fds[0])
        try:
            probe = socket.socket(fileno=dup)
        except OSError:
            os.close(dup)
            raise
        with probe:
            if probe.type != socket.SOCK_SEQPACKET or probe.family != socket.AF_UNIX:
                return "the fd is not a unix SEQPACKET socket"
        request = json.loads(msg)
        directory, env = request["dir"], request["env"]
        st = os.lstat(directory)
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
        return f"malformed request: {type(exc).__name__}"
    if not os.path.isabs(directory) or not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        return "the directory is not a private one of ours (0700, by absolute path)"
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        return "the env is not a map of strings"
    try:
        for key, value in env.items():
            k, v = os.fsencode(key), os.fsencode(value)
            if not k or b"=" in k or b"\0" in k or b"\0" in v:
                return "the env has a name or value no environment can hold"
    except UnicodeError:
        return "the env has a name or value no environment can hold"
    return None


def _become_forkserver(control_fd: int, directory: Path, env: dict[str, str]) -> None:
    """In the template's fork: become a forkserver exactly as a fresh one starts (own
    session, cwd, env, stderr to its log), warm already. Never returns."""
    code = 1
    try:
        os.setsid()
        _close_fds_except((control_fd,))
        log = os.open(directory / "forkserver.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        os.dup2(log, 2)
        os.close(log)
        os.chdir(directory)
        os.environ.clear()
        os.environ.update(env)
        control = socket.socket(fileno=control_fd)
        control.set_inheritable(False)
        code = _serve(_Server(control, directory, _rehearsal_root(directory)))
    except BaseException as exc:  # noqa: BLE001
        _say(f"bridge forkserver (forked by the template) failed to start: {type(exc).__name__}: {exc}\n")
    finally:
        _flush_stderr()
        os._exit(code)


def _say(message: str) -> None:
    """A note on fd 2 (the forkserver's log) from a forked child, never raising."""
    try:
        os.write(2, message.encode())
    except OSError:
        pass


def _flush_stderr() -> None:
    try:
        sys.stderr.flush()
    except Exception:  # noqa: BLE001 - a child on its way out
        pass


if __name__ == "__main__":
    raise SystemExit(main())
