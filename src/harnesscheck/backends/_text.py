"""Text helpers the CLI transports share, written once.

Requirements kept here: what a transport puts in an outcome's message is one line, bounded
(`short`); the last non-blank line of a CLI's stderr is its likeliest error (`last_line`); a
CLI with no system-prompt channel gets the contract first, then the task (`compose_prompt`).
Where one backend's use differs (a longer bound, other words in its prompt), the difference
is an argument its own module passes, so each backend's text stays what it was.
"""

from __future__ import annotations

from collections.abc import Iterable

from harnesscheck.backends._harness import BRIDGE_SERVER


def short(text: str | None, limit: int = 300) -> str:
    """`text` on one line (runs of whitespace become one space), cut to `limit` characters with
    a trailing `…`; None reads as empty."""
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def last_line(text: str | None) -> str:
    """The last line of `text` that is not blank ("" if none)."""
    lines = [ln for ln in (text or "").splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def compose_prompt(
    system: str | None,
    prompt: str,
    tool_names: Iterable[str],
    *,
    place: str = "working directory",
    closing: str = "",
) -> str:
    """The prompt of a CLI with no system-prompt channel: `# Instructions` (the contract), then
    `# Tools` (the repository is reached only through the bridge's MCP tools, `tool_names` as
    the CLI names them), then `# Task`; the bare prompt when there is neither. `place`: what
    the CLI calls where it runs (its working directory, its workspace); `closing`: a sentence
    after the tools paragraph (e.g. not to use the built-ins), or ""."""
    tool_names = tuple(tool_names)
    parts = []
    if system and system.strip():
        parts.append("# Instructions\n\n" + system.strip())
    if tool_names:
        parts.append(
            f"# Tools\n\nThe repository is not in your {place}. Reach it only through the "
            f"`{BRIDGE_SERVER}` MCP tools ({', '.join(tool_names)}), with paths relative to the "
            "repository root." + (f" {closing}" if closing else "")
        )
    if not parts:
        return prompt
    return "\n\n".join(parts) + "\n\n# Task\n\n" + prompt
