"""Test-wide guards: no test can reach a real vendor with the developer's credentials.

Provider variables are removed from the test process before anything runs (tests that
need them set their own canary values with monkeypatch), and HARNESS_* selection from
the developer's shell never leaks into a test.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# The test modules sit in tests/<layer>/ (tests/test_layers.py keeps the mirror) and import the
# support modules at the top of tests/ (kit_support, proc_support, api_wire, ...) by name, so
# tests/ must be on sys.path. pytest's default (prepend) import mode puts this conftest's folder
# there before it runs; this states the dependency where the support modules live.
_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

_PROVIDER_PREFIXES = (
    "ANTHROPIC_",
    "OPENAI_",
    "CODEX_",
    "CURSOR_",
    "GEMINI_",
    "GOOGLE_",
    "CLAUDE_CODE_",
    "CLAUDE_AGENT_",
    "HARNESS_",
)
for _name in list(os.environ):
    if _name.startswith(_PROVIDER_PREFIXES) or _name in ("CLAUDECODE", "CLAUDE_CONFIG_DIR"):
        del os.environ[_name]


#: The tests that take longest (each a child run of the suite, or minutes of waits on purpose),
#: by node id prefix. They are started first, so no worker is left running one alone at the end
#: of the run. xdist's `--dist load` gives each worker a first batch of consecutive items (a
#: quarter of its share), so all of them go to one worker and run there one after another (about
#: 170 s, mostly waiting) while the others run unit tests (doc/performance.md, twenty-second
#: session). Only the order changes, never what runs.
LONG_FIRST = (
    "tests/kit/test_kit_mutants.py::test_cli_mutants_fail_exactly_their_checks",
    "tests/kit/test_kit_mutants.py::test_in_process_mutants_fail_exactly_their_checks",
    "tests/kit/test_kit_mutants.py::test_loopback_cli_mutants_fail_exactly_their_checks",
    "tests/kit/test_kit_verify.py::test_verify_leaves_nothing_in_tmp",
    "tests/kit/test_kit_verify.py::test_serial_and_parallel_runs_give_the_same_cells",
    "tests/loopback/test_loopback_real.py::test_drift_against_stored_recordings",
    "tests/kit/test_kit_watchdog.py::test_a_session_that_overran_its_bound_fails_at_the_bound",
)


def _long_rank(item) -> int:
    for rank, prefix in enumerate(LONG_FIRST):
        if item.nodeid.startswith(prefix):
            return rank
    return len(LONG_FIRST)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items) -> None:
    """After every other reordering (the kit orders its cells): the LONG_FIRST tests first, in
    that order; everything else keeps its place (a stable sort)."""
    items.sort(key=_long_rank)
