"""The loopback level: scripted model servers on 127.0.0.1 for the real CLIs, the pinned
CLI install, recording of fixtures and the drift check. See doc/SPEC-loopback.md.

Light to import (standard library + the package's own light modules).
"""

from harnesscheck.backends.loopback_endpoint import LoopbackEndpoint
from harnesscheck.loopback.scenario import Scenario, ServedUsage, ToolCall, Turn, named_scenario
from harnesscheck.loopback.server import RecordedRequest, ScriptedModelServer

__all__ = [
    "LoopbackEndpoint",
    "RecordedRequest",
    "Scenario",
    "ScriptedModelServer",
    "ServedUsage",
    "ToolCall",
    "Turn",
    "named_scenario",
]
