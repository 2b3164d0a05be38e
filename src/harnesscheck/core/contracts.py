"""The contracts every backend keeps: specs, capabilities, requests, outcomes, typed errors.

One schema for all backends (api and harness kinds alike). See doc/SPEC-contracts.md.
No message, outcome or error ever carries a secret: build messages with
`harnesscheck.contain.envpolicy.redact` when they may contain child output.
"""

from __future__ import annotations

import json
import threading
from enum import StrEnum
from pathlib import Path
from typing import Callable, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from harnesscheck.core.events import EventStream, SessionEvent
from harnesscheck.core.policy import Policy, PolicyEngine
from harnesscheck.core.scope import ToolScope

SCHEMA_VERSION = 1


class Kind(StrEnum):
    """api: stateless completions, the host runs the tool loop. harness: the CLI owns the loop."""

    api = "api"
    harness = "harness"


class Capability(StrEnum):
    """A flag a backend declares statically (never probed). Each is backed by a check."""

    mcp_tools = "mcp_tools"  # host tools reach the backend through the MCP bridge
    host_tool_loop = "host_tool_loop"  # host runs the tool loop through dispatch (api, fake)
    builtin_tools_off = "builtin_tools_off"  # vendor built-in tools can be switched off
    native_tools_audited = "native_tools_audited"  # built-ins cannot be removed; the audit flags them
    max_turns = "max_turns"  # a turn cap ends the session as truncated/max_turns
    system_prompt = "system_prompt"  # a separate system prompt channel exists
    usage_reporting = "usage_reporting"  # token usage is reported
    cost_reporting = "cost_reporting"  # a dollar figure is reported by the vendor
    served_model_reporting = "served_model_reporting"  # the served model id is reported
    auth_preflight = "auth_preflight"  # the auth source is reported and checked before work
    cancellation = "cancellation"  # host cancellation ends the session, tree and all
    config_isolation = "config_isolation"  # per-run config home; worktree/user config ignored
    early_auth_stop = "early_auth_stop"  # auth failures end the session at once, not after retries
    credential_exchange = "credential_exchange"  # a stored login is exchanged for short-lived tokens, cached until near expiry
    prompt_caching = "prompt_caching"  # prompt-cache breakpoints are placed on the wire (Anthropic Messages)
    host_policy = "host_policy"  # the request's policy decides every tool call before it runs (doc/SPEC-policy.md)
    host_approvals = "host_approvals"  # approval_required calls reach the request's approver before they run
    event_stream = "event_stream"  # the request's on_event sees each tool call requested, decided, completed (doc/SPEC-events.md)
    retry_events = "retry_events"  # a retry wait is announced as a retry event before it is waited out


class OutcomeStatus(StrEnum):
    ok = "ok"
    truncated = "truncated"
    blocked = "blocked"
    error = "error"
    cancelled = "cancelled"


class ErrorClass(StrEnum):
    auth = "auth"
    rate_limit = "rate_limit"
    quota = "quota"
    overloaded = "overloaded"
    server_error = "server_error"
    context_overflow = "context_overflow"
    max_turns = "max_turns"
    budget = "budget"
    model_unavailable = "model_unavailable"
    invalid_request = "invalid_request"
    network = "network"
    cli_missing = "cli_missing"
    cli_unsupported = "cli_unsupported"
    cli_crash = "cli_crash"
    protocol = "protocol"
    mcp_unavailable = "mcp_unavailable"
    policy_violation = "policy_violation"
    timeout = "timeout"
    unknown = "unknown"


#: Error classes that are worth retrying later; everything else is final.
RETRYABLE: frozenset[ErrorClass] = frozenset(
    {
        ErrorClass.rate_limit,
        ErrorClass.overloaded,
        ErrorClass.server_error,
        ErrorClass.network,
        ErrorClass.cli_crash,
        ErrorClass.timeout,
    }
)

#: Error classes that block the host loudly (never retried into a lockout).
BLOCKING: frozenset[ErrorClass] = frozenset({ErrorClass.auth, ErrorClass.quota, ErrorClass.policy_violation, ErrorClass.mcp_unavailable})


class ModelVerdict(StrEnum):
    match = "match"
    mismatch = "mismatch"
    unverified = "unverified"


class CostSource(StrEnum):
    api = "api"  # computed from the shipped model metadata's list prices for an API call (Cost.basis)
    subscription = "subscription"  # reported by the CLI under a subscription: not billed
    reported = "reported"  # reported by the vendor as billed
    none = "none"  # no dollar figure


class ProviderSpec(BaseModel):
    """A registered backend: id, kind, declared capabilities and how to build its transport."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    kind: Kind
    label: str
    factory: str = Field(description="'module:attr' building the Transport from (spec, settings)")
    capabilities: frozenset[Capability] = frozenset()
    cli_name: str | None = Field(default=None, description="binary name for harness backends")
    cli_package: str | None = Field(default=None, description="npm package of the real CLI")
    min_version: str | None = None
    max_version: str | None = Field(default=None, description="exclusive upper bound")
    pinned_version: str | None = Field(default=None, description="version the loopback level installs")
    api_mode: str | None = Field(
        default=None, description="the wire protocol an api backend speaks (its mode column, `api/<mode>`); None: HARNESS_API_MODE decides"
    )
    cold_start_s: float = Field(
        default=0.0,
        ge=0.0,
        description=(
            "the real runtime's declared cold start (s): how long it takes from being spawned to its first model "
            "request; the loopback level adds it (or the start-up it measures, when longer) to the deadlines of "
            "checks that do not test the deadline itself"
        ),
    )
    kit_profile: str | None = Field(
        default=None,
        description=(
            "'module:attr' of the backend's KitProfile (backends/_kit_profile.py), kept beside it in "
            "backends/<backend>/kit_profile.py: what the conformance kit must know of its CLI"
        ),
    )
    description: str = ""

    def supports(self, capability: Capability | str) -> bool:
        return Capability(capability) in self.capabilities


class Usage(BaseModel):
    """Token usage. Counted once per message id; never summed per streamed line."""

    model_config = ConfigDict(extra="forbid")

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    reasoning: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(**{k: getattr(self, k) + getattr(other, k) for k in Usage.model_fields})

    @property
    def total(self) -> int:
        return self.input + self.output + self.cache_read + self.cache_write


class Cost(BaseModel):
    """A dollar figure and where it came from. Never fabricated: unknown means usd=None."""

    model_config = ConfigDict(extra="forbid")

    usd: float | None = None
    source: CostSource = CostSource.none
    partial: bool = Field(default=False, description="the session was truncated before a final figure")
    basis: str | None = Field(default=None, description="where the rates came from, e.g. the model metadata snapshot and its version")


class Refusal(BaseModel):
    """One refused tool call, as traced by dispatch (in-process or through the bridge)."""

    model_config = ConfigDict(extra="forbid")

    tool: str
    code: str
    detail: str = ""


class AuditFlag(BaseModel):
    model_config = ConfigDict(extra="forbid")

    code: str
    detail: str = ""


class AuditVerdict(BaseModel):
    """Post-run audit result: clean, or flags with stable codes."""

    model_config = ConfigDict(extra="forbid")

    clean: bool = True
    flags: list[AuditFlag] = Field(default_factory=list)


class RequestOptions(BaseModel):
    """How the model is asked to answer (doc/SPEC-api.md, "Request options"): passed on each wire
    as that wire spells it, or refused before any request (OptionUnsupported) where the wire,
    the model or the backend cannot honour it. None: the wire's default."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    reasoning_effort: Literal["minimal", "low", "medium", "high"] | None = None
    reasoning_summary: Literal["auto", "concise", "detailed"] | None = None
    thinking_budget: int | None = Field(default=None, ge=1024, description="Anthropic extended thinking, in tokens")
    temperature: float | None = Field(default=None, ge=0, le=2, allow_inf_nan=False)
    max_output_tokens: int | None = Field(default=None, gt=0)

    def given(self) -> dict[str, object]:
        """The options set, by name."""
        return {k: v for k, v in self.model_dump().items() if v is not None}


class AgentSessionRequest(BaseModel):
    """One agent step for a backend: prompt, tool scope, limits."""

    model_config = ConfigDict(extra="forbid")

    prompt: str
    scope: ToolScope
    system: str | None = None
    model: str | None = None
    max_iters: int = Field(default=20, gt=0)
    timeout_s: float = Field(default=1800.0, gt=0)
    run_dir: Path | None = Field(default=None, description="per-session scratch dir; created if None")
    bridge_spec_path: Path | None = Field(default=None, description="harness only")
    session_id: str | None = None
    options: RequestOptions | None = Field(default=None, description="reasoning, thinking, sampling and output options (refused up front where not honoured)")
    policy: Policy | None = Field(default=None, description="the host's tool policy for this session (doc/SPEC-policy.md); None: the defaults")
    approver: Callable[..., object] | None = Field(
        default=None, exclude=True, description="answers approval_required calls (sync or async); none: they are denied"
    )
    on_event: Callable[[SessionEvent], object] | None = Field(
        default=None, exclude=True, description="receives the session's typed events as they happen (doc/SPEC-events.md)"
    )
    _engines: dict = PrivateAttr(default_factory=dict)
    _streams: dict = PrivateAttr(default_factory=dict)

    def events(self, session_id: str | None) -> EventStream:
        """The session's event stream (one per session id, kept); it drops everything when the
        host gave no `on_event`."""
        key = session_id or ""
        stream = self._streams.get(key)
        if stream is None:
            stream = self._streams[key] = EventStream(self.on_event, session_id)
        return stream

    def policy_engine(self, session_id: str) -> PolicyEngine | None:
        """The session's policy engine (one per session id, kept), or None when the host set
        no policy, approver or event sink: then the choke point runs as before, on the scope
        (an engine with the default policy decides exactly what the scope alone would for
        the host's five tools)."""
        if self.policy is None and self.approver is None and self.on_event is None:
            return None
        engine = self._engines.get(session_id)
        if engine is None:
            engine = PolicyEngine(
                self.policy,
                root=self.scope.root,
                session=session_id,
                approver=self.approver,
                sink=self.events(session_id) if self.on_event is not None else None,
            )
            self._engines[session_id] = engine
        return engine


class AgentOutcome(BaseModel):
    """The normalized result of one session, identical in shape for every backend."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    status: OutcomeStatus
    error_class: ErrorClass | None = None
    retryable: bool = False
    retry_after_s: float | None = None
    message: str = Field(default="", description="human message; never contains a secret")
    text: str = Field(default="", description="final text, or the partial text when truncated")
    iterations: int = 0
    tool_calls: int = 0
    tools_used: list[str] = Field(default_factory=list)
    refusals: list[Refusal] = Field(default_factory=list)
    native_tool_calls: list[str] = Field(default_factory=list, description="vendor built-in tools the harness used (for the audit)")
    usage: Usage = Field(default_factory=Usage)
    helper_usage: dict[str, Usage] = Field(default_factory=dict, description="usage of helper/sub-agent models, by model id")
    cost: Cost = Field(default_factory=Cost)
    requested_model: str | None = None
    served_model: str | None = None
    model_verdict: ModelVerdict = ModelVerdict.unverified
    auth_source: str | None = None
    session_id: str | None = None
    exit_code: int | None = None
    signal: int | None = None
    duration_s: float = 0.0
    terminal_event_seen: bool = False
    orphan_suspected: bool = False
    containment: Literal["bwrap", "guards", "none"] = Field(
        default="none",
        description="how the session's process was contained: bwrap (namespaces of its own, doc/SPEC-sandbox.md), "
        "guards (the process guard and env policy alone: no sandbox here), none (no process: an api session)",
    )
    containment_note: str | None = Field(default=None, description="why a sandbox was not had, when it was not")
    audit: AuditVerdict | None = None
    backend: str = ""
    cli_version: str | None = None
    stderr_tail: str = Field(default="", description="redacted")

    @property
    def ok(self) -> bool:
        return self.status is OutcomeStatus.ok

    @classmethod
    def json_schema(cls) -> dict:
        return cls.model_json_schema()


def model_verdict(requested: str | None, served: str | None) -> ModelVerdict:
    """match when the served model is the requested one (or a dated/suffixed form of it)."""
    if not requested or not served:
        return ModelVerdict.unverified
    req, got = requested.strip().lower(), served.strip().lower()
    base = req.split("[", 1)[0]
    if got == req or got == base or got.startswith(base + "-") or req.startswith(got + "-"):
        return ModelVerdict.match
    return ModelVerdict.mismatch


# ---------------------------------------------------------------------------------------
# The transport protocol


@runtime_checkable
class Transport(Protocol):
    """What every backend implements. run_session never raises for in-session failures:
    they become an AgentOutcome. Pre-session problems raise a HarnessError subclass."""

    spec: ProviderSpec

    def run_session(
        self,
        request: AgentSessionRequest,
        *,
        cancel: threading.Event | None = None,
        on_text: Callable[[str], None] | None = None,
    ) -> AgentOutcome: ...

    def complete(
        self,
        prompt: str,
        *,
        system: str | None = None,
        model: str | None = None,
        tools: list | None = None,
        timeout_s: float | None = None,
    ) -> AgentOutcome: ...


# ---------------------------------------------------------------------------------------
# Typed pre-session errors. Each names the fix; none carries a secret.


class HarnessError(Exception):
    """Base of every error raised before a session starts. `fix` says what to do."""

    error_class: ErrorClass = ErrorClass.unknown
    exit_code = 2

    def __init__(self, message: str, fix: str = ""):
        self.message = message
        self.fix = fix
        super().__init__(f"{message}\n  fix: {fix}" if fix else message)


class UnknownBackend(HarnessError):
    error_class = ErrorClass.invalid_request

    def __init__(self, name: str, known: list[str]):
        self.name, self.known = name, sorted(known)
        super().__init__(
            f"unknown backend {name!r}",
            f"use one of: {', '.join(self.known)}",
        )


class SelectionMissing(HarnessError):
    error_class = ErrorClass.invalid_request

    def __init__(self, known: list[str]):
        self.known = sorted(known)
        super().__init__(
            "no backend selected (HARNESS_BACKEND is not set)",
            f"add this line to .env (one of {', '.join(self.known)}):\nHARNESS_BACKEND={self.known[0] if self.known else 'api'}",
        )


class CliNotFound(HarnessError):
    error_class = ErrorClass.cli_missing
    exit_code = 3

    def __init__(self, backend: str, cli_name: str, paths_tried: list[str], package: str | None = None):
        self.backend, self.cli_name, self.paths_tried = backend, cli_name, list(paths_tried)
        how = f"`harnesscheck install-clis` or `npm install -g {package}`" if package else "install it"
        super().__init__(
            f"{backend}: CLI {cli_name!r} not found; tried: {', '.join(self.paths_tried) or '(nothing)'}",
            f"{how}, or set HARNESS_BACKEND_CLI=/path/to/{cli_name}",
        )


class CliVersionUnsupported(HarnessError):
    error_class = ErrorClass.cli_unsupported
    exit_code = 3

    def __init__(self, backend: str, found: str, required: str):
        self.backend, self.found, self.required = backend, found, required
        super().__init__(
            f"{backend}: CLI version {found} found, {required} required",
            f"install a CLI version in {required} (harnesscheck install-clis installs the pinned one)",
        )


class AuthUnavailable(HarnessError):
    error_class = ErrorClass.auth
    exit_code = 3

    def __init__(self, backend: str, missing: str, fix: str = ""):
        self.backend, self.missing = backend, missing
        super().__init__(f"{backend}: no credentials: {missing}", fix or f"set {missing}")


class CapabilityUnsupported(HarnessError):
    error_class = ErrorClass.invalid_request

    def __init__(self, backend: str, feature: str):
        self.backend, self.feature = backend, feature
        super().__init__(f"{backend} does not support {feature}", "choose a backend that declares it")


class OptionUnsupported(CapabilityUnsupported):
    """A request option the backend, its wire or the model cannot honour: raised before any request."""

    def __init__(self, backend: str, option: str, model: str | None, why: str):
        self.option, self.model, self.why = option, model, why
        HarnessError.__init__(
            self,
            f"{backend}: the request option {option} cannot be honoured" + (f" for model {model}" if model else "") + f": {why}",
            f"leave {option} out of the request, or choose a model or backend that takes it",
        )
        self.backend, self.feature = backend, f"request option {option}"


class ConfigError(HarnessError):
    error_class = ErrorClass.invalid_request


def outcome_schema_json() -> str:
    """The exported JSON Schema of AgentOutcome (doc/agent-outcome.schema.json)."""
    return json.dumps(AgentOutcome.json_schema(), indent=2, sort_keys=True) + "\n"
