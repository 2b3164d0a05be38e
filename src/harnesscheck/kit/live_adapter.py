"""The live level: the real CLI (or the real API) with the user's real login, on a budget.

Reached only through `pytest -m live --hc-backend ID` (verify runs live only when asked).
Never in CI: with CI set, every live cell is skipped `budget`. A missing binary or login is
skipped `env-missing` with the exact thing that is missing. Each live run is one session of
at most LIVE_MAX_TURNS turns and LIVE_TIMEOUT_S seconds in a throwaway worktree.
"""

from __future__ import annotations

import os

from harnesscheck.core.config import Settings
from harnesscheck.kit.adapters import BackendUnderTest, Setup
from harnesscheck.kit.levels import LEVEL_PROVIDERS
from harnesscheck.kit.session import Facts, SkipCell

LIVE_MAX_TURNS = 2
LIVE_TIMEOUT_S = 120.0
LIVE_SCENARIOS = ("success", "tool_calls")


def _missing(spec) -> str | None:
    """What this machine lacks for a live run of `spec`, or None."""
    if os.environ.get("CI"):
        return "CI is set: live checks never run in CI"
    if spec.cli_name:
        from harnesscheck.backends.registry import find_cli
        from harnesscheck.core.contracts import HarnessError

        try:
            find_cli(spec, Settings(backend=spec.id))
        except HarnessError as exc:
            return exc.message
        return _login_missing(spec)
    if spec.id.partition("/")[0] == "api":
        mode = spec.api_mode or os.environ.get("HARNESS_API_MODE") or "anthropic_messages"
        var = "ANTHROPIC_API_KEY" if mode == "anthropic_messages" else "OPENAI_API_KEY"
        if not os.environ.get(var):
            return f"{var} is not set (api_mode {mode})"
        if not os.environ.get("HARNESS_BACKEND_MODEL"):
            return "HARNESS_BACKEND_MODEL is not set"
        return None
    return f"{spec.id} has no live level"


def _login_missing(spec) -> str | None:
    """Whether the user's login for the CLI is present (checked on disk, without running it)."""
    from pathlib import Path

    from harnesscheck.backends.registry import kit_profile

    home = Path(os.path.expanduser("~"))
    login_missing = kit_profile(spec).live_login_missing  # the backend's own reader (its kit profile)
    if login_missing is not None:
        return login_missing(home)
    return f"the kit does not know how {spec.id} logs in: no live level"


class LiveAdapter(BackendUnderTest):
    name = "live"

    @staticmethod
    def available(spec) -> tuple[bool, str]:
        why = _missing(spec)
        return why is None, why or ""

    @staticmethod
    def cli_version(spec) -> str | None:
        if not spec.cli_name or _missing(spec):
            return None
        from harnesscheck.backends.registry import find_cli

        return find_cli(spec, Settings(backend=spec.id)).version

    def provenance(self) -> str:
        return f"live: {self.spec.id} with this machine's real login and budget"

    def prepare(self, scenario, ws, *, tool_calls, model, timeout_s, echo) -> Setup:
        why = _missing(self.spec)
        if why:
            reason = "budget" if why.startswith("CI is set") else "env-missing"
            raise SkipCell(reason, why)
        if scenario not in LIVE_SCENARIOS:
            raise SkipCell("budget", f"live runs only {', '.join(LIVE_SCENARIOS)}")
        settings = Settings.from_env().model_copy(update={"backend": self.spec.id, "timeout_s": LIVE_TIMEOUT_S})
        from harnesscheck.backends.registry import build_transport

        return Setup(build_transport(self.spec, settings), Facts(), model=model)

    def run(self, scenario, **kwargs):
        kwargs["max_iters"] = min(kwargs.get("max_iters", LIVE_MAX_TURNS), LIVE_MAX_TURNS)
        kwargs["timeout_s"] = min(kwargs.get("timeout_s", LIVE_TIMEOUT_S), LIVE_TIMEOUT_S)
        return super().run(scenario, **kwargs)


for _kind in ("harness", "api"):
    LEVEL_PROVIDERS.setdefault((_kind, "live"), LiveAdapter)
