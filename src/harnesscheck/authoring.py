"""The public, typed base for backend authors: what a backend subclasses or calls to meet the
conformance suite without rebuilding it (doc/AUTHORS.md, "The public base").

Requirement (issue 32, item 4): everything an author needs to pass the checks is importable
from here under a public name, typed (the package ships `py.typed`), and stays stable; the
modules these names live in (`backends._harness`, ...) are private and may move (issue 29
moved them into layer folders). A name is added here when a check's fix
(conformance/guidance.toml), doc/AUTHORS.md, the README or examples/ point an author or a
host at it: those documents import from here only, so a later move breaks none of them.
This module sits above every layer (tests/test_layers.py: TOP); nothing in the package
imports it.

- The harness base: subclass `HarnessTransport`, supply `invocation()` (argv, added env,
  stdin: an `Invocation`) and `make_parser()` (a `StreamParser`); it provides the session and
  run dirs, the child environment, the process tree, deadlines, cancellation, the bridge and the
  post-run audit. `bridge_command()` is the bridge's argv and env for the CLI's MCP config.
- The environment policy: `build_child_env` (an allowlist, never os.environ), `config_home`
  (a private HOME / config dir per run), `private_temp_dirs`, `redact`.
- The process layer: `run_process` (own process group, deadline, cancel, linger, bounded
  lines, whole-tree kill), `terminate_tree`, `session_slot` (the host's concurrency cap).
- Stream parsing and error classes: `EventDecoder` (noise-tolerant JSON lines),
  `ending_outcome` (exit code and terminal event to a status), `classify_text` (error text to
  an `ErrorClass`), `ClaudeStreamParser` and `CLAUDE_INJECTIONS` for a claude-driven backend.
- Run dirs: `prepare_run_dir` (refuses a run dir inside the worktree), `write_private`,
  `redact_files`.
- The contract: `ProviderSpec`, `Kind`, `Capability`, `AgentSessionRequest`, `AgentOutcome`,
  `OutcomeStatus`, `ErrorClass`, `Usage`, `Cost`, `Settings`, `ToolScope`, `Policy`, and the
  typed pre-session errors (`HarnessError` and its subclasses).
- The kit's knowledge of a new CLI: `KitProfile` (doc/AUTHORS.md, step 6), and what
  `harnesscheck doctor` knows of it: `DoctorProfile`, `DoctorFinding` (its `doctor` field).
- The scripted reference transport an example backend builds on: `FakeTransport`.
- A host's view of a session: `iter_events`, `run_with_events` (the typed event stream) and
  `preflight` (what the backend will and will not do for a request, before any side effect).
"""

from __future__ import annotations

from harnesscheck.apps.preflight import preflight
from harnesscheck.backends._args import safe_model
from harnesscheck.backends._errortext import classify_text
from harnesscheck.backends._harness import (
    BRIDGE_SERVER,
    EventDecoder,
    HarnessTransport,
    Invocation,
    SessionContext,
    StreamParser,
    bridge_command,
    ending_outcome,
    new_session_context,
    scratch_dir,
)
from harnesscheck.backends._kit_profile import KitProfile
from harnesscheck.backends._setup_profile import DoctorFinding, DoctorProfile
from harnesscheck.backends.claude_code import CLAUDE_INJECTIONS, ClaudeStreamParser
from harnesscheck.backends.fake import FakeTransport
from harnesscheck.contain.envpolicy import build_child_env, config_home, private_temp_dirs, redact
from harnesscheck.contain.process import LineAction, ProcessResult, run_process, session_slot, terminate_tree
from harnesscheck.contain.rundir import RunDirError, prepare_run_dir, redact_files, write_private
from harnesscheck.core.config import Settings
from harnesscheck.core.contracts import (
    AgentOutcome,
    AgentSessionRequest,
    AuthUnavailable,
    Capability,
    CapabilityUnsupported,
    CliNotFound,
    CliVersionUnsupported,
    ConfigError,
    Cost,
    ErrorClass,
    HarnessError,
    Kind,
    OutcomeStatus,
    ProviderSpec,
    Transport,
    Usage,
)
from harnesscheck.core.events import iter_events, run_with_events
from harnesscheck.core.policy import Policy
from harnesscheck.core.scope import ToolScope

__all__ = [
    # the harness base
    "HarnessTransport",
    "Invocation",
    "SessionContext",
    "StreamParser",
    "BRIDGE_SERVER",
    "bridge_command",
    "new_session_context",
    "scratch_dir",
    # environment policy
    "build_child_env",
    "config_home",
    "private_temp_dirs",
    "redact",
    # process layer
    "run_process",
    "ProcessResult",
    "LineAction",
    "terminate_tree",
    "session_slot",
    # stream parsing and error classes
    "EventDecoder",
    "ending_outcome",
    "classify_text",
    "safe_model",
    "ClaudeStreamParser",
    "CLAUDE_INJECTIONS",
    # run dirs
    "prepare_run_dir",
    "write_private",
    "redact_files",
    "RunDirError",
    # the contract
    "ProviderSpec",
    "Kind",
    "Capability",
    "AgentSessionRequest",
    "AgentOutcome",
    "OutcomeStatus",
    "ErrorClass",
    "Usage",
    "Cost",
    "Settings",
    "ToolScope",
    "Policy",
    "Transport",
    "HarnessError",
    "ConfigError",
    "CliNotFound",
    "CliVersionUnsupported",
    "AuthUnavailable",
    "CapabilityUnsupported",
    # the kit's knowledge of a new CLI, the scripted reference transport
    "KitProfile",
    "DoctorProfile",
    "DoctorFinding",
    "FakeTransport",
    # a host's view of a session
    "iter_events",
    "run_with_events",
    "preflight",
]
