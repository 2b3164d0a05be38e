"""The loopback level as the kit sees it, without importing the kit: a lazy stand-in for
`harnesscheck.loopback.adapter.LoopbackAdapter` that `harnesscheck.kit.adapters` registers
in LEVEL_PROVIDERS[("harness", "loopback")]. The adapter (and the kit modules it builds
on) is imported only when a loopback cell is actually set up or probed.
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
