"""Bridge relay: the stdio command a CLI runs when the bridge forkserver is up.

    python -I -S _bridgerelay.py SOCKET SPEC_PATH -- FALLBACK_ARGV...

It connects to the host's bridge forkserver (bridge/forkserver.py) on the AF_UNIX
SOCK_SEQPACKET socket SOCKET, hands over its fd 0, 1 and 2 (SCM_RIGHTS) with the spec path,
and waits on the connection until the forkserver reports how the bridge child ended; it
then exits the same way (exit code, or 128 + signal number). Its own copies of fd 0/1 are
pointed at /dev/null once sent, so the CLI's pipes end exactly when the bridge child ends.

- Refused by the forkserver (spec not registered for a live session, changed since, or
  claimed by another session): a message on stderr, exit 2, no fallback.
- Forkserver unreachable (no socket, connection refused): a note on stderr, then exec of
  FALLBACK_ARGV, the full stdio bridge (`python -I -m harnesscheck.bridge --spec-sha256 H
  --spec ...`), so the session still gets its tools, only slower. The host pins H, the
  sha256 of the spec bytes it registered, so the fallback refuses a spec rewritten since
  (exit 2) instead of serving what the file says now. Without a fallback argv: exit 3.
- The forkserver vanishing after the hand-over: stderr, exit 1.
- A server whose uid (SO_PEERCRED) is not ours: stderr, exit 2; the CLI's fds are never sent.

Killing the relay (the CLI's group teardown) closes the connection, which ends the bridge
child. Nothing here is secret: the argv holds only paths. It imports only built-in modules
(`_socket`, `posix`; not `os`, `socket`, `array`, `json`, `signal`: `array` pulled in
`collections` and `os` `_collections_abc`, ~4 ms of a ~11 ms start), so it starts in about
the time of `python -I -S -c pass`.
"""

import _socket
import posix
import sys

USAGE = b"usage: _bridgerelay.py SOCKET SPEC_PATH [-- FALLBACK_ARGV...]\n"
MAX_REPLY = 4096


def _say(text: str) -> None:
    try:
        posix.write(2, ("harnesscheck bridge relay: " + text + "\n").encode("utf-8", "replace"))
    except OSError:
        pass


def _fallback(argv: list, why: str) -> None:
    if not argv:
        _say("bridge forkserver unreachable (" + why + ") and no fallback given")
        posix._exit(3)
    _say("bridge forkserver unreachable (" + why + "); starting the full stdio bridge")
    try:
        posix.execv(argv[0], argv)
    except OSError as exc:
        _say("cannot start the fallback bridge " + argv[0] + ": " + str(exc))
        posix._exit(127)


def _finish(reply: bytes) -> None:
    """Exit as the forkserver's reply says: b"exit N", b"signal N", b"refused WHY"."""
    text = reply.decode("utf-8", "replace")
    kind, _, value = text.partition(" ")
    if kind == "exit" and value.lstrip("-").isdigit():
        posix._exit(int(value) & 0xFF)
    if kind == "signal" and value.isdigit():
        posix._exit(128 + int(value))
    if kind == "refused":
        _say("refused: " + value)
        posix._exit(2)
    _say("unexpected reply from the bridge forkserver: " + text[:200])
    posix._exit(1)


def main() -> None:
    args = sys.argv[1:]
    if len(args) < 2 or (len(args) > 2 and args[2] != "--"):
        posix.write(2, USAGE)
        posix._exit(2)
    sock_path, spec_path, fallback = args[0], args[1], args[3:]
    # The request is ready before connect(): the forkserver, woken by the connection, finds
    # it there instead of waiting for a second wake-up.
    fds = [0, 1, 2]
    try:
        posix.fstat(2)
    except OSError:
        fds = [0, 1]
    payload = b"spec\0" + spec_path.encode(sys.getfilesystemencoding(), sys.getfilesystemencodeerrors())
    rights = b"".join(fd.to_bytes(4, sys.byteorder, signed=True) for fd in fds)  # C int[]
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
    try:
        sock.connect(sock_path)
    except OSError as exc:
        sock.close()
        _fallback(fallback, exc.strerror or type(exc).__name__)
        return
    # The server must be ours: a socket of another user at this path gets nothing.
    try:
        cred = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)
        peer_uid = int.from_bytes(cred[4:8], sys.byteorder)
    except OSError:
        peer_uid = -1
    if peer_uid != posix.getuid():
        _say("refused: the server at " + sock_path + " is not this user's bridge forkserver")
        posix._exit(2)
    try:
        sock.sendmsg([payload], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, rights)])
    except OSError as exc:
        _say("cannot hand the stdio fds to the bridge forkserver: " + (exc.strerror or type(exc).__name__))
        posix._exit(1)
    # The bridge child owns the protocol now: hold none of the CLI's pipe ends.
    null = posix.open("/dev/null", posix.O_RDWR)
    posix.dup2(null, 0)
    posix.dup2(null, 1)
    posix.close(null)
    while True:
        try:
            reply = sock.recv(MAX_REPLY)
        except InterruptedError:
            continue
        except OSError as exc:
            _say("lost the bridge forkserver: " + (exc.strerror or type(exc).__name__))
            posix._exit(1)
        if not reply:
            _say("the bridge forkserver closed the connection without a status")
            posix._exit(1)
        _finish(reply)


if __name__ == "__main__":
    main()
