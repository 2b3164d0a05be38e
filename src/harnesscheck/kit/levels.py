"""Choosing the adapter for a cell: which kind a backend is (scripted, harness, api; ACP,
Copilot and reasoning backends by what their transport is built on), whether this machine can
run it at a level, and the lazily registered loopback adapters (LEVEL_PROVIDERS)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Callable, Iterable, NamedTuple

from harnesscheck.core.contracts import Kind, ProviderSpec
from harnesscheck.kit.adapters import BackendUnderTest
from harnesscheck.kit.scripted_adapter import ScriptedAdapter
from harnesscheck.kit.session import SkipCell

# ---------------------------------------------------------------------------------------
# Choosing an adapter

#: (kind-or-"scripted", level) -> adapter class. The loopback helper registers its own here.
LEVEL_PROVIDERS: dict[tuple[str, str], Callable[[ProviderSpec, str, Path], BackendUnderTest]] = {}


def is_scripted(spec: ProviderSpec) -> bool:
    """A backend built on FakeTransport (has a settable `script`)."""
    import importlib

    module, _, attr = spec.factory.partition(":")
    try:
        factory = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError):
        return False
    from harnesscheck.backends.fake import FakeTransport

    return isinstance(factory, type) and issubclass(factory, FakeTransport)


def starts_bridges(specs: Iterable[ProviderSpec]) -> bool:
    """Whether any of these backends is a harness, whose cells start tool bridges (and so
    want the run's bridge forkserver template)."""
    return any(adapter_kind(spec) == "harness" for spec in specs)


def adapter_kind(spec: ProviderSpec) -> str:
    if is_scripted(spec):
        return "scripted"
    if spec.kind is Kind.harness:
        return "harness"
    return "api"


class WarmUp(NamedTuple):
    """A one-time start-up begun in the background: `name` says which ("forkserver", "api-sdk")."""

    name: str
    run: Callable[[], object]


def background_warm_ups(cells: list[tuple[ProviderSpec, str]], *, api_sdk: bool = True) -> list[WarmUp]:
    """The one-time start-ups these cells would each wait for on first use, to begin in the
    background: the bridge forkserver (harness cells) and, with `api_sdk`, the api SDK's
    import (offline api cells, ~1 s for anthropic). Starting them early changes no outcome,
    only when it is paid."""
    kinds = {(adapter_kind(spec), level) for spec, level in cells}
    jobs: list[WarmUp] = []
    if any(kind == "harness" for kind, _ in kinds):
        from harnesscheck.bridge.forkserver import get_forkserver

        jobs.append(WarmUp("forkserver", get_forkserver))
    if api_sdk and ("api", "offline") in kinds:
        from harnesscheck.backends.llm import sdk_module

        sdks = sorted({sdk_module(spec.api_mode or "anthropic_messages") for spec, level in cells if level == "offline" and adapter_kind(spec) == "api"})
        jobs.append(WarmUp("api-sdk", functools.partial(_import_all, sdks)))
    return jobs


def _import_all(modules: list[str]) -> None:
    import importlib

    for module in modules:
        importlib.import_module(module)


def level_available(spec: ProviderSpec, level: str) -> tuple[bool, str]:
    """Whether this machine can run `spec` at `level` (offline always can)."""
    _load_level_providers()
    kind = adapter_kind(spec)
    if level == "offline":
        return True, ""
    if kind == "harness" and level == "loopback" and is_acp(spec):
        from harnesscheck.kit.acp_adapter import AcpLoopbackLevel

        return AcpLoopbackLevel.available(spec)
    if (kind, level) in LEVEL_PROVIDERS:
        probe = getattr(LEVEL_PROVIDERS[(kind, level)], "available", None)
        if probe is not None:
            return probe(spec)
        return True, ""
    if kind == "scripted":
        return False, f"{spec.id} is in-process: only the offline level exists"
    return False, f"no {level} adapter for {spec.id} is installed"


def _load_level_providers() -> None:
    """The live level registers itself on import (loopback registers lazily, below)."""
    import harnesscheck.kit.live_adapter  # noqa: F401


def adapter_for(spec: ProviderSpec, level: str, tmp_path: Path) -> BackendUnderTest:
    _load_level_providers()
    kind = adapter_kind(spec)
    if kind == "harness" and level == "loopback" and is_acp(spec):
        from harnesscheck.kit.acp_adapter import AcpLoopbackLevel

        return AcpLoopbackLevel()(spec, level, tmp_path)
    if (kind, level) in LEVEL_PROVIDERS:
        return LEVEL_PROVIDERS[(kind, level)](spec, level, tmp_path)
    if level != "offline":
        raise SkipCell("env-missing", level_available(spec, level)[1])
    if kind == "scripted":
        return ScriptedAdapter(spec, level, tmp_path)
    if kind == "harness" and is_acp(spec):
        from harnesscheck.kit.acp_adapter import AcpAdapter

        return AcpAdapter(spec, level, tmp_path)
    if kind == "harness":
        from harnesscheck.kit.harness_adapter import HarnessAdapter

        return HarnessAdapter(spec, level, tmp_path)
    if is_reasoning(spec):
        raise SkipCell("adapter-not-implemented", reasoning_profile(spec).offline_skip)
    if is_copilot(spec):
        from harnesscheck.kit.copilot_adapter import CopilotAdapter

        return CopilotAdapter(spec, level, tmp_path)
    from harnesscheck.kit.api_adapter import ApiAdapter

    return ApiAdapter(spec, level, tmp_path)


def _built_on(spec: ProviderSpec, base: type) -> bool:
    """Whether the spec's factory is a transport class derived from `base` (False when it does
    not import: the adapter that needs it says so later)."""
    import importlib

    module, _, attr = spec.factory.partition(":")
    try:
        factory = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError):
        return False
    return isinstance(factory, type) and issubclass(factory, base)


def is_acp(spec: ProviderSpec) -> bool:
    """A backend built on the ACP transport (an ACP agent, driven by kit/acp_adapter.py offline)."""
    from harnesscheck.backends.acp.transport import AcpTransport

    return _built_on(spec, AcpTransport)


def is_copilot(spec: ProviderSpec) -> bool:
    """A backend built on the Copilot provider (its endpoints are mocked by CopilotAdapter)."""
    from harnesscheck.backends.copilot import CopilotTransport

    return _built_on(spec, CopilotTransport)


class LoopbackLevel:
    """The loopback level, registered lazily: callable like `kit.loopback_adapter.LoopbackAdapter`
    (imported only when a loopback cell is set up), with `available(spec)` and
    `cli_version(spec)` answered from the pinned CLI install alone."""

    @staticmethod
    def _adapter():
        from harnesscheck.kit.loopback_adapter import LoopbackAdapter

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


def reasoning_profile(spec: ProviderSpec):
    """The reasoning part of the backend's kit profile (an api backend whose model is another
    backend's CLI, one call per host turn), None for every other backend. Its `offline_skip`
    says why it has no offline cells (its column is the loopback level)."""
    from harnesscheck.backends.registry import kit_profile

    return kit_profile(spec).reasoning


def is_reasoning(spec: ProviderSpec) -> bool:
    """A reasoning-only backend (its kit profile says so): the api kind, driven at the loopback
    level by kit/reasoning_adapter.py."""
    return reasoning_profile(spec) is not None


class ReasoningLevel:
    """The api kind's loopback level: only a reasoning-only backend has one (the real CLI of the
    backend its kit profile names, at that backend's pin); every other api column has no binary
    to run here. Lazy like LoopbackLevel: kit/reasoning_adapter.py is imported only when such a
    cell is set up."""

    @staticmethod
    def _adapter():
        from harnesscheck.kit.reasoning_adapter import ReasoningLoopbackAdapter

        return ReasoningLoopbackAdapter

    def __call__(self, spec, level, tmp_path):
        return self._adapter()(spec, level, tmp_path)

    def available(self, spec) -> tuple[bool, str]:
        if not is_reasoning(spec):
            return False, f"no loopback adapter for {spec.id} is installed"
        return self._adapter().available(spec)

    def cli_version(self, spec) -> str | None:
        if not is_reasoning(spec):
            return None
        binary, _ = self._adapter().pinned_cli(spec)
        return binary.version if binary else None


LEVEL_PROVIDERS.setdefault(("harness", "loopback"), LoopbackLevel())
LEVEL_PROVIDERS.setdefault(("api", "loopback"), ReasoningLevel())
