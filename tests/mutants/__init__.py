"""Known-bad backends ("mutants"): one small class each, named for its defect.

Each is addressed exactly as a user addresses a backend — `--backend tests.mutants.scripted:follows_symlinks`
— so the self-test goes through the real selection path. `MUTANTS` maps that reference to
the exact check ids the mutant must fail (tests/test_kit_mutants.py proves it), and
`AREAS` narrows the slow CLI-based mutants to the areas their defect can reach.
"""

from __future__ import annotations

from harnesscheck.contracts import ProviderSpec
from harnesscheck.registry import BUILTIN_SPECS


def mutant_spec(base: str, module: str, cls: type, **changes) -> ProviderSpec:
    """A spec like the built-in `base`, built by `cls` (a subclass of its transport)."""
    spec = BUILTIN_SPECS[base]
    return spec.model_copy(update={
        "id": f"mutant-{cls.__name__}", "label": f"mutant: {cls.__doc__.strip().splitlines()[0]}",
        "factory": f"{module}:{cls.__name__}", **changes,
    })


def _ids(*ids: str) -> frozenset[str]:
    return frozenset(ids)


#: --backend reference -> the exact set of check ids the mutant fails.
MUTANTS: dict[str, frozenset[str]] = {
    # in-process (built on the fake backend)
    "tests.mutants.scripted:follows_symlinks": _ids(
        "scope.symlink-leaf-refused", "parity.refusal-codes-match-dispatch", "scope.loop-reaches-dispatch",
    ),
    "tests.mutants.scripted:prefix_check_without_separator": _ids("scope.sibling-prefix-refused"),
    "tests.mutants.scripted:ignores_the_timeout": _ids("time.timeout-truncates"),
    "tests.mutants.scripted:ignores_cancellation": _ids("time.cancel-ends-session"),
    "tests.mutants.scripted:no_turn_cap": _ids("time.max-turns-truncates"),
    "tests.mutants.scripted:sums_usage_per_streamed_line": _ids("usage.counted-once-per-message"),
    "tests.mutants.scripted:reads_served_model_from_helper": _ids("usage.helper-model-not-served"),
    "tests.mutants.scripted:fabricates_a_dollar_cost": _ids("usage.cost-never-fabricated"),
    "tests.mutants.scripted:always_says_model_matches": _ids("usage.served-model-mismatch-flagged"),
    "tests.mutants.scripted:retries_a_401": _ids("errors.auth-not-retried"),
    "tests.mutants.scripted:rate_limit_is_final": _ids("errors.rate-limit-retryable"),
    "tests.mutants.scripted:quota_is_retryable": _ids("errors.quota-not-retryable"),
    "tests.mutants.scripted:echoes_secrets_in_errors": _ids("errors.secret-free-messages"),
    "tests.mutants.scripted:drops_loop_refusals": _ids(
        "scope.dotdot-refused", "scope.absolute-path-refused", "scope.sibling-prefix-refused",
        "scope.symlink-leaf-refused", "scope.symlink-parent-write-refused", "scope.procfs-refused",
        "scope.nul-byte-refused", "scope.long-path-refused", "scope.hardlink-write-refused", "scope.fifo-refused",
        "scope.read-only-write-refused", "scope.refusal-visible-to-model", "parity.refusal-codes-match-dispatch",
        "concurrency.parallel-sessions-isolated",
    ),
    "tests.mutants.scripted:tool_results_never_reach_the_model": _ids(
        "scope.loop-reaches-dispatch", "scope.in-tree-symlink-reads", "scope.refusal-visible-to-model",
    ),
    "tests.mutants.scripted:writes_without_dispatch": _ids(
        "scope.symlink-parent-write-refused", "scope.hardlink-write-refused", "scope.read-only-write-refused",
        "parity.refusal-codes-match-dispatch",
    ),
    "tests.mutants.scripted:offers_a_shell_tool": _ids("audit.only-scope-tools-offered"),
    "tests.mutants.scripted:one_trace_for_all_sessions": _ids("concurrency.parallel-sessions-isolated"),
    "tests.mutants.scripted:accepts_tools_in_complete": _ids("selection.complete-declines-tools"),
    "tests.mutants.scripted:labels_itself_wrongly": _ids("parity.outcome-schema"),
    # CLI harnesses (built on the claude-code transport, run against the fake claude)
    "tests.mutants.harness:passes_os_environ_through": _ids(
        "env.provider-keys-stripped", "env.nesting-vars-stripped",
    ),
    "tests.mutants.harness:leaks_the_api_key_in_argv": _ids("env.no-secret-in-argv"),
    "tests.mutants.harness:trusts_subtype_success": _ids("errors.not-logged-in-blocks", "parse.exit0-is-error"),
    "tests.mutants.harness:runs_on_when_the_bridge_failed": _ids("bridge.failed-load-ends-session"),
    "tests.mutants.harness:drops_bridge_refusals": _ids(
        "scope.dotdot-refused", "scope.sibling-prefix-refused", "scope.symlink-leaf-refused",
        "scope.refusal-visible-to-model",
    ),
    "tests.mutants.harness:kills_only_the_direct_child": _ids("time.no-survivors-after-timeout"),
    "tests.mutants.harness:leaves_builtin_tools_on": _ids("audit.only-scope-tools-offered"),
    "tests.mutants.harness:ignores_the_cli_version": _ids("selection.cli-version-unsupported"),
}

#: For the slow CLI-based mutants: the test file(s) the self-test runs (their defect cannot
#: reach the other areas; the in-process mutants run the whole suite).
AREAS: dict[str, tuple[str, ...]] = {
    "tests.mutants.harness:passes_os_environ_through": ("test_env.py", "test_errors.py"),
    "tests.mutants.harness:leaks_the_api_key_in_argv": ("test_env.py",),
    "tests.mutants.harness:trusts_subtype_success": ("test_errors.py", "test_parse.py"),
    "tests.mutants.harness:runs_on_when_the_bridge_failed": ("test_bridge.py",),
    "tests.mutants.harness:drops_bridge_refusals": ("test_scope.py",),
    "tests.mutants.harness:kills_only_the_direct_child": ("test_time.py",),
    "tests.mutants.harness:leaves_builtin_tools_on": ("test_audit.py",),
    "tests.mutants.harness:ignores_the_cli_version": ("test_selection.py",),
}

#: Checks no known-bad backend fails, and why (the kit's honest sensitivity gaps).
UNCAUGHT: dict[str, str] = {}
