"""The loopback level as the kit sees it, without importing the kit: lazy stand-ins for
`harnesscheck.loopback.adapter.LoopbackAdapter` and
`harnesscheck.loopback.reasoning.ReasoningLoopbackAdapter` that `harnesscheck.kit.adapters`
registers in LEVEL_PROVIDERS[("harness", "loopback")] and [("api", "loopback")]. The
adapters (and the kit modules they build on) are imported only when a loopback cell is
actually set up or probed.
"""

from __future__ import annotations


class LoopbackLevel:
    """Callable like the adapter class; `available(spec)` and `cli_version(spec)` as the kit
    asks them of a level provider."""

    @staticmethod
    def _adapter():
        from harnesscheck.loopback.adapter import LoopbackAdapter

        return LoopbackAdapter

    def __call__(self, spec, level, tmp_path):
        return self._adapter()(spec, level, tmp_path)

    def available(self, spec) -> tuple[bool, str]:
        from harnesscheck.loopback.clis import require_pinned_cli

        binary, why = require_pinned_cli(spec)
        return binary is not None, why

    def cli_version(self, spec) -> str | None:
        from harnesscheck.loopback.clis import require_pinned_cli

        binary, _ = require_pinned_cli(spec)
        return binary.version if binary else None


LOOPBACK_LEVEL = LoopbackLevel()


class ReasoningLevel:
    """The api kind's loopback level: only reasoning-only Claude Code has one (its real claude,
    the claude-code pin); every other api column has no binary to run here."""

    @staticmethod
    def _adapter():
        from harnesscheck.loopback.reasoning import ReasoningLoopbackAdapter

        return ReasoningLoopbackAdapter

    def __call__(self, spec, level, tmp_path):
        return self._adapter()(spec, level, tmp_path)

    def available(self, spec) -> tuple[bool, str]:
        from harnesscheck.kit.adapters import is_reasoning

        if not is_reasoning(spec):
            return False, f"no loopback adapter for {spec.id} is installed"
        return self._adapter().available(spec)

    def cli_version(self, spec) -> str | None:
        from harnesscheck.kit.adapters import is_reasoning

        if not is_reasoning(spec):
            return None
        binary, _ = self._adapter().pinned_claude()
        return binary.version if binary else None


REASONING_LEVEL = ReasoningLevel()
