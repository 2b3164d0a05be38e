"""What `harnesscheck doctor` and `harnesscheck install-clis` know of one backend, kept beside it.

Requirements kept here:
- apps/doctor.py and loopback/install.py name no CLI or agent (tests/test_layers.py): every fact
  they need of one backend is a field of these profiles, held by its KitProfile
  (`KitProfile.doctor`, `.npm_runtime_deps`, `.pip_runtime`; backends/_kit_profile.py) and found
  through `harnesscheck.backends.registry.kit_profile(spec)`.
- Plain data where the fact is data; a function, kept in the backend's folder, where it is
  behaviour (how its runtime is found, how its login is asked). Those functions return plain
  values (a `DoctorFinding`, a CliInfo): nothing here imports apps/ or loopback/.
- The empty profile, DoctorProfile(), is a backend doctor knows nothing special of: no
  credential variables, no billing variables, its binary found the usual way (registry.find_cli),
  its login left in the user's credential store, which doctor never opens.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal


@dataclass(frozen=True)
class DoctorFinding:
    """One `auth` line of doctor's report, without the backend (doctor adds it). "fail" is
    downgraded to "warn" by doctor when the backend was not selected, where the field says so."""

    status: Literal["ok", "fail", "warn", "skip"]
    detail: str
    fix: str = ""


@dataclass(frozen=True)
class DoctorProfile:
    """What `harnesscheck doctor` knows of one backend's credentials and binary."""

    #: Credential variables, by name, with what each is: (name, meaning); the first set one is
    #: what the backend would use. Values are never read into output.
    credential_vars: tuple[tuple[str, str], ...] = ()
    #: Variables that, if the CLI saw them, would bill an API key instead of the subscription.
    #: The env policy strips them from every child; doctor only reports that they are present.
    billing_vars: tuple[str, ...] = ()
    #: A backend that runs another backend's CLI with that CLI's own login: doctor reports the
    #: other backend's credential status for it (its registered id).
    same_credentials_as: str | None = None
    #: Credential files the CLI reads from a fixed path, whatever HOME or its config dir say.
    #: Doctor only says whether they exist, never reads them.
    fixed_credential_files: tuple[str, ...] = ()
    #: How the backend's runtime is found when it is not a binary on PATH or in the npm cache
    #: ((spec, settings) -> registry.CliInfo, or CliNotFound); None: registry.find_cli.
    find_runtime: Callable[[Any, Any], Any] | None = None
    #: The whole auth verdict of a backend whose credential doctor can judge without opening
    #: another tool's store (an api key by variable name, harnesscheck's own auth store):
    #: (spec, settings, environment) -> finding ("fail" downgraded when not selected).
    credentials: Callable[[Any, Any, Mapping[str, str]], DoctorFinding] | None = None
    #: For a backend that runs only with a key: when no credential variable is set, whether the
    #: settings hold the key (settings -> None) or the finding that says it is missing ("fail"
    #: downgraded when not selected); doctor then reports nothing more for the backend.
    missing_key: Callable[[Any], DoctorFinding | None] | None = None
    #: Asks the CLI whether the credential variable set is accepted as a login, in a scratch
    #: HOME with only that variable ((CLI path, variable name, environment) -> finding, or None
    #: when the answer does not read); never opens the user's credential store.
    login_probe: Callable[[Path, str, Mapping[str, str]], DoctorFinding | None] | None = None


@dataclass(frozen=True)
class NpmRuntimeDeps:
    """A CLI that installs a package of its own at run time, from the registry, into its config
    dir: install-clis pre-installs it beside the CLI's release, so a session never reaches a
    registry."""

    #: The directory beside the release's npm prefix that holds the pre-fill.
    dirname: str
    #: The package, installed at the CLI's own version.
    package: str
    #: Whether a directory holds the complete pre-fill for a release ((dir, version) -> bool).
    ready: Callable[[Path, str], bool]


@dataclass(frozen=True)
class PipRuntime:
    """A backend whose runtime is a Python package, installed with this interpreter's pip into
    `<cache>/<dirname>@<version>/` (`pip install --target`, exact versions, no dependencies)."""

    #: The name of its directory in the cache.
    dirname: str
    #: The packages installed, each at the pinned version.
    packages: tuple[str, ...]
