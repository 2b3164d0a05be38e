"""What `harnesscheck doctor` and `harnesscheck install-clis` know of DeepSeek Harness
(backends/_setup_profile.py).

Requirements kept here: its only key source (`HARNESS_DEEPSEEK_API_KEY`, from the environment
or .env: Settings.deepseek_api_key) and the vendor keys it never uses; its runtime is an SDK
directory in harnesscheck's pip cache, found by the transport, not a binary on PATH; and the
packages install-clis puts there (the SDK and its runtime executable, exact versions; their own
dependency, pydantic, is harnesscheck's).
"""

from __future__ import annotations

from harnesscheck.backends._setup_profile import DoctorFinding, DoctorProfile, PipRuntime


def find_sdk(spec, settings):
    """The SDK dir the transport would run (an SDK dir in harnesscheck's pip cache), unversioned."""
    from harnesscheck.backends.deepseek import DeepSeekTransport

    return DeepSeekTransport(spec, settings, check_version=False).cli()


def missing_key(settings) -> DoctorFinding | None:
    if settings.deepseek_api_key is not None:
        return None
    return DoctorFinding(
        "fail",
        "HARNESS_DEEPSEEK_API_KEY is not set (API-keyed backend)",
        "export HARNESS_DEEPSEEK_API_KEY=... (or put it in .env); no other key is ever used",
    )


DOCTOR = DoctorProfile(
    credential_vars=(("HARNESS_DEEPSEEK_API_KEY", "DeepSeek API key, the backend's only key source"),),
    billing_vars=("DEEPSEEK_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_API_KEY"),
    find_runtime=find_sdk,
    missing_key=missing_key,
)

PIP_RUNTIME = PipRuntime(dirname="deepseek", packages=("deepseek-harness-sdk", "deepseek-harness-runtime-bin"))
