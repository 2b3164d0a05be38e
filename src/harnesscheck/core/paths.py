"""Where the suite, the fake CLIs and the fixtures live: in the wheel, or in a checkout."""

from __future__ import annotations

from functools import cache
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent.parent  # harnesscheck/ (this module is in core/)


@cache
def data_root() -> Path:
    """The folder holding conformance/, fake_clis/ and fixtures/."""
    shipped = _PACKAGE / "_data"
    if (shipped / "fixtures").is_dir():
        return shipped
    checkout = _PACKAGE.parent.parent
    if (checkout / "fixtures").is_dir():
        return checkout
    raise FileNotFoundError("harnesscheck data (conformance/, fake_clis/, fixtures/) not found")


def conformance_dir() -> Path:
    return data_root() / "conformance"


def fake_clis_dir() -> Path:
    return data_root() / "fake_clis"


def fixtures_dir() -> Path:
    return data_root() / "fixtures"


def cli_cache_dir() -> Path:
    """Where `harnesscheck install-clis` puts the pinned real CLIs (HARNESSCHECK_CACHE overrides)."""
    import os

    base = os.environ.get("HARNESSCHECK_CACHE") or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "harnesscheck")
    return Path(base) / "clis"


def auth_dir() -> Path:
    """harnesscheck's own credential dir (auth.json of `harnesscheck login`):
    `$XDG_DATA_HOME/harnesscheck`, else `~/.local/share/harnesscheck`. HARNESS_AUTH_DIR
    (Settings.auth_dir) overrides it; no other tool's credential store is ever read."""
    import os

    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "harnesscheck"
