"""The copilot backend's kit profile (backends/_kit_profile.py): an api provider, so it runs no
CLI; what `harnesscheck doctor` knows of its login is kept here (backends/_setup_profile.py).

Requirements kept here: its login is harnesscheck's own auth store (auth.json, written by
`harnesscheck login copilot`), never another tool's store; doctor says whether a GitHub login
is stored there, never its value.
"""

from __future__ import annotations

from harnesscheck.backends._kit_profile import KitProfile
from harnesscheck.backends._setup_profile import DoctorFinding, DoctorProfile


def stored_login(spec, settings, environ) -> DoctorFinding:
    """Whether harnesscheck's own auth.json holds a GitHub login for the backend (value not read into output)."""
    from harnesscheck.backends.authstore import AuthStore
    from harnesscheck.backends.copilot import PROVIDER_ID
    from harnesscheck.core.contracts import AuthUnavailable
    from harnesscheck.core.paths import auth_dir

    store = AuthStore(settings.auth_dir or auth_dir())
    try:
        record = store.get(PROVIDER_ID)
    except AuthUnavailable as exc:
        return DoctorFinding("fail", exc.message, exc.fix)
    if record and record.get("access"):
        return DoctorFinding("ok", f"a GitHub login is stored in {store.path} (value not shown)")
    return DoctorFinding("fail", f"no GitHub login stored in {store.path}", "run: harnesscheck login copilot")


PROFILE = KitProfile(doctor=DoctorProfile(credentials=stored_login))
