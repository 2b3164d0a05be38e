"""ToolScope: what a session's tools may touch, and path resolution beneath its root.

Contract (doc/SPEC-scope.md): every path a tool receives is resolved here, in one function,
relative to a directory fd opened on the root; nothing outside the root is ever opened.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

READ_TOOLS: tuple[str, ...] = ("read_file", "list_dir", "grep")
WRITE_TOOLS: tuple[str, ...] = ("write_file", "edit_file")
ALL_TOOLS: tuple[str, ...] = READ_TOOLS + WRITE_TOOLS

DEFAULT_MAX_RESULT_BYTES = 256 * 1024


class ToolScope(BaseModel):
    """The host's tool scope for one session: a root, the tools allowed, read-only or not."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = "default"
    root: Path
    read_only: bool = True
    allowed_tools: tuple[str, ...] | None = Field(
        default=None, description="Tool names offered; None means every tool the mode permits."
    )
    path_patterns: tuple[str, ...] = Field(
        default=(), description="Glob patterns (relative to root) a path must match; empty = any."
    )
    max_result_bytes: int = Field(default=DEFAULT_MAX_RESULT_BYTES, gt=0)

    @field_validator("root")
    @classmethod
    def _root_absolute(cls, value: Path) -> Path:
        if not value.is_absolute():
            raise ValueError("scope root must be an absolute path")
        return value

    def tool_names(self) -> tuple[str, ...]:
        """Tools this scope offers: writers only when not read-only, filtered by allowed_tools."""
        names = READ_TOOLS if self.read_only else ALL_TOOLS
        if self.allowed_tools is not None:
            names = tuple(n for n in names if n in self.allowed_tools)
        return names
