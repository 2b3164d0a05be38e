"""`harnesscheck doctor`: can this machine run each backend, and if not, what is the fix.

Contract (doc/SPEC-doctor.md). Per backend of the registry: the binary (every path tried)
and its version against the supported range; the credential the backend would use, by
variable NAME only (never a value), and the CLI's own auth status only where that can be
asked without opening the user's credential store; for every run, a bridge self-test
(spawn the real stdio bridge on a temp root, list tools, one scoped read, one refused
read); with `--probe`, one cheap round trip through each selected backend. Every failing
line carries the fix. Output: a rich table, or JSON with `--json`. What doctor knows of one
backend (its credential and billing variables, how its runtime is found and its login asked) is
that backend's DoctorProfile (backends/_setup_profile.py), read through
`registry.kit_profile(spec).doctor`: this module names no CLI or agent (tests/test_layers.py).

Exit code: 2 when the input is bad (an unknown backend id, an invalid HARNESS_* value: the
failing `backend`/`settings` line names it and the fix); else 1 when a check failed for a
selected backend (`--backend`, else HARNESS_BACKEND) or the bridge self-test failed; 0
otherwise. With no selection every backend is reported and a missing CLI is a warning, not
a failure. `--json` prints a `DoctorReport` (doc/doctor.schema.json).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from pydantic.dataclasses import dataclass

OK, FAIL, WARN, SKIP = "ok", "fail", "warn", "skip"

PROBE_PROMPT = "Reply with the single word: pong"


#: The checks whose failure means the input was bad (exit 2), not the machine.
USAGE_CHECKS = frozenset({("settings", "HARNESS_*"), ("*", "backend")})


@dataclass(config=ConfigDict(extra="forbid"))
class Check:
    """One line of the report: what was checked for which backend, and the fix when not ok."""

    backend: str
    check: str
    status: Literal["ok", "fail", "warn", "skip"]
    detail: str = ""
    fix: str = ""

    @property
    def is_usage(self) -> bool:
        return (self.backend, self.check) in USAGE_CHECKS or ("*", self.check) in USAGE_CHECKS


class DoctorReport(BaseModel):
    """`harnesscheck doctor --json`: `ok` is false when any line failed."""

    model_config = ConfigDict(extra="forbid", title="harnesscheck doctor report")

    ok: bool
    checks: list[Check]


def _is_set(environ: dict[str, str], name: str) -> bool:
    return bool((environ.get(name) or "").strip())


# ---------------------------------------------------------------------------------------
# Per-backend checks


def check_binary(spec, settings, selected: bool) -> tuple[list[Check], Any]:
    """Binary found (paths tried) and version in range. Returns (checks, CliInfo | None)."""
    from harnesscheck.backends.registry import find_cli, version_range, version_supported
    from harnesscheck.core.contracts import CliNotFound

    missing_status = FAIL if selected else WARN
    find_runtime = _doctor_profile(spec).find_runtime  # a runtime that is no binary on PATH (an SDK dir)
    try:
        info = find_runtime(spec, settings) if find_runtime else find_cli(spec, settings, check_version=False)
    except CliNotFound as exc:
        return [Check(spec.id, "binary", missing_status, f"{spec.cli_name} not found; tried: {', '.join(exc.paths_tried)}", exc.fix)], None
    checks = [Check(spec.id, "binary", OK, str(info.path))]
    rng = version_range(spec)
    if info.version is None:
        said = _version_stderr(info.path)
        checks.append(
            Check(
                spec.id,
                "version",
                missing_status,
                f"`{info.path} --version` printed no version (required {rng})" + (f"; it said: {said}" if said else ""),
                f"reinstall {spec.cli_package or spec.cli_name} (harnesscheck install-clis), or point HARNESS_BACKEND_CLI at a working binary",
            )
        )
    elif (spec.min_version or spec.max_version) and not version_supported(spec, info.version):
        how = f"`harnesscheck install-clis` (installs {spec.pinned_version})" if spec.pinned_version else "install a supported version"
        checks.append(Check(spec.id, "version", missing_status, f"{info.version} found, {rng} required", how))
    else:
        checks.append(Check(spec.id, "version", OK, f"{info.version} (supported: {rng})"))
        checks.append(check_verified(spec, info.version))
    return checks, info


def check_verified(spec, found: str) -> Check:
    """ "verified" only for a release the shipped matrix ran at the loopback level; otherwise
    a warning naming the nearest verified release and how to verify this one."""
    from harnesscheck.backends.registry import nearest_release, parse_version, verified_releases

    version = ".".join(map(str, parse_version(found) or ()))
    releases = verified_releases(spec.id)
    if version in releases:
        return Check(spec.id, "verified", OK, f"{version} verified by the shipped matrix (loopback level)")
    near = nearest_release(version, releases)
    said = f"the shipped matrix verified {', '.join(releases)}; nearest {near}" if near else "the shipped matrix verified no release of it"
    return Check(
        spec.id,
        "verified",
        WARN,
        f"{version} is NOT verified: {said}",
        f"harnesscheck install-clis --backend {spec.id} --version {version} && harnesscheck verify --backend {spec.id}=={version} --level loopback",
    )


def check_fixed_credential_files(spec, present=os.path.lexists) -> list[Check]:
    """A credential file at a hard-coded path outside the private HOME would authenticate
    the CLI past the transport's private config (an API key bills the key): warn, by path.
    The paths are the backend's (`DoctorProfile.fixed_credential_files`, seen with strace);
    doctor only says whether they exist, never reads them."""
    found = [f for f in _doctor_profile(spec).fixed_credential_files if present(f)]
    if not found:
        return []
    return [
        Check(
            spec.id,
            "fixed-credentials",
            WARN,
            f"{spec.cli_name} reads credentials from a fixed path outside its private HOME, and these exist: {', '.join(found)}",
            "remove them on a machine that runs harnesscheck (the transport's subscription guard blocks an "
            "apiKeySource it did not set, but the CLI reads the file first)",
        )
    ]


def _version_stderr(path: Path) -> str:
    """The first line `<cli> --version` wrote to stderr (redacted), to say why it failed."""
    from harnesscheck.contain.envpolicy import redact

    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/")}
    try:
        proc = subprocess.run([str(path), "--version"], stdin=subprocess.DEVNULL, capture_output=True, timeout=20, env=env, start_new_session=True)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return type(exc).__name__
    for raw in proc.stderr.decode("utf-8", "replace").splitlines():
        if raw.strip():
            return redact(raw.strip())[:200] + (f" (exit {proc.returncode})" if proc.returncode else "")
    return f"exit {proc.returncode}" if proc.returncode else ""


def check_credentials(spec, settings, environ: dict[str, str], selected: bool, cli_info=None) -> list[Check]:
    """Which credential the backend would use, by variable name; the CLI's own status only
    when it can be asked in a scratch HOME with that variable (never the user's store)."""
    from harnesscheck.core.contracts import Kind

    profile = _doctor_profile(spec)
    twin = profile.same_credentials_as  # another backend's CLI, signed in as that backend is
    if twin is not None:
        from harnesscheck.backends.registry import get_spec

        twin_spec = get_spec(twin)
        if cli_info is None:
            cli_info = _quiet_cli(twin_spec, settings)
        return [Check(spec.id, c.check, c.status, c.detail, c.fix) for c in check_credentials(twin_spec, settings, environ, selected, cli_info)]
    out: list[Check] = []
    if profile.credentials is not None:  # a key by name, or harnesscheck's own auth store (never another tool's)
        return [_auth_check(spec, profile.credentials(spec, settings, environ), selected)]
    if spec.kind is not Kind.harness:
        return [Check(spec.id, "auth", SKIP, "no credentials needed")]
    billing = [n for n in profile.billing_vars if _is_set(environ, n)]
    if billing:
        out.append(
            Check(spec.id, "api-key-env", WARN, f"{', '.join(billing)} set in this shell; the env policy strips it from the CLI, so it is never billed", "")
        )
    creds = [(n, why) for n, why in profile.credential_vars if _is_set(environ, n)]
    missing = profile.missing_key(settings) if profile.missing_key is not None and not creds else None
    if missing is not None:
        out.append(_auth_check(spec, missing, selected))
        return out
    if creds:
        name, why = creds[0]
        status = Check(spec.id, "auth", OK, f"{name} is set ({why}; value not shown)")
        if profile.login_probe is not None and cli_info is not None:
            found = profile.login_probe(cli_info.path, name, environ)
            status = Check(spec.id, "auth", found.status, found.detail, found.fix) if found is not None else status
        out.append(status)
    else:
        names = [n for n, _ in profile.credential_vars]
        hint = f" or set {' / '.join(names)}" if names else ""
        out.append(
            Check(
                spec.id,
                "auth",
                SKIP,
                "not checked: the login lives in the user's credential store, which doctor never opens",
                f"log in with `{spec.cli_name} login`{hint}; `harnesscheck doctor --probe --backend {spec.id}` makes one real round trip",
            )
        )
    return out


def _doctor_profile(spec):
    """What doctor knows of `spec`'s backend (backends/_setup_profile.py DoctorProfile), kept
    with the backend as a field of its kit profile; the empty profile for one without."""
    from harnesscheck.backends.registry import kit_profile

    return kit_profile(spec).doctor


def _auth_check(spec, found, selected: bool) -> Check:
    """The `auth` line of a backend profile's finding; its "fail" is a warning when the
    backend was not selected (a machine may well not run every backend)."""
    status = WARN if found.status == FAIL and not selected else found.status
    return Check(spec.id, "auth", status, found.detail, found.fix)


def _quiet_cli(spec, settings) -> Any:
    """The spec's CLI (path, version) when it can be found, else None (its own binary check says why)."""
    from harnesscheck.backends.registry import find_cli
    from harnesscheck.core.contracts import HarnessError

    try:
        return find_cli(spec, settings, check_version=False)
    except HarnessError:
        return None


# ---------------------------------------------------------------------------------------
# Bridge self-test


def bridge_self_test(timeout_s: float = 60.0) -> list[Check]:
    """Spawn the real stdio bridge (as a CLI would) on a temp root; list tools, one scoped
    read, one refused read. Reports the time to a listed toolset."""
    try:
        import anyio
    except ImportError as exc:  # pragma: no cover - a dependency
        return [Check("bridge", "self-test", FAIL, f"anyio missing: {exc}", "pip install harnesscheck")]
    try:
        return anyio.run(_bridge_self_test, timeout_s)
    except Exception as exc:
        return [Check("bridge", "self-test", FAIL, f"{type(exc).__name__}: {str(exc)[:300]}", "run `harnesscheck bridge --root .` by hand and read its stderr")]


async def _bridge_self_test(timeout_s: float) -> list[Check]:
    import anyio
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    from harnesscheck.bridge.spec import BridgeSpec, bridge_argv, bridge_env, summarize_trace, write_spec
    from harnesscheck.core.scope import ToolScope

    with tempfile.TemporaryDirectory(prefix="hc-doctor-bridge-") as tmp:
        base = Path(tmp).resolve()
        root = base / "root"
        root.mkdir()
        (root / "hello.txt").write_text("doctor-ok\n", encoding="utf-8")
        (base / "outside.txt").write_text("must not be served\n", encoding="utf-8")
        spec = BridgeSpec(
            scope=ToolScope(name="doctor", root=root, read_only=True),
            run_dir=base,
            trace_path=base / "bridge-trace.jsonl",
            session_id="doctor",
            parent_pid=os.getpid(),
        )
        spec_path = write_spec(spec, base / "bridge-spec.json")
        argv = bridge_argv(spec_path)
        params = StdioServerParameters(command=argv[0], args=argv[1:], env=bridge_env() or None, cwd=str(base))
        checks: list[Check] = []
        with open(base / "bridge-stderr.txt", "w+", encoding="utf-8") as errlog:
            started = time.monotonic()
            try:
                with anyio.fail_after(timeout_s):
                    async with Client(stdio_client(params, errlog=errlog), mode="legacy") as client:
                        tools = await client.list_tools()
                        ready_s = time.monotonic() - started
                        names = sorted(t.name for t in tools.tools)
                        expected = sorted(spec.scope.tool_names())
                        checks.append(
                            Check(
                                "bridge",
                                "list tools",
                                OK if names == expected else FAIL,
                                f"{', '.join(names)} in {ready_s:.2f} s (spawn to tools/list)",
                                "" if names == expected else f"expected {', '.join(expected)}",
                            )
                        )
                        good = await client.call_tool("read_file", {"path": "hello.txt"})
                        text = " ".join(getattr(c, "text", "") for c in good.content)
                        ok = not good.is_error and "doctor-ok" in text
                        checks.append(
                            Check(
                                "bridge",
                                "scoped read",
                                OK if ok else FAIL,
                                "read_file hello.txt served" if ok else f"unexpected result: {text[:200]!r}",
                                "" if ok else "see doc/SPEC-bridge.md; report a bug",
                            )
                        )
                        bad = await client.call_tool("read_file", {"path": "../outside.txt"})
                        btext = " ".join(getattr(c, "text", "") for c in bad.content)
                        refused = bad.is_error and btext.startswith("refused: ") and "must not" not in btext
                        checks.append(
                            Check(
                                "bridge",
                                "refused read",
                                OK if refused else FAIL,
                                f"read_file ../outside.txt -> {btext[:120]!r}",
                                "" if refused else "the bridge served a path outside its root: do not use it",
                            )
                        )
            except TimeoutError:
                errlog.seek(0)
                checks.append(
                    Check(
                        "bridge",
                        "self-test",
                        FAIL,
                        f"no answer within {timeout_s:.0f} s; stderr: {errlog.read()[-300:]!r}",
                        "run `harnesscheck bridge --root .` by hand and read its stderr",
                    )
                )
                return checks
            except Exception as exc:
                errlog.seek(0)
                checks.append(
                    Check(
                        "bridge",
                        "self-test",
                        FAIL,
                        f"{type(exc).__name__}: {str(exc)[:200]}; stderr: {errlog.read()[-300:]!r}",
                        "run `harnesscheck bridge --root .` by hand and read its stderr",
                    )
                )
                return checks
        summary = summarize_trace(spec.trace_path, session_id="doctor")
        traced = summary.tool_calls == 2 and len(summary.refusals) == 1
        checks.append(
            Check(
                "bridge",
                "trace",
                OK if traced else FAIL,
                f"{summary.tool_calls} calls, {len(summary.refusals)} refusal traced",
                "" if traced else "the bridge did not trace its calls: report a bug",
            )
        )
        return checks


# ---------------------------------------------------------------------------------------
# Probe


def probe_backend(spec, settings, timeout_s: float = 120.0) -> Check:
    """One cheap, tool-less round trip through the backend (a real model call)."""
    from harnesscheck.backends.registry import build_transport
    from harnesscheck.core.contracts import HarnessError

    try:
        transport = build_transport(spec, settings)
        outcome = transport.complete(PROBE_PROMPT, timeout_s=timeout_s)
    except HarnessError as exc:
        return Check(spec.id, "probe", FAIL, exc.message, exc.fix)
    except Exception as exc:
        return Check(spec.id, "probe", FAIL, f"{type(exc).__name__} while probing", "run with --json and report a bug")
    if outcome.ok:
        served = f", served model {outcome.served_model}" if outcome.served_model else ""
        return Check(spec.id, "probe", OK, f"answered in {outcome.duration_s:.1f} s{served}")
    return Check(
        spec.id,
        "probe",
        FAIL,
        f"{outcome.status.value} ({outcome.error_class.value if outcome.error_class else '?'}): {outcome.message[:200]}",
        _probe_fix(outcome),
    )


def _probe_fix(outcome) -> str:
    ec = outcome.error_class.value if outcome.error_class else ""
    return {
        "auth": "log in again (or refresh the token) for this backend",
        "quota": "the subscription or key is out of quota; wait or switch backend explicitly",
        "rate_limit": "rate limited: retry later",
        "cli_missing": "install the CLI (harnesscheck install-clis)",
        "model_unavailable": "choose another HARNESS_BACKEND_MODEL",
        "mcp_unavailable": "the bridge did not load in the CLI: run `harnesscheck doctor` for the bridge self-test",
    }.get(ec, "see the message; rerun with --json for details")


# ---------------------------------------------------------------------------------------
# The command


def run_doctor(backends: list[str], probe: bool, environ: dict[str, str] | None = None) -> tuple[list[Check], bool]:
    """All checks, and whether any failure counts toward the exit code."""
    from harnesscheck.backends.registry import get_spec, known_specs
    from harnesscheck.core.config import Settings
    from harnesscheck.core.contracts import ConfigError, HarnessError, Kind

    env = dict(os.environ if environ is None else environ)
    checks: list[Check] = []
    try:
        settings = Settings.from_env(env, dotenv=Path(".env"))
    except ConfigError as exc:
        checks.append(Check("settings", "HARNESS_*", FAIL, exc.message, exc.fix))
        settings = Settings()
    specs = known_specs()
    selected_ids: list[str] = list(backends) or ([settings.backend] if settings.backend else [])
    to_check = []
    for bid in selected_ids:
        try:
            to_check.append(get_spec(bid))
        except HarnessError as exc:
            checks.append(Check(bid, "backend", FAIL, exc.message, exc.fix))
    if not selected_ids:
        to_check = list(specs.values())
        checks.append(
            Check(
                "selection",
                "HARNESS_BACKEND",
                WARN,
                "no backend selected: reporting every backend",
                f"add to .env: HARNESS_BACKEND=<one of {', '.join(specs)}>",
            )
        )
    selected = bool(selected_ids)
    for spec in to_check:
        spec_settings = settings if (settings.backend in (None, spec.id) or backends) else Settings()
        cli_info = None
        if spec.kind is Kind.harness and spec.cli_name:
            bin_checks, cli_info = check_binary(spec, spec_settings, selected)
            checks.extend(bin_checks)
            checks.extend(check_fixed_credential_files(spec))
        checks.extend(check_credentials(spec, spec_settings, env, selected, cli_info))
        if probe:
            if not selected:
                checks.append(Check(spec.id, "probe", SKIP, "not selected", f"harnesscheck doctor --probe --backend {spec.id}"))
            elif any(c.backend == spec.id and c.status == FAIL for c in checks):
                checks.append(Check(spec.id, "probe", SKIP, "skipped: fix the failures above first"))
            else:
                checks.append(probe_backend(spec, spec_settings))
    checks.append(check_sandbox(settings.sandbox))
    checks.extend(bridge_self_test())
    failing = any(c.status == FAIL for c in checks)
    return checks, failing


def check_sandbox(mode: str) -> Check:
    """Whether sessions can run in a sandbox of their own (doc/SPEC-sandbox.md), and by which
    means they will be contained. Fails only when a sandbox is required and cannot be had."""
    from harnesscheck.contain import sandbox

    state = sandbox.status()
    if state.available:
        how = (
            "every harness session runs in it"
            if mode != "off"
            else "available, not used: HARNESS_BACKEND_SANDBOX=off (sessions are contained by the process guard alone)"
        )
        detail = f"bubblewrap {state.version or ''} works here ({'with' if state.user_namespace else 'without'} a user namespace); {how}"
        fix = "" if mode != "off" else "set HARNESS_BACKEND_SANDBOX=auto to sandbox every session"
        return Check("*", "sandbox", OK, detail.replace("  ", " "), fix)
    detail = f"no sandbox: {state.reason}; sessions run with the process guard alone (containment: guards)"
    return Check("*", "sandbox", FAIL if mode == "require" else WARN, detail, sandbox.INSTALL_FIX)


#: Below this many columns (or piped), doctor prints one line per check, not a table: an
#: 80-column table folded every detail into a narrow column (198 lines for the default run).
TABLE_MIN_COLUMNS = 110


def render_table(checks: list[Check]) -> None:
    import shutil
    import sys

    if not sys.stdout.isatty() or shutil.get_terminal_size((80, 24)).columns < TABLE_MIN_COLUMNS:
        sys.stdout.write(render_lines(checks))
        return
    _render_rich_table(checks)


def render_lines(checks: list[Check]) -> str:
    """One line per check (`status  backend  check: detail`), its fix indented below: readable
    piped, in a log and at 80 columns, without folding."""
    width = max((len(c.backend) for c in checks), default=8)
    out = ["harnesscheck doctor"]
    for c in checks:
        out.append(f"{c.status:<5} {c.backend:<{width}}  {c.check}: {' '.join(c.detail.split())}")
        if c.fix and c.status in (FAIL, WARN, SKIP):
            out.append(f"{'':<5} {'':<{width}}  fix: {' '.join(c.fix.split())}")
    return "\n".join(out) + "\n"


def _render_rich_table(checks: list[Check]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    style = {OK: "green", FAIL: "bold red", WARN: "yellow", SKIP: "dim"}
    table = Table(title="harnesscheck doctor", show_lines=False)
    for col in ("backend", "check", "status", "detail"):
        table.add_column(col, overflow="fold")
    for c in checks:
        detail = escape(c.detail)
        if c.fix and c.status in (FAIL, WARN, SKIP):
            detail += f"\n[bold]fix:[/bold] {escape(c.fix)}"
        table.add_row(escape(c.backend), escape(c.check), f"[{style.get(c.status, 'white')}]{c.status}[/]", detail)
    Console(soft_wrap=False).print(table)


def doctor_command(backends: list[str], probe: bool, as_json: bool) -> int:
    checks, failing = run_doctor(backends, probe)
    if as_json:
        sys.stdout.write(DoctorReport(ok=not failing, checks=checks).model_dump_json(indent=2) + "\n")
    else:
        render_table(checks)
    if any(c.status == FAIL and c.is_usage for c in checks):
        return 2
    return 1 if failing else 0
