"""harnesscheck's own credential file: one `auth.json`, mode 0600, keyed by provider id
(doc/SPEC-copilot.md, "Auth storage").

    {"copilot": {"type": "oauth", "access": "<token>", "refresh": "", "expires": 0}}

`expires` 0 means "never" (a GitHub OAuth app token). The file lives in harnesscheck's own
directory (`paths.auth_dir()`, or `Settings.auth_dir` / HARNESS_AUTH_DIR); no other tool's
credential store is ever read or written. Writes are atomic (a 0600 temp file created
`O_EXCL|O_NOFOLLOW` beside it, fsynced, then renamed over it) and serialized between
processes by an flock on a lock file beside it. A file that others can read, that is not a
regular file, or that belongs to another user is refused, never used: it names the fix.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import stat
from pathlib import Path
from typing import Iterator

from harnesscheck.core.contracts import AuthUnavailable

FILE_NAME = "auth.json"
FILE_MODE = 0o600
DIR_MODE = 0o700


class AuthStore:
    """The auth.json in `directory`."""

    def __init__(self, directory: Path):
        self.directory = Path(directory).expanduser()
        self.path = self.directory / FILE_NAME

    def __repr__(self) -> str:
        return f"AuthStore({str(self.path)!r})"

    def get(self, provider: str) -> dict | None:
        """The provider's record, None when there is no file or no record for it. A file
        others can read or write (or not a regular file of this user) raises AuthUnavailable."""
        data = self._read()
        record = data.get(provider)
        return dict(record) if isinstance(record, dict) else None

    def put(self, provider: str, record: dict) -> Path:
        """Store the provider's record (the others are kept); returns the file's path."""
        self.directory.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        with self._locked():
            try:
                data = self._read()
            except AuthUnavailable:
                data = {}  # an unsafe old file is replaced by a private one, not read
            data[provider] = dict(record)
            self._write(data)
        return self.path

    def remove(self, provider: str) -> bool:
        """Forget the provider's record; True if there was one."""
        if not self.path.exists():
            return False
        with self._locked():
            data = self._read()
            if provider not in data:
                return False
            del data[provider]
            self._write(data)
        return True

    # -- file handling -----------------------------------------------------------------

    def _read(self) -> dict:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return {}
        except OSError as exc:  # ELOOP: a symlink in the file's place
            raise AuthUnavailable("auth", f"{self.path} cannot be opened ({exc.strerror})", f"remove {self.path} and log in again") from None
        with os.fdopen(fd, "rb") as fh:
            info = os.fstat(fh.fileno())
            if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
                raise AuthUnavailable("auth", f"{self.path} is not a regular file of this user", f"remove {self.path} and log in again")
            if info.st_mode & 0o077:
                raise AuthUnavailable(
                    "auth",
                    f"{self.path} is readable by others (mode {oct(info.st_mode & 0o777)[2:]})",
                    f"chmod 600 {self.path} (or remove it and log in again)",
                )
            raw = fh.read()
        try:
            data = json.loads(raw.decode("utf-8")) if raw.strip() else {}
        except (ValueError, UnicodeDecodeError):
            raise AuthUnavailable("auth", f"{self.path} is not valid JSON", f"remove {self.path} and log in again") from None
        return data if isinstance(data, dict) else {}

    def _write(self, data: dict) -> None:
        tmp = self.directory / f".{FILE_NAME}.{secrets.token_hex(6)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
        try:
            os.fchmod(fd, FILE_MODE)  # whatever the umask
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(data, fh, indent=2, sort_keys=True)
                fh.write("\n")
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        fd = os.open(self.directory / f".{FILE_NAME}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)
