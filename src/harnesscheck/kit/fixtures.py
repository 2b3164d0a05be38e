"""The kit's fixtures, registered as a plugin only in a run that involves the suite
(kit/plugin.py pytest_configure), so another project's run gets no fixture from harnesscheck."""

from __future__ import annotations

import pytest

#: The sessions checks share in this pytest run (BackendUnderTest.shared_run), one dict per run.
SHARED_RUNS = pytest.StashKey[dict]()


@pytest.fixture
def but(request: pytest.FixtureRequest, tmp_path):
    """The backend under test for this cell (a kit adapter), or a skip with a reason code.
    After the cell, whatever its verdict, every process its sessions started that is still
    alive is ended (BackendUnderTest.end_survivors): a failing backend leaves nothing running."""
    from harnesscheck.kit.catalog import info_of
    from harnesscheck.kit.levels import adapter_for, level_available
    from harnesscheck.kit.session import SkipCell

    spec, level = request.param
    info = info_of(request.function)
    if level == "live" and not request.config.getoption("hc_backend"):
        raise SkipCell("budget", "live checks spend a real login's budget only for a backend named with --hc-backend ID")
    ok, why = level_available(spec, level)
    if not ok:
        raise SkipCell("env-missing", why)
    from harnesscheck.kit.requirements import unmet

    missing = unmet(spec, info.requires) if info else []  # a required capability is judged, declared or not
    if missing:
        from harnesscheck.backends.registry import declined_because

        why = "; ".join(w for w in (declined_because(spec, c) for c in missing) if w)
        raise SkipCell("unsupported-by-backend", f"{spec.id} does not declare {', '.join(missing)}" + (f": {why}" if why else ""))
    adapter = adapter_for(spec, level, tmp_path)
    adapter.shared_runs = request.config.stash.setdefault(SHARED_RUNS, {})
    yield adapter
    adapter.end_survivors()
