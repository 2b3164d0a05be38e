"""The run report of one session: RUN_REPORT.md (for people) and RUN_REPORT.json (for tools).

Contract (doc/SPEC-report.md):
- both files are written into the run dir, atomically, mode 0600, from an AgentOutcome plus
  the run facts (backend id and label, CLI version, capabilities, root, requested model,
  timeout, start time); the JSON holds the full outcome, the Markdown a readable digest;
- every string is redacted (`envpolicy.redact`) before it is written: no secret reaches a
  report even when the CLI echoed one;
- cost is never invented: a figure is shown only with its source (`api`, `subscription` =
  reported by the CLI and not billed, `reported`), otherwise "none";
- the verdict line says what the backend could do and what the audit found, e.g.
  "backend: cursor — native tools possible, audit: clean".
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from harnesscheck.contain.envpolicy import redact, redact_obj
from harnesscheck.core.contracts import AgentOutcome, Capability, CostSource, ProviderSpec

REPORT_KIND = "harnesscheck-run"
REPORT_VERSION = 1
MD_NAME = "RUN_REPORT.md"
JSON_NAME = "RUN_REPORT.json"
_TEXT_EXCERPT = 4000
_STDERR_LINES = 20


@dataclass
class ReportFacts:
    """What the runner knows about a run besides the outcome."""

    backend: str
    label: str = ""
    cli_version: str | None = None
    cli_path: str | None = None
    capabilities: list[str] = field(default_factory=list)
    root: str | None = None
    read_only: bool = True
    requested_model: str | None = None
    timeout_s: float | None = None
    started_at: str | None = None
    run_dir: str | None = None
    attempts: list[dict] = field(default_factory=list)  # the runner's retry record, one per attempt

    @classmethod
    def from_spec(cls, spec: ProviderSpec, **kwargs) -> "ReportFacts":
        return cls(
            backend=spec.id,
            label=spec.label,
            capabilities=sorted(c.value for c in spec.capabilities),
            **kwargs,
        )


def verdict_line(facts: ReportFacts, outcome: AgentOutcome) -> str:
    """One line: which backend, whether native tools could run, and the audit verdict
    (the audit's own `summary_line`, so the report and the audit never disagree)."""
    from harnesscheck.backends.audit import summary_line

    possible = Capability.native_tools_audited.value in set(facts.capabilities)
    line = summary_line(facts.backend, outcome.audit, native_tools_possible=possible)
    if outcome.native_tool_calls:
        line += f"; {len(outcome.native_tool_calls)} native tool call(s)"
    return line


def cost_line(outcome: AgentOutcome) -> str:
    cost = outcome.cost
    if cost.usd is None or cost.source is CostSource.none:
        return "none (no dollar figure reported)"
    what = {
        CostSource.api: "computed from the shipped price table",
        CostSource.subscription: "reported by the CLI under a subscription, not billed",
        CostSource.reported: "reported by the vendor as billed",
    }[cost.source]
    partial = ", partial (session truncated)" if cost.partial else ""
    return f"${cost.usd:.4f} (source: {cost.source.value}: {what}{partial})"


def model_line(outcome: AgentOutcome) -> str:
    req = outcome.requested_model or "(CLI default)"
    served = outcome.served_model or "(not reported)"
    return f"requested {req}, served {served}: {outcome.model_verdict.value}"


def build_report(facts: ReportFacts, outcome: AgentOutcome) -> dict:
    """The JSON report (already redacted)."""
    doc = {
        "kind": REPORT_KIND,
        "report_version": REPORT_VERSION,
        "facts": facts.__dict__,
        "verdict": verdict_line(facts, outcome),
        "cost": cost_line(outcome),
        "model": model_line(outcome),
        "outcome": outcome.model_dump(mode="json"),
    }
    return redact_obj(doc)


def render_markdown(facts: ReportFacts, outcome: AgentOutcome) -> str:
    """The Markdown digest (already redacted)."""
    o = outcome
    usage = o.usage
    rows = [
        ("status", o.status.value + (f" ({o.error_class.value})" if o.error_class else "")),
        ("retryable", "yes" if o.retryable else "no"),
        ("message", o.message or "—"),
        ("backend", f"{facts.backend} — {facts.label}" if facts.label else facts.backend),
        ("CLI version", facts.cli_version or o.cli_version or "—"),
        ("root", f"{facts.root or '—'} ({'read-only' if facts.read_only else 'read-write'})"),
        ("model", model_line(o)),
        ("auth source", o.auth_source or "(not reported)"),
        (
            "usage",
            f"input {usage.input}, output {usage.output}, cache read {usage.cache_read}, cache write {usage.cache_write}, reasoning {usage.reasoning}",
        ),
        ("cost", cost_line(o)),
        ("bridge tool calls", f"{o.tool_calls} ({', '.join(o.tools_used) or 'none'})"),
        ("native tool calls", ", ".join(o.native_tool_calls) or "none"),
        ("refusals", str(len(o.refusals))),
        ("iterations", str(o.iterations)),
        ("terminal event seen", "yes" if o.terminal_event_seen else "no"),
        ("exit", f"code {o.exit_code}, signal {o.signal}" + (", orphan suspected" if o.orphan_suspected else "")),
        ("contained by", o.containment + (f" ({o.containment_note})" if o.containment_note else "")),
        ("duration", f"{o.duration_s:.2f} s" + (f" (budget {facts.timeout_s:g} s)" if facts.timeout_s else "")),
        ("session id", o.session_id or "—"),
        ("started", facts.started_at or "—"),
    ]
    lines = [
        f"# Run report: {facts.label or facts.backend}",
        "",
        verdict_line(facts, o),
        "",
        "| | |",
        "|---|---|",
    ]
    lines += [f"| {k} | {_cell(v)} |" for k, v in rows]
    if o.refusals:
        lines += ["", "## Refusals", ""]
        lines += [f"- `{r.tool}`: {r.code}" + (f" — {_inline(r.detail)}" if r.detail else "") for r in o.refusals]
    if o.audit is not None and o.audit.flags:
        lines += ["", "## Audit flags", ""]
        lines += [f"- {f.code}" + (f": {_inline(f.detail)}" if f.detail else "") for f in o.audit.flags]
    if len(facts.attempts) > 1:
        lines += ["", "## Attempts", ""]
        lines += [
            f"- {a.get('attempt')}: {a.get('status')}"
            + (f" ({a['error_class']})" if a.get("error_class") else "")
            + (f", retried after {a['wait_s']:g} s" if a.get("retried") else "")
            + f" — {_inline(str(a.get('why', '')))}"
            for a in facts.attempts
        ]
    if o.helper_usage:
        lines += ["", "## Helper models", ""]
        lines += [f"- {m}: input {u.input}, output {u.output}" for m, u in sorted(o.helper_usage.items())]
    text = o.text if len(o.text) <= _TEXT_EXCERPT else o.text[:_TEXT_EXCERPT] + "\n… (truncated in the report)"
    lines += ["", "## Final text" if o.ok else "## Text (partial)", "", _fence(text or "(empty)")]
    if o.stderr_tail.strip():
        tail = "\n".join(o.stderr_tail.rstrip().splitlines()[-_STDERR_LINES:])
        lines += ["", "## stderr (tail, redacted)", "", _fence(tail)]
    return redact("\n".join(lines) + "\n")


def write_report(run_dir: Path, facts: ReportFacts, outcome: AgentOutcome) -> tuple[Path, Path]:
    """Write RUN_REPORT.md and RUN_REPORT.json into run_dir; returns their paths."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    md = _atomic_write(run_dir / MD_NAME, render_markdown(facts, outcome))
    js = _atomic_write(run_dir / JSON_NAME, json.dumps(build_report(facts, outcome), indent=2, sort_keys=True) + "\n")
    return md, js


def _atomic_write(path: Path, text: str) -> Path:
    """0600, through a temp file with a random name (never a predictable one: rundir.py)."""
    from harnesscheck.contain.rundir import replace_private

    return replace_private(path, text)


def _cell(value: str) -> str:
    return _inline(value).replace("|", "\\|") or "—"


def _inline(value: str) -> str:
    return " ".join(str(value).split())


def _fence(text: str) -> str:
    fence = "```"
    while fence in text:
        fence += "`"
    return f"{fence}text\n{text}\n{fence}"
