"""Offline harness runs reuse fake-CLI wrappers (one version probe per wrapper, not per
session) while every run keeps its own scenario and record (kit/harness_adapter.py WrapperPool)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import harnesscheck.backends.registry as registry
from harnesscheck.backends.registry import BUILTIN_SPECS
from harnesscheck.core.contracts import OutcomeStatus
from harnesscheck.kit.harness_adapter import HarnessAdapter


def test_sequential_runs_share_a_wrapper_and_probe_its_version_once(tmp_path, monkeypatch):
    probes = []
    real = registry._probe_version
    monkeypatch.setattr(registry, "_probe_version", lambda path, t: probes.append(path) or real(path, t))
    but = HarnessAdapter(BUILTIN_SPECS["codex"], "offline", tmp_path)
    first = but.run("success")
    second = but.run("timeout_mid_stream", timeout_s=0.3)
    assert first.outcome.status == OutcomeStatus.ok and second.outcome.status == OutcomeStatus.truncated
    paths = {c["argv"][0] for run in (first, second) for c in run.children}
    assert len(paths) == 1, f"each run got its own wrapper: {paths}"
    assert probes.count(Path(next(iter(paths)))) <= 1
    # each run's evidence is its own: one invocation in each record, the scenario it asked for
    assert len(first.children) == len(second.children) == 1
    assert _process(first.children[0]) != _process(second.children[0])
    assert second.timeline.stalled is not None and first.timeline.stalled is None


def test_concurrent_runs_keep_their_records_apart(tmp_path):
    def one(i):
        but = HarnessAdapter(BUILTIN_SPECS["cursor"], "offline", tmp_path / f"b{i}")
        return but.run("success")

    with ThreadPoolExecutor(max_workers=3) as pool:
        runs = list(pool.map(one, range(3)))
    assert all(r.outcome.status == OutcomeStatus.ok for r in runs)
    assert all(len(r.children) == 1 for r in runs), "a record holds another run's invocation"
    assert len({_process(r.children[0]) for r in runs}) == 3


def _process(child: dict) -> tuple:
    """Which session's process a record is: the run marker of its environment (one per
    session) and its pid (a sandboxed fake's pid is its namespace's, and a namespace's id can
    be used again once it is gone, so neither tells ended sessions apart alone)."""
    from harnesscheck.contain.envpolicy import RUN_MARKER_VAR

    return (child["env"][RUN_MARKER_VAR], child["pid"])
