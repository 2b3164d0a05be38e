"""kit/scheduling.py: under xdist every offline api cell runs on the pin worker, each loopback
column on one worker while it has work of its own, every other cell is load-balanced as before,
and no cell is lost or run twice, whatever happens to the pin worker or a column's owner."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from harnesscheck.kit.scheduling import PIN_WORKER, SuiteScheduling, pinned_suffixes

SUFFIXES = pinned_suffixes([("api", "offline", "api"), ("api", "loopback", "api"), ("codex", "offline", "harness")])


class Node:
    def __init__(self, name: str):
        self.gateway = SimpleNamespace(id=name)
        self.shutting_down = False
        self.sent: list[int] = []

    def send_runtest_some(self, indices):
        assert not self.shutting_down
        self.sent.extend(indices)

    def shutdown(self):
        self.shutting_down = True

    def __repr__(self):
        return self.gateway.id


def collection(n_harness: int, n_api: int) -> list[str]:
    ids = [f"conformance/test_a.py::test_{i}[codex@offline]" for i in range(n_harness)]
    return ids + [f"conformance/test_b.py::test_{i}[api@offline]" for i in range(n_api)]


def scheduler(nodes: list[Node], ids: list[str]) -> SuiteScheduling:
    config = SimpleNamespace(getvalue=lambda name: [f"{len(nodes)}*popen"], getoption=lambda name: None)
    sched = SuiteScheduling(config, suffixes=SUFFIXES)
    for node in nodes:
        sched.add_node(node)
    for node in nodes:
        sched.add_node_collection(node, ids)
    sched.schedule()
    return sched


def run_to_end(sched: SuiteScheduling, nodes: list[Node], *, crash: Node | None = None) -> dict[Node, list[int]]:
    """Complete tests one at a time, round-robin over the nodes, as workers would report them."""
    ran: dict[Node, list[int]] = {node: [] for node in nodes}
    live = list(nodes)
    while live:
        progressed = False
        for node in list(live):
            pending = sched.node2pending.get(node, [])
            if node is crash and ran[node]:
                sched.remove_node(node)  # crashed after its first test: its pending go back
                live.remove(node)
                continue
            if pending:
                index = pending[0]
                ran[node].append(index)
                sched.mark_test_complete(node, index)
                progressed = True
            elif node.shutting_down:
                live.remove(node)
        assert progressed or not live or any(sched.node2pending.get(n) for n in live), "a worker waits for work that never comes"
    return ran


def test_suffixes_name_offline_api_cells_only():
    assert SUFFIXES == ("[api@offline]",)


def test_the_installed_xdist_has_what_the_pinning_builds_on():
    from harnesscheck.kit.scheduling import supported

    assert supported()  # else every run silently falls back to xdist's scheduler: say so here


def test_every_api_cell_runs_on_the_pin_worker_and_the_rest_is_shared():
    nodes = [Node("gw1"), Node(PIN_WORKER)]  # the pin worker is found by name, not position
    ids = collection(60, 20)
    sched = scheduler(nodes, ids)
    ran = run_to_end(sched, nodes)
    api = {i for i, nodeid in enumerate(ids) if nodeid.endswith("[api@offline]")}
    assert set(ran[nodes[1]]) >= api and not set(ran[nodes[0]]) & api
    assert sorted(ran[nodes[0]] + ran[nodes[1]]) == list(range(len(ids)))  # each cell exactly once
    assert ran[nodes[0]], "the other worker got none of the other cells"
    assert all(node.shutting_down for node in nodes)
    # the pin worker's first batch runs some other cells before the api ones (time for the SDK import)
    first_api = next(k for k, i in enumerate(nodes[1].sent) if i in api)
    assert first_api > 0


def test_pinned_cells_go_back_to_everyone_when_the_pin_worker_goes_down():
    nodes = [Node(PIN_WORKER), Node("gw1")]
    ids = collection(10, 12)
    sched = scheduler(nodes, ids)
    ran = run_to_end(sched, nodes, crash=nodes[0])
    crashed_item = 1  # the item being run when it went down is reported by xdist, not rerun
    assert len(ran[nodes[0]]) + len(ran[nodes[1]]) == len(ids) - crashed_item
    assert len(set(ran[nodes[0]] + ran[nodes[1]])) == len(ids) - crashed_item


@pytest.mark.parametrize("n_harness, n_api", [(0, 5), (3, 0), (1, 1), (0, 1)])
def test_small_or_one_sided_collections_finish(n_harness, n_api):
    nodes = [Node(PIN_WORKER), Node("gw1")]
    ids = collection(n_harness, n_api)
    sched = scheduler(nodes, ids)
    ran = run_to_end(sched, nodes)
    assert sorted(ran[nodes[0]] + ran[nodes[1]]) == list(range(len(ids)))
    assert all(node.shutting_down for node in nodes)


def test_without_xdist_nothing_is_pinned_and_the_constants_still_import():
    """A serial run on an environment without pytest-xdist reads API_SDK_HERE from this module."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'xdist' or name.startswith('xdist.'):\n"
        "            raise ImportError(name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "from harnesscheck.kit import scheduling\n"
        "print(scheduling.supported(), scheduling.API_SDK_HERE)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "harnesscheck_api_sdk_here"]


@pytest.mark.parametrize("n_harness, n_api", [(0, 1), (1, 1), (2, 1), (0, 2)])
@pytest.mark.parametrize("pin_always", [False, True])
def test_a_small_run_ends_whatever_order_the_workers_came_in(n_harness, n_api, pin_always, monkeypatch):
    """Fewer cells than two per worker are dealt one at a time and may run out before the pin
    worker's turn (review finding: `-n 3` on one api cell hung, its cell pending for ever).
    With `pin_always` the share rule is off, so the pinned cells really wait for gw0's turn."""
    if pin_always:
        monkeypatch.setattr(SuiteScheduling, "_choose_pinned", lambda self: {i for i, n in enumerate(self.collection) if n.endswith(SUFFIXES)})
    nodes = [Node("gw1"), Node("gw2"), Node(PIN_WORKER)]
    ids = collection(n_harness, n_api)
    sched = scheduler(nodes, ids)
    ran = run_to_end(sched, nodes)
    assert sorted(sum(ran.values(), [])) == list(range(len(ids)))
    assert all(node.shutting_down for node in nodes)
    if pin_always:
        api = {i for i, nodeid in enumerate(ids) if nodeid.endswith("[api@offline]")}
        assert set(ran[nodes[2]]) >= api


def test_a_run_of_mostly_api_cells_is_not_pinned_to_one_worker():
    nodes = [Node(PIN_WORKER), Node("gw1")]
    ids = collection(4, 30)  # pinning would make one worker run 30 of 34 cells in a row
    sched = scheduler(nodes, ids)
    ran = run_to_end(sched, nodes)
    api = {i for i, nodeid in enumerate(ids) if nodeid.endswith("[api@offline]")}
    assert set(ran[nodes[1]]) & api, "the api cells were all kept on one worker"
    assert sorted(ran[nodes[0]] + ran[nodes[1]]) == list(range(len(ids)))


# --- loopback columns kept to one worker --------------------------------------------------

from harnesscheck.kit.scheduling import column_of  # noqa: E402

COLUMNS = ("opencode", "acp-opencode", "codex", "gemini", "deepseek", "claude-code")


def mixed_collection(cells_per_column: int = 12, units: int = 30) -> list[str]:
    """Unit tests, then the checks in suite order: each check's offline and loopback cells of
    every backend side by side, as the kit collects them."""
    ids = [f"tests/test_unit.py::test_{i}" for i in range(units)]
    for check in range(cells_per_column):
        for backend in COLUMNS:
            ids.append(f"conformance/test_c.py::test_{check}[{backend}@offline]")
            ids.append(f"conformance/test_c.py::test_{check}[{backend}@loopback]")
    return ids


def run_with_speeds(sched: SuiteScheduling, nodes: list[Node], every: dict[str, int], *, crash: Node | None = None) -> dict[Node, list[int]]:
    """Like run_to_end, but a node completes a test only every `every[name]` rounds (1 if not named)."""
    ran: dict[Node, list[int]] = {node: [] for node in nodes}
    live = list(nodes)
    for rnd in range(100_000):
        if not live:
            return ran
        for node in list(live):
            if rnd % every.get(node.gateway.id, 1):
                continue
            pending = sched.node2pending.get(node, [])
            if node is crash and len(ran[node]) > 40:
                sched.remove_node(node)
                live.remove(node)
            elif pending:
                ran[node].append(pending[0])
                sched.mark_test_complete(node, pending[0], duration=1.0)
            elif node.shutting_down or sched.tests_finished:
                live.remove(node)
    raise AssertionError("the run never ended")


def columns_by_node(ids: list[str], ran: dict[Node, list[int]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for node, indices in ran.items():
        for i in indices:
            column = column_of(ids[i])
            if column is not None:
                out.setdefault(column, set()).add(node.gateway.id)
    return out


def test_column_of_names_loopback_cells_only():
    assert column_of("conformance/test_c.py::test_1[acp-opencode@loopback]") == "acp-opencode@loopback"
    assert column_of("conformance/test_c.py::test_1[acp-opencode@offline]") is None
    assert column_of("tests/test_unit.py::test_loopback") is None


def test_each_loopback_column_runs_on_one_worker_when_the_workers_keep_pace():
    """Under xdist's own `load` every worker runs cells of every column, and pays each column's
    shared sessions itself; here each column runs on its owner alone."""
    nodes = [Node(PIN_WORKER), Node("gw1"), Node("gw2")]
    ids = mixed_collection()
    ran = run_with_speeds(scheduler(nodes, ids), nodes, {})
    assert sorted(sum(ran.values(), [])) == list(range(len(ids)))
    by_column = columns_by_node(ids, ran)
    assert set(by_column) == {f"{b}@loopback" for b in COLUMNS}
    assert sum(len(owners) for owners in by_column.values()) <= len(COLUMNS) + 1, by_column  # at most one join, at the very end
    assert all(node.shutting_down for node in nodes)
    # the same run under xdist's own scheduler spreads every column (what this is for)
    from xdist.scheduler import LoadScheduling

    plain_nodes = [Node(PIN_WORKER), Node("gw1"), Node("gw2")]
    config = SimpleNamespace(getvalue=lambda name: ["3*popen"], getoption=lambda name: None)
    plain = LoadScheduling(config)
    for node in plain_nodes:
        plain.add_node(node)
    for node in plain_nodes:
        plain.add_node_collection(node, ids)
    plain.schedule()
    spread = columns_by_node(ids, run_with_speeds(plain, plain_nodes, {}))
    assert sum(len(owners) for owners in spread.values()) > len(COLUMNS) + 1


def test_a_worker_with_none_of_its_own_left_joins_the_column_with_most_waiting():
    """gw0 is three times slower: the others, done with their own, take its columns' cells, so
    the run ends about as evenly as under `load`."""
    nodes = [Node(PIN_WORKER), Node("gw1"), Node("gw2")]
    ids = mixed_collection(cells_per_column=30)
    sched = scheduler(nodes, ids)
    mine = {column for column, owner in sched._owner.items() if owner is nodes[0]}
    ran = run_with_speeds(sched, nodes, {PIN_WORKER: 3})
    assert sorted(sum(ran.values(), [])) == list(range(len(ids)))
    by_column = columns_by_node(ids, ran)
    assert mine and all(len(by_column[column]) > 1 for column in mine), (mine, by_column)
    counts = sorted(len(indices) for indices in ran.values())
    assert counts[0] * 3 >= counts[-1] // 3  # the slow worker ran about a third as many as each other


def test_the_columns_of_a_worker_that_went_down_go_to_the_others():
    nodes = [Node(PIN_WORKER), Node("gw1"), Node("gw2")]
    ids = mixed_collection()
    ran = run_with_speeds(scheduler(nodes, ids), nodes, {}, crash=nodes[1])
    done = sum(ran.values(), [])
    assert len(done) == len(set(done)) == len(ids) - 1  # the item running at the crash is xdist's to report
    assert all(node.shutting_down for node in (nodes[0], nodes[2]))


@pytest.mark.parametrize("n_workers", [1, 2, 5])
@pytest.mark.parametrize("cells_per_column", [1, 3])
def test_small_runs_of_loopback_cells_finish_on_any_number_of_workers(n_workers, cells_per_column):
    nodes = [Node(f"gw{i}") for i in range(n_workers)]
    ids = mixed_collection(cells_per_column=cells_per_column, units=0)
    ids = [nodeid for nodeid in ids if column_of(nodeid)]  # loopback cells only
    ran = run_with_speeds(scheduler(nodes, ids), nodes, {})
    assert sorted(sum(ran.values(), [])) == list(range(len(ids)))


# --- paced cells spread over the run -----------------------------------------------------

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st

from harnesscheck.kit.scheduling import spread_paced  # noqa: E402


def test_paced_items_are_spread_evenly_and_each_group_keeps_its_order():
    items = [f"o{i}" for i in range(10)] + ["w0", "w1", "w2"]
    out = spread_paced(items, lambda x: x.startswith("w"))
    assert out == ["o0", "o1", "o2", "w0", "o3", "o4", "w1", "o5", "o6", "o7", "w2", "o8", "o9"]


@given(st.lists(st.booleans(), max_size=60))
def test_spreading_keeps_every_item_once_in_group_order_with_no_paced_item_next_to_another(flags):
    items = list(enumerate(flags))
    out = spread_paced(items, lambda it: it[1])
    assert sorted(out) == items
    assert [it for it in out if it[1]] == [it for it in items if it[1]]
    assert [it for it in out if not it[1]] == [it for it in items if not it[1]]
    paced, others = sum(flags), len(flags) - sum(flags)
    if paced <= others:  # room for all: never two waits in a row, none at the very start
        assert all(not (a[1] and b[1]) for a, b in zip(out, out[1:]))
        assert not out or not out[0][1]


def test_the_checks_that_wait_on_purpose_are_paced_and_pacing_is_not_part_of_a_checks_meaning():
    """The waits bench/bench_suite.py counts as required come from paced checks; marking a
    check paced leaves the catalog hash alone (it is scheduling, not the requirement)."""
    from dataclasses import replace

    from harnesscheck.kit.catalog import catalog_hash, load_catalog

    catalog = load_catalog()
    waits = {
        "time.timeout-truncates",
        "time.no-survivors-after-timeout",
        "time.linger-after-result",
        "time.cancel-ends-session",
        "bridge.slow-start-not-toolless",
        "errors.overloaded-retryable",
        "time.stalled-tool-call-ends-by-deadline",
        "time.abandoned-stream-no-survivors",
    }
    assert {i for i, info in catalog.items() if info.paced} == waits
    flipped = {i: replace(info, paced=not info.paced) for i, info in catalog.items()}
    assert catalog_hash(flipped) == catalog_hash(catalog)
