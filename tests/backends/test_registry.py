"""Registry and resolution: explicit selection, errors that name the fix, entry points."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest

from harnesscheck.backends import registry
from harnesscheck.core.config import Settings
from harnesscheck.core.contracts import (
    Capability,
    CliNotFound,
    CliVersionUnsupported,
    ConfigError,
    Kind,
    ProviderSpec,
    SelectionMissing,
    UnknownBackend,
)

BUILTINS = {"acp-fake", "api", "claude-code", "claude-code-reasoning", "codex", "copilot", "cursor", "deepseek", "fake", "gemini", "opencode", "zcode"}


def test_builtin_ids() -> None:
    assert set(registry.BUILTIN_SPECS) == BUILTINS
    for spec in registry.BUILTIN_SPECS.values():
        assert spec.capabilities, spec.id
        if spec.kind is Kind.harness:
            assert spec.cli_name and Capability.mcp_tools in spec.capabilities


def test_no_selection_prints_the_env_line() -> None:
    with pytest.raises(SelectionMissing) as info:
        registry.resolve_provider(Settings())
    assert "HARNESS_BACKEND=" in info.value.fix


def test_unknown_backend_lists_known() -> None:
    with pytest.raises(UnknownBackend) as info:
        registry.resolve_provider(Settings(backend="claude"))
    for known in BUILTINS:
        assert known in str(info.value)


def test_settings_from_env_and_dotenv(tmp_path: Path) -> None:
    dotenv = tmp_path / ".env"
    dotenv.write_text("HARNESS_BACKEND=fake\nANTHROPIC_API_KEY=sk-ant-secret\nexport HARNESS_BACKEND_TIMEOUT_S='12'\n")
    s = Settings.from_env({"HARNESS_BACKEND_MODEL": "m"}, dotenv)
    assert (s.backend, s.model, s.timeout_s) == ("fake", "m", 12.0)
    assert Settings.from_env({"HARNESS_BACKEND": "api"}, dotenv).backend == "api"  # env wins


def test_harness_teardown_settings_reach_the_transport() -> None:
    """HARNESS_BACKEND_LINGER_S / _TERM_GRACE_S configure a harness's teardown; explicit
    constructor arguments win; out-of-range values name the variable."""
    from harnesscheck.backends.claude_code import ClaudeCodeTransport

    s = Settings.from_env({"HARNESS_BACKEND_LINGER_S": "0.5", "HARNESS_BACKEND_TERM_GRACE_S": "3"})
    assert (s.linger_s, s.term_grace_s) == (0.5, 3.0)
    assert (Settings().linger_s, Settings().term_grace_s) == (2.0, 2.0)  # harness-anchors C10
    spec = registry.BUILTIN_SPECS["claude-code"]
    t = ClaudeCodeTransport(spec, s, parent_env={})
    assert (t.linger_s, t.term_grace_s) == (0.5, 3.0)
    t = ClaudeCodeTransport(spec, s, parent_env={}, linger_s=1.0)
    assert (t.linger_s, t.term_grace_s) == (1.0, 3.0)
    for bad in ("-1", "61"):
        with pytest.raises(ConfigError) as info:
            Settings.from_env({"HARNESS_BACKEND_TERM_GRACE_S": bad})
        assert "HARNESS_BACKEND_TERM_GRACE_S" in str(info.value)


def test_invalid_setting_names_the_variable() -> None:
    with pytest.raises(ConfigError) as info:
        Settings.from_env({"HARNESS_BACKEND_CONCURRENCY": "zero"})
    assert "HARNESS_BACKEND_CONCURRENCY" in str(info.value)


@pytest.mark.parametrize(
    ("name", "value", "rule", "reason"),
    [
        ("HARNESS_BACKEND_TIMEOUT_S", "-5", "must be a positive, finite number of seconds", "Input should be greater than 0"),
        ("HARNESS_BACKEND_TIMEOUT_S", "inf", "must be a positive, finite number of seconds", "Input should be a finite number"),
        ("HARNESS_BACKEND_TIMEOUT_S", "nan", "must be a positive, finite number of seconds", "Input should be a finite number"),
        ("HARNESS_BACKEND_LINGER_S", "inf", "must be a number of seconds from 0 to 60", "finite number"),
        ("HARNESS_BACKEND_CONCURRENCY", "2.5", "must be a whole number of sessions, 1 or more", "valid integer"),
        ("HARNESS_MODEL_MISMATCH", "maybe", "must be fail or warn", "String should match pattern"),
        ("HARNESS_API_MODE", "grpc", "must be anthropic_messages, chat_completions or responses", "String should match pattern"),
    ],
)
def test_a_bad_setting_names_the_value_the_rule_and_pydantics_reason(name, value, rule, reason) -> None:
    with pytest.raises(ConfigError) as info:
        Settings.from_env({name: value})
    assert info.value.message.startswith(f"{name}={value!r}: {rule} (pydantic: ") and reason in info.value.message
    assert name in info.value.fix


def test_a_bad_dotenv_value_says_where_it_came_from_and_a_provider_key_is_never_read(tmp_path: Path) -> None:
    dotenv = tmp_path / ".env"
    dotenv.write_text("ANTHROPIC_API_KEY=sk-ant-secret-canary\nHARNESS_BACKEND_TIMEOUT_S=-1\n")
    with pytest.raises(ConfigError) as info:
        Settings.from_env({}, dotenv)
    assert f"(from {dotenv})" in info.value.message and "sk-ant" not in str(info.value)
    dotenv.write_text("ANTHROPIC_API_KEY=sk-ant-secret-canary\nHARNESS_BACKEND=fake\n")
    s = Settings.from_env({}, dotenv)
    assert s.backend == "fake" and "sk-ant" not in s.model_dump_json()


def test_plain_settings_read_no_environment(monkeypatch) -> None:
    """Settings(...) is a value: only from_env reads HARNESS_* (a library host decides)."""
    monkeypatch.setenv("HARNESS_BACKEND_TIMEOUT_S", "5")
    monkeypatch.setenv("HARNESS_BACKEND", "codex")
    assert Settings().timeout_s == 1800.0 and Settings().backend is None
    assert Settings.from_env().timeout_s == 5.0 and Settings.from_env({}).backend is None
    assert Settings(backend="fake", timeout_s=3).timeout_s == 3.0


def _fake_cli(tmp_path: Path, version: str) -> Path:
    path = tmp_path / "claude"
    path.write_text(f"#!/bin/sh\necho '{version}'\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_cli_not_found_lists_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("HARNESSCHECK_CACHE", str(tmp_path / "cache"))
    spec = registry.get_spec("claude-code")
    with pytest.raises(CliNotFound) as info:
        registry.find_cli(spec, Settings())
    assert str(tmp_path / "cache") in str(info.value) and "$PATH/claude" in str(info.value)


def test_cli_version_outside_range(tmp_path: Path) -> None:
    spec = registry.get_spec("claude-code")
    with pytest.raises(CliVersionUnsupported) as info:
        registry.find_cli(spec, Settings(cli=_fake_cli(tmp_path, "1.0.3 (Claude Code)")))
    assert "1.0.3" in str(info.value) and ">=2.1.0" in str(info.value)


def test_cli_version_in_range(tmp_path: Path) -> None:
    spec = registry.get_spec("claude-code")
    info = registry.find_cli(spec, Settings(cli=_fake_cli(tmp_path, "2.1.197 (Claude Code)")))
    assert info.version == "2.1.197 (Claude Code)"


def test_silent_version_probe_says_why(tmp_path: Path) -> None:
    """A CLI that answers --version with nothing names its exit status and stderr in the error."""
    cli = tmp_path / "claude"
    cli.write_text("#!/bin/sh\necho 'EACCES: permission denied, mkdir /x/.claude' >&2\nexit 7\n")
    cli.chmod(0o755)
    with pytest.raises(CliVersionUnsupported) as info:
        registry.find_cli(registry.get_spec("claude-code"), Settings(cli=cli))
    message = str(info.value)
    assert "exit status 7" in message and "EACCES" in message, message
    assert registry.probe_failure(cli) is not None


def test_version_probe_is_kept_across_processes_per_binary(tmp_path: Path, monkeypatch) -> None:
    """A `harnesscheck run` is a process of its own: the binary's answer is kept in the cache
    dir, keyed by path, size, mtime, ctime and inode; a changed binary is probed again."""
    monkeypatch.setenv("HARNESSCHECK_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(registry, "_temporary", lambda path: False)  # as an installed CLI is
    runs = tmp_path / "runs"
    cli = tmp_path / "claude"

    def write(version: str) -> None:  # as an install does: a new file put in place
        new = tmp_path / "claude.new"
        new.write_text(f"#!/bin/sh\necho run >> {runs}\necho '{version}'\n")
        new.chmod(0o755)
        os.replace(new, cli)

    def probe_in_a_new_process() -> str | None:
        monkeypatch.setattr(registry, "_VERSION_CACHE", {})  # what a new process starts with
        return registry.probe_version(cli)

    write("2.1.197 (Claude Code)")
    assert probe_in_a_new_process() == "2.1.197 (Claude Code)"
    assert probe_in_a_new_process() == "2.1.197 (Claude Code)"
    assert runs.read_text().count("run") == 1, "the second process probed the same binary again"
    stored = (tmp_path / "cache" / registry.PROBE_CACHE_NAME).read_text()
    assert "2.1.197" in stored and str(cli) in stored
    write("2.1.198 (Claude Code)")  # same size, same path: another inode
    assert probe_in_a_new_process() == "2.1.198 (Claude Code)"
    assert runs.read_text().count("run") == 2
    (tmp_path / "cache" / registry.PROBE_CACHE_NAME).write_text("{not json")
    monkeypatch.setattr(registry, "_VERSION_CACHE", {})
    assert registry.probe_version(cli) == "2.1.198 (Claude Code)"  # a torn cache is only a miss


def test_a_temporary_binary_is_not_written_to_the_probe_file(tmp_path, monkeypatch):
    """A fake CLI or exec wrapper under the temp dir is probed once per process and never
    written to version-probes.json (issue 32: one entry per temporary path pushed the
    installed CLIs' answers out)."""
    monkeypatch.setenv("HARNESSCHECK_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(registry, "_VERSION_CACHE", {})
    cli = tmp_path / "claude"
    cli.write_text("#!/bin/sh\necho '2.1.332 (Claude Code)'\n")
    cli.chmod(0o755)
    assert registry._temporary(cli) and not registry._temporary(Path("/usr/bin/env"))
    assert registry.probe_version(cli) == "2.1.332 (Claude Code)"
    assert not (tmp_path / "cache" / registry.PROBE_CACHE_NAME).exists()


@pytest.mark.parametrize("backend", ["opencode", "claude-code", "gemini"])
def test_the_version_probe_is_bounded_by_the_backends_start_up_allowance(tmp_path, monkeypatch, backend):
    """opencode's `--version` took 8.7 s alone at load 16: its probe gets the backend's start-up
    allowance (cold_start_s, 30 s), not a fixed 20 s, and every probe stays bounded."""
    spec = registry.get_spec(backend)
    cli = tmp_path / (spec.cli_name or "cli")
    cli.write_text("#!/bin/sh\necho 1.18.33\n")
    cli.chmod(0o755)
    bounds: list[float] = []
    monkeypatch.setenv("HARNESSCHECK_CACHE", str(tmp_path / "cache"))  # the answer is remembered there
    monkeypatch.setattr(registry, "_VERSION_CACHE", {})
    monkeypatch.setattr(registry, "_probe_version", lambda path, t: bounds.append(t) or ("1.18.33", ""))
    registry.find_cli(spec, Settings(cli=cli), check_version=False)
    assert bounds == [max(registry.VERSION_PROBE_S, spec.cold_start_s)]
    assert bounds[0] >= spec.cold_start_s and bounds[0] < float("inf")
    if backend == "opencode":
        assert bounds[0] == 30.0


def test_the_version_probe_sees_no_host_env_and_skips_geminis_relaunch(tmp_path, monkeypatch):
    """The probe runs with PATH, a private HOME and the vendor switches only: no host key reaches a
    CLI that is only asked its version, and gemini answers without starting node twice."""
    cli = tmp_path / "gemini"
    cli.write_text('#!/bin/sh\necho "v=${GEMINI_CLI_NO_RELAUNCH:-unset} key=${ANTHROPIC_API_KEY:-none} home=$HOME"\n')
    cli.chmod(0o755)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-host-key")
    monkeypatch.setenv("HOME", str(tmp_path))
    answer, why = registry._probe_version(cli, 10)
    assert why == "" and answer.startswith("v=true key=none home=")
    assert answer.split("home=")[1] != str(tmp_path)


def test_the_version_probe_gives_a_private_temp_dir_and_removes_it(tmp_path):
    """`opencode --version` makes `$TMPDIR/opencode` (/tmp/opencode without one): the probe's
    CLI gets a temp dir of its own, removed with what it wrote, never the system's."""
    cli = tmp_path / "opencode"
    cli.write_text('#!/bin/sh\nmkdir -p "${TMPDIR:-/tmp}/opencode" && touch "$TMP/x" "$TEMP/y" && echo "$TMPDIR"\n')
    cli.chmod(0o755)
    answer, why = registry._probe_version(cli, 10)
    assert why == "" and answer.startswith(tempfile.gettempdir()) and answer != "/tmp", answer
    assert not os.path.exists(answer), "the probe's temp dir outlived it"


def test_a_hung_version_probe_still_ends(tmp_path):
    cli = tmp_path / "opencode"
    cli.write_text("#!/bin/sh\nexec sleep 600\n")
    cli.chmod(0o755)
    assert registry._probe_version(cli, 0.5) == (None, "no answer within 0.5 s")


EXAMPLE_SPEC = ProviderSpec(
    id="example-ep",
    kind=Kind.api,
    label="Example",
    factory="harnesscheck.backends.fake:FakeTransport",
    capabilities=frozenset({Capability.host_tool_loop}),
)


def example_spec() -> ProviderSpec:
    return EXAMPLE_SPEC


def test_entry_point_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dist = tmp_path / "example_backend-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: example-backend\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[harnesscheck.backends]\nexample-ep = {__name__}:example_spec\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry._entry_point_specs.cache_clear()
    try:
        assert registry.get_spec("example-ep") == EXAMPLE_SPEC
        assert "example-ep" in registry.known_specs()
    finally:
        registry._entry_point_specs.cache_clear()


def test_module_factory_reference() -> None:
    assert registry.get_spec(f"{__name__}:example_spec") == EXAMPLE_SPEC


def test_version_policy() -> None:
    spec = registry.get_spec("codex")
    assert registry.version_supported(spec, "codex-cli 0.171.0")
    assert not registry.version_supported(spec, "codex-cli 1.2.0")
    assert not registry.version_supported(spec, "garbage")
    assert registry.version_range(spec) == ">=0.100.0,<1.0.0"


@pytest.mark.parametrize(
    ("printed", "parsed"),
    [
        ("2.1.197 (Claude Code)", "2.1.197"),
        ("codex-cli 0.171.0", "0.171.0"),
        ("codex-cli 0.172.0-alpha.1", "0.172.0a1"),
        ("2026.08.11-e8db854", "2026.8.11+e8db854"),
        ("cursor-agent v2026.08.11-e8db854", "2026.8.11+e8db854"),
        ("garbage", None),
    ],
)
def test_versions_are_read_the_way_pip_reads_them(printed, parsed) -> None:
    got = registry.parse_cli_version(printed)
    assert (str(got) if got is not None else None) == parsed
    assert registry.parse_version(printed) == (tuple(int(x) for x in parsed.split("+")[0].split("a")[0].split(".")) if parsed else None)


def test_a_date_hash_version_orders_by_date_and_ranges_ignore_the_hash() -> None:
    """cursor's `2026.08.11-e8db854`: the hash is a local label. Later dates are newer; two
    builds of one day are equal in every range; a range bound on the date holds for them."""
    v = registry.parse_cli_version
    assert v("2026.08.11-e8db854") < v("2026.09.02-0a1b2c3") and v("2026.08.11-e8db854") > v("2026.08.10-ffffff0")
    spec = ProviderSpec(id="cur", kind=Kind.harness, label="c", factory="x:y", cli_name="cursor-agent", min_version="2026.8.11", max_version="2027.1.1")
    assert registry.version_supported(spec, "2026.08.11-e8db854") and registry.version_supported(spec, "2026.08.11-0000000")
    assert not registry.version_supported(spec, "2026.08.10-e8db854")
    assert not registry.version_supported(spec, "2027.01.01-e8db854")
    assert str(registry.supported_versions(spec)) in (">=2026.8.11,<2027.1.1", "<2027.1.1,>=2026.8.11")


def test_pre_releases_inside_the_range_count_and_the_bounds_own_do_not() -> None:
    spec = registry.get_spec("claude-code")  # >=2.1.0,<3.0.0
    assert registry.version_supported(spec, "2.2.0-beta.1 (Claude Code)")
    assert not registry.version_supported(spec, "3.0.0-alpha.1 (Claude Code)")
    assert not registry.version_supported(spec, "2.1.0-rc.1 (Claude Code)"), "a pre-release of the lower bound is below it"
