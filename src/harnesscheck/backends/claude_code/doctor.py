"""What `harnesscheck doctor` knows of Claude Code (backends/_setup_profile.py DoctorProfile).

Requirements kept here: the subscription token variable it uses, the variables that would bill
an API key instead, the credential files the CLI reads from a fixed path outside its private
HOME, and how its login is asked (`claude auth status --json` in a scratch HOME with only the
token variable: it reads no user file).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

from harnesscheck.backends._setup_profile import DoctorFinding, DoctorProfile


def auth_status(cli_path: Path, var: str, environ: Mapping[str, str]) -> DoctorFinding | None:
    """`claude auth status --json` in a scratch HOME/CLAUDE_CONFIG_DIR with only the token
    variable injected: tells whether that token is accepted as a login, reads no user file."""
    from harnesscheck.contain.envpolicy import build_child_env

    with tempfile.TemporaryDirectory(prefix="hc-doctor-") as home:
        env = build_child_env(environ, injections={"HOME": home, "CLAUDE_CONFIG_DIR": os.path.join(home, ".claude"), var: environ[var]})
        try:
            proc = subprocess.run(
                [str(cli_path), "auth", "status", "--json"],
                env=env,
                cwd=home,
                capture_output=True,
                stdin=subprocess.DEVNULL,
                timeout=30,
                start_new_session=True,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return DoctorFinding("warn", f"`claude auth status --json` did not answer ({type(exc).__name__})", "")
    try:
        data = json.loads(proc.stdout.decode("utf-8", "replace"))
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    method = str(data.get("authMethod", "?"))
    if data.get("loggedIn"):
        return DoctorFinding("ok", f"{var} accepted: loggedIn, authMethod {method} (claude auth status)")
    return DoctorFinding("fail", f"{var} is set but claude reports loggedIn=false", "create a fresh token with `claude setup-token` and export it")


DOCTOR = DoctorProfile(
    credential_vars=(("CLAUDE_CODE_OAUTH_TOKEN", "subscription token (claude setup-token)"),),
    billing_vars=("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"),
    # Seen with strace at loopback: claude 2.1.197 and 2.1.332 open `.api_key` and
    # `.session_ingress_token` there at start-up; the binary also names `.oauth_token`.
    fixed_credential_files=tuple(f"/home/claude/.claude/remote/{n}" for n in (".api_key", ".oauth_token", ".session_ingress_token")),
    login_probe=auth_status,
)
