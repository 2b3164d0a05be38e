"""harnesscheck as an Agent Client Protocol agent: `harnesscheck acp serve --backend ID`.

Any registered backend (fake, api/<mode>, claude-code, codex, ...; resolved through the
registry as `harnesscheck run` resolves it) served over stdio as an ACP v1 agent, so an ACP
editor gets the guarded transports (built child env, scoped tools, whole-tree kill) and the
kit's ACP checks have a correct agent to be proven against. doc/SPEC-acp-serve.md is the
contract; agent.py holds the protocol, wire.py the framing. Nothing is imported at package
import: `acp` (the typed schema models) only once the server runs.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

EXIT_OK, EXIT_USAGE, EXIT_ENVIRONMENT = 0, 2, 3


def serve_command(*, backend: str | None, root: Path | None = None, model: str | None = None, timeout: float | None = None, cli: Path | None = None) -> int:
    """Resolve the backend from the options and HARNESS_* variables (errors before serving: its
    message and fix on stderr, exit 2/3), then serve stdin/stdout until EOF or a signal; exit 0."""
    from harnesscheck.acpserve.agent import AcpServer
    from harnesscheck.acpserve.wire import Writer, take_stdout
    from harnesscheck.backends.registry import get_spec, known_specs, resolve_provider
    from harnesscheck.core.config import Settings
    from harnesscheck.core.contracts import HarnessError, SelectionMissing

    fence = None
    if root is not None:
        fence = Path(root).expanduser()
        if not fence.is_dir():
            print(f"harnesscheck acp serve: --root {fence}: not a directory\n  fix: pass the directory sessions must stay inside", file=sys.stderr)
            return EXIT_USAGE
        fence = fence.resolve()
    try:
        # The environment and the command line only, never ./.env: an editor starts its agent
        # in the project, and a planted .env would choose the backend or its binary.
        settings = Settings.from_env(dotenv=None)
        update: dict = {"backend": backend or settings.backend}
        if not update["backend"]:
            raise SelectionMissing(list(known_specs()))
        if model:
            update["model"] = model
        if timeout is not None:
            update["timeout_s"] = float(timeout)
        if cli is not None:
            update["cli"] = Path(cli).expanduser().absolute()
        settings = settings.model_copy(update=update)
        spec = get_spec(settings.backend)
        transport = resolve_provider(settings)
    except HarnessError as exc:
        print(f"harnesscheck acp serve: {exc.message}" + (f"\n  fix: {exc.fix}" if exc.fix else ""), file=sys.stderr)
        return int(getattr(exc, "exit_code", EXIT_ENVIRONMENT))

    server = AcpServer(transport, spec, Writer(take_stdout()), model=settings.model, timeout_s=settings.timeout_s, fence=fence)

    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)

    def on_signal(signum: int, _frame: object) -> None:
        server.stop_reason = signal.Signals(signum).name
        try:
            os.write(wake_w, b"x")  # wakes the reader; the loop then shuts down in order
        except OSError:
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    server.log(f"serving backend {spec.id} over stdio (ACP v1)")
    code = server.serve(0, stop_fd=wake_r)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # a second signal during the exit must not cut the cleanup short
    return code
