"""kit/api_adapter.import_sdk_settled: the api worker imports its SDK once, with the cyclic
collector paused, and keeps it out of every later full collection (gc.freeze)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap


def _fresh(code: str) -> dict:
    """Run `code` in a fresh interpreter (no SDK imported yet) and return the JSON it prints."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_sdk_imported_with_the_collector_paused_then_frozen() -> None:
    result = _fresh(
        """
        import gc, json, sys
        from harnesscheck.kit.api_adapter import import_sdk_settled
        seen = []
        gc.callbacks.append(lambda phase, info: phase == "stop" and seen.append([info["generation"], "anthropic" in sys.modules]))
        import_sdk_settled("anthropic_messages")
        import anthropic
        tracked = {id(o) for o in gc.get_objects()}
        print(json.dumps({
            "imported": "anthropic" in sys.modules,
            "collections": seen,
            "enabled": gc.isenabled(),
            "frozen": gc.get_freeze_count(),
            "client_class_tracked": id(anthropic.Anthropic) in tracked,
        }))
        """
    )
    assert result["imported"]
    assert [2, False] in result["collections"], "one full collection before the import"
    assert [c for c in result["collections"] if c[1]] == [], "no collection while the SDK is imported"
    assert result["enabled"]
    assert result["frozen"] > 10_000
    assert not result["client_class_tracked"], "the SDK's classes must sit in the permanent generation"


def test_already_imported_sdk_is_left_alone() -> None:
    result = _fresh(
        """
        import gc, json
        import anthropic
        from harnesscheck.kit.api_adapter import import_sdk_settled
        import_sdk_settled("anthropic_messages")
        print(json.dumps({"frozen": gc.get_freeze_count(), "enabled": gc.isenabled()}))
        """
    )
    assert result == {"frozen": 0, "enabled": True}


def test_collector_state_restored_when_the_import_fails() -> None:
    result = _fresh(
        """
        import gc, json
        import harnesscheck.llm
        from harnesscheck.kit.api_adapter import import_sdk_settled
        harnesscheck.llm.sdk_module = lambda mode: "hc_no_such_sdk"
        states = []
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            try:
                import_sdk_settled("anthropic_messages")
                raised = False
            except ImportError:
                raised = True
            states.append([raised, gc.isenabled()])
        gc.enable()
        print(json.dumps({"states": states, "frozen": gc.get_freeze_count()}))
        """
    )
    assert result == {"states": [[True, True], [True, False]], "frozen": 0}
