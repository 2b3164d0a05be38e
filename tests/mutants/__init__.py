"""Known-bad backends ("mutants"): one small class each, named for its defect.

Each is addressed exactly as a user addresses a backend — `--backend tests.mutants.scripted:follows_symlinks`
— so the self-test goes through the real selection path. `MUTANTS` maps that reference to
the exact check ids the mutant must fail (tests/kit/test_kit_mutants.py proves it), and
`AREAS` narrows the slow CLI-based mutants to the areas their defect can reach.
"""

from __future__ import annotations

from harnesscheck.backends.registry import get_spec
from harnesscheck.core.contracts import ProviderSpec


def mutant_spec(base: str, module: str, cls: type, **changes) -> ProviderSpec:
    """A spec like the built-in `base` (an id or a column such as `api/responses`), built by
    `cls` (a subclass of its transport). Its id names the module too (`mutant-gemini-TrustsExitZero`):
    two mutant modules may name the same defect, and one run judges all of them by id."""
    spec = get_spec(base)
    return spec.model_copy(
        update={
            "id": f"mutant-{module.rpartition('.')[2]}-{cls.__name__}",
            "label": f"mutant: {cls.__doc__.strip().splitlines()[0]}",
            "factory": f"{module}:{cls.__name__}",
            **changes,
        }
    )


def _ids(*ids: str) -> frozenset[str]:
    return frozenset(ids)


#: --backend reference -> the exact set of check ids the mutant fails.
MUTANTS: dict[str, frozenset[str]] = {
    # in-process (built on the fake backend)
    "tests.mutants.scripted:follows_symlinks": _ids(
        "scope.symlink-leaf-refused",
        "parity.refusal-codes-match-dispatch",
        "scope.loop-reaches-dispatch",
        "scope.large-result-bounded",
        "scope.hardlink-read-contained",
        "scope.swap-race-contained",
        "events.tool-calls-streamed",
    ),
    "tests.mutants.scripted:prefix_check_without_separator": _ids("scope.sibling-prefix-refused"),
    "tests.mutants.scripted:ignores_the_timeout": _ids("time.timeout-truncates"),
    "tests.mutants.scripted:ignores_cancellation": _ids("time.cancel-ends-session"),
    "tests.mutants.scripted:no_turn_cap": _ids("time.max-turns-truncates"),
    "tests.mutants.scripted:sums_usage_per_streamed_line": _ids("usage.counted-once-per-message"),
    "tests.mutants.scripted:reads_served_model_from_helper": _ids("usage.helper-model-not-served"),
    "tests.mutants.scripted:fabricates_a_dollar_cost": _ids("usage.cost-never-fabricated"),
    "tests.mutants.scripted:always_says_model_matches": _ids(
        "usage.served-model-mismatch-flagged",
        "usage.mismatch-policy-applied",
    ),
    "tests.mutants.scripted:ignores_the_mismatch_policy": _ids("usage.mismatch-policy-applied"),
    "tests.mutants.scripted:never_compares_the_served_model": _ids("usage.mismatch-policy-applied"),
    "tests.mutants.scripted:retries_a_401": _ids("errors.auth-not-retried"),
    "tests.mutants.scripted:rate_limit_is_final": _ids("errors.rate-limit-retryable"),
    "tests.mutants.scripted:overload_is_final": _ids("errors.overloaded-retryable"),
    "tests.mutants.scripted:quota_is_retryable": _ids("errors.quota-not-retryable"),
    "tests.mutants.scripted:echoes_secrets_in_errors": _ids("errors.secret-free-messages"),
    "tests.mutants.scripted:drops_loop_refusals": _ids(
        "scope.dotdot-refused",
        "scope.absolute-path-refused",
        "scope.sibling-prefix-refused",
        "scope.symlink-leaf-refused",
        "scope.symlink-parent-write-refused",
        "scope.procfs-refused",
        "scope.nul-byte-refused",
        "scope.long-path-refused",
        "scope.hardlink-write-refused",
        "scope.fifo-refused",
        "scope.refusal-visible-to-model",
        "parity.refusal-codes-match-dispatch",
        "concurrency.parallel-sessions-isolated",
        "policy.denied-call-never-runs",
        "policy.unapproved-call-never-runs",
    ),
    "tests.mutants.scripted:tool_results_never_reach_the_model": _ids(
        "scope.loop-reaches-dispatch",
        "scope.in-tree-symlink-reads",
        "scope.refusal-visible-to-model",
        "scope.large-result-bounded",
        "concurrency.parallel-sessions-isolated",
        "scope.hardlink-read-contained",
        "concurrency.shared-worktree-isolated",
        "scope.swap-race-contained",
    ),
    "tests.mutants.scripted:writes_without_dispatch": _ids(
        "scope.symlink-parent-write-refused",
        "scope.hardlink-write-refused",
        "scope.read-only-write-refused",
        "parity.refusal-codes-match-dispatch",
        "policy.denied-call-never-runs",
        "policy.unapproved-call-never-runs",
        "policy.approval-bound-to-the-call",
        "policy.limit-ends-session",
    ),
    "tests.mutants.scripted:reads_through_hard_links": _ids("scope.hardlink-read-contained"),
    "tests.mutants.scripted:offers_a_shell_tool": _ids("audit.only-scope-tools-offered"),
    "tests.mutants.scripted:one_trace_for_all_sessions": _ids(
        "concurrency.parallel-sessions-isolated",
        "concurrency.shared-worktree-isolated",
    ),
    "tests.mutants.scripted:accepts_tools_in_complete": _ids("selection.complete-declines-tools"),
    "tests.mutants.scripted:labels_itself_wrongly": _ids("parity.outcome-schema"),
    "tests.mutants.scripted:auth_is_retryable": _ids(
        "errors.auth-blocks",
        "errors.not-logged-in-blocks",
        "errors.auth-not-retried",
    ),
    "tests.mutants.scripted:network_errors_are_unknown": _ids("errors.network-retryable"),
    "tests.mutants.scripted:returns_whole_files": _ids("scope.large-result-bounded"),
    "tests.mutants.scripted:ignores_the_host_policy": _ids(
        "policy.denied-call-never-runs",
        "policy.unapproved-call-never-runs",
        "policy.approval-bound-to-the-call",
        "policy.limit-ends-session",
        "events.tool-calls-streamed",
    ),
    "tests.mutants.scripted:approval_covers_the_tool": _ids("policy.approval-bound-to-the-call"),
    "tests.mutants.scripted:runs_past_the_policy_limit": _ids("policy.limit-ends-session"),
    "tests.mutants.scripted:ignores_request_options": _ids("usage.option-refused-before-request"),
    "tests.mutants.scripted:reports_usage_per_chunk": _ids("events.usage-adds-up"),
    "tests.mutants.api:retries_silently": _ids("events.retry-announced"),
    "tests.mutants.api:sends_over_long_requests": _ids("usage.over-context-never-sent"),
    "tests.mutants.api:drops_thinking": _ids("usage.thinking-carried-back"),
    "tests.mutants.api:bills_cache_reads_as_input": _ids("usage.cost-from-metadata-rates"),
    "tests.mutants.scripted:refuses_every_write": _ids(
        "scope.writes-stay-inside",
        "concurrency.shared-worktree-isolated",
        "policy.denied-call-never-runs",
        "policy.approval-bound-to-the-call",
        "policy.limit-ends-session",
    ),
    "tests.mutants.scripted:never_reports_the_served_model": _ids(
        "usage.served-model-reported",
        "usage.served-model-mismatch-flagged",
        "usage.helper-model-not-served",
    ),
    "tests.mutants.scripted:ignores_the_system_prompt": _ids("selection.system-prompt-delivered"),
    "tests.mutants.scripted:checks_the_run_dir_lexically": _ids("env.run-dir-outside-worktree"),
    "tests.mutants.scripted:lacks_complete": _ids("selection.registry-builds-backend", "selection.complete-declines-tools"),
    # declares nothing: the required minimum still runs (cancellation, the host tool loop) and the
    # declines= checks judge the claim; its guessed served model is caught, not skipped
    "tests.mutants.scripted:claims_almost_nothing": _ids(
        "usage.served-model-never-guessed",
        "usage.mismatch-policy-applied",
    ),
    # CLI harnesses (built on the claude-code / codex transports, run against the fake CLIs)
    "tests.mutants.codex:hides_its_builtins": _ids("audit.declines-builtins-honestly"),
    "tests.mutants.codex:forgets_native_tool_calls": _ids("audit.native-tool-use-flagged", "audit.declines-builtins-honestly"),
    "tests.mutants.codex:fails_an_unverified_model": _ids("usage.mismatch-policy-applied"),
    "tests.mutants.codex:audits_shells_by_the_paths_they_name": _ids("audit.hostile-builtins-flagged"),
    "tests.mutants.codex:loads_the_project_docs": _ids("env.planted-files-not-loaded"),
    "tests.mutants.harness:leaves_stdin_open": _ids("time.stdin-not-left-open"),
    "tests.mutants.harness:takes_every_brace_line_for_an_event": _ids("parse.brace-noise-skipped"),
    "tests.mutants.harness:holds_stdin_open_a_while": _ids("time.stdin-not-left-open"),
    "tests.mutants.harness:lets_the_cli_walk_for_claude_md": _ids("env.planted-files-not-loaded"),
    # a hand-rolled runner: besides abandonment it kills only the CLI's group and reads to EOF past the result
    "tests.mutants.harness:leaks_the_cli_when_the_stream_is_abandoned": _ids(
        "time.abandoned-stream-no-survivors",
        "time.no-survivors-after-timeout",
        "time.linger-after-result",
    ),
    # the worktree's .env holds a host key: the hostile host's credential check sees it too
    "tests.mutants.harness:loads_the_worktree_dotenv": _ids("env.worktree-not-cwd", "env.host-credentials-unreachable"),
    # the model still sees each refusal as an error result (black-box judgement, issue 19):
    # what is lost is the host's record of the calls and of dispatch's codes
    "tests.mutants.harness:forgets_bridge_calls": _ids(
        "scope.bridge-reaches-dispatch",
        "parity.refusal-codes-match-dispatch",
    ),
    "tests.mutants.harness:passes_any_model_name": _ids("selection.flag-values-validated"),
    "tests.mutants.harness:waits_out_a_lingering_cli": _ids("time.linger-after-result"),
    "tests.mutants.harness:drops_the_vendor_cost": _ids("usage.vendor-cost-reported", "usage.cost-never-fabricated"),
    "tests.mutants.harness:chokes_on_unknown_events": _ids("parse.unknown-events-ignored"),
    "tests.mutants.harness:passes_os_environ_through": _ids(
        "env.provider-keys-stripped",
        "env.nesting-vars-stripped",
    ),
    "tests.mutants.harness:leaks_the_api_key_in_argv": _ids("env.no-secret-in-argv", "env.host-credentials-unreachable"),
    "tests.mutants.harness:trusts_subtype_success": _ids(
        "errors.not-logged-in-blocks",
        "parse.exit0-is-error",
        "errors.model-unavailable",
        "errors.quota-not-retryable",
        "errors.context-overflow",
        # not errors.rate-limit-retryable: the pin 2.1.332 answers a subscription 429 with
        # `system/api_retry` (2.1.197 gave `subtype: success` + is_error); other mutants catch it
    ),
    "tests.mutants.harness:runs_on_when_the_bridge_failed": _ids(
        "bridge.failed-load-ends-session",
        "bridge.slow-start-not-toolless",
    ),
    # declares nothing, yet bridge readiness is judged (mcp_tools is required of every harness); its
    # claims are judged too: it says it cannot switch built-ins off yet its audit lets one pass as ok,
    # and it says it folds the system prompt in yet hands it over through a file
    "tests.mutants.harness:claims_almost_nothing_and_runs_on_without_tools": _ids(
        "bridge.failed-load-ends-session",
        "bridge.slow-start-not-toolless",
        "audit.declines-builtins-honestly",
        "selection.declines-stated",
    ),
    "tests.mutants.cursor:runs_on_without_its_bridge": _ids("bridge.failed-load-ends-session"),
    "tests.mutants.cursor:ends_ok_on_an_unclean_audit": _ids("audit.declines-builtins-honestly"),
    "tests.mutants.harness:drops_bridge_refusals": _ids("parity.refusal-codes-match-dispatch"),
    "tests.mutants.cursor:declines_silently": _ids("selection.declines-stated"),
    # their trees outlive an abandoned stream too (time.abandoned-stream-no-survivors)
    "tests.mutants.harness:kills_only_the_direct_child": _ids("time.no-survivors-after-timeout", "time.abandoned-stream-no-survivors"),
    "tests.mutants.harness:codex_kills_only_the_direct_child": _ids("time.no-survivors-after-timeout", "time.abandoned-stream-no-survivors"),
    "tests.mutants.harness:finds_escapees_by_env_marker": _ids("time.no-survivors-after-timeout", "time.abandoned-stream-no-survivors"),
    "tests.mutants.harness:leaves_builtin_tools_on": _ids("audit.only-scope-tools-offered"),
    "tests.mutants.harness:ignores_the_cli_version": _ids("selection.cli-version-unsupported"),
    "tests.mutants.harness:puts_the_prompt_in_argv": _ids("selection.prompt-never-a-flag"),
    "tests.mutants.harness:puts_the_system_prompt_in_argv": _ids("selection.huge-system-prompt-not-in-argv"),
    "tests.mutants.harness:uses_the_users_config_home": _ids("env.config-home-isolated"),
    "tests.mutants.harness:keeps_the_host_home": _ids("env.host-credentials-unreachable"),
    # not built on harnesscheck's providers: the seed's transport defects in an independent
    # miniature, its bridge under another name (only-bridge-configured must pass), json output
    "tests.mutants.foreign:seed_style_claude": _ids(
        "env.worktree-not-cwd",
        "env.run-dir-outside-worktree",
        "env.host-credentials-unreachable",
        "errors.not-logged-in-blocks",
        "errors.crash-without-result",
        "parse.exit0-is-error",
        "selection.flag-values-validated",
        "selection.huge-system-prompt-not-in-argv",
        "usage.vendor-cost-reported",
    ),
    "tests.mutants.harness:adds_an_extra_mcp_server": _ids("bridge.only-bridge-configured"),
    "tests.mutants.harness:treats_noise_as_fatal": _ids("parse.noise-lines-skipped"),
    "tests.mutants.harness:crash_counts_as_success": _ids("errors.crash-without-result"),
    # the retry ladders (issue 19): the fixtures go on where the reference stops early, so a
    # backend that waits for the CLI's own end is judged on its classification: a correct one
    # fails nothing, one that lets the CLI retry a 401 fails only the auth-retry check
    "tests.mutants.harness:writes_its_mcp_config_to_a_fixed_name": _ids("concurrency.shared-worktree-isolated"),
    "tests.mutants.harness:waits_for_the_clis_own_end": _ids(),
    "tests.mutants.harness:waits_out_the_auth_ladder": _ids("errors.auth-not-retried"),
    "tests.mutants.harness:ignores_the_api_key_source": _ids("env.auth-source-fail-closed"),
    "tests.mutants.harness:ignores_the_concurrency_cap": _ids("concurrency.cap-holds"),
    "tests.mutants.harness:keeps_session_files_unredacted": _ids("env.session-files-redacted"),
    "tests.mutants.harness:configures_a_silent_bridge": _ids("bridge.answers-every-request"),
    # its bridge checks a path by name, then opens it by name (a 2 ms window: the defect's caricature)
    "tests.mutants.harness:checks_then_opens_by_name": _ids("scope.swap-race-contained"),
    "tests.mutants.harness:pauses_the_clock_for_tool_calls": _ids("time.stalled-tool-call-ends-by-deadline"),
    "tests.mutants.harness:trusts_any_cli_path": _ids(
        "selection.cli-missing-typed-error",
        "selection.cli-version-unsupported",
    ),
    # the seed's deepseek mistakes (tests/mutants/deepseek.py)
    "tests.mutants.deepseek:inherits_the_host_env": _ids(
        "env.provider-keys-stripped",
        "env.nesting-vars-stripped",
        "env.host-credentials-unreachable",
    ),
    "tests.mutants.deepseek:reads_the_key_from_anthropic_api_key": _ids(
        "env.provider-keys-stripped",
        "env.host-credentials-unreachable",
    ),
    "tests.mutants.deepseek:empty_error_is_success": _ids(
        "errors.auth-blocks",
        "errors.auth-not-retried",
        "errors.not-logged-in-blocks",
        "errors.rate-limit-retryable",
        "errors.overloaded-retryable",
        "parse.exit0-is-error",
    ),
    "tests.mutants.deepseek:leaves_builtins_on": _ids("audit.only-scope-tools-offered"),
    "tests.mutants.deepseek:loads_workspace_instructions": _ids("env.planted-files-not-loaded"),
    "tests.mutants.deepseek:never_adds_the_bridge": _ids(
        "bridge.failed-load-ends-session",
        "bridge.only-bridge-configured",
        "bridge.slow-start-not-toolless",
    ),
    # gemini (built on the gemini transport, run against the fake gemini)
    "tests.mutants.gemini:leaves_builtins_on": _ids("audit.only-scope-tools-offered"),
    "tests.mutants.gemini:forgets_skip_trust": _ids(
        "parse.unknown-events-ignored",
        "parse.noise-lines-skipped",
        "parse.brace-noise-skipped",
    ),
    # env.worktree-not-cwd judges the worktree .env's own value (issue 19), not a host-env leak
    "tests.mutants.gemini:passes_the_host_env_through": _ids("env.provider-keys-stripped", "env.nesting-vars-stripped"),
    "tests.mutants.gemini:trusts_exit_zero": _ids("parse.truncated-last-line"),
    "tests.mutants.gemini:walks_up_for_gemini_md": _ids("env.planted-files-not-loaded"),
    "tests.mutants.opencode:leaves_its_builtins_on": _ids("audit.only-scope-tools-offered"),
    "tests.mutants.opencode:keeps_the_host_home": _ids("env.config-home-isolated", "env.host-credentials-unreachable"),
    "tests.mutants.opencode:reads_success_from_exit_zero": _ids("parse.truncated-last-line"),
    "tests.mutants.opencode:waits_out_its_own_retries": _ids("errors.rate-limit-retryable"),
    # zcode (offline only, fixtures from references): the seed implementation's defects
    "tests.mutants.zcode:leaves_a_huge_prompt_in_argv": _ids("selection.huge-folded-prompt-not-in-argv"),
    "tests.mutants.zcode:passes_the_host_env_through": _ids(
        "env.provider-keys-stripped",
        "env.nesting-vars-stripped",
        "env.host-credentials-unreachable",
    ),
    # the seed's blind spot: a Glob bound by its literal prefix. native_tool_use's globs have an
    # in-worktree prefix and climb out after a wildcard (an empty prefix would be path-less, and
    # the audit's path-less rule flags that whatever binds the pattern)
    "tests.mutants.zcode:audits_globs_by_their_literal_prefix": _ids(
        "audit.native-tool-use-flagged",
        "audit.declines-builtins-honestly",
    ),
    "tests.mutants.zcode:trusts_exit_zero": _ids("parse.truncated-last-line"),
    "tests.mutants.zcode:rate_limit_is_auth": _ids("errors.rate-limit-retryable"),
    # the copilot provider against the kit's mocked Copilot (kit/copilot_adapter.py)
    "tests.mutants.copilot:retries_every_401": _ids("errors.auth-not-retried"),
    # every session fails: the mock answers a model sent to an endpoint it is not served on with 400
    "tests.mutants.copilot:routes_every_model_to_chat_completions": _ids("usage.served-model-reported"),
    # the refresh after the 401 comes before any model call: the revoked login is met at the second exchange
    "tests.mutants.copilot:exchanges_the_token_per_request": _ids(
        "errors.credential-not-refetched",
        "errors.auth-not-retried",
    ),
    "tests.mutants.copilot:names_the_rejected_credential": _ids("errors.secret-free-messages"),
    # the api backend, one api_mode each (driven against the scripted server of that wire)
    "tests.mutants.api:drops_cache_breakpoints": _ids("usage.cache-breakpoints-placed"),
    "tests.mutants.api:marks_every_message_for_caching": _ids("usage.cache-breakpoints-placed"),
    "tests.mutants.api:drops_cache_tokens": _ids("usage.cache-and-reasoning-tokens-reported"),
    "tests.mutants.api:counts_cached_tokens_as_input": _ids(
        "usage.cache-and-reasoning-tokens-reported",
        "usage.counted-once-per-message",
    ),
    "tests.mutants.api:drops_reasoning_tokens": _ids("usage.cache-and-reasoning-tokens-reported"),
    "tests.mutants.api:sends_the_host_auth_token": _ids("env.session-credential-at-wire"),
    "tests.mutants.harness:runs_its_bundled_cli": _ids("selection.runs-the-given-cli"),
    # containment (conformance/test_contain.py): they skip where the machine has no sandbox
    "tests.mutants.harness:runs_unsandboxed": _ids(
        "contain.other-environ-unreadable",
        "contain.worktree-only-through-bridge",
        "contain.cli-install-unchangeable",
    ),
    "tests.mutants.harness:leaves_what_the_cli_opened_up": _ids(  # unsandboxed too, so the CLI can open them up
        "contain.nothing-world-writable-left",
        "contain.other-environ-unreadable",
        "contain.worktree-only-through-bridge",
        "contain.cli-install-unchangeable",
    ),
    "tests.mutants.harness:runs_a_copy_of_the_given_cli": _ids("selection.runs-the-given-cli"),
    # the real claude at the loopback level (MUTANT_LEVELS): fakes make no network calls
    "tests.mutants.harness:leaves_telemetry_on": _ids("contain.network-loopback-only"),
    "tests.mutants.harness:retries_the_session_on_auth": _ids("errors.auth-stops-within-5s"),
    "tests.mutants.harness:takes_the_last_calls_usage": _ids("usage.matches-wire"),
    "tests.mutants.harness:reports_the_requested_model_as_served": _ids("usage.served-model-mismatch-at-wire"),
    "tests.mutants.harness:keeps_its_private_dirs": _ids("env.no-leftovers-outside-run-dir"),
    "tests.mutants.harness:leaves_the_real_builtins_on": _ids("audit.builtins-off-at-wire", "audit.only-scope-tools-offered"),
    "tests.mutants.harness:leaves_bash_and_edit_on": _ids("audit.builtins-off-at-wire", "audit.only-scope-tools-offered"),
    "tests.mutants.harness:drops_the_real_bridges_refusals": _ids("scope.real-cli-refusals-traced", "parity.refusal-codes-match-dispatch"),
    "tests.mutants.harness:hides_the_models_builtin_calls": _ids("audit.disabled-builtin-not-executed"),
    "tests.mutants.harness:codex_kills_only_the_real_launcher": _ids("time.runaway-ends-by-wall-clock"),
    # reasoning-only Claude Code: the real claude at the loopback level (MUTANT_LEVELS)
    "tests.mutants.claude_code_reasoning:has_no_tripwire": _ids("audit.builtin-call-blocks-session"),
    "tests.mutants.claude_code_reasoning:drops_the_host_system_prompt": _ids("selection.system-prompt-delivered"),
    "tests.mutants.claude_code_reasoning:leaves_telemetry_on": _ids("contain.network-loopback-only"),
    "tests.mutants.claude_code_reasoning:passes_the_api_key_through": _ids("env.provider-keys-stripped", "env.canaries-never-reach-model"),
    "tests.mutants.claude_code_reasoning:runs_turns_outside_the_run_dir": _ids("scope.cli-reads-inside-sandbox"),
    "tests.mutants.claude_code_reasoning:drops_the_tool_results": _ids(
        "scope.loop-reaches-dispatch",
        "scope.in-tree-symlink-reads",
    ),
    # ACP (the fake ACP agent with one defect switch, through the real ACP transport)
    "tests.mutants.acp:ignores_a_rejected_permission": _ids("acp.rejected-permission-not-run"),
    "tests.mutants.acp:never_asks": _ids("acp.side-effects-asked"),
    "tests.mutants.acp:answers_cancel_but_leaves_the_tool": _ids("acp.cancel-stops-tool"),
    "tests.mutants.acp:ignores_stdin_eof": _ids("acp.exits-on-stdin-close"),
    "tests.mutants.acp:passes_its_env_to_tools": _ids("acp.host-secrets-unreachable"),
    "tests.mutants.acp:prints_logs_on_stdout": _ids("acp.stdout-only-jsonrpc"),
    "tests.mutants.acp:retries_auth_silently": _ids("acp.auth-failure-answered"),
    "tests.mutants.acp:loads_project_settings": _ids("acp.planted-settings-inert"),
}

#: Checks that skip where the machine gives no sandbox (conformance/test_contain.py): a
#: mutant cannot fail them there.
NEEDS_SANDBOX: frozenset[str] = _ids(
    "contain.other-environ-unreadable",
    "contain.worktree-only-through-bridge",
    "contain.cli-install-unchangeable",
)

#: For the CLI-based mutants (a fake CLI per session is slow): the checks each is run against,
#: all in one child run (tests/kit/test_kit_mutants.py, `--hc-cells`). A selection always holds
#: checks the mutant must pass too, so "exactly these fail" still means something; the
#: in-process mutants run the whole suite. (These are the cells the earlier per-mutant
#: `-k` selections collected, written out as check ids.)
AREAS: dict[str, tuple[str, ...]] = {
    "tests.mutants.api:retries_silently": ("events.retry-announced", "events.tool-calls-streamed", "events.usage-adds-up"),
    "tests.mutants.api:sends_over_long_requests": ("usage.over-context-never-sent", "usage.option-refused-before-request"),
    "tests.mutants.api:drops_thinking": ("usage.thinking-carried-back", "usage.cost-never-fabricated"),
    "tests.mutants.api:bills_cache_reads_as_input": ("usage.cost-from-metadata-rates", "usage.cost-never-fabricated"),
    "tests.mutants.acp:ignores_a_rejected_permission": ("acp.rejected-permission-not-run", "acp.stdout-only-jsonrpc"),
    "tests.mutants.acp:never_asks": ("acp.side-effects-asked", "acp.stdout-only-jsonrpc"),
    "tests.mutants.acp:answers_cancel_but_leaves_the_tool": ("acp.cancel-stops-tool", "acp.stdout-only-jsonrpc"),
    "tests.mutants.acp:ignores_stdin_eof": ("acp.exits-on-stdin-close", "acp.stdout-only-jsonrpc"),
    "tests.mutants.acp:passes_its_env_to_tools": ("acp.host-secrets-unreachable", "acp.stdout-only-jsonrpc"),
    "tests.mutants.acp:prints_logs_on_stdout": ("acp.stdout-only-jsonrpc", "acp.rejected-permission-not-run"),
    "tests.mutants.acp:retries_auth_silently": ("acp.auth-failure-answered", "acp.stdout-only-jsonrpc"),
    "tests.mutants.acp:loads_project_settings": ("acp.planted-settings-inert", "acp.stdout-only-jsonrpc"),
    "tests.mutants.harness:runs_unsandboxed": (
        "contain.other-environ-unreadable",
        "contain.worktree-only-through-bridge",
        "contain.cli-install-unchangeable",
        "contain.nothing-world-writable-left",
    ),
    "tests.mutants.harness:leaves_what_the_cli_opened_up": (
        "contain.other-environ-unreadable",
        "contain.worktree-only-through-bridge",
        "contain.cli-install-unchangeable",
        "contain.nothing-world-writable-left",
    ),
    "tests.mutants.harness:passes_os_environ_through": (
        "env.nesting-vars-stripped",
        "env.no-secret-in-argv",
        "env.provider-keys-stripped",
        "env.run-dir-outside-worktree",
        "env.worktree-not-cwd",
    ),
    "tests.mutants.harness:leaks_the_api_key_in_argv": (
        "env.auth-source-fail-closed",
        "env.config-home-isolated",
        "env.host-credentials-unreachable",
        "env.nesting-vars-stripped",
        "env.no-secret-in-argv",
        "env.planted-files-not-loaded",
        "env.provider-keys-stripped",
        "env.run-dir-outside-worktree",
        "env.session-credential-at-wire",
        "env.session-files-redacted",
        "env.worktree-not-cwd",
    ),
    "tests.mutants.harness:trusts_subtype_success": (
        "errors.auth-blocks",
        "errors.auth-not-retried",
        "errors.context-overflow",
        "errors.crash-without-result",
        "errors.credential-not-refetched",
        "errors.model-unavailable",
        "errors.not-logged-in-blocks",
        "errors.overloaded-retryable",
        "errors.quota-not-retryable",
        "errors.rate-limit-retryable",
        "parse.brace-noise-skipped",
        "parse.exit0-is-error",
        "parse.noise-lines-skipped",
        "parse.oversize-line-bounded",
        "parse.split-lines-identical",
        "parse.truncated-last-line",
        "parse.unknown-events-ignored",
    ),
    "tests.mutants.harness:runs_on_when_the_bridge_failed": (
        "bridge.failed-load-ends-session",
        "bridge.only-bridge-configured",
        "bridge.slow-start-not-toolless",
    ),
    "tests.mutants.cursor:runs_on_without_its_bridge": (
        "bridge.failed-load-ends-session",
        "bridge.only-bridge-configured",
        "bridge.slow-start-not-toolless",
    ),
    "tests.mutants.harness:claims_almost_nothing_and_runs_on_without_tools": (
        "audit.declines-builtins-honestly",
        "bridge.failed-load-ends-session",
        "bridge.only-bridge-configured",
        "bridge.slow-start-not-toolless",
        "selection.complete-declines-tools",
        "selection.declines-stated",
    ),
    "tests.mutants.cursor:ends_ok_on_an_unclean_audit": (
        "audit.declines-builtins-honestly",
        "audit.native-tool-use-flagged",
    ),
    "tests.mutants.harness:drops_bridge_refusals": (
        "parity.refusal-codes-match-dispatch",
        "scope.bridge-reaches-dispatch",
        "scope.dotdot-refused",
        "scope.in-tree-symlink-reads",
        "scope.refusal-visible-to-model",
        "scope.sibling-prefix-refused",
        "scope.symlink-leaf-refused",
    ),
    "tests.mutants.cursor:declines_silently": (
        "selection.declines-stated",
        "selection.huge-system-prompt-not-in-argv",
        "selection.prompt-never-a-flag",
    ),
    "tests.mutants.harness:kills_only_the_direct_child": (
        "time.abandoned-stream-no-survivors",
        "time.no-survivors-after-timeout",
    ),
    "tests.mutants.harness:codex_kills_only_the_direct_child": (
        "time.abandoned-stream-no-survivors",
        "time.no-survivors-after-timeout",
    ),
    "tests.mutants.harness:finds_escapees_by_env_marker": (
        "time.abandoned-stream-no-survivors",
        "time.cancel-ends-session",
        "time.no-survivors-after-timeout",
    ),
    "tests.mutants.harness:leaves_builtin_tools_on": ("audit.only-scope-tools-offered",),
    "tests.mutants.harness:ignores_the_cli_version": (
        "selection.batch-shim-refused",
        "selection.cli-missing-typed-error",
        "selection.cli-version-unsupported",
    ),
    "tests.mutants.harness:puts_the_prompt_in_argv": (
        "selection.huge-system-prompt-not-in-argv",
        "selection.prompt-never-a-flag",
    ),
    "tests.mutants.harness:puts_the_system_prompt_in_argv": (
        "selection.huge-system-prompt-not-in-argv",
        "selection.prompt-never-a-flag",
    ),
    "tests.mutants.harness:uses_the_users_config_home": (
        "env.config-home-isolated",
        "env.nesting-vars-stripped",
        "env.provider-keys-stripped",
    ),
    "tests.mutants.harness:keeps_the_host_home": (
        "env.config-home-isolated",
        "env.host-credentials-unreachable",
        "env.nesting-vars-stripped",
        "env.provider-keys-stripped",
    ),
    "tests.mutants.foreign:seed_style_claude": (
        "bridge.only-bridge-configured",
        "env.host-credentials-unreachable",
        "env.nesting-vars-stripped",
        "env.provider-keys-stripped",
        "env.run-dir-outside-worktree",
        "env.worktree-not-cwd",
        "errors.crash-without-result",
        "errors.not-logged-in-blocks",
        "parse.exit0-is-error",
        "selection.flag-values-validated",
        "selection.huge-system-prompt-not-in-argv",
        "usage.vendor-cost-reported",
    ),
    "tests.mutants.harness:adds_an_extra_mcp_server": (
        "bridge.failed-load-ends-session",
        "bridge.only-bridge-configured",
    ),
    "tests.mutants.harness:treats_noise_as_fatal": (
        "parse.brace-noise-skipped",
        "parse.exit0-is-error",
        "parse.noise-lines-skipped",
        "parse.oversize-line-bounded",
        "parse.split-lines-identical",
        "parse.truncated-last-line",
        "parse.unknown-events-ignored",
    ),
    "tests.mutants.harness:crash_counts_as_success": (
        "errors.auth-blocks",
        "errors.auth-not-retried",
        "errors.context-overflow",
        "errors.crash-without-result",
        "errors.credential-not-refetched",
        "errors.model-unavailable",
        "errors.network-retryable",
        "errors.not-logged-in-blocks",
        "errors.overloaded-retryable",
        "errors.quota-not-retryable",
        "errors.rate-limit-retryable",
        "errors.secret-free-messages",
    ),
    "tests.mutants.harness:writes_its_mcp_config_to_a_fixed_name": (
        "concurrency.parallel-sessions-isolated",
        "concurrency.shared-worktree-isolated",
    ),
    "tests.mutants.harness:waits_for_the_clis_own_end": (
        "errors.auth-blocks",
        "errors.auth-not-retried",
        "errors.not-logged-in-blocks",
        "errors.overloaded-retryable",
        "errors.rate-limit-retryable",
    ),
    "tests.mutants.harness:waits_out_the_auth_ladder": (
        "errors.auth-blocks",
        "errors.auth-not-retried",
        "errors.context-overflow",
        "errors.crash-without-result",
        "errors.credential-not-refetched",
        "errors.model-unavailable",
        "errors.network-retryable",
        "errors.not-logged-in-blocks",
        "errors.overloaded-retryable",
        "errors.quota-not-retryable",
        "errors.rate-limit-retryable",
        "errors.secret-free-messages",
    ),
    "tests.mutants.harness:ignores_the_api_key_source": (
        "env.auth-source-fail-closed",
        "env.nesting-vars-stripped",
        "env.provider-keys-stripped",
    ),
    "tests.mutants.harness:trusts_any_cli_path": (
        "selection.batch-shim-refused",
        "selection.cli-missing-typed-error",
        "selection.cli-version-unsupported",
        "selection.registry-builds-backend",
    ),
    "tests.mutants.opencode:leaves_its_builtins_on": ("audit.only-scope-tools-offered",),
    "tests.mutants.opencode:keeps_the_host_home": (
        "env.config-home-isolated",
        "env.host-credentials-unreachable",
        "env.nesting-vars-stripped",
        "env.provider-keys-stripped",
    ),
    "tests.mutants.opencode:reads_success_from_exit_zero": (
        "errors.crash-without-result",
        "parse.exit0-is-error",
        "parse.truncated-last-line",
    ),
    "tests.mutants.opencode:waits_out_its_own_retries": ("errors.rate-limit-retryable",),
    "tests.mutants.harness:leaves_stdin_open": ("time.stdin-not-left-open",),
    "tests.mutants.harness:takes_every_brace_line_for_an_event": (
        "parse.brace-noise-skipped",
        "parse.noise-lines-skipped",
        "parse.split-lines-identical",
        "parse.unknown-events-ignored",
    ),
    "tests.mutants.harness:holds_stdin_open_a_while": ("time.stdin-not-left-open",),
    "tests.mutants.harness:lets_the_cli_walk_for_claude_md": (
        "env.nesting-vars-stripped",
        "env.planted-files-not-loaded",
        "env.provider-keys-stripped",
        "env.run-dir-outside-worktree",
        "env.worktree-not-cwd",
    ),
    "tests.mutants.harness:leaks_the_cli_when_the_stream_is_abandoned": (
        "time.abandoned-stream-no-survivors",
        "time.cancel-ends-session",
        "time.linger-after-result",
        "time.max-turns-truncates",
        "time.no-survivors-after-timeout",
        "time.stalled-tool-call-ends-by-deadline",
        "time.stdin-not-left-open",
        "time.timeout-truncates",
    ),
    "tests.mutants.harness:ignores_the_concurrency_cap": (
        "concurrency.cap-holds",
        "concurrency.parallel-sessions-isolated",
    ),
    "tests.mutants.harness:keeps_session_files_unredacted": (
        "env.no-secret-in-argv",
        "env.run-dir-outside-worktree",
        "env.session-files-redacted",
    ),
    "tests.mutants.harness:configures_a_silent_bridge": (
        "bridge.answers-every-request",
        "bridge.failed-load-ends-session",
        "bridge.only-bridge-configured",
    ),
    "tests.mutants.harness:checks_then_opens_by_name": (
        "scope.bridge-reaches-dispatch",
        "scope.dotdot-refused",
        "scope.in-tree-symlink-reads",
        "scope.swap-race-contained",
    ),
    "tests.mutants.harness:pauses_the_clock_for_tool_calls": (
        "time.abandoned-stream-no-survivors",
        "time.no-survivors-after-timeout",
        "time.stalled-tool-call-ends-by-deadline",
        "time.timeout-truncates",
    ),
    "tests.mutants.harness:loads_the_worktree_dotenv": (
        "env.auth-source-fail-closed",
        "env.config-home-isolated",
        "env.host-credentials-unreachable",
        "env.nesting-vars-stripped",
        "env.no-secret-in-argv",
        "env.planted-files-not-loaded",
        "env.provider-keys-stripped",
        "env.run-dir-outside-worktree",
        "env.session-credential-at-wire",
        "env.session-files-redacted",
        "env.worktree-not-cwd",
    ),
    "tests.mutants.harness:forgets_bridge_calls": (
        "parity.refusal-codes-match-dispatch",
        "scope.bridge-reaches-dispatch",
        "scope.dotdot-refused",
        "scope.in-tree-symlink-reads",
        "scope.sibling-prefix-refused",
        "scope.symlink-leaf-refused",
    ),
    "tests.mutants.harness:passes_any_model_name": ("selection.flag-values-validated", "selection.prompt-never-a-flag"),
    "tests.mutants.harness:waits_out_a_lingering_cli": (
        "time.abandoned-stream-no-survivors",
        "time.cancel-ends-session",
        "time.linger-after-result",
        "time.max-turns-truncates",
        "time.no-survivors-after-timeout",
        "time.stalled-tool-call-ends-by-deadline",
        "time.stdin-not-left-open",
        "time.timeout-truncates",
    ),
    "tests.mutants.harness:drops_the_vendor_cost": (
        "usage.cost-never-fabricated",
        "usage.counted-once-per-message",
        "usage.helper-model-not-served",
        "usage.mismatch-policy-applied",
        "usage.served-model-mismatch-flagged",
        "usage.served-model-reported",
        "usage.vendor-cost-reported",
    ),
    "tests.mutants.harness:chokes_on_unknown_events": (
        "parse.brace-noise-skipped",
        "parse.exit0-is-error",
        "parse.noise-lines-skipped",
        "parse.oversize-line-bounded",
        "parse.split-lines-identical",
        "parse.truncated-last-line",
        "parse.unknown-events-ignored",
    ),
    "tests.mutants.codex:hides_its_builtins": ("audit.declines-builtins-honestly", "audit.native-tool-use-flagged"),
    "tests.mutants.codex:fails_an_unverified_model": (
        "usage.cost-never-fabricated",
        "usage.mismatch-policy-applied",
        "usage.served-model-mismatch-flagged",
        "usage.served-model-never-guessed",
        "usage.served-model-reported",
        "usage.vendor-cost-reported",
    ),
    "tests.mutants.codex:forgets_native_tool_calls": (
        "audit.declines-builtins-honestly",
        "audit.hostile-builtins-flagged",
        "audit.native-tool-use-flagged",
        "audit.only-scope-tools-offered",
    ),
    "tests.mutants.codex:audits_shells_by_the_paths_they_name": (
        "audit.declines-builtins-honestly",
        "audit.hostile-builtins-flagged",
        "audit.native-tool-use-flagged",
    ),
    "tests.mutants.codex:loads_the_project_docs": (
        "env.config-home-isolated",
        "env.planted-files-not-loaded",
        "env.run-dir-outside-worktree",
        "env.worktree-not-cwd",
    ),
    "tests.mutants.deepseek:inherits_the_host_env": (
        "env.host-credentials-unreachable",
        "env.nesting-vars-stripped",
        "env.no-secret-in-argv",
        "env.provider-keys-stripped",
        "env.run-dir-outside-worktree",
        "env.worktree-not-cwd",
    ),
    "tests.mutants.deepseek:reads_the_key_from_anthropic_api_key": (
        "env.host-credentials-unreachable",
        "env.nesting-vars-stripped",
        "env.no-secret-in-argv",
        "env.provider-keys-stripped",
        "env.run-dir-outside-worktree",
        "env.worktree-not-cwd",
    ),
    "tests.mutants.deepseek:empty_error_is_success": (
        "errors.auth-blocks",
        "errors.auth-not-retried",
        "errors.context-overflow",
        "errors.crash-without-result",
        "errors.credential-not-refetched",
        "errors.model-unavailable",
        "errors.not-logged-in-blocks",
        "errors.overloaded-retryable",
        "errors.quota-not-retryable",
        "errors.rate-limit-retryable",
        "parse.brace-noise-skipped",
        "parse.exit0-is-error",
        "parse.noise-lines-skipped",
        "parse.oversize-line-bounded",
        "parse.split-lines-identical",
        "parse.truncated-last-line",
        "parse.unknown-events-ignored",
    ),
    "tests.mutants.deepseek:leaves_builtins_on": ("audit.only-scope-tools-offered",),
    "tests.mutants.deepseek:loads_workspace_instructions": (
        "env.config-home-isolated",
        "env.planted-files-not-loaded",
        "env.run-dir-outside-worktree",
        "env.worktree-not-cwd",
    ),
    "tests.mutants.deepseek:never_adds_the_bridge": (
        "bridge.failed-load-ends-session",
        "bridge.only-bridge-configured",
        "bridge.slow-start-not-toolless",
    ),
    "tests.mutants.gemini:leaves_builtins_on": ("audit.only-scope-tools-offered",),
    "tests.mutants.gemini:forgets_skip_trust": (
        "parse.brace-noise-skipped",
        "parse.noise-lines-skipped",
        "parse.unknown-events-ignored",
    ),
    "tests.mutants.gemini:passes_the_host_env_through": (
        "env.nesting-vars-stripped",
        "env.no-secret-in-argv",
        "env.provider-keys-stripped",
        "env.run-dir-outside-worktree",
        "env.worktree-not-cwd",
    ),
    "tests.mutants.gemini:trusts_exit_zero": (
        "errors.crash-without-result",
        "parse.exit0-is-error",
        "parse.truncated-last-line",
    ),
    "tests.mutants.gemini:walks_up_for_gemini_md": (
        "env.config-home-isolated",
        "env.planted-files-not-loaded",
        "env.run-dir-outside-worktree",
        "env.worktree-not-cwd",
    ),
    "tests.mutants.zcode:leaves_a_huge_prompt_in_argv": (
        "selection.huge-folded-prompt-not-in-argv",
        "selection.huge-system-prompt-not-in-argv",
        "selection.prompt-never-a-flag",
    ),
    "tests.mutants.zcode:passes_the_host_env_through": (
        "env.config-home-isolated",
        "env.host-credentials-unreachable",
        "env.nesting-vars-stripped",
        "env.provider-keys-stripped",
        "env.run-dir-outside-worktree",
        "env.worktree-not-cwd",
    ),
    "tests.mutants.zcode:audits_globs_by_their_literal_prefix": (
        "audit.declines-builtins-honestly",
        "audit.native-tool-use-flagged",
    ),
    "tests.mutants.zcode:trusts_exit_zero": (
        "errors.crash-without-result",
        "parse.exit0-is-error",
        "parse.truncated-last-line",
    ),
    "tests.mutants.zcode:rate_limit_is_auth": (
        "errors.auth-blocks",
        "errors.auth-not-retried",
        "errors.context-overflow",
        "errors.crash-without-result",
        "errors.credential-not-refetched",
        "errors.model-unavailable",
        "errors.network-retryable",
        "errors.not-logged-in-blocks",
        "errors.overloaded-retryable",
        "errors.quota-not-retryable",
        "errors.rate-limit-retryable",
        "errors.secret-free-messages",
    ),
    "tests.mutants.copilot:retries_every_401": (
        "errors.auth-blocks",
        "errors.auth-not-retried",
        "errors.credential-not-refetched",
        "errors.secret-free-messages",
    ),
    "tests.mutants.copilot:routes_every_model_to_chat_completions": (
        "usage.cost-never-fabricated",
        "usage.served-model-reported",
    ),
    "tests.mutants.copilot:exchanges_the_token_per_request": (
        "errors.auth-blocks",
        "errors.auth-not-retried",
        "errors.credential-not-refetched",
    ),
    "tests.mutants.copilot:names_the_rejected_credential": (
        "errors.auth-blocks",
        "errors.auth-not-retried",
        "errors.secret-free-messages",
    ),
    "tests.mutants.api:drops_cache_breakpoints": (
        "selection.complete-declines-tools",
        "selection.registry-builds-backend",
        "selection.system-prompt-delivered",
        "usage.cache-and-reasoning-tokens-reported",
        "usage.cache-breakpoints-placed",
        "usage.cost-never-fabricated",
        "usage.counted-once-per-message",
        "usage.helper-model-not-served",
        "usage.mismatch-policy-applied",
        "usage.served-model-mismatch-flagged",
        "usage.served-model-reported",
        "usage.vendor-cost-reported",
    ),
    "tests.mutants.api:marks_every_message_for_caching": (
        "selection.system-prompt-delivered",
        "usage.cache-and-reasoning-tokens-reported",
        "usage.cache-breakpoints-placed",
        "usage.counted-once-per-message",
    ),
    "tests.mutants.api:drops_cache_tokens": (
        "usage.cache-and-reasoning-tokens-reported",
        "usage.cache-breakpoints-placed",
        "usage.cost-never-fabricated",
        "usage.counted-once-per-message",
        "usage.helper-model-not-served",
        "usage.mismatch-policy-applied",
        "usage.served-model-mismatch-flagged",
        "usage.served-model-reported",
        "usage.vendor-cost-reported",
    ),
    "tests.mutants.api:counts_cached_tokens_as_input": (
        "usage.cache-and-reasoning-tokens-reported",
        "usage.cache-breakpoints-placed",
        "usage.cost-never-fabricated",
        "usage.counted-once-per-message",
        "usage.helper-model-not-served",
        "usage.mismatch-policy-applied",
        "usage.served-model-mismatch-flagged",
        "usage.served-model-reported",
        "usage.vendor-cost-reported",
    ),
    "tests.mutants.api:drops_reasoning_tokens": (
        "usage.cache-and-reasoning-tokens-reported",
        "usage.cache-breakpoints-placed",
        "usage.cost-never-fabricated",
        "usage.counted-once-per-message",
        "usage.served-model-mismatch-flagged",
        "usage.served-model-reported",
        "usage.vendor-cost-reported",
    ),
    "tests.mutants.api:sends_the_host_auth_token": ("env.session-credential-at-wire",),
    "tests.mutants.harness:runs_its_bundled_cli": (
        "selection.cli-missing-typed-error",
        "selection.complete-declines-tools",
        "selection.registry-builds-backend",
        "selection.runs-the-given-cli",
    ),
    "tests.mutants.harness:runs_a_copy_of_the_given_cli": (
        "selection.cli-missing-typed-error",
        "selection.complete-declines-tools",
        "selection.registry-builds-backend",
        "selection.runs-the-given-cli",
    ),
    "tests.mutants.claude_code_reasoning:has_no_tripwire": (
        "audit.builtin-call-blocks-session",
        "audit.only-scope-tools-offered",
    ),
    "tests.mutants.claude_code_reasoning:drops_the_host_system_prompt": (
        "selection.registry-builds-backend",
        "selection.system-prompt-delivered",
    ),
    "tests.mutants.claude_code_reasoning:drops_the_tool_results": (
        "scope.dotdot-refused",
        "scope.in-tree-symlink-reads",
        "scope.loop-reaches-dispatch",
    ),
    "tests.mutants.harness:leaves_telemetry_on": ("contain.network-loopback-only", "env.provider-keys-stripped"),
    "tests.mutants.harness:retries_the_session_on_auth": ("errors.auth-stops-within-5s", "selection.registry-builds-backend"),
    "tests.mutants.harness:takes_the_last_calls_usage": ("usage.matches-wire", "selection.registry-builds-backend"),
    "tests.mutants.harness:reports_the_requested_model_as_served": ("usage.served-model-mismatch-at-wire", "selection.registry-builds-backend"),
    "tests.mutants.harness:keeps_its_private_dirs": ("env.no-leftovers-outside-run-dir", "selection.registry-builds-backend"),
    "tests.mutants.harness:leaves_the_real_builtins_on": (
        "audit.builtins-off-at-wire",
        "audit.disabled-builtin-not-executed",
        "audit.only-scope-tools-offered",
    ),
    "tests.mutants.harness:leaves_bash_and_edit_on": ("audit.builtins-off-at-wire", "audit.only-scope-tools-offered", "selection.registry-builds-backend"),
    "tests.mutants.harness:drops_the_real_bridges_refusals": (
        "parity.refusal-codes-match-dispatch",
        "scope.real-cli-refusals-traced",
        "selection.registry-builds-backend",
    ),
    "tests.mutants.harness:hides_the_models_builtin_calls": ("audit.disabled-builtin-not-executed", "selection.registry-builds-backend"),
    "tests.mutants.harness:codex_kills_only_the_real_launcher": ("selection.registry-builds-backend", "time.runaway-ends-by-wall-clock"),
    "tests.mutants.claude_code_reasoning:leaves_telemetry_on": ("contain.network-loopback-only", "selection.registry-builds-backend"),
    "tests.mutants.claude_code_reasoning:passes_the_api_key_through": ("env.canaries-never-reach-model", "env.no-secret-in-argv", "env.provider-keys-stripped"),
    "tests.mutants.claude_code_reasoning:runs_turns_outside_the_run_dir": ("env.no-leftovers-outside-run-dir", "scope.cli-reads-inside-sandbox"),
}

#: The level a CLI-based mutant runs at, where not offline: reasoning-only Claude Code has no
#: offline adapter (its column is the real claude at loopback; the test skips without the pin),
#: and some defects only the real CLI's own behaviour shows: a network call of its own (fakes
#: make none), its retries of a rejected credential, its usage and served model as the model
#: server saw them, the tools it offers on the wire and its answer to a call of one, the
#: bridge's refusals as it reports them, what it writes in the session's temp dirs, the tree it
#: leaves.
MUTANT_LEVELS: dict[str, str] = {
    "tests.mutants.claude_code_reasoning:has_no_tripwire": "loopback",
    "tests.mutants.claude_code_reasoning:drops_the_host_system_prompt": "loopback",
    "tests.mutants.claude_code_reasoning:drops_the_tool_results": "loopback",
    "tests.mutants.claude_code_reasoning:leaves_telemetry_on": "loopback",
    "tests.mutants.claude_code_reasoning:passes_the_api_key_through": "loopback",
    "tests.mutants.claude_code_reasoning:runs_turns_outside_the_run_dir": "loopback",
    "tests.mutants.harness:leaves_telemetry_on": "loopback",
    "tests.mutants.harness:retries_the_session_on_auth": "loopback",
    "tests.mutants.harness:takes_the_last_calls_usage": "loopback",
    "tests.mutants.harness:reports_the_requested_model_as_served": "loopback",
    "tests.mutants.harness:keeps_its_private_dirs": "loopback",
    "tests.mutants.harness:leaves_the_real_builtins_on": "loopback",
    "tests.mutants.harness:leaves_bash_and_edit_on": "loopback",
    "tests.mutants.harness:drops_the_real_bridges_refusals": "loopback",
    "tests.mutants.harness:hides_the_models_builtin_calls": "loopback",
    "tests.mutants.harness:codex_kills_only_the_real_launcher": "loopback",
}

#: Offline checks no known-bad backend fails, and why (the kit's honest sensitivity gaps).
#: Checks that never run offline (loopback/live only) are out of the mutants' reach by construction.
UNCAUGHT: dict[str, str] = {
    "parse.split-lines-identical": "line framing is process.py's, shared by every transport; no transport-level defect "
    "can cut lines differently (tests/contain/test_process.py pins the framer with a chunking property)",
    "parse.oversize-line-bounded": "the line bound is enforced by the shared runner before any parser sees a line; a transport cannot make it unbounded",
    "selection.batch-shim-refused": "the hazard (cmd.exe re-parsing a .cmd/.bat shim's arguments) exists only on "
    "Windows; elsewhere the check skips env-missing, so no mutant can fail it on the platforms the suite runs on",
}
