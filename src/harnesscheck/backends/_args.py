"""Validation of values a transport puts into a CLI's argv (harness-anchors J2).

A value that could read as a flag, a list or two arguments is refused before any spawn.
"""

from __future__ import annotations

import re

from harnesscheck.core.contracts import ConfigError

#: Model ids seen in the wild: `gpt-5.5-codex`, `claude-opus-4-8[1m]`, `base[effort=high]`,
#: `provider/model`, `model@2026-01-01`. Nothing else: no comma, space, quote or leading '-'.
_MODEL_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+=\[\]-]{0,199}")


def safe_model(model: str) -> str:
    """`model` when it is a plain model id; ConfigError (naming the fix) otherwise."""
    if not isinstance(model, str) or not _MODEL_RE.fullmatch(model):
        raise ConfigError(
            f"invalid model name {model!r}",
            "pass a plain model id (letters, digits and . _ : / @ + = [ ] -; no spaces, commas or leading '-')",
        )
    return model
