"""Pytest fixtures for the loopback level (import them into a conftest or a test module:
`from harnesscheck.loopback.pytest_fixtures import loopback_server, real_cli`).

- `loopback_server(scenario, **kw)`: a factory fixture; every server it starts is
  stopped at teardown (hanging answers released).
- `real_cli(backend_id)`: the pinned real binary for a backend, or a pytest skip whose
  reason says exactly what is missing and how to install it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator

import pytest

from harnesscheck.loopback.scenario import Scenario, named_scenario
from harnesscheck.loopback.server import ScriptedModelServer


@pytest.fixture
def loopback_server() -> Iterator[Callable[..., ScriptedModelServer]]:
    started: list[ScriptedModelServer] = []

    def start(scenario: Scenario | str, **kwargs) -> ScriptedModelServer:
        if isinstance(scenario, str):
            scenario = named_scenario(scenario)
        srv = ScriptedModelServer(scenario, **kwargs).start()
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.stop()


@pytest.fixture
def real_cli() -> Callable[[str], Path]:
    from harnesscheck.loopback.clis import require_pinned_cli

    def get(backend_id: str) -> Path:
        found, reason = require_pinned_cli(backend_id)
        if found is None:
            pytest.skip(reason)
        return found.path

    return get
