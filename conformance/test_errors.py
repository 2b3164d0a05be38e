"""Error classification: every failure ends as one normalized class, with the right status and
retry advice; auth is blocked loudly at once and never retried into a lockout."""

from __future__ import annotations

from harnesscheck.core.contracts import Capability as C
from harnesscheck.core.contracts import ErrorClass as E
from harnesscheck.core.contracts import Kind, OutcomeStatus
from harnesscheck.kit.catalog import check


def _assert_class(run, cls, *, status, retryable):
    o = run.outcome
    assert o.error_class == cls, f"error_class {o.error_class} != {cls.value} (status {o.status}, message {o.message!r})"
    assert o.status == status, f"status {o.status} != {status.value} for {cls.value}"
    assert o.retryable is retryable, f"retryable={o.retryable} for {cls.value}, expected {retryable}"


@check("errors.auth-blocks", incident=["E1", "A10"])
def test_auth_blocks(but):
    """A 401 / invalid key ends the session blocked with error_class auth, not retryable."""
    _assert_class(but.run("auth_401"), E.auth, status=OutcomeStatus.blocked, retryable=False)


@check("errors.not-logged-in-blocks", incident=["A10", "E1"])
def test_not_logged_in_blocks(but):
    """'Not logged in' (even with exit 0 or subtype success) ends blocked with auth, never ok."""
    _assert_class(but.run("not_logged_in"), E.auth, status=OutcomeStatus.blocked, retryable=False)


@check("errors.auth-not-retried", requires=[C.early_auth_stop], incident=["E1", "A10"])
def test_auth_not_retried(but):
    """An auth failure stops the session at once: one model call, no retry ladder, within seconds."""
    run = but.run("auth_401", timeout_s=120)
    assert run.outcome.error_class == E.auth
    if run.model_calls is not None:
        assert run.model_calls == 1, f"{run.model_calls} model calls for a 401: auth must never be retried"
    took = run.duration_s - run.timeline.allowance_s  # the runtime's start-up is not a retry
    assert took < 30, f"auth failure took {took:.1f} s past start-up: it must stop early, not after retries"


@check("errors.rate-limit-retryable", incident="E2")
def test_rate_limit_retryable(but):
    """A 429 is rate_limit, retryable, distinct from quota exhaustion."""
    _assert_class(but.run("rate_limit_429"), E.rate_limit, status=OutcomeStatus.error, retryable=True)


@check("errors.quota-not-retryable", incident="E2")
def test_quota_not_retryable(but):
    """A usage limit / insufficient quota is quota: blocked, not retryable, distinct from rate_limit."""
    _assert_class(but.run("usage_limit"), E.quota, status=OutcomeStatus.blocked, retryable=False)


@check("errors.overloaded-retryable", incident="E3", paced=True)
def test_overloaded_retryable(but):
    """529 overloaded is overloaded (or server_error), retryable."""
    run = but.run("overloaded_529")
    assert run.outcome.error_class in (E.overloaded, E.server_error), (
        f"got {run.outcome.status}/{run.outcome.error_class} after the model answered only 529 overloaded "
        f"({len(run.outcome.text or '')} chars of text, message {run.outcome.message[:200]!r}): a failure that ends like "
        "a normal turn hides it. Fix: end the session with an overloaded (or server) error once retries are spent"
    )
    assert run.outcome.retryable is True and run.outcome.status == OutcomeStatus.error


@check("errors.context-overflow", incident="E4")
def test_context_overflow(but):
    """'prompt is too long' / context_length_exceeded is context_overflow, not retryable."""
    _assert_class(but.run("context_overflow"), E.context_overflow, status=OutcomeStatus.error, retryable=False)


@check("errors.model-unavailable", incident="E8")
def test_model_unavailable(but):
    """An unknown or unavailable model is model_unavailable, not retryable."""
    _assert_class(but.run("model_not_found"), E.model_unavailable, status=OutcomeStatus.error, retryable=False)


@check("errors.crash-without-result", incident="C5", kinds=[Kind.harness])
def test_crash_without_result(but):
    """A CLI exiting non-zero with no terminal event is cli_crash (retryable), never ok."""
    run = but.run("crash_no_result")
    _assert_class(run, E.cli_crash, status=OutcomeStatus.error, retryable=True)
    assert run.outcome.terminal_event_seen is False


@check("errors.secret-free-messages", incident=["A9", "A10"])
def test_secret_free_messages(but):
    """Error messages and stderr tails never carry a secret, even when the upstream echoes one."""
    canaries = {k: v for k, v in but.parent_env_canaries().items() if any(w in k for w in ("KEY", "TOKEN", "SECRET", "PASSWORD"))}
    for scenario in ("auth_401", "rate_limit_429"):
        run = but.run(scenario, parent_env=canaries, echo=[*canaries.values(), *but.held_secrets().values()])
        blob = run.outcome.message + run.outcome.stderr_tail
        secrets = {**canaries, **but.held_secrets(run)}  # the backend's own credentials are secrets too
        leaked = [k for k, v in secrets.items() if v in blob]
        assert not leaked, f"{scenario}: the error text carries {leaked}"


@check("errors.network-retryable", incident="E9")
def test_network_retryable(but):
    """A connection failure (refused, reset, DNS) is network: retryable, never ok or unknown."""
    run = but.run("network_error", timeout_s=60)
    _assert_class(run, E.network, status=OutcomeStatus.error, retryable=True)


@check("errors.credential-not-refetched", requires=[C.credential_exchange], incident=["E1", "E2"])
def test_credential_not_refetched(but):
    """A short-lived credential exchanged from a stored login is fetched once and reused for every
    request until it nears expiry: a session of several model turns makes one exchange, not one
    per request (per-request exchanges spend the token endpoint's rate limit and lock the account out)."""
    run = but.run("tool_calls")
    assert run.outcome.status == OutcomeStatus.ok, run.said
    fetches = but.credential_fetches(run)
    if fetches is None:
        but.skip("adapter-not-implemented", f"the kit cannot see {but.spec.id}'s credential exchanges at {but.level}")
    assert run.model_calls is None or run.model_calls >= 2, f"the scenario made {run.model_calls} model calls"
    assert fetches == 1, f"{fetches} credential exchanges for one session of {run.model_calls} model calls"
