"""xdist scheduling of the suite: every offline api cell on one worker, each loopback column
kept to one worker, and the paced cells spread over the run.

An offline api cell needs the api SDK imported (~1 s of CPU for anthropic, plus its share
of the interpreter's teardown). Spread over every worker, each pays it; pinned to one, one
does, and it can start the import in the background once collection is over (plugin.py
tells each worker, through `workerinput[API_SDK_HERE]`, whether it is that one).

A loopback column's checks that only read a session's evidence share one session per
process (BackendUnderTest.shared_run: the warm-up `success`, one with canaries, one more
scenario), and each such session of a real runtime costs seconds of CPU. Dealt out by
xdist's `load`, every worker runs some cells of every column and pays each shared session
itself; here each loopback column has an owner, and a worker is sent only its own columns'
cells (two at a time, so the rest stay in the common queue). A worker with none of its own
left joins the column with the most cells still waiting, so the run ends as evenly as under
`load`; a column whose owner went down is anyone's.

Everything else is xdist's `load` scheduling unchanged; which cells run, and their outcomes,
do not depend on it.

The pinned cells go to the pin worker with its first batch, after that batch's other
cells, so the import has the length of that batch to finish; if the pin worker goes down
before running them, they go back to the common queue and any worker takes them.

Paced cells (CheckInfo.paced: they wait on purpose, for a deadline, a grace or a replayed
delay) are spread evenly over the order of the run (`spread_paced`). Left together (one
module), xdist deals them to every worker at once near the end, and both cores idle while
every worker waits; spread, one worker's wait overlaps another's work.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import TypeVar

T = TypeVar("T")

try:
    from xdist.scheduler import LoadScheduling
except ImportError:  # no xdist: nothing is pinned (supported() is False), serial runs need only the constants
    LoadScheduling = object

#: The worker that runs the pinned cells (xdist names workers gw0, gw1, ...).
PIN_WORKER = "gw0"
#: workerinput key (plugin.py pytest_configure_node): True on the worker that runs the pinned
#: cells, False on the others; absent when nothing is pinned.
API_SDK_HERE = "harnesscheck_api_sdk_here"


def pinned_suffixes(cells: Collection[tuple[str, str, str]]) -> tuple[str, ...]:
    """Node-id suffixes of the cells to pin, from (backend id, level, adapter kind) triples."""
    return tuple(f"[{backend}@{level}]" for backend, level, kind in cells if kind == "api" and level == "offline")


#: Most workers the suite gets by default: its cells are short, and each worker costs a
#: Python start, a collection and a forkserver fork.
MAX_WORKERS = 4


def suite_workers(cpus: int | None = None) -> int:
    """Workers for a run of the suite on `cpus` CPUs (default: those this process may use):
    one more than the CPUs, at most MAX_WORKERS; 1 (serial) on one CPU. Its cells spend part
    of their time waiting on purpose (paced checks) and on their fake CLIs, so one worker per
    CPU leaves CPUs idle (2 CPUs, tmpfs scratch, 3 interleaved rounds: offline suite -n 2
    6.05-6.44 s, -n 3 5.67-5.86 s, -n 4 6.11-6.31 s; `harnesscheck verify`, offline and
    loopback: 55.8 s with 2, 48.2 s with 3, the same cells)."""
    import os

    if cpus is None:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return 1 if cpus <= 1 else min(cpus + 1, MAX_WORKERS)


def spread_paced(items: list[T], paced: Callable[[T], bool]) -> list[T]:
    """The same items, the paced ones moved to evenly spaced places among the others: the
    k-th (of m) right after the ceil(k·n/(m+1))-th of the n others. Each group keeps its order."""
    waits = [item for item in items if paced(item)]
    others = [item for item in items if not paced(item)]
    if not waits or not others:
        return list(items)
    out: list[T] = []
    k = 0
    for j, item in enumerate(others, start=1):
        out.append(item)
        while k < len(waits) and (k + 1) * len(others) <= j * (len(waits) + 1):
            out.append(waits[k])
            k += 1
    return out + waits[k:]


def supported() -> bool:
    """Whether this xdist's load scheduler has the parts SuiteScheduling builds on (its
    batch sender and queues, xdist 3.5 to 3.8 at least); if not, xdist's own is used."""
    return all(hasattr(LoadScheduling, name) for name in ("_send_tests", "schedule"))


#: The level whose columns keep to one worker: its adapters share sessions (LoopbackAdapter).
AFFINE_LEVEL = "loopback"
#: Cells of its own columns a worker is sent at a time: the rest wait in the common queue, where
#: a worker that ran out of its own can take them at the end.
AFFINE_CHUNK = 2


def column_of(nodeid: str) -> str | None:
    """The loopback column ("backend@loopback") of a cell's node id, None for any other test."""
    if not nodeid.endswith(f"@{AFFINE_LEVEL}]"):
        return None
    return nodeid[nodeid.rfind("[") + 1 : -1]


class SuiteScheduling(LoadScheduling):
    """`--dist load`, except that

    - the cells whose node ids end with one of `suffixes` all go to the pin worker (the node
      named PIN_WORKER, else the first), in one batch whatever `--maxschedchunk` says. When they
      would be more than a worker's share of the run (a run of little but api cells), nothing is
      pinned: one worker would run them all in a row;
    - each loopback column is owned by one worker (columns dealt in the order they first appear,
      each to the worker owning the fewest cells so far), which is sent that column's cells
      AFFINE_CHUNK at a time; a worker with no cell of its own left waiting joins the column
      with the most cells waiting, and a column whose owner is gone is anyone's."""

    def __init__(self, config, log=None, *, suffixes: tuple[str, ...] = ()):
        super().__init__(config, log)
        self._suffixes = suffixes
        self._pinned: set[int] | None = None  # indices not yet sent; None before the first send
        self._column: dict[int, str] = {}  # index -> its loopback column, for loopback cells
        self._owner: dict[str, object] = {}  # column -> the node that owns it
        self._joined: dict[object, set[str]] = {}  # node -> columns it joined when it ran out of its own

    def _pin_node(self):
        nodes = self.nodes
        return next((n for n in nodes if n.gateway.id == PIN_WORKER), nodes[0] if nodes else None)

    def _choose_pinned(self) -> set[int]:
        if not self._suffixes:
            return set()
        pinned = {i for i, nodeid in enumerate(self.collection) if nodeid.endswith(self._suffixes)}
        share = len(self.collection) / max(1, len(self.nodes))
        return pinned if len(pinned) < share else set()

    def _choose_owners(self) -> None:
        counts: dict[str, int] = {}
        for i, nodeid in enumerate(self.collection):
            column = column_of(nodeid)
            if column is not None:
                self._column[i] = column
                counts[column] = counts.get(column, 0) + 1
        nodes = list(self.nodes)
        if len(nodes) < 2:
            return
        load = {node: 0 for node in nodes}
        for column, count in counts.items():  # in the order the columns first appear
            owner = min(nodes, key=lambda node: load[node])
            self._owner[column] = owner
            load[owner] += count

    def _mine(self, node, index: int) -> bool:
        column = self._column.get(index)
        if column is None or column in self._joined.get(node, ()):
            return True
        owner = self._owner.get(column)
        return owner is None or owner is node or owner.shutting_down or owner not in self.node2pending

    def _choose(self, node, num: int, skip: set[int]) -> list[int]:
        chosen: list[int] = []
        affine = 0
        for i in self.pending:
            if len(chosen) >= num:
                break
            if i in skip or not self._mine(node, i):
                continue
            if i in self._column:
                if affine >= AFFINE_CHUNK:
                    continue
                affine += 1
            chosen.append(i)
        return chosen

    def _join_a_column(self, node, skip: set[int]) -> bool:
        waiting: dict[str, int] = {}
        for i in self.pending:
            column = self._column.get(i)
            if column is not None and i not in skip:
                waiting[column] = waiting.get(column, 0) + 1
        if not waiting:
            return False
        self._joined.setdefault(node, set()).add(max(waiting, key=lambda column: waiting[column]))
        return True

    def schedule(self) -> None:
        super().schedule()
        # xdist's first distribution may end before it reached the pin worker (fewer cells
        # than two per worker are dealt one at a time): the pinned cells go to it now, and a
        # run with nothing left to send lets every worker finish, as xdist's own does.
        pin = self._pin_node()
        if self._pinned and self.collection is not None and pin is not None and not pin.shutting_down:
            self._send_tests(pin, 0)
            if not self.pending:
                for node in self.nodes:
                    if not node.shutting_down:
                        node.shutdown()

    def _send_tests(self, node, num: int) -> None:
        if self._pinned is None:
            self._pinned = self._choose_pinned()
            self._choose_owners()
        pinned = self._pinned
        chosen = self._choose(node, num, pinned)
        if not chosen and num > 0 and self._join_a_column(node, pinned):
            chosen = self._choose(node, num, pinned)
        if pinned and node is self._pin_node():
            chosen += sorted(pinned & set(self.pending))
            pinned.clear()  # sent: from now on any index in pending is an ordinary one
        if not chosen:
            return
        taken = set(chosen)
        self.pending[:] = [i for i in self.pending if i not in taken]
        self.node2pending[node].extend(chosen)
        node.send_runtest_some(chosen)
