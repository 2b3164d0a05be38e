"""Reasoning-only Claude Code's kit profile (backends/_kit_profile.py): an api backend whose model
is one tool-less `claude -p` per host turn, so the kit verifies it with the real claude of the
claude-code backend (its pin, its loopback scripts) at the loopback level, and has no offline
cells. The scripted server finds the turn a prompt asks for with `transcript_turns`.
"""

from __future__ import annotations

from harnesscheck.backends._kit_profile import KitProfile, ReasoningProfile
from harnesscheck.backends._setup_profile import DoctorProfile


def _turn_of_prompt(prompt: str) -> int:
    from harnesscheck.backends.claude_code_reasoning import transcript_turns

    return transcript_turns(prompt)


PROFILE = KitProfile(
    reasoning=ReasoningProfile(
        cli_backend="claude-code",
        turn_of_prompt=_turn_of_prompt,
        offline_skip=(
            "reasoning-only Claude Code is verified with the real claude at the loopback level: its model is a CLI call "
            "per host turn, which a mocked HTTP API cannot stand in for and the fake claude (replaying recorded streams) "
            "cannot answer; offline, tests/backends/test_claude_code_reasoning.py covers its parser, tripwire and error mapping"
        ),
    ),
    # doctor: it calls `claude -p` signed in as claude-code is ("no credentials needed" was wrong)
    doctor=DoctorProfile(same_credentials_as="claude-code"),
)
