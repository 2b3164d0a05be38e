"""preflight: what a backend will and will not do for one request, before any side effect.

Requirement (issue 31 item 5; the ADR: "missing auth, unsupported tools, incompatible context or
unavailable cancellation returns a structured preflight result rather than failing midway"):
a typed result a host reads before it starts a session, and may refuse to start on.

- the CLI: found, its version in range, verified by the shipped matrix or not (harness backends);
- the credential the backend would use, learned cheaply (by variable name, login files, the
  CLI's own status in a scratch HOME; doctor's checks, never the user's credential store);
- what the request asks that the backend declines (`transport.declined(request)`: a turn cap
  without `max_turns`, a system prompt without `system_prompt`, ...);
- the policy: whether the backend applies the host's policy at all (`host_policy`), whether an
  `approval_required` call can reach the approver (`host_approvals`; else it is denied), the
  limits that apply.

`ok` is false when any item failed: the session would not do what the host asked, so a host
(and `harnesscheck run`) does not start it. Nothing here starts a session or writes a file.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

Status = Literal["ok", "warn", "fail"]


class PreflightItem(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    topic: str
    status: Status
    detail: str
    fix: str = ""


class Preflight(BaseModel):
    """The preflight of one request on one backend. `ok`: no item failed."""

    model_config = ConfigDict(extra="forbid", title="harnesscheck preflight")

    backend: str
    kind: str
    items: list[PreflightItem]
    declines: list[str]
    ok: bool

    def lines(self) -> list[str]:
        """One line per item that is not ok, each with its fix: what `run` prints."""
        out = []
        for item in self.items:
            if item.status != "ok":
                out.append(f"preflight {item.status}: {item.topic}: {item.detail}" + (f"\n  fix: {item.fix}" if item.fix else ""))
        return out


def _policy_items(spec: Any, request: Any, transport: Any = None) -> list[PreflightItem]:
    from harnesscheck.core.contracts import Capability as C
    from harnesscheck.core.policy import Verdict

    policy = request.policy
    if policy is None and request.approver is None:
        return []
    caps = spec.capabilities
    if C.host_policy not in caps:
        return [
            PreflightItem(
                topic="policy",
                status="fail",
                detail=f"{spec.id} does not declare host_policy: its tool calls would not be decided by the host's policy",
                fix="choose a backend that declares host_policy, or run without a policy",
            )
        ]
    items = [PreflightItem(topic="policy", status="ok", detail="every tool call is decided by the host's policy before it runs")]
    asks = policy is not None and (
        any(v is Verdict.APPROVAL_REQUIRED for v in policy.defaults.values()) or any(r.decision is Verdict.APPROVAL_REQUIRED for r in policy.rules)
    )
    if asks and C.host_approvals not in caps:
        items.append(
            PreflightItem(
                topic="approvals",
                status="warn",
                detail=f"{spec.id} runs its tools outside this process: an approval_required call cannot reach the approver "
                "and is denied (pre-approvals in the policy file still apply)",
                fix="pre-approve what the session needs in the policy file, or use a host-loop backend (api, copilot)",
            )
        )
    elif asks and request.approver is None:
        items.append(
            PreflightItem(
                topic="approvals",
                status="warn",
                detail="the policy asks for approvals and no approver is set: those calls are denied",
                fix="pass an approver (harnesscheck run asks on the terminal)",
            )
        )
    if policy is not None:
        limits = {k: v for k, v in policy.limits.model_dump().items() if v is not None}
        if limits:
            items.append(PreflightItem(topic="limits", status="ok", detail=", ".join(f"{k} {v}" for k, v in limits.items())))
        counts = transport is not None and getattr(transport, "counts_turns", False)
        if policy.limits.turns is not None and C.max_turns not in caps and C.host_tool_loop not in caps and not counts:
            items.append(
                PreflightItem(
                    topic="limits",
                    status="warn",
                    detail=f"{spec.id} has no turn cap of its own: the turns limit is not enforced",
                    fix="bound the session with tool_calls or its timeout instead",
                )
            )
        if policy.limits.processes is not None:
            items.append(_processes_item(spec))
    return items


def _processes_item(spec: Any) -> PreflightItem:
    """Whether the processes limit can be enforced: a CLI's or agent's tree is counted whole in
    its sandbox or under the process guard (process.run_process max_processes); without
    either, or for a backend that starts no CLI, it is not."""
    from harnesscheck.contain import process, sandbox
    from harnesscheck.core.contracts import Kind

    if spec.kind is not Kind.harness:
        return PreflightItem(
            topic="limits",
            status="warn",
            detail=f"{spec.id} runs no CLI process tree of its own that the host counts: the processes limit is not enforced",
            fix="bound the session with tool_calls or its timeout",
        )
    if process._use_guard() or sandbox.status().available:
        return PreflightItem(
            topic="limits",
            status="ok",
            detail="processes: the CLI's tree is counted whole (in its sandbox, or under the process guard) and ended past the limit",
        )
    return PreflightItem(
        topic="limits",
        status="warn",
        detail="no process guard and no sandbox here: the CLI's tree cannot be counted whole, the processes limit is not enforced",
        fix=sandbox.INSTALL_FIX,
    )


def preflight(spec: Any, settings: Any, request: Any, *, transport: Any = None, environ: dict[str, str] | None = None) -> Preflight:
    """The preflight of `request` on the backend `spec` (with `settings`; `transport`, when
    already built, answers `declined`). Never starts a session."""
    import os

    from harnesscheck.apps.doctor import check_binary, check_credentials
    from harnesscheck.backends.registry import declined_because
    from harnesscheck.core.contracts import Kind

    env = dict(os.environ if environ is None else environ)
    items: list[PreflightItem] = []
    cli_info = None
    if spec.kind is Kind.harness and spec.cli_name:
        checks, cli_info = check_binary(spec, settings, True)
        items += [
            PreflightItem(topic=c.check, status="fail" if c.status == "fail" else "warn" if c.status == "warn" else "ok", detail=c.detail, fix=c.fix)
            for c in checks
            if c.status != "skip"
        ]
    for c in check_credentials(spec, settings, env, True, cli_info):
        if c.status != "skip":
            items.append(
                PreflightItem(topic=c.check, status="fail" if c.status == "fail" else "warn" if c.status == "warn" else "ok", detail=c.detail, fix=c.fix)
            )
    declines: list[str] = []
    declined = getattr(transport, "declined", None)
    if callable(declined):
        for cap in declined(request):
            declines.append(cap.value)
            why = declined_because(spec, cap.value)
            items.append(
                PreflightItem(
                    topic="declines",
                    status="warn",
                    detail=f"{spec.id} does not honour {cap.value}" + (f": {why}" if why else ""),
                    fix="leave it out of the request, or choose a backend that declares it",
                )
            )
    items += _policy_items(spec, request, transport)
    return Preflight(backend=spec.id, kind=spec.kind.value, items=items, declines=declines, ok=not any(i.status == "fail" for i in items))
