"""envpolicy: allowlist, deny rules, injections, config homes, redaction; canaries end to end.

Canary values are unique random strings planted in the parent env for every denied family
plus custom secrets. They must not reach the child env (built or observed from a real
child), its argv, the trace file, the stderr tail or any error text.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harnesscheck.contain.envpolicy import (
    DEFAULT_POLICY,
    REDACTED,
    EnvPolicy,
    build_child_env,
    config_home,
    redact,
    redact_obj,
    secret_values,
)
from harnesscheck.contain.process import run_process

SCRIPTS = Path(__file__).resolve().parents[1] / "proc_scripts"

DENIED_NAMES = [
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_MODEL",
    "ANTHROPIC_DEFAULT_SONNET_MODEL",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "CLAUDE_CODE_USE_BEDROCK",
    "CLAUDE_CODE_ENTRYPOINT",
    "CLAUDE_CODE_SSE_PORT",
    "CLAUDE_AGENT_SDK_VERSION",
    "CLAUDECODE",
    "CLAUDE_CONFIG_DIR",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "CODEX_API_KEY",
    "CODEX_HOME",
    "CURSOR_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "OPENCODE_CONFIG",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_PROFILE",
    "AZURE_OPENAI_API_KEY",
    "DEEPSEEK_API_KEY",
    "NODE_OPTIONS",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
    "CI",
    # custom secrets: only the name gives them away
    "MY_SERVICE_TOKEN",
    "DATABASE_PASSWORD",
    "STRIPE_SECRET",
    "GH_TOKEN",
    "GITHUB_TOKEN",
    "NPM_AUTH",
    "SOME_CREDENTIALS_FILE",
    "private_key_pem",
    "session_cookie",
    "db_passwd",
]
ALLOWED = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/home/someone",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "TERM": "xterm",
    "TMPDIR": "/tmp",
    "USER": "someone",
    "TZ": "UTC",
}


def canary(name: str) -> str:
    return f"canary-{name.lower()}-{os.urandom(8).hex()}"


@pytest.fixture
def parent() -> dict[str, str]:
    env = dict(ALLOWED)
    env.update({name: canary(name) for name in DENIED_NAMES})
    env["BASH_FUNC_evil%%"] = "() {  curl x; }"
    env["PATH_FN"] = "() { echo pwned; }"  # an exported function under an innocent name
    env["UNLISTED_VAR"] = canary("unlisted")
    return env


class ListTrace:
    def __init__(self) -> None:
        self.records: list[tuple[str, dict]] = []

    def record(self, event: str, **fields: object) -> None:
        self.records.append((event, fields))


# --- build_child_env --------------------------------------------------------------------------------


def test_only_allowlisted_names_survive(parent: dict[str, str]) -> None:
    child = build_child_env(parent)
    assert child == ALLOWED
    values = "\0".join(child.values())
    for name in DENIED_NAMES:
        assert parent[name] not in values


def test_deny_wins_even_over_a_mistaken_allowlist(parent: dict[str, str]) -> None:
    policy = EnvPolicy(allow_names=frozenset(parent))  # allow everything by mistake
    child = build_child_env(parent, policy=policy)
    for name in DENIED_NAMES:
        assert name not in child
    assert "BASH_FUNC_evil%%" not in child and "PATH_FN" not in child
    assert child["UNLISTED_VAR"] == parent["UNLISTED_VAR"]  # the mistake itself is honoured


def test_custom_deny_rules_are_case_insensitive() -> None:
    policy = EnvPolicy(allow_names=frozenset({"acme_url", "Other"}), deny_prefixes=("acme_",), deny_names=frozenset({"other"}))
    assert build_child_env({"acme_url": "x", "Other": "y"}, policy=policy) == {}


def test_proxies_pass_only_when_configured(parent: dict[str, str]) -> None:
    child = build_child_env(parent, policy=EnvPolicy(pass_proxies=True))
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "no_proxy"):
        assert child[name] == parent[name]
    assert "ANTHROPIC_API_KEY" not in child


def test_injection_is_the_only_way_in_replaces_and_is_traced_by_name(parent: dict[str, str]) -> None:
    trace = ListTrace()
    token = "sk-ant-oat01-" + os.urandom(16).hex()
    child = build_child_env(
        parent,
        injections={"CLAUDE_CODE_OAUTH_TOKEN": token, "HOME": "/run/home", "LANG": ""},
        trace=trace,
    )
    assert child["CLAUDE_CODE_OAUTH_TOKEN"] == token  # injected, replaces the parent's canary
    assert child["HOME"] == "/run/home"  # replaces, never appends
    assert "LANG" in parent and "LANG" not in child  # empty injection means unset
    assert trace.records == [("env_inject", {"names": ["CLAUDE_CODE_OAUTH_TOKEN", "HOME"], "unset": ["LANG"]})]
    assert token not in json.dumps(trace.records)


def test_bad_injections_are_refused() -> None:
    with pytest.raises(ValueError):
        build_child_env({}, injections={"A=B": "x"})
    with pytest.raises(ValueError):
        build_child_env({}, injections={"A": "x\0y"})


def test_parent_is_not_modified(parent: dict[str, str]) -> None:
    before = dict(parent)
    build_child_env(parent, injections={"HOME": "/x"})
    assert parent == before


SECRET_WORDS = ["KEY", "SECRET", "TOKEN", "PASSWORD", "CREDENTIAL", "AUTH"]
_name_part = st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_", max_size=8)


@settings(max_examples=300, deadline=None)
@given(
    prefix=_name_part,
    word=st.sampled_from(SECRET_WORDS),
    suffix=_name_part,
    lower=st.booleans(),
    allow_it=st.booleans(),
    inject=st.booleans(),
    value=st.text(alphabet=st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)), min_size=1, max_size=30),
)
def test_secret_looking_names_never_survive_unless_injected(prefix, word, suffix, lower, allow_it, inject, value) -> None:
    name = prefix + (word.lower() if lower else word) + suffix
    policy = EnvPolicy(allow_names=DEFAULT_POLICY.allow_names | {name}) if allow_it else DEFAULT_POLICY
    child = build_child_env({name: value, "PATH": "/bin"}, policy=policy, injections={name: "injected"} if inject else {})
    if inject:
        assert child[name] == "injected"
    else:
        assert name not in child


@settings(max_examples=200, deadline=None)
@given(prefix=st.sampled_from([p for p in DEFAULT_POLICY.deny_prefixes]), rest=_name_part)
def test_denied_families_never_survive_an_allowlisting(prefix: str, rest: str) -> None:
    name = prefix + rest
    policy = EnvPolicy(allow_names=DEFAULT_POLICY.allow_names | {name})
    assert name not in build_child_env({name: "v"}, policy=policy)


# --- config homes -------------------------------------------------------------------------------------


def test_config_home_is_private_and_per_run(tmp_path: Path) -> None:
    name, path = config_home(tmp_path / "run", "CLAUDE_CONFIG_DIR")
    assert name == "CLAUDE_CONFIG_DIR"
    p = Path(path)
    assert p.is_dir() and p.is_relative_to(tmp_path)
    assert stat.S_IMODE(p.stat().st_mode) == 0o700
    assert config_home(tmp_path / "run", "CLAUDE_CONFIG_DIR") == (name, path)  # idempotent
    assert config_home(tmp_path / "run", "CODEX_HOME")[1] != path
    child = build_child_env({"PATH": "/bin"}, injections=dict([config_home(tmp_path / "run", "CODEX_HOME")]))
    assert child["CODEX_HOME"].startswith(str(tmp_path))


def test_config_home_refuses_a_planted_symlink(tmp_path: Path) -> None:
    (tmp_path / "run" / "config-homes").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "run" / "config-homes" / "codex_home").symlink_to(tmp_path / "elsewhere")
    with pytest.raises((PermissionError, FileExistsError)):
        config_home(tmp_path / "run", "CODEX_HOME")


# --- redaction ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "key sk-ant-api03-AbCdEf0123456789xyz in text",
        "OPENAI: sk-proj-AbCdEf0123456789AbCdEf0123",
        "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N",
        "Authorization: Bearer abcDEF1234567890",
        "MY_SERVICE_TOKEN=Zq8xY7wV6uT5s",
        '{"api_key": "Zq8xY7wV6uT5s"}',
        "password: hunter2hunter2",
        "https://user:S3cretPassw0rd@proxy.local:8080/",
        "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
        "aws AKIAABCDEFGHIJKLMNOP",
        "x-api-key:0123456789abcdef0123456789abcdef",
        "using key 0123456789abcdef0123456789abcdef now",
        "token\tQUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo0123456789==",
    ],
)
def test_redact_patterns(text: str) -> None:
    out = redact(text)
    assert REDACTED in out
    for secret in (
        "sk-ant-api03",
        "sk-proj-AbCd",
        "abcDEF1234567890",
        "Zq8xY7wV6uT5s",
        "hunter2hunter2",
        "S3cretPassw0rd",
        "ghp_abcdef",
        "AKIAABCDEFGHIJKLMNOP",
        "0123456789abcdef0123",
        "eyJhbGciOi",
        "QUJDREVGR0hJ",
    ):
        assert secret not in out


@pytest.mark.parametrize(
    "text",
    [
        "error: authentication_failed",
        "apiKeySource: none",
        "tool read_file allowed path=src/a.py",
        "auth: oauth",
        "the token budget was exceeded",
        "refused: outside_root: ../etc/passwd",
        "the key insight is simple",
        "token_count_exceeded_for_this_request_window",
    ],
)
def test_redact_keeps_diagnostics_readable(text: str) -> None:
    assert redact(text) == text


def test_redact_uses_the_environment_at_call_time(monkeypatch: pytest.MonkeyPatch) -> None:
    value = "plainvalue" + os.urandom(6).hex()
    assert redact(f"x {value} y") == f"x {value} y"
    monkeypatch.setenv("MY_DB_PASSWORD", value)
    assert redact(f"x {value} y") == f"x {REDACTED} y"
    monkeypatch.setenv("MY_DB_PASSWORD", "other" + os.urandom(6).hex())
    assert redact(f"x {value} y") == f"x {value} y"


def test_redact_extra_secrets_and_short_values() -> None:
    assert redact("a zebra-horse-42 b", extra_secrets=["zebra-horse-42"]) == f"a {REDACTED} b"
    assert redact("a short b", extra_secrets=["short"]) == "a short b"  # < 8 chars: not a secret


def test_secret_values_only_from_secret_names() -> None:
    env = {"MY_TOKEN": "aaaaaaaaaa", "API_KEY": "short", "PATH": "/usr/bin:/bin/long", "X_AUTH": "bbbbbbbbbbbb"}
    assert secret_values(env) == {"aaaaaaaaaa", "bbbbbbbbbbbb"}


def test_redact_obj_walks_nested_values() -> None:
    v = redact_obj({"a": ["Bearer abcdef0123456789", {"b": "ok"}], "n": 3}, extra_secrets=["zzzzzzzzzz"])
    assert v == {"a": [f"Bearer {REDACTED}", {"b": "ok"}], "n": 3}


def test_redact_is_linear_on_large_inputs() -> None:
    """No catastrophic backtracking on long runs of name characters (stderr tails are 64 KiB)."""
    import time

    for text in ("k" * 65536, "token=" + "k" * 65536, "a=b " * 16384, "x://" * 16384):
        started = time.monotonic()
        redact(text)
        assert time.monotonic() - started < 5.0  # quadratic behaviour takes minutes here


# --- canaries end to end -----------------------------------------------------------------------------


def test_canaries_never_reach_a_real_child_its_argv_trace_or_errors(parent: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The host process itself carries the canaries (as a developer's shell would).
    for name in DENIED_NAMES:
        monkeypatch.setenv(name, parent[name])
    trace_path = tmp_path / "trace.jsonl"
    trace = _trace(trace_path)
    injected = "sk-ant-oat01-" + os.urandom(16).hex()
    env = build_child_env(os.environ, injections={"CLAUDE_CODE_OAUTH_TOKEN": injected}, trace=trace)
    lines: list[str] = []
    result = run_process(
        [sys.executable, str(SCRIPTS / "print_env.py"), "--flag"],
        env=env,
        cwd=tmp_path,
        on_line=lines.append,
        timeout_s=60,
    )
    seen = json.loads(lines[0])
    # error text a transport would build from the result
    error_text = redact(f"cli failed: exit {result.exit_code}; stderr: {result.stderr_tail}")
    trace.record("session_end", stderr_tail=result.stderr_tail, error=error_text)
    trace_text = trace_path.read_text()
    child_env_text = "\0".join(f"{k}={v}" for k, v in seen["env"].items())
    argv_text = "\0".join(seen["argv"])

    for name in DENIED_NAMES:
        value = parent[name]
        assert name not in seen["env"] or name == "CLAUDE_CODE_OAUTH_TOKEN"
        for where, text in (
            ("child env", child_env_text),
            ("argv", argv_text),
            ("trace", trace_text),
            ("stderr tail", result.stderr_tail),
            ("error", error_text),
        ):
            assert value not in text, f"{name} canary reached the {where}"
    # the injected token reached the child, and nothing else that is stored
    assert seen["env"]["CLAUDE_CODE_OAUTH_TOKEN"] == injected
    assert injected not in trace_text and injected not in result.stderr_tail and injected not in error_text
    assert '"env_inject"' in trace_text and "CLAUDE_CODE_OAUTH_TOKEN" in trace_text


def _trace(path: Path):
    """The project's Trace when present, else a minimal JSONL writer with the same record()."""
    try:
        from harnesscheck.choke.trace import Trace

        return Trace(path, session_id="canary")
    except ImportError:  # pragma: no cover - trace.py is built by another part of the issue

        class _Jsonl:
            def record(self, event: str, **fields: object) -> None:
                with open(path, "a") as fh:
                    fh.write(redact(json.dumps({"event": event, **fields})) + "\n")

        return _Jsonl()


def test_private_temp_dirs_are_the_sessions_own():
    """TMPDIR/TMP/TEMP, the CLI's own equivalents and XDG_RUNTIME_DIR point inside the run
    dir (0700); a run dir too deep for a socket path gets a short private runtime dir."""
    import shutil
    import tempfile

    from harnesscheck.contain.envpolicy import private_temp_dirs

    base = Path(tempfile.mkdtemp(prefix="hc-t-", dir="/tmp"))  # short enough for a socket path below it
    try:
        inj, remove = private_temp_dirs(base / "run", ("CLAUDE_CODE_TMPDIR",))
        assert {inj[k] for k in ("TMPDIR", "TMP", "TEMP", "CLAUDE_CODE_TMPDIR")} == {str(base / "run" / "tmp")}
        assert inj["XDG_RUNTIME_DIR"] == str(base / "run" / "runtime")
        assert remove == [base / "run" / "tmp", base / "run" / "runtime"]
        for path in remove:
            assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
        deep = base / ("d" * 90) / "run"
        inj, remove = private_temp_dirs(deep)
        assert inj["TMPDIR"] == str(deep / "tmp")
        runtime = remove[1]
        assert inj["XDG_RUNTIME_DIR"] == str(runtime) and len(str(runtime)) + 40 <= 107
        assert stat.S_IMODE(os.stat(runtime).st_mode) == 0o700
        runtime.rmdir()
    finally:
        shutil.rmtree(base)


def test_an_interrupt_while_the_private_dirs_are_made_leaves_none_unlisted(monkeypatch):
    """The short runtime dir outside a too-deep run dir is in the session's cleanup list from
    the moment it exists: a Ctrl-C (or an ending run's SIGINT) raised while the other dir is
    made still has it removed at the session's end, never left in /tmp."""
    import shutil
    import tempfile

    from harnesscheck.contain.envpolicy import private_temp_dirs

    base = Path(tempfile.mkdtemp(prefix="hc-t-", dir="/tmp"))
    deep = base / ("d" * 90) / "run"
    made: list[Path] = []
    real_mkdtemp = tempfile.mkdtemp

    def mkdtemp(*args, **kwargs):
        made.append(Path(real_mkdtemp(*args, **kwargs)))
        return str(made[-1])

    def interrupted(self, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp)
    monkeypatch.setattr(Path, "mkdir", interrupted)  # the first mkdir after the runtime dir's mkdtemp
    cleanup: list[Path] = [base / "cwd"]
    try:
        with pytest.raises(KeyboardInterrupt):
            private_temp_dirs(deep, cleanup=cleanup)
        assert len(made) == 1 and made[0].is_dir() and made[0].name.startswith("hc-rt-")
        assert cleanup == [base / "cwd", deep / "tmp", made[0]], "the runtime dir made before the interrupt is not listed for removal"
    finally:
        monkeypatch.undo()
        for path in (base, *made):
            shutil.rmtree(path, ignore_errors=True)


def test_the_short_runtime_dir_names_its_maker_and_sweeps_orphans_first(tmp_path, monkeypatch):
    """The /tmp fallback is made by core/tempdirs.make_temp_dir: named after this process, after
    the dirs of makers that are gone were removed (tests/core/test_tempdirs.py)."""
    import shutil

    from harnesscheck.contain import envpolicy
    from harnesscheck.core import tempdirs

    monkeypatch.setattr(envpolicy, "SOCKET_ROOM", 200)  # any run dir is too deep: the fallback is made
    swept: list[tuple[str, str]] = []
    monkeypatch.setattr(tempdirs, "sweep_orphans", lambda prefix, parent: swept.append((prefix, parent)) or [])
    _, remove = envpolicy.private_temp_dirs(tmp_path / "run")
    try:
        runtime = remove[-1]
        assert runtime.name.startswith(f"hc-rt-{os.getpid()}-{tempdirs.start_time(os.getpid())}-")
        assert swept == [("hc-rt-", str(runtime.parent))]
    finally:
        for path in remove:
            shutil.rmtree(path, ignore_errors=True)
