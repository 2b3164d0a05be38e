"""Adopt the seed project's provider layer (JiusiServe/InferMatrixCopilot,
``src/infermatrix_copilot/providers/``) as a backend under test, without changing it.

The seed is not published on a package registry, so this module imports it from a checkout
named by ``HC_SEED_SRC`` (its ``src`` directory on ``sys.path``); tests/kit/test_foreign_seed.py
skips without it. Nothing of the seed is copied here: this is the translation an author
writes when adopting the suite, one request in, one outcome out, and it adds no behaviour:

- harnesscheck's ``AgentSessionRequest`` becomes the seed's: same prompt, system, model,
  ``max_iters``, ``timeout_s``, run dir; the scope becomes the seed's ``ToolScope`` (the same
  root, read-only, the read tools); the bridge spec is written by the seed's own
  ``tool_bridge.write_bridge_spec``, as its runner does.
- The CLI the kit installs (``Settings.cli``) is the seed's ``STRICT_BACKEND_CLI``.
- The seed's ``AgentOutcome`` (text, iterations, tool_calls, truncated, refusals, tokens)
  becomes harnesscheck's: ``truncated`` -> status ``truncated``, anything else ``ok``. The
  seed has no error taxonomy, no cancellation and reports no cost through run_session;
  the binding does not invent them (a backend's missing feature must fail its check).
- The capabilities are the seed registry's own flags, mapped by name.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import SimpleNamespace

from harnesscheck.core.contracts import (
    AgentOutcome,
    CapabilityUnsupported,
    Kind,
    OutcomeStatus,
    ProviderSpec,
    Refusal,
    Usage,
)
from harnesscheck.core.contracts import Capability as C

#: the seed's capability vocabulary -> harnesscheck's (names the seed does not have stay out)
CAPABILITIES = {
    "mcp_tools": C.mcp_tools,
    "builtin_tools_off": C.builtin_tools_off,
    "max_turns": C.max_turns,
    "system_prompt": C.system_prompt,
    "usage_reporting": C.usage_reporting,
    "cost_reporting": C.cost_reporting,
}
#: the seed's bridge tools a read-only session gets (its runner's review scope)
READ_TOOLS = frozenset({"read_file", "list_dir", "grep"})
WRITE_TOOLS = frozenset({"write_file", "edit_file"})
#: seed provider id -> (module, transport class, cli name)
TRANSPORTS = {
    "claude-code": ("infermatrix_copilot.providers.claude_code", "ClaudeCodeTransport", "claude"),
    "codex": ("infermatrix_copilot.providers.codex", "CodexTransport", "codex"),
    "cursor": ("infermatrix_copilot.providers.cursor", "CursorTransport", "cursor-agent"),
}


def _seed_path() -> None:
    src = os.environ.get("HC_SEED_SRC")
    if src and src not in sys.path:
        sys.path.insert(0, src)


class SeedBinding:
    """harnesscheck's Transport protocol over one of the seed's HarnessTransports."""

    seed_id = ""

    def __init__(self, spec: ProviderSpec, settings):
        import importlib

        _seed_path()
        module, cls, _cli = TRANSPORTS[self.seed_id]
        self.spec, self.settings = spec, settings
        seed_settings = SimpleNamespace(
            strict_backend_cli=str(settings.cli or ""), strict_backend_model=settings.model or "", strict_backend_timeout_s=settings.timeout_s
        )
        self.inner = getattr(importlib.import_module(module), cls)(seed_settings)

    def run_session(self, request, *, cancel=None, on_text=None) -> AgentOutcome:
        from infermatrix_copilot.providers.base import AgentSessionRequest as SeedRequest
        from infermatrix_copilot.scopes import ToolScope as SeedScope
        from infermatrix_copilot.tool_bridge import write_bridge_spec

        run_dir = Path(request.run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        tools = READ_TOOLS if request.scope.read_only else READ_TOOLS | WRITE_TOOLS
        scope = SeedScope(name=request.scope.name, allowed_tools=tools, read_only=request.scope.read_only, root=str(request.scope.root))
        bridge = write_bridge_spec(run_dir=run_dir, step_name="session", scope=scope, repo="")
        out = self.inner.run_session(
            SeedRequest(
                system=request.system or "",
                prompt=request.prompt,
                scope=scope,
                model=request.model or "",
                max_iters=request.max_iters,
                timeout_s=request.timeout_s,
                run_dir=run_dir,
                bridge_spec_path=bridge,
            )
        )
        return AgentOutcome(
            status=OutcomeStatus.truncated if out.truncated else OutcomeStatus.ok,
            text=out.text,
            iterations=out.iterations,
            tool_calls=out.tool_calls,
            tools_used=list(out.tools_used),
            refusals=[Refusal(tool="", code="refused", detail=str(r)) for r in out.refusals],
            usage=Usage(input=out.input_tokens, output=out.output_tokens),
            backend=self.spec.id,
            requested_model=request.model,
        )

    def complete(self, prompt, *, system=None, model=None, tools=None, timeout_s=None) -> AgentOutcome:
        if tools:  # the seed's HarnessLLM refuses tools the same way, before any work
            raise CapabilityUnsupported(self.spec.id, "tools in a one-shot completion")
        reply = self.inner.complete(system=system or "", messages=[{"role": "user", "content": prompt}], model=model or "")
        text = "".join(getattr(b, "text", "") or "" for b in reply.blocks)
        return AgentOutcome(status=OutcomeStatus.ok, text=text, backend=self.spec.id)


class SeedClaude(SeedBinding):
    seed_id = "claude-code"


class SeedCodex(SeedBinding):
    seed_id = "codex"


class SeedCursor(SeedBinding):
    seed_id = "cursor"


def _spec(seed_id: str, factory: str) -> ProviderSpec:
    _seed_path()
    from infermatrix_copilot.providers.registry import PROVIDERS

    row = PROVIDERS[seed_id]
    return ProviderSpec(
        id=f"seed-{seed_id}",
        kind=Kind.harness,
        label=f"seed {row.display}",
        factory=f"tests.foreign.seed_binding:{factory}",
        cli_name=TRANSPORTS[seed_id][2],
        capabilities=frozenset(CAPABILITIES[c] for c in row.capabilities if c in CAPABILITIES),
    )


def claude() -> ProviderSpec:
    return _spec("claude-code", "SeedClaude")


def codex() -> ProviderSpec:
    return _spec("codex", "SeedCodex")


def cursor() -> ProviderSpec:
    return _spec("cursor", "SeedCursor")
