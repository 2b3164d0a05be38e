"""The api backend's kit profile (backends/_kit_profile.py): a provider over HTTP, so it runs no
CLI; what `harnesscheck doctor` knows of its credential is kept here (backends/_setup_profile.py).

Requirements kept here: the key is the variable of its api mode (`MODE_ENV`: the mode of its
column `api/<mode>`, else HARNESS_API_MODE), reported by name only, never its value; the base
URL variable of that mode is named when set too. Without a mode there is no key to look for.
"""

from __future__ import annotations

from collections.abc import Mapping

from harnesscheck.backends._kit_profile import KitProfile
from harnesscheck.backends._setup_profile import DoctorFinding, DoctorProfile


def mode_key(spec, settings, environ: Mapping[str, str]) -> DoctorFinding:
    """Whether the key variable of the backend's api mode is set (by name; value not read into output)."""
    from harnesscheck.backends.api import MODE_ENV

    mode = spec.api_mode or settings.api_mode
    if not mode:
        return DoctorFinding("fail", "HARNESS_API_MODE is not set", "add to .env: HARNESS_API_MODE=anthropic_messages (or chat_completions, responses)")
    key_var, url_var = MODE_ENV[mode]
    if (environ.get(key_var) or "").strip():
        where = f", base URL from {url_var}" if (environ.get(url_var) or "").strip() else ""
        return DoctorFinding("ok", f"{key_var} is set (value not shown){where}")
    return DoctorFinding("fail", f"{key_var} is not set (api_mode {mode})", f"export {key_var}=... in the environment that runs harnesscheck")


PROFILE = KitProfile(doctor=DoctorProfile(credentials=mode_key))
