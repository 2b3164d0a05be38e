"""Stream parsing (harness-anchors D1–D9): noise, unknown events, truncated and oversize lines
never crash a session or change a recorded outcome; exactly one terminal outcome."""

from __future__ import annotations

from harnesscheck.core.contracts import ErrorClass as E
from harnesscheck.core.contracts import Kind, OutcomeStatus
from harnesscheck.kit.catalog import check


@check("parse.noise-lines-skipped", kinds=[Kind.harness], incident=["D4", "D8", "D3"])
def test_noise_lines_skipped(but):
    """Non-JSON lines (banners, debug output, invalid UTF-8, bare CRLF) on stdout are skipped; the outcome is unchanged."""
    run = but.run("noise_lines")
    assert run.outcome.status == OutcomeStatus.ok, run.said
    assert run.outcome.text


@check("parse.unknown-events-ignored", kinds=[Kind.harness], incident=["D6", "D10"])
def test_unknown_events_ignored(but):
    """Unknown event types and new fields are ignored, not fatal."""
    run = but.run("unknown_events")
    assert run.outcome.status == OutcomeStatus.ok, run.said
    assert run.outcome.text


@check("parse.truncated-last-line", kinds=[Kind.harness], incident="D5")
def test_truncated_last_line(but):
    """A truncated last line is dropped; the outcome uses the last complete events and is never a silent ok without a result."""
    run = but.run("truncated_last_line")
    o = run.outcome
    if o.terminal_event_seen:
        assert o.status in (OutcomeStatus.ok, OutcomeStatus.error, OutcomeStatus.blocked)
    else:
        assert o.status != OutcomeStatus.ok, "no terminal event was complete, yet the outcome is ok"


@check("parse.oversize-line-bounded", kinds=[Kind.harness], incident=["D1", "D7"])
def test_oversize_line_bounded(but):
    """A multi-MiB line is parsed, or fails with a typed protocol error naming the limit: never a hang or crash.

    Parsed through to the terminal event, the session may still end blocked/policy_violation: the
    fixtures print the line from a native shell call, which an audited backend's audit rejects."""
    run = but.run("oversize_line", timeout_s=120)
    o = run.outcome
    parsed = o.status == OutcomeStatus.ok or (o.error_class == E.policy_violation and o.terminal_event_seen)
    assert parsed or o.error_class == E.protocol, f"{o.status}/{o.error_class}: {o.message}"
    assert run.duration_s < 100 + run.timeline.allowance_s


@check("parse.exit0-is-error", kinds=[Kind.harness], incident=["D9", "A10"])
def test_exit0_is_error(but):
    """A result with is_error true is an error even when the CLI exits 0 (never trust subtype: success)."""
    run = but.run("exit0_is_error")
    assert run.outcome.status != OutcomeStatus.ok, f"an is_error result was reported ok: {run.outcome.text!r}"
    assert run.outcome.error_class is not None


@check("parse.split-lines-identical", kinds=[Kind.harness], incident=["D2", "D3"])
def test_split_lines_identical(but):
    """A stream whose lines arrive cut at arbitrary byte offsets parses exactly like the uncut one."""
    whole = but.shared_run("success").outcome
    cut = but.run("split_lines").outcome
    for field in ("status", "error_class", "text", "usage", "served_model", "cost", "terminal_event_seen"):
        assert getattr(cut, field) == getattr(whole, field), f"{field}: {getattr(cut, field)!r} != {getattr(whole, field)!r}"


@check("parse.brace-noise-skipped", kinds=[Kind.harness], incident=["D4", "D8"])
def test_brace_noise_skipped(but):
    """Lines that start with `{` but are no event (a debug print of an object, a lone `{`, a
    half-printed object, a JSON log record without a `type`, `{}`), between every two events on
    stdout and on stderr, are skipped: the outcome is exactly the one of the same session
    without them.

    Evidence: the outcome of `success` and of the same fixture with those lines added (status,
    error class, text, usage, served model, terminal event)."""
    whole = but.shared_run("success").outcome
    noisy = but.run("brace_noise").outcome
    assert noisy.status == OutcomeStatus.ok, f"{noisy.status}/{noisy.error_class} with non-event lines starting with '{{' in the stream: {noisy.message!r}"
    for field in ("status", "error_class", "text", "usage", "served_model", "terminal_event_seen"):
        assert getattr(noisy, field) == getattr(whole, field), (
            f"non-event lines starting with '{{' changed the outcome's {field}: {getattr(noisy, field)!r} != {getattr(whole, field)!r}"
        )
