"""Scripted model scenarios: what a loopback model server answers, turn by turn.

A scenario is a list of turns. The server serves turn N to a request whose history holds
N model turns already (counted from the request itself, so retries of the same request
get the same turn). A turn is one model response:

- text (optionally with tool calls after it): `Turn(text="hi")`,
  `Turn(tool_calls=[ToolCall("read_file", {"path": "a.txt"})])`;
- an HTTP status with a body and headers (401, 429 + retry-after, 529): `Turn(status=429, ...)`;
- a delay before answering (`delay_s`), or a hang (headers and the first event, then
  nothing until the server stops);
- a served model other than the requested one (`served_model`, per turn or per scenario);
- the usage the server reports for the turn (`usage`).

`repeat_last=True` serves the last turn for every later request ("always call a tool").
Tool names are written in the bridge's plain form (`read_file`); `tool_name_style` says how
the server names the call on the wire (claude: `mcp__bridge__read_file`; codex: see
doc/SPEC-loopback.md). Named scenarios for the conformance checks and recordings are built
by `named_scenario(name, ...)`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

#: The name of the bridge's MCP server, as the transports configure it.
BRIDGE_SERVER = "bridge"


@dataclass(frozen=True)
class ServedUsage:
    """Token counts the server reports for one turn (what a parser must find again)."""

    input: int = 11
    output: int = 7
    cache_read: int = 0
    cache_write: int = 0
    reasoning: int = 0


@dataclass(frozen=True)
class ToolCall:
    """A tool call the scripted model makes. `name` is the bridge tool (`read_file`) or,
    with `builtin=True`, a vendor built-in named verbatim (`Read`, `exec_command`)."""

    name: str
    input: dict[str, Any] = field(default_factory=dict)
    builtin: bool = False
    #: Responses only: a freeform (custom tool) call carrying this text as its input
    #: (codex's `apply_patch`, code-mode `exec`).
    freeform: str | None = None


@dataclass(frozen=True)
class Turn:
    """One model response (see the module docstring)."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    status: int | None = None
    error_type: str | None = None
    error_message: str | None = None
    #: Responses/Chat error `code` (e.g. `context_length_exceeded`, `model_not_found`);
    #: default: derived from `error_type`.
    error_code: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    delay_s: float = 0.0
    hang: bool = False
    served_model: str | None = None
    usage: ServedUsage = field(default_factory=ServedUsage)

    def __post_init__(self) -> None:
        if isinstance(self.tool_calls, list):
            object.__setattr__(self, "tool_calls", tuple(self.tool_calls))
        if isinstance(self.headers, dict):
            object.__setattr__(self, "headers", tuple(self.headers.items()))

    @property
    def is_status(self) -> bool:
        return self.status is not None and self.status != 200


@dataclass(frozen=True)
class Scenario:
    """A named list of turns; see the module docstring."""

    name: str
    turns: tuple[Turn, ...]
    repeat_last: bool = False
    served_model: str | None = None
    description: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.turns, list):
            object.__setattr__(self, "turns", tuple(self.turns))
        if not self.turns:
            raise ValueError("a scenario needs at least one turn")

    def turn(self, index: int) -> Turn | None:
        """The turn for a request whose history holds `index` model turns, or None
        when the script is exhausted (the server then answers a plain closing text)."""
        if index < len(self.turns):
            return self.turns[index]
        if self.repeat_last:
            return self.turns[-1]
        return None

    def with_served_model(self, model: str | None) -> "Scenario":
        return replace(self, served_model=model)


# ---------------------------------------------------------------------------------------
# Named scenarios (shared by the conformance checks, `record` and the command line)

ERROR_BODIES = {
    401: ("authentication_error", "invalid x-api-key"),
    403: ("permission_error", "forbidden"),
    429: ("rate_limit_error", "rate limited (scripted)"),
    500: ("api_error", "internal server error (scripted)"),
    529: ("overloaded_error", "Overloaded (scripted)"),
}

SCENARIO_NAMES = (
    "success",
    "tool_calls",
    "max_turns",
    "auth_401",
    "rate_limit_429",
    "overloaded_529",
    "served_model_mismatch",
    "timeout_mid_stream",
    "native_tool_use",
    "read_outside",
    "read_symlink_escape",
)


def status_turn(status: int, *, retry_after: float | None = None) -> Turn:
    etype, msg = ERROR_BODIES.get(status, ("api_error", f"status {status} (scripted)"))
    headers: tuple[tuple[str, str], ...] = ()
    if retry_after is not None:
        headers = (("retry-after", f"{retry_after:g}"),)
    return Turn(status=status, error_type=etype, error_message=msg, headers=headers)


def named_scenario(name: str, *, native_tool: str = "Read", native_input: dict | None = None, native_freeform: str | None = None) -> Scenario:
    """The scenario for a canonical name (fixtures/ scenario names where they overlap).

    `native_tool`/`native_input` pick the disabled built-in a `native_tool_use` scenario
    asks for (claude: `Read`; codex: `exec_command`)."""
    done = Turn(text="done")
    if name == "success":
        return Scenario(name, (Turn(text="Hello from the scripted model."),))
    if name == "tool_calls":
        return Scenario(
            name,
            (
                Turn(text="Reading the file.", tool_calls=(ToolCall("read_file", {"path": "hello.txt"}),)),
                Turn(text="The file says hello."),
            ),
        )
    if name == "read_outside":
        return Scenario(name, (Turn(tool_calls=(ToolCall("read_file", {"path": "../outside/secret.txt"}),)), done))
    if name == "read_symlink_escape":
        return Scenario(name, (Turn(tool_calls=(ToolCall("read_file", {"path": "escape/secret.txt"}),)), done))
    if name == "max_turns":
        return Scenario(
            name,
            (Turn(tool_calls=(ToolCall("read_file", {"path": "hello.txt"}),)),),
            repeat_last=True,
            description="the model always calls a tool",
        )
    if name == "auth_401":
        return Scenario(name, (status_turn(401),), repeat_last=True)
    if name == "rate_limit_429":
        return Scenario(name, (status_turn(429, retry_after=1),), repeat_last=True)
    if name == "overloaded_529":
        return Scenario(name, (status_turn(529),), repeat_last=True)
    if name == "served_model_mismatch":
        return Scenario(name, (Turn(text="Served by another model."),), served_model="loopback-other-model")
    if name == "timeout_mid_stream":
        return Scenario(name, (Turn(text="partial", hang=True),), repeat_last=True)
    if name == "native_tool_use":
        call = ToolCall(
            native_tool,
            native_input if native_input is not None else {"file_path": "/etc/hostname"},
            builtin=True,
            freeform=native_freeform,
        )
        return Scenario(name, (Turn(tool_calls=(call,)), done))
    raise KeyError(f"unknown loopback scenario {name!r}; known: {', '.join(SCENARIO_NAMES)}")
