"""Child environment policy and redaction.

A child's environment is built, never passed through:

1. allowlist: only a few names (and the `LC_` prefix) are copied from the parent;
2. deny rules win over the parent env even if a name was allowlisted by mistake:
   provider and agent families (ANTHROPIC_*, CLAUDE_CODE_*, OPENAI_*, ...), NODE_OPTIONS,
   proxies (unless the policy passes them), CI, exported bash functions, and any name that
   looks like a secret (KEY, SECRET, TOKEN, PASSWORD, CREDENTIAL, AUTH, ...);
3. explicit injections: the only way a denied name reaches a child. An injection replaces
   (never appends); an empty value means "unset". Injections are traced by name only.

`redact()` scrubs secret values and secret-looking tokens from any text that is printed or
stored (trace records, stderr tails, error messages).
"""

from __future__ import annotations

import os
import re
import stat
import threading
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

REDACTED = "[REDACTED]"

#: The variable the process runner injects so escaped descendants can be found again.
RUN_MARKER_VAR = "HARNESSCHECK_RUN"

DEFAULT_ALLOW_NAMES: frozenset[str] = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "TERM",
        "COLORTERM",
        "LANG",
        "LANGUAGE",
        "TMPDIR",
        "TZ",
        "XDG_RUNTIME_DIR",
        # CA bundles are paths, not secrets; without them children break behind custom CAs.
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "NODE_EXTRA_CA_CERTS",
        "REQUESTS_CA_BUNDLE",
        # Windows essentials (harmless elsewhere).
        "SYSTEMROOT",
        "WINDIR",
        "COMSPEC",
        "PATHEXT",
        "TEMP",
        "TMP",
        "USERPROFILE",
        "APPDATA",
        "LOCALAPPDATA",
    }
)
DEFAULT_ALLOW_PREFIXES: tuple[str, ...] = ("LC_",)

DEFAULT_DENY_PREFIXES: tuple[str, ...] = (
    "ANTHROPIC_",
    "CLAUDE_CODE_",
    "CLAUDE_AGENT_",
    "OPENAI_",
    "CODEX_",
    "CURSOR_",
    "GEMINI_",
    "GOOGLE_",
    "OPENCODE_",
    "AWS_",
    "AZURE_",
    "DEEPSEEK_",
    "BASH_FUNC_",
)
DEFAULT_DENY_NAMES: frozenset[str] = frozenset({"CLAUDECODE", "CLAUDE_CONFIG_DIR", "NODE_OPTIONS", "CI"})
PROXY_NAMES: frozenset[str] = frozenset({"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"})

#: A variable whose name matches this is treated as a secret (denied, and its value redacted).
SECRET_NAME_RE = re.compile(r"KEY|SECRET|TOKEN|PASSWORD|PASSWD|CREDENTIAL|AUTH|COOKIE|PRIVATE", re.IGNORECASE)
#: Values shorter than this are not treated as secrets by value (too many false hits).
MIN_SECRET_LEN = 8


class EnvPolicy(BaseModel):
    """Which parent variables a child may see. Deny rules always win over the allowlist."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    allow_names: frozenset[str] = DEFAULT_ALLOW_NAMES
    allow_prefixes: tuple[str, ...] = DEFAULT_ALLOW_PREFIXES
    deny_prefixes: tuple[str, ...] = DEFAULT_DENY_PREFIXES
    deny_names: frozenset[str] = DEFAULT_DENY_NAMES
    pass_proxies: bool = False

    @field_validator("deny_prefixes", "deny_names", mode="after")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        """Deny matching is case-insensitive: rules are kept upper-case."""
        return type(value)(v.upper() for v in value)

    def allowed(self, name: str) -> bool:
        """True if `name` may be copied from the parent env."""
        if not _valid_name(name):
            return False
        upper = name.upper()
        if upper in PROXY_NAMES:
            return self.pass_proxies
        if not (name in self.allow_names or name.startswith(self.allow_prefixes)):
            return False
        return not self.denied(name)

    def denied(self, name: str) -> bool:
        """True if `name` must never be inherited from the parent (it may still be injected)."""
        upper = name.upper()
        if upper in PROXY_NAMES:
            return not self.pass_proxies
        return upper in self.deny_names or upper.startswith(self.deny_prefixes) or is_secret_name(name)


DEFAULT_POLICY = EnvPolicy()


def _valid_name(name: str) -> bool:
    return bool(name) and "=" not in name and "\0" not in name


@lru_cache(maxsize=4096)
def is_secret_name(name: str) -> bool:
    """True for names that look like they hold a credential (KEY, TOKEN, AUTH, ...)."""
    return SECRET_NAME_RE.search(name) is not None


def _is_bash_function(name: str, value: str) -> bool:
    return name.startswith("BASH_FUNC_") or value.startswith("() {") or value.startswith("(){")


def build_child_env(
    parent: Mapping[str, str],
    *,
    injections: Mapping[str, str] = {},  # noqa: B006 - read only
    policy: EnvPolicy = DEFAULT_POLICY,
    trace: Any = None,
) -> dict[str, str]:
    """The environment for a child: allowlist, then deny rules, then explicit injections.

    An injection replaces any value; an empty-string injection removes the name. Injected
    names (never values) are recorded with `trace.record("env_inject", names=[...])`.
    """
    env: dict[str, str] = {}
    for name, value in parent.items():
        if "\0" in value or _is_bash_function(name, value):
            continue
        if policy.allowed(name):
            env[name] = value
    set_names: list[str] = []
    unset_names: list[str] = []
    for name, value in injections.items():
        if not _valid_name(name):
            raise ValueError(f"invalid environment variable name in injections: {name!r}")
        if "\0" in value:
            raise ValueError(f"NUL byte in the injected value of {name}")
        if value == "":
            env.pop(name, None)
            unset_names.append(name)
        else:
            env[name] = value
            set_names.append(name)
    if trace is not None and (set_names or unset_names):
        trace.record("env_inject", names=sorted(set_names), unset=sorted(unset_names))
    return env


def config_home(run_dir: str | os.PathLike[str], var: str) -> tuple[str, str]:
    """A private (0700) per-run config directory for `var` (e.g. CLAUDE_CONFIG_DIR, CODEX_HOME).

    Returns `(var, path)`, ready to be used as an injection. The directory lives under
    `run_dir/config-homes/` and is never the user's real credential store.
    """
    if not _valid_name(var) or "/" in var:
        raise ValueError(f"invalid variable name: {var!r}")
    base = Path(run_dir) / "config-homes"
    base.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = base / var.lower()
    path.mkdir(mode=0o700, exist_ok=True)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():  # lstat: a symlink is not a dir
        raise PermissionError(f"config home {path} is not a private directory owned by this user")
    os.chmod(path, 0o700)
    return var, str(path)


#: Room a CLI needs below its runtime dir for a unix socket (`cc-socks/<pid>.sock`) inside
#: sun_path's 108 bytes.
SOCKET_ROOM = 40
_SUN_PATH_MAX = 107
#: The temp and runtime variables every session's CLI gets pointed at private dirs.
TEMP_VARS = ("TMPDIR", "TMP", "TEMP")
RUNTIME_VARS = ("XDG_RUNTIME_DIR",)
#: The short runtime dir's prefix, named after its maker (core/tempdirs.py: one whose maker was
#: killed outright is removed by the next session that makes one).
RUNTIME_DIR_PREFIX = "hc-rt-"


def private_temp_dirs(
    run_dir: str | os.PathLike[str], extra_tmp_vars: Iterable[str] = (), *, cleanup: list[Path] | None = None
) -> tuple[dict[str, str], list[Path]]:
    """(injections, dirs to remove at session end): TMPDIR/TMP/TEMP (and the CLI's own
    equivalents, `extra_tmp_vars`, e.g. CLAUDE_CODE_TMPDIR) -> `run_dir/tmp`,
    XDG_RUNTIME_DIR -> `run_dir/runtime`, both 0700. The host's temp and runtime dirs are
    never passed on: a CLI's scratch files, state dirs and sockets (claude's messaging
    socket `cc-socks/<pid>.sock`) stay in the session's own dirs, reachable by no other
    local process, and go with the session. Where `run_dir` is too deep for a socket path,
    the runtime dir is a fresh 0700 dir under the system temp dir instead (removed too).

    `cleanup`, the session's list of dirs to remove at its end: each dir is appended to it
    before anything else is done, so an interrupt (Ctrl-C, an ending run's SIGINT) raised
    while the dirs are being made never leaves the one outside `run_dir` unlisted. Without
    it, the caller lists the returned dirs itself."""
    tmp = Path(run_dir) / "tmp"
    runtime = Path(run_dir) / "runtime"
    remove = cleanup if cleanup is not None else []
    first = len(remove)
    remove.append(tmp)
    if len(os.fsencode(str(runtime))) + SOCKET_ROOM > _SUN_PATH_MAX:
        from harnesscheck.core.tempdirs import make_temp_dir

        runtime = make_temp_dir(RUNTIME_DIR_PREFIX, "/tmp" if os.path.isdir("/tmp") else None)
    remove.append(runtime)
    for path in (tmp, runtime):
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            raise PermissionError(f"private temp dir {path} is not a directory owned by this user")
        os.chmod(path, 0o700)
    injections = {name: str(tmp) for name in (*TEMP_VARS, *extra_tmp_vars)}
    injections.update({name: str(runtime) for name in RUNTIME_VARS})
    return injections, remove[first:]


# --- redaction -----------------------------------------------------------------------


def secret_values(environ: Mapping[str, str]) -> set[str]:
    """Values of secret-named variables in `environ` that are long enough to redact by value."""
    return {value for name, value in environ.items() if len(value) >= MIN_SECRET_LEN and is_secret_name(name)}


_SECRET_WORD = r"(?:key|secret|token|password|passwd|credential|auth|cookie|private)"
# Known credential formats, anywhere in text.
_TOKEN_RE = (
    r"sk-ant-[A-Za-z0-9_\-]{8,}"
    r"|\bsk-[A-Za-z0-9_\-]{16,}"
    r"|\bgh[pousr]_[A-Za-z0-9]{20,}"
    r"|\bgithub_pat_[A-Za-z0-9_]{20,}"
    r"|\bxox[abprs]-[A-Za-z0-9\-]{10,}"
    r"|\bAKIA[0-9A-Z]{16}\b"
    r"|\bAIza[0-9A-Za-z_\-]{30,}"
    r"|\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"
)
# "Bearer xxx" / "Basic xxx" / "token xxx" authorization values.
_AUTH_SCHEME_RE = r"\b((?i:bearer|basic|token))(\s+)([A-Za-z0-9._~+/\-]{8,}=*)"
# NAME=value, NAME: value, "name": "value" with a secret-looking name.
_NAMED_VALUE_RE = (
    r"(?<![A-Za-z0-9_.\-])([A-Za-z0-9_.\-]*(?i:" + _SECRET_WORD + r")[A-Za-z0-9_.\-]*)"
    r"(['\"]?\s*[=:]\s*['\"]?)"
    r"([^\s'\"&,;})\]]{8,})"
)
# A long key-like value right after a secret word: "key 0123abcd...", "token: <base64>".
_LONG_AFTER_WORD_RE = r"((?i:key|token|secret|password|credential))(\W{1,3})([A-Za-z0-9+/_\-]{24,}={0,2})"
# scheme://user:password@host
_URL_USERINFO_RE = r"(?<![A-Za-z0-9+.\-])([A-Za-z][A-Za-z0-9+.\-]*://)([^/\s:@]+):([^/\s@]+)@"

_TOKEN = re.compile(_TOKEN_RE)
_AUTH_SCHEME = re.compile(_AUTH_SCHEME_RE)
_NAMED_VALUE = re.compile(_NAMED_VALUE_RE)
_URL_USERINFO = re.compile(_URL_USERINFO_RE)
_LONG_AFTER_WORD = re.compile(_LONG_AFTER_WORD_RE)
# Cheap substring tests that must hold before a pattern can match (regexes are slow;
# `in` is a C-level scan): most strings skip every regex.
_TOKEN_LITERALS = ("sk-", "gh", "github_pat_", "xox", "AKIA", "AIza", "eyJ")
_AUTH_WORDS = ("bearer", "basic", "token")
_SECRET_WORDS = ("key", "secret", "token", "password", "passwd", "credential", "auth", "cookie", "private")
# A plain word (one case, letters and _ or -) is a status, not a secret: keep it readable.
_PLAIN_WORD = re.compile(r"[a-z_\-]+|[A-Z_\-]+|[A-Z][a-z]+")


def _named_value_sub(match: re.Match[str]) -> str:
    value = match.group(3)
    if value.startswith("[REDACTED") or _PLAIN_WORD.fullmatch(value):
        return match.group(0)
    return f"{match.group(1)}{match.group(2)}{REDACTED}"


def _auth_scheme_sub(match: re.Match[str]) -> str:
    value = match.group(3)
    if match.group(1).lower() == "token" and _PLAIN_WORD.fullmatch(value):
        return match.group(0)
    return f"{match.group(1)}{match.group(2)}{REDACTED}"


class _EnvironSecrets:
    """Secret values of os.environ, longest first; recomputed only when the env changes.

    The check compares a snapshot of os.environ's backing dict (identical objects compare
    by identity, so an unchanged env costs about a microsecond).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._snapshot: dict[Any, Any] | None = None
        self._values: tuple[str, ...] = ()

    def get(self) -> tuple[str, ...]:
        data = getattr(os.environ, "_data", None)
        if not isinstance(data, dict):
            return tuple(sorted(secret_values(os.environ), key=len, reverse=True))
        snapshot = self._snapshot
        if snapshot is not None and snapshot == data:
            return self._values
        with self._lock:
            copy = dict(data)
            values = tuple(sorted(secret_values(os.environ), key=len, reverse=True))
            self._snapshot, self._values = copy, values
        return values


_environ_secrets = _EnvironSecrets()


def redact(text: str, extra_secrets: Iterable[str] = ()) -> str:
    """`text` with known secret values and secret-looking tokens replaced by [REDACTED].

    Known values: secret-named variables of os.environ at call time, plus `extra_secrets`
    (values shorter than 8 characters are ignored). Patterns: sk-/sk-ant- keys, GitHub,
    Slack, AWS and Google key formats, JWTs, `Bearer xxx`, `NAME=value` with a secret-looking
    name, and passwords in URLs.
    """
    if len(text) < MIN_SECRET_LEN:
        return text
    for secret in _environ_secrets.get():
        if secret in text:
            text = text.replace(secret, REDACTED)
    if extra_secrets:
        for secret in sorted({s for s in extra_secrets if len(s) >= MIN_SECRET_LEN}, key=len, reverse=True):
            if secret in text:
                text = text.replace(secret, REDACTED)
    if _contains_any(text, _TOKEN_LITERALS):
        text = _TOKEN.sub(REDACTED, text)
    lower = text.lower()
    if _contains_any(lower, _AUTH_WORDS):
        text = _AUTH_SCHEME.sub(_auth_scheme_sub, text)
    if _contains_any(lower, _SECRET_WORDS):
        if "=" in text or ":" in text:
            text = _NAMED_VALUE.sub(_named_value_sub, text)
        text = _LONG_AFTER_WORD.sub(_named_value_sub, text)
    if "://" in text and "@" in text:
        text = _URL_USERINFO.sub(lambda m: f"{m.group(1)}{m.group(2)}:{REDACTED}@", text)
    return text


def _contains_any(text: str, needles: tuple[str, ...]) -> bool:
    for needle in needles:  # a plain loop of C-level `in` beats a regex alternation here
        if needle in text:
            return True
    return False


def session_secret_values(*environs: Mapping[str, str]) -> set[str]:
    """Every secret value a host knows for one session: the secret-named values of each env
    given (the transport's parent env, which holds every value it withheld from the child
    by name; the injections, e.g. a subscription token) and of this process's env."""
    values = set(_environ_secrets.get())
    for environ in environs:
        values |= secret_values(environ)
    return values


def replace_values(value: Any, secrets: Iterable[str]) -> Any:
    """`value` (a string, or nested dicts/lists of them) with each known secret value
    replaced by [REDACTED]: exact values only (no patterns), longest first, so text that
    merely looks like a credential stays as it is."""
    ordered = sorted({s for s in secrets if len(s) >= MIN_SECRET_LEN}, key=len, reverse=True)
    if not ordered:
        return value

    def walk(item: Any) -> Any:
        if isinstance(item, str):
            for secret in ordered:
                if secret in item:
                    item = item.replace(secret, REDACTED)
            return item
        if isinstance(item, Mapping):
            return {k: walk(v) for k, v in item.items()}
        if isinstance(item, (list, tuple)):
            return type(item)(walk(v) for v in item)
        return item

    return walk(value)


def redact_obj(value: Any, extra_secrets: Iterable[str] = ()) -> Any:
    """`redact()` applied to every string inside nested dicts, lists and tuples."""
    extra = tuple(extra_secrets)
    if isinstance(value, str):
        return redact(value, extra)
    if isinstance(value, Mapping):
        return {k: redact_obj(v, extra) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact_obj(v, extra) for v in value)
    return value
