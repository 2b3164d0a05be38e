"""policy: the host's one decision for every tool call (doc/SPEC-policy.md).

Requirement (shared/seeds ADR on the agent backend and tool host boundary): every tool call of
every backend gets exactly one decision from one engine before it runs — `allow`, `deny` or
`approval_required` — with a stable reason code, and the same engine answers the bridge, the
api host loop and an ACP agent's `session/request_permission`.

- Rules match a call by tool name (shell-style patterns), by kind (read, write, execute,
  network, other) and by path pattern beneath the root. Among the rules that match, **deny
  beats approval_required beats allow** (the order Claude Code's settings use): a broad allow
  can never open what a deny closes. No rule matching means the kind's documented default
  (`DEFAULTS`); a kind the engine cannot place is `other`, denied by default: fail closed.
- An approval is bound to a digest of the tool, its canonical arguments, the root and the
  session (`call_digest`), and it expires. It authorizes exactly that call; a changed argument,
  another root or another session is a new call. An approver may instead grant a stated
  pattern (tools and paths) for this session and root until the expiry. An approval-required
  call nobody answers is denied at the approver's timeout; an approver that fails is a deny.
- Limits (tool calls, bytes written, files touched, turns) are charged at the same place; the
  call that would pass a limit is denied with `limit_reached`, and `limit_reached` stays set so
  the session ends typed (status `truncated`, error class `budget`). `processes` is not a
  call's: the process layer counts a CLI's tree against it (backends/_harness.py), and a
  session whose tree cannot be counted says so.

The engine holds no I/O and no clock of its own (the clock is an argument), so every rule,
approval and expiry is tested deterministically.
"""

from __future__ import annotations

import fnmatch
import hashlib
import inspect
import json
import os
import threading
import time
import tomllib
from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import StrEnum
from pathlib import Path
from typing import Any, Awaitable, Callable, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class ToolKind(StrEnum):
    """What a tool call does to the world; ACP's `ToolKind` values map onto these."""

    READ = "read"
    WRITE = "write"
    EXECUTE = "execute"
    NETWORK = "network"
    OTHER = "other"


class Verdict(StrEnum):
    ALLOW = "allow"
    DENY = "deny"
    APPROVAL_REQUIRED = "approval_required"


#: The kind of each of the host's own tools (dispatch.ALL_TOOLS).
HOST_TOOL_KINDS: dict[str, ToolKind] = {
    "read_file": ToolKind.READ,
    "list_dir": ToolKind.READ,
    "grep": ToolKind.READ,
    "write_file": ToolKind.WRITE,
    "edit_file": ToolKind.WRITE,
}

#: ACP `ToolKind` (session/update tool_call.kind, request_permission.toolCall.kind) → ours.
ACP_KINDS: dict[str, ToolKind] = {
    "read": ToolKind.READ,
    "search": ToolKind.READ,
    "edit": ToolKind.WRITE,
    "delete": ToolKind.WRITE,
    "move": ToolKind.WRITE,
    "execute": ToolKind.EXECUTE,
    "fetch": ToolKind.NETWORK,
    "think": ToolKind.OTHER,
    "switch_mode": ToolKind.OTHER,
    "other": ToolKind.OTHER,
}

#: With no matching rule: reads and writes of the host's tools are allowed (the scope still
#: bounds them: read-only, paths, sizes), commands and network are denied, anything the engine
#: cannot place is denied.
DEFAULTS: dict[ToolKind, Verdict] = {
    ToolKind.READ: Verdict.ALLOW,
    ToolKind.WRITE: Verdict.ALLOW,
    ToolKind.EXECUTE: Verdict.DENY,
    ToolKind.NETWORK: Verdict.DENY,
    ToolKind.OTHER: Verdict.DENY,
}

_RANK = {Verdict.ALLOW: 0, Verdict.APPROVAL_REQUIRED: 1, Verdict.DENY: 2}


class PolicyError(ValueError):
    """A policy file that cannot be used; the message names the file and the field."""


class Rule(BaseModel):
    """One rule. Empty `tools`/`kinds`/`paths` match anything; `paths` match only calls that
    name a path beneath the root (a pattern relative to the root, `*` crossing `/`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    decision: Verdict
    tools: tuple[str, ...] = ()
    kinds: tuple[ToolKind, ...] = ()
    paths: tuple[str, ...] = ()
    reason: str = Field(default="", max_length=200, description="shown with the decision")


class PreApproval(BaseModel):
    """A pattern approved ahead of time for any session under the policy, until `expires`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tools: tuple[str, ...] = Field(min_length=1)
    paths: tuple[str, ...] = ()
    expires: datetime | None = None


class Limits(BaseModel):
    """Caps beyond the clock; None = no cap. Charged at the choke point."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tool_calls: int | None = Field(default=None, ge=0)
    bytes_written: int | None = Field(default=None, ge=0)
    files_touched: int | None = Field(default=None, ge=0)
    turns: int | None = Field(default=None, ge=0)
    #: The most processes a harness CLI's or ACP agent's tree (itself included) may hold at
    #: once, counted by the host where the sandbox or the process guard holds the whole tree
    #: (process.run_process max_processes); past it the session ends truncated / budget.
    processes: int | None = Field(default=None, ge=1)


class Policy(BaseModel):
    """The host's policy: defaults by kind, rules, pre-approvals, limits, approval timeout.
    `harnesscheck policy schema` prints its JSON Schema (doc/policy.schema.json)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    defaults: dict[ToolKind, Verdict] = Field(default_factory=lambda: dict(DEFAULTS))
    rules: tuple[Rule, ...] = ()
    preapprove: tuple[PreApproval, ...] = ()
    limits: Limits = Limits()
    approval_timeout_s: float = Field(default=300.0, gt=0, le=86400, allow_inf_nan=False)

    def default_for(self, kind: ToolKind) -> Verdict:
        return self.defaults.get(kind, DEFAULTS[kind])

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "Policy":
        """A TOML policy file; a bad one raises PolicyError naming the file and the field."""
        p = Path(path)
        try:
            data = tomllib.loads(p.read_text(encoding="utf-8"))
        except OSError as exc:
            raise PolicyError(f"policy file {p.name}: cannot be read ({exc.strerror or exc})") from None
        except tomllib.TOMLDecodeError as exc:
            raise PolicyError(f"policy file {p.name}: not TOML ({exc})") from None
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "(top)"
            raise PolicyError(f"policy file {p.name}: {where}: {first['msg']}") from None


def canonical_args(args: Mapping[str, Any] | None) -> str:
    """The arguments as one canonical JSON text (sorted keys, no spaces, UTF-8 kept)."""
    return json.dumps(dict(args or {}), sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def call_digest(tool: str, args: Mapping[str, Any] | None, root: str | os.PathLike[str], session: str) -> str:
    """sha256 over the tool, its canonical arguments, the root and the session: what an
    approval is bound to. Any change to one of the four is another digest."""
    body = json.dumps(
        {"tool": tool, "args": json.loads(canonical_args(args)), "root": os.fspath(root), "session": session},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


def _rel_path(path: object, root: str) -> str | None:
    """The call's path relative to the root, lexically, or None when it names none or climbs
    out (the scope refuses those anyway; a path rule never matches them)."""
    if not isinstance(path, str) or not path or "\x00" in path:
        return None
    p = os.path.normpath(path if os.path.isabs(path) else os.path.join(root, path))
    rel = os.path.relpath(p, root)
    if rel == ".":
        return "."
    if rel.startswith(".." + os.sep) or rel == ".." or os.path.isabs(rel):
        return None
    return rel.replace(os.sep, "/")


def _matches_any(value: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(value, pat) for pat in patterns)


@dataclass(frozen=True)
class ToolCall:
    """One call as the engine sees it. `path`: the path argument, if the call has one."""

    tool: str
    args: Mapping[str, Any]
    kind: ToolKind
    path: str | None = None
    bytes_to_write: int = 0


@dataclass(frozen=True)
class Decision:
    """The engine's answer. `code` is a stable reason code: `rule`, `default`, `approved`,
    `preapproved`, `approval_denied`, `approval_timeout`, `approval_failed`, `no_approver`,
    `limit_reached`."""

    verdict: Verdict
    code: str
    digest: str
    detail: str = ""

    @property
    def allowed(self) -> bool:
        return self.verdict is Verdict.ALLOW


@dataclass(frozen=True)
class ApprovalRequest:
    """What a host's approver is shown: the call, its digest, its kind and path, the session."""

    tool: str
    args: Mapping[str, Any]
    kind: ToolKind
    path: str | None
    digest: str
    session: str
    root: str
    reason: str


@dataclass(frozen=True)
class ApprovalAnswer:
    """An approver's answer. `approve` with no pattern authorizes exactly the digest asked
    about; with `tools` (and optionally `paths`) it grants that pattern to this session and
    root. `ttl_s` bounds the grant (default: the engine's `approval_ttl_s`)."""

    approve: bool
    tools: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()
    ttl_s: float | None = None


Approver = Callable[[ApprovalRequest], "ApprovalAnswer | bool | Awaitable[ApprovalAnswer | bool]"]


@dataclass
class _Grant:
    expires_at: float
    digest: str | None = None
    tools: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()


@dataclass
class LimitState:
    """What the session has used so far."""

    tool_calls: int = 0
    bytes_written: int = 0
    files_touched: set[str] = field(default_factory=set)
    turns: int = 0


class PolicyEngine:
    """The policy applied to one session (a root and a session id).

    `decide(call)` is the rules alone; `authorize(call)` is what a choke point calls before
    running a call: rules, limits, grants, then the approver for `approval_required`.
    `record(call, ok)` charges a call that ran. Thread-safe."""

    def __init__(
        self,
        policy: Policy | None = None,
        *,
        root: str | os.PathLike[str],
        session: str,
        approver: Approver | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
        approval_ttl_s: float = 600.0,
        sink: Callable[..., object] | None = None,
    ) -> None:
        self.policy = policy or Policy()
        #: Receives `(kind, **fields)` for each call's events (harnesscheck.core.events.EventStream).
        self.sink = sink
        self.root = os.path.abspath(os.fspath(root))
        self.session = session
        self.approver = approver
        self._clock = clock
        self._wall_clock = wall_clock
        self.approval_ttl_s = approval_ttl_s
        self._grants: list[_Grant] = []
        self._lock = threading.Lock()
        self.used = LimitState()
        #: The name of the limit that ended the session, once one was reached.
        self.limit_reached: str | None = None

    # -- building a call ---------------------------------------------------------------
    def host_call(self, tool: str, args: Mapping[str, Any] | None) -> ToolCall:
        """A call of one of the host's own tools (dispatch's five), kind from HOST_TOOL_KINDS."""
        args = dict(args or {})
        kind = HOST_TOOL_KINDS.get(tool, ToolKind.OTHER)
        content = args.get("content") if tool == "write_file" else args.get("new") if tool == "edit_file" else None
        size = len(content.encode("utf-8", "surrogatepass")) if isinstance(content, str) else 0
        return ToolCall(tool=tool, args=args, kind=kind, path=_rel_path(args.get("path"), self.root), bytes_to_write=size)

    def digest(self, call: ToolCall) -> str:
        return call_digest(call.tool, call.args, self.root, self.session)

    # -- the rules -----------------------------------------------------------------------
    def decide(self, call: ToolCall) -> Decision:
        """The rules' verdict for a call (deny > approval_required > allow; no match: the
        kind's default). No limits, no grants, no approver."""
        digest = self.digest(call)
        best: Rule | None = None
        for rule in self.policy.rules:
            if rule.tools and not _matches_any(call.tool, rule.tools):
                continue
            if rule.kinds and call.kind not in rule.kinds:
                continue
            if rule.paths and (call.path is None or not _matches_any(call.path, rule.paths)):
                continue
            if best is None or _RANK[rule.decision] > _RANK[best.decision]:
                best = rule
        if best is not None:
            detail = best.reason or f"a policy rule says {best.decision.value} for {call.tool}"
            return Decision(best.decision, "rule", digest, detail)
        verdict = self.policy.default_for(call.kind)
        return Decision(verdict, "default", digest, f"the default for {call.kind.value} is {verdict.value}")

    # -- limits ----------------------------------------------------------------------------
    def _limit_hit(self, call: ToolCall) -> str | None:
        limits, used = self.policy.limits, self.used
        if self.limit_reached:
            return self.limit_reached
        if limits.tool_calls is not None and used.tool_calls + 1 > limits.tool_calls:
            return "tool_calls"
        if call.kind is ToolKind.WRITE:
            if limits.bytes_written is not None and used.bytes_written + call.bytes_to_write > limits.bytes_written:
                return "bytes_written"
            touched = call.path or call.tool
            if limits.files_touched is not None and touched not in used.files_touched and len(used.files_touched) + 1 > limits.files_touched:
                return "files_touched"
        return None

    def resume(self, records) -> None:
        """Take up the counts of calls this session already made in another process (a CLI
        that restarts its MCP server, or opens a second connection, gets a second bridge with
        a fresh engine): `records` are the session's trace records; each `tool` record is a
        call (a denied one too), an allowed write counts its bytes and its file. The limits
        then hold for the session, not for one bridge process."""
        used = LimitState()
        for rec in records:
            if rec.get("event") != "tool":
                continue
            used.tool_calls += 1
            if rec.get("decision") == "allow" and HOST_TOOL_KINDS.get(str(rec.get("tool"))) is ToolKind.WRITE:
                used.bytes_written += int(rec.get("bytes") or 0)
                used.files_touched.add(str(rec.get("path") or rec.get("tool")))
        with self._lock:
            self.used = used

    def count_turn(self) -> bool:
        """Charge one model turn; False (and `limit_reached = "turns"`) once past the cap."""
        with self._lock:
            cap = self.policy.limits.turns
            if cap is not None and self.used.turns + 1 > cap:
                self.limit_reached = self.limit_reached or "turns"
                return False
            self.used.turns += 1
            return True

    def record(self, call: ToolCall, ran: bool) -> None:
        """Charge a call: every call the model made counts (a denied one too: a model that
        keeps calling a denied tool still reaches `tool_calls`); a write that ran counts its
        bytes and its file."""
        with self._lock:
            self.used.tool_calls += 1
            if ran and call.kind is ToolKind.WRITE:
                self.used.bytes_written += call.bytes_to_write
                self.used.files_touched.add(call.path or call.tool)

    # -- grants ----------------------------------------------------------------------------
    def judge_ran(self, call: ToolCall) -> Decision:
        """A call that already ran, judged after the fact (a CLI's built-in the audit saw): the
        rules and the pre-approvals; never the approver and never a limit (nothing can be
        refused any more). Anything but allow means the call should not have run."""
        ruled = self.decide(call)
        if ruled.verdict is Verdict.APPROVAL_REQUIRED:
            granted = self._granted(call, ruled.digest)
            if granted is not None:
                return Decision(Verdict.ALLOW, granted, ruled.digest, f"{call.tool} was {granted}")
        return ruled

    def _granted(self, call: ToolCall, digest: str) -> str | None:
        now = self._clock()
        with self._lock:
            self._grants = [g for g in self._grants if g.expires_at > now]
            for grant in self._grants:
                if grant.digest is not None and grant.digest == digest:
                    return "approved"
                if (
                    grant.digest is None
                    and _matches_any(call.tool, grant.tools)
                    and (not grant.paths or (call.path is not None and _matches_any(call.path, grant.paths)))
                ):
                    return "approved"
        wall = self._wall_clock()
        for pre in self.policy.preapprove:
            if pre.expires is not None and _aware(pre.expires) <= wall:
                continue
            if _matches_any(call.tool, pre.tools) and (not pre.paths or (call.path is not None and _matches_any(call.path, pre.paths))):
                return "preapproved"
        return None

    def grant(self, answer: ApprovalAnswer, digest: str) -> None:
        """Keep an approver's yes: the exact digest, or the pattern it states, until expiry."""
        ttl = self.approval_ttl_s if answer.ttl_s is None else max(0.0, float(answer.ttl_s))
        expires = self._clock() + ttl
        with self._lock:
            if answer.tools:
                self._grants.append(_Grant(expires, None, tuple(answer.tools), tuple(answer.paths)))
            else:
                self._grants.append(_Grant(expires, digest))

    # -- the one entry point ---------------------------------------------------------------
    def _emit(self, kind: str, call: ToolCall, digest: str, **fields: Any) -> None:
        if self.sink is not None:
            self.sink(kind, tool=call.tool, digest=digest[:16], **fields)

    def refused_before(self, tool: str, args: Mapping[str, Any] | None, code: str) -> None:
        """A call the scope refused before the policy was asked (unknown tool, not offered,
        read-only, bad arguments): it counts as a call, and its events say it was refused."""
        call = self.host_call(tool, {str(k): v for k, v in (args or {}).items()})
        digest = self.digest(call)
        self._emit("tool_call", call, digest, tool_kind=call.kind.value, path=call.path)
        self._emit("tool_decision", call, digest, decision=Verdict.DENY.value, code=code)
        self.record(call, ran=False)

    def finished(self, call: ToolCall, ok: bool, code: str | None) -> None:
        """The call ran (or the scope refused it after an allow): its `tool_result` event."""
        self._emit("tool_result", call, self.digest(call), ok=ok, code=code)

    def authorize(self, call: ToolCall) -> Decision:
        """The decision a choke point acts on: allow or deny, never approval_required; each
        call's `tool_call` and `tool_decision` events (and the approval's) are emitted here."""
        digest = self.digest(call)
        self._emit("tool_call", call, digest, tool_kind=call.kind.value, path=call.path)
        decision = self._authorize(call)
        self._emit("tool_decision", call, digest, decision=decision.verdict.value, code=decision.code)
        return decision

    def _authorize(self, call: ToolCall) -> Decision:
        """Rules and limits; the approver (if any) is asked for an approval-required call with
        no live grant; no approver, a no, a failure or no answer within `approval_timeout_s`
        is a deny."""
        ruled = self.decide(call)
        hit = self._limit_hit(call)  # before the rules: past a limit nothing more is judged
        if hit is not None:
            self.limit_reached = hit
            return Decision(Verdict.DENY, "limit_reached", ruled.digest, f"the session's {hit} limit is reached")
        if ruled.verdict is Verdict.DENY:
            return ruled
        if ruled.verdict is Verdict.ALLOW:
            return ruled
        granted = self._granted(call, ruled.digest)
        if granted is not None:
            return Decision(Verdict.ALLOW, granted, ruled.digest, f"{call.tool} was approved ({granted})")
        if self.approver is None:
            return Decision(Verdict.DENY, "no_approver", ruled.digest, f"{call.tool} needs an approval and this host has no approver")
        request = ApprovalRequest(call.tool, call.args, call.kind, call.path, ruled.digest, self.session, self.root, ruled.detail)
        self._emit("approval_requested", call, ruled.digest, tool_kind=call.kind.value, path=call.path)
        code, answer = _ask(self.approver, request, self.policy.approval_timeout_s)
        self._emit(
            "approval_answered",
            call,
            ruled.digest,
            decision="allow" if answer is not None and answer.approve else "deny",
            code=code if answer is None else ("approved" if answer.approve else "approval_denied"),
        )
        if answer is None:
            return Decision(Verdict.DENY, code, ruled.digest, f"{call.tool}: {code.replace('_', ' ')}")
        if not answer.approve:
            return Decision(Verdict.DENY, "approval_denied", ruled.digest, f"{call.tool} was not approved")
        self.grant(answer, ruled.digest)
        # The answer is kept as a grant and the call re-judged against it, so an approval
        # whose ttl is 0 (already expired) authorizes nothing.
        granted = self._granted(call, ruled.digest)
        if granted is None:
            return Decision(Verdict.DENY, "approval_expired", ruled.digest, f"the approval of {call.tool} expired")
        return Decision(Verdict.ALLOW, "approved", ruled.digest, f"{call.tool} was approved")


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)


def _coerce(answer: object) -> ApprovalAnswer | None:
    if isinstance(answer, ApprovalAnswer):
        return answer
    if isinstance(answer, bool):
        return ApprovalAnswer(approve=answer)
    return None


def _ask(approver: Approver, request: ApprovalRequest, timeout_s: float) -> tuple[str, ApprovalAnswer | None]:
    """Call a sync or async approver with a timeout. (code, answer); answer None = deny.

    The approver runs on a daemon thread: one that never answers costs the call its timeout
    and is then abandoned, never the host's exit."""
    import asyncio

    box: list[tuple[str, object]] = []
    done = threading.Event()

    def call() -> None:
        try:
            result = approver(request)
            if inspect.isawaitable(result):

                async def bounded() -> object:
                    return await asyncio.wait_for(result, timeout_s)  # type: ignore[arg-type]

                result = asyncio.run(bounded())
            box.append(("ok", result))
        except asyncio.TimeoutError:
            box.append(("approval_timeout", None))
        except Exception:  # an approver that raises is a no, never an allow
            box.append(("approval_failed", None))
        finally:
            done.set()

    threading.Thread(target=call, name="hc-approver", daemon=True).start()
    if not done.wait(timeout_s) or not box:
        return "approval_timeout", None
    code, raw = box[0]
    if code != "ok":
        return code, None
    answer = _coerce(raw)
    return ("approval_failed", None) if answer is None else ("approved", answer)


def policy_json_schema() -> dict:
    """The policy file's JSON Schema (published as doc/policy.schema.json)."""
    schema = Policy.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "harnesscheck policy file"
    return schema


if __name__ == "__main__":  # python -m harnesscheck.core.policy > doc/policy.schema.json
    print(json.dumps(policy_json_schema(), indent=2, sort_keys=True))
