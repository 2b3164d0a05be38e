"""Loopback pieces that need no real CLI: install-clis logic, the transports' loopback
seam (config and env), scrubbing, and the drift comparison."""

from __future__ import annotations

import itertools
import json
import tomllib
from pathlib import Path

import pytest

from harnesscheck.backends.loopback_endpoint import CODEX_KEY_VAR, LoopbackEndpoint, claude_env, codex_env
from harnesscheck.loopback import install
from harnesscheck.loopback.drift import compare, field_paths
from harnesscheck.loopback.record import scrub_line

# -- install-clis ------------------------------------------------------------------------


def test_pinned_versions_come_from_the_registry():
    from harnesscheck.backends.registry import get_spec

    pinned = {c.backend: c for c in install.pinned_clis()}
    assert {"claude-code", "codex", "gemini", "opencode"} <= set(pinned)
    for backend, c in pinned.items():
        spec = get_spec(backend)
        assert (c.package, c.version, c.cli_name) == (spec.cli_package, spec.pinned_version, spec.cli_name)


def test_npm_argv_pins_exact_versions_without_scripts(tmp_path):
    argv = install.npm_argv("/usr/bin/npm", tmp_path, install.pinned_clis())
    assert argv[:4] == ["/usr/bin/npm", "install", "--prefix", str(tmp_path)]
    assert "--ignore-scripts" in argv and "--save-exact" in argv
    assert "@anthropic-ai/claude-code@2.1.332" in argv and "@openai/codex@0.171.0" in argv
    assert "@google/gemini-cli@0.61.0" in argv


def _fake_package(dest: Path, package: str, version: str, bin_name: str, script: str | None = None, body: str = "") -> None:
    pkg = dest / "node_modules" / package
    pkg.mkdir(parents=True)
    manifest = {"name": package, "version": version}
    if script is not None:
        manifest["scripts"] = {"postinstall": script}
    (pkg / "package.json").write_text(json.dumps(manifest))
    bindir = dest / "node_modules" / ".bin"
    bindir.mkdir(parents=True, exist_ok=True)
    exe = bindir / bin_name
    exe.write_text(body or f"#!/bin/sh\necho '{version} ({bin_name})'\n")
    exe.chmod(0o755)


def test_missing_detects_wrong_version_and_placeholder_binaries(tmp_path):
    clis = [install.PinnedCli("x", "xcli", "@v/x", "1.2.3"), install.PinnedCli("y", "ycli", "y", "2.0.0")]
    _fake_package(tmp_path, "@v/x", "1.2.3", "xcli")
    _fake_package(tmp_path, "y", "2.0.0", "ycli", body="#!/bin/sh\necho 'not installed' >&2\nexit 1\n")
    assert [c.backend for c in install.missing(tmp_path, clis)] == ["y"]  # placeholder prints no version
    assert install.installed_version(tmp_path, "@v/x") == "1.2.3"
    assert install.installed_version(tmp_path, "nope") is None


def test_postinstall_runs_only_a_plain_node_script(tmp_path):
    c = install.PinnedCli("x", "xcli", "x", "1.0.0")
    _fake_package(tmp_path, "x", "1.0.0", "xcli", script="node install.cjs; curl evil")
    assert install.run_postinstall(tmp_path, c, "node") == 3  # not a plain `node file`: refused
    plain = install.PinnedCli("y", "ycli", "y", "1.0.0")
    _fake_package(tmp_path, "y", "1.0.0", "ycli")
    assert install.run_postinstall(tmp_path, plain, "node") == 0  # no script: nothing to run


def test_install_is_a_no_op_when_everything_is_present(tmp_path, monkeypatch, capsys):
    clis = [install.PinnedCli("x", "xcli", "x", "1.2.3")]
    _fake_package(tmp_path, "x", "1.2.3", "xcli")
    monkeypatch.setattr(install, "pinned_clis", lambda: clis)
    monkeypatch.setattr(install.shutil, "which", lambda name: pytest.fail("npm must not run"))
    assert install.install(tmp_path) == 0
    assert "present" in capsys.readouterr().out


# -- the transports' loopback seam ---------------------------------------------------------


def test_endpoint_is_loopback_only():
    LoopbackEndpoint("http://127.0.0.1:8080")
    for bad in ("https://127.0.0.1:1", "http://10.0.0.1:80", "http://example.invalid:80"):
        with pytest.raises(ValueError):
            LoopbackEndpoint(bad)


def test_claude_seam_injects_endpoint_and_reads_no_host_credential(tmp_path):
    from harnesscheck.backends.claude_code import ClaudeCodeTransport
    from harnesscheck.backends.registry import get_spec

    ep = LoopbackEndpoint("http://127.0.0.1:9999", api_key="sk-loopback-test-0001")
    host = {"PATH": "/usr/bin", "HOME": str(tmp_path), "CLAUDE_CODE_OAUTH_TOKEN": "host-real-token-should-not-pass"}
    t = ClaudeCodeTransport(get_spec("claude-code"), parent_env=host, loopback=ep, check_version=False)
    assert t.injections["ANTHROPIC_BASE_URL"] == ep.base_url
    assert t.injections["CLAUDE_CODE_OAUTH_TOKEN"] == "sk-loopback-test-0001"
    assert t._credentials(tmp_path) == {}  # the host token is never read in loopback mode
    assert claude_env(ep)["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"


def test_codex_seam_writes_a_loopback_provider_at_top_level(tmp_path):
    from harnesscheck.backends._harness import new_session_context
    from harnesscheck.backends.codex import CodexTransport
    from harnesscheck.backends.registry import get_spec
    from harnesscheck.core.contracts import AgentSessionRequest
    from harnesscheck.core.scope import ToolScope

    root = tmp_path / "work"
    root.mkdir()
    ep = LoopbackEndpoint("http://127.0.0.1:9999")
    t = CodexTransport(get_spec("codex"), parent_env={"PATH": "/usr/bin", "HOME": str(tmp_path)}, loopback=ep)
    req = AgentSessionRequest(prompt="x", scope=ToolScope(name="t", root=root, read_only=True), run_dir=tmp_path / "run")
    ctx = new_session_context(req, "codex")
    inv = t.invocation(ctx, req, Path("/usr/bin/codex"), tool_less=False)
    config = tomllib.loads((Path(inv.injections["CODEX_HOME"]) / "config.toml").read_text())
    provider = config["model_providers"][config["model_provider"]]
    assert provider["base_url"] == "http://127.0.0.1:9999/v1" and provider["wire_api"] == "responses"
    assert provider["env_key"] == CODEX_KEY_VAR and provider["supports_websockets"] is False
    assert inv.injections[CODEX_KEY_VAR] == codex_env(ep)[CODEX_KEY_VAR]
    assert config["features"]["shell_tool"] is False and config["web_search"] == "disabled"
    assert list(config["mcp_servers"]) == ["bridge"]
    assert not (Path(inv.injections["CODEX_HOME"]) / "auth.json").exists()


# -- scrubbing and drift -------------------------------------------------------------------


def test_scrub_replaces_paths_port_and_secrets():
    line = json.dumps({"cwd": "/tmp/abc/run/cwd", "x": "/tmp/abc/other", "u": "http://127.0.0.1:43817/v1", "k": "sk-loopback-dummy-0000"})
    out = scrub_line(line, [("/tmp/abc/run/cwd", "{{cwd}}"), ("/tmp/abc", "/tmp/harnesscheck-run")])
    assert "/tmp/abc" not in out and "{{cwd}}" in out and "/tmp/harnesscheck-run/other" in out
    assert "127.0.0.1:PORT" in out and "43817" not in out
    assert "sk-loopback-dummy-0000" not in out


def _fx(*events, version="1.0.0"):
    return {"provenance": {"cli_version": version}, "steps": [{"emit": e} for e in events] + [{"exit": 0}]}


def test_drift_ignores_values_and_reports_shape_changes():
    a = _fx({"type": "result", "subtype": "success", "usage": {"input_tokens": 1}, "modelUsage": {"m1": {"x": 1}}})
    same = _fx({"type": "result", "subtype": "success", "usage": {"input_tokens": 99}, "modelUsage": {"other": {"y": 2}}})
    assert not compare("claude", "s", a, same).changed
    changed = _fx(
        {"type": "result", "subtype": "success", "usage": {"input_tokens": 1, "new_field": 0}},
        {"type": "system", "subtype": "api_retry"},
        version="1.1.0",
    )
    d = compare("claude", "s", a, changed)
    assert d.changed and d.kinds_added == ["system/api_retry"]
    assert d.fields_added == {"result/success": ["usage.new_field"]}
    assert d.fields_removed == {"result/success": ["modelUsage", "modelUsage{}"]}
    assert "1.0.0 -> 1.1.0" in d.lines()[0]


def test_field_paths_treat_list_items_alike_and_codex_items_by_type():
    from harnesscheck.loopback.drift import event_kind

    assert field_paths({"a": [{"b": 1}, {"c": 2}]}) == {"a", "a[].b", "a[].c"}
    assert event_kind({"type": "item.completed", "item": {"type": "agent_message"}}) == "item.completed/agent_message"


def test_a_claude_mcp_server_of_any_name_is_scripted_and_read_back():
    """A foreign backend names its MCP server itself (issue 19): the scripted model calls the
    scope tool under the name the CLI offered, and the offered names map back to scope names."""
    from harnesscheck.loopback.adapter import wire_to_scope_name
    from harnesscheck.loopback.scenario import ToolCall
    from harnesscheck.loopback.wire import ANTHROPIC, resolve_wire_name

    offered = ["mcp__workspace__list_dir", "mcp__workspace__read_file"]
    assert resolve_wire_name(ToolCall("read_file", {}), offered, ANTHROPIC) == ("mcp__workspace__read_file", None)
    # harnesscheck's own name wins when both are offered; nothing offered: claude's form for `bridge`
    both = ["mcp__other__read_file", "mcp__bridge__read_file"]
    assert resolve_wire_name(ToolCall("read_file", {}), both, ANTHROPIC) == ("mcp__bridge__read_file", None)
    assert resolve_wire_name(ToolCall("read_file", {}), ["Bash"], ANTHROPIC) == ("mcp__bridge__read_file", None)
    assert resolve_wire_name(ToolCall("grep", {}), offered, ANTHROPIC) == ("mcp__bridge__grep", None)
    assert wire_to_scope_name("mcp__workspace__read_file") == "read_file"
    assert wire_to_scope_name("mcp__my-tools__write_file") == "write_file"
    assert wire_to_scope_name("mcp__bridge__grep") == "grep"
    assert wire_to_scope_name("Bash") == "Bash"
    assert wire_to_scope_name("mcp__") == "mcp__"


def test_loopback_refusals_are_read_from_the_wire_for_any_claude_backend():
    """At loopback the model's side is the server's: every error tool result a claude CLI sent
    back counts as a refusal the model saw (once per call, named by its tool_use), whether or
    not the backend's outcome lists it (a foreign backend lists none)."""
    from types import SimpleNamespace

    from harnesscheck.core.contracts import Kind, ProviderSpec
    from harnesscheck.kit.loopback_adapter import LoopbackAdapter

    use = {
        "role": "assistant",
        "content": [
            {"type": "tool_use", "id": "t1", "name": "mcp__workspace__read_file", "input": {}},
            {"type": "tool_use", "id": "t2", "name": "mcp__workspace__list_dir", "input": {}},
        ],
    }
    results = {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "t1", "is_error": True, "content": [{"type": "text", "text": "outside the root"}]},
            {"type": "tool_result", "tool_use_id": "t2", "content": "a\nb"},
        ],
    }
    first = json.dumps({"messages": [{"role": "user", "content": "go"}, use, results]})
    again = json.dumps({"messages": [{"role": "user", "content": "go"}, use, results, {"role": "assistant", "content": "ok"}]})
    run = SimpleNamespace(requests=[{"body": "not json"}, {"body": first}, {"body": again}])
    # a third party's backend of the claude CLI: the claude-code kit profile reads its wire
    foreign = ProviderSpec(id="foreign-claude", kind=Kind.harness, label="x", factory="nowhere:Nothing", cli_name="claude")
    claude = SimpleNamespace(spec=foreign)
    assert LoopbackAdapter.tool_errors(claude, run) == [("read_file", "outside the root")]
    assert LoopbackAdapter.tool_errors(claude, SimpleNamespace(requests=[])) == []


def _probing_adapter(answer_for):
    """A stand-in LoopbackAdapter whose sessions answer the called tool with answer_for(name):
    a list of tool-result lists, one per model request the CLI sent."""
    from types import SimpleNamespace

    from harnesscheck.kit.loopback_adapter import LoopbackAdapter

    def run(*_args, tool_calls, **_kwargs):
        turns = [SimpleNamespace(tool_results=list(r)) for r in answer_for(tool_calls[0].name)]
        return SimpleNamespace(loopback_requests=turns, requests=[{"body": "no canary here"}])

    adapter = SimpleNamespace(run=run, spec=SimpleNamespace(id=f"probe-{next(_PROBES)}"), level="loopback")
    adapter.unknown_tool_answer = lambda ws: LoopbackAdapter.unknown_tool_answer(adapter, ws)
    adapter.error_answer_to = lambda name, ws: LoopbackAdapter.error_answer_to(adapter, name, ws)
    return lambda *names: LoopbackAdapter.refused_when_called(adapter, list(names), SimpleNamespace(canary="CANARY-1", outside_unchanged=lambda: True))


_PROBES = itertools.count()


def _no_such_tool(name: str) -> dict:
    return {"id": "t1", "is_error": True, "text": f"<tool_use_error>Error: No such tool available: {name}</tool_use_error>"}


def test_an_offered_tool_is_judged_refused_whatever_request_of_the_clis_own_came_first():
    """The probe of an offered tool reads the CLI's answer from the first request that carries
    a tool result: claude-agent-acp sends a tool-less request of its own beside the first
    turn, sometimes before it and sometimes after, and its refusal ("No such tool available")
    was read from the wrong request when that one came second (a false fail in most runs)."""
    executed = {"id": "t1", "is_error": False, "text": "done"}
    for order in ([[], [_no_such_tool("X")]], [[], [], [_no_such_tool("X")]], [[], [_no_such_tool("X")], [_no_such_tool("X")]]):
        probe = _probing_adapter(lambda name, order=order: [[_no_such_tool(name)] if r else r for r in order])
        assert probe("X") == {"X": _no_such_tool("X")["text"]}, order
    assert _probing_adapter(lambda name: [[], [], [executed] if name == "X" else [_no_such_tool(name)]])("X") == {}, "an executed call is never a refusal"
    assert _probing_adapter(lambda name: [[], []] if name == "X" else [[_no_such_tool(name)]])("X") == {}, "no answer is never a refusal"


def test_an_error_is_a_refusal_only_when_it_is_the_answer_to_a_tool_that_does_not_exist():
    """An offered tool that is on answers an empty input with an error too (claude's Bash: an
    input validation error): only the answer the backend gives a tool that does not exist,
    the name aside, is a refusal. A backend that answers an unknown tool without an error
    gives nothing to compare with: nothing it offers counts as refused."""
    invalid = {"id": "t1", "is_error": True, "text": "<tool_use_error>InputValidationError: Bash failed: command is required</tool_use_error>"}
    probe = _probing_adapter(lambda name: [[invalid]] if name == "Bash" else [[_no_such_tool(name)]])
    assert probe("DeferredToolPlaceholder", "Bash", "Later") == {"DeferredToolPlaceholder": _no_such_tool("DeferredToolPlaceholder")["text"]}
    assert probe("Bash") == {}
    quiet = {"id": "t1", "is_error": False, "text": "no such tool"}
    silent = _probing_adapter(lambda name: [[quiet]] if name.startswith("hc_no_such_tool_") else [[_no_such_tool(name)]])
    assert silent("DeferredToolPlaceholder") == {}
    assert _probing_adapter(lambda name: [[_no_such_tool(name)]])() == {}, "nothing to probe, no session"
    error = _probing_adapter(lambda name: [[_no_such_tool(name) | {"text": f"Error: no tool {name} in Error"}]])
    assert error("Error") == {"Error": "Error: no tool Error in Error"}, "a name that is also a word of the wording"


def test_a_probe_of_an_unknown_tool_that_got_no_answer_is_asked_again():
    """The answer to a tool that does not exist is kept for the column, but a probe that got no
    answer at all (no tool result reached the model server: a slow start-up, a crash) is not: one
    bad session never decides the later cells of the process."""
    sessions = []

    def answers(name):
        sessions.append(name)
        if name.startswith("hc_no_such_tool_") and len(sessions) == 1:
            return [[]]
        return [[_no_such_tool(name)]]

    probe = _probing_adapter(answers)
    assert probe("DeferredToolPlaceholder") == {}, "no answer to compare with"
    assert probe("DeferredToolPlaceholder") == {"DeferredToolPlaceholder": _no_such_tool("DeferredToolPlaceholder")["text"]}
    assert probe("DeferredToolPlaceholder") == {"DeferredToolPlaceholder": _no_such_tool("DeferredToolPlaceholder")["text"]}
    assert [n.startswith("hc_no_such_tool_") for n in sessions] == [True, True, False, False], "asked again once, then kept"


# -- the descendant watcher --------------------------------------------------------------


def test_the_watcher_reads_a_child_again_once_it_has_execd(tmp_path):
    """A child seen between its fork and its exec shows its parent's argv and env; the watcher
    reads it again once it has exec'd (the CI flake of session 17: the sandbox test's `sleep`
    was recorded as the shell that forked it) and keeps the earlier image as evidence too."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from harnesscheck.loopback.adapter import DescendantWatcher

    parent = subprocess.Popen(
        [sys.executable, "-c", "import os, time\nif os.fork() == 0:\n    time.sleep(1.0)\n    os.execv('/bin/sleep', ['sleep', '30'])\nos.wait()\n"],
        start_new_session=True,
    )
    record = tmp_path / "cli.record.jsonl"
    record.write_text(json.dumps({"pid": parent.pid, "argv": ["cli", "--task"]}) + "\n")
    watcher = DescendantWatcher(record, interval_s=0.05).start()
    try:
        end = time.monotonic() + 30  # an upper bound, not a timing: the loop ends at the first sight of the exec
        while time.monotonic() < end and not any(c["argv"][:1] == ["sleep"] for c in dict(watcher.seen).values()):
            time.sleep(0.05)
    finally:
        seen = watcher.stop()
        os.killpg(parent.pid, signal.SIGKILL)
        parent.wait()
    assert [c["argv"] for c in seen if c["argv"][:1] == ["sleep"]] == [["sleep", "30"]], [c["argv"] for c in seen]
    assert len({c["pid"] for c in seen}) == 1, "one process: its images, the one before its exec kept too"


def test_an_acp_agent_that_runs_a_clis_pin_installs_it_under_its_own_id():
    """`install-clis --backend acp-opencode` installs opencode's pin (with its plugin pre-fill,
    which the acp-opencode profile links into the agent's HOME), not "no npm CLI"."""
    [pin] = install.wanted_clis("acp-opencode")
    assert (pin.backend, pin.cli_name) == ("acp-opencode", "opencode")
    assert (pin.package, pin.version) == next((c.package, c.version) for c in install.pinned_clis() if c.backend == "opencode")
    assert install.runtime_deps(pin.cli_name) is not None
    assert install.wanted_clis("acp-no-such-agent") == []


def test_another_release_for_an_acp_agent_is_refused_with_the_way_that_works(tmp_path, capsys):
    """A shipped ACP profile's command names its pin's path: `--version X` for it would install a
    release nothing runs, so install-clis refuses before any install and names a profile of one's own."""
    pin = install.wanted_clis("acp-opencode")[0].version
    assert install.install(tmp_path, backend="acp-opencode", version="0.0.1") == 2
    err = capsys.readouterr().err
    assert f"opencode-ai@{pin}" in err and "acp:<file>.toml" in err
    assert not any(tmp_path.iterdir()), "nothing was installed"
    assert install.install(tmp_path, backend="acp-opencode", version="latest") == 2  # refused before the registry is asked
    assert install.profile_pinned_release("acp-opencode", pin) is None  # the pin itself is what it runs
    assert install.profile_pinned_release("opencode", "0.0.1") is None  # a CLI's releases sit side by side


# -- network calls seen with strace (contain.network-loopback-only) -----------------------

STRACE_LINES = r"""23    sendto(10, "\0 \1\0\0\1\0\0\0\0\0\0\2ab\7chatgpt\3com\0\0\1\0\1", 32, MSG_NOSIGNAL, {sa_family=AF_INET, sin_port=htons(53), sin_addr=inet_addr("10.255.255.53")}, 16) = 32
7     sendmmsg(9, [{msg_hdr={msg_name=NULL, msg_namelen=0, msg_iov=[{iov_base="\310]\1\0\0\1\0\0\0\0\0\0\3api\7example\3com\0\0\1\0\1", iov_len=35}], msg_iovlen=1}, msg_len=35}], 2, MSG_NOSIGNAL) = 2
7     connect(9, {sa_family=AF_INET, sin_port=htons(41000), sin_addr=inet_addr("127.0.0.1")}, 16) = -1 EINPROGRESS (Operation now in progress)
7     connect(9, {sa_family=AF_INET, sin_port=htons(53), sin_addr=inet_addr("127.0.0.53")}, 16) = 0
1     connect(3, {sa_family=AF_INET6, sin6_port=htons(443), sin6_flowinfo=htonl(0), inet_pton(AF_INET6, "2001:db8::1", &sin6_addr), sin6_scope_id=0}, 28) = -1 ENETUNREACH (Network is unreachable)
1     connect(3, {sa_family=AF_INET6, sin6_port=htons(8080), sin6_flowinfo=htonl(0), inet_pton(AF_INET6, "::ffff:127.0.0.1", &sin6_addr), sin6_scope_id=0}, 28) = 0
1     connect(3, {sa_family=AF_INET6, sin6_port=htons(8080), sin6_flowinfo=htonl(0), inet_pton(AF_INET6, "::1", &sin6_addr), sin6_scope_id=0}, 28) = 0
1     connect(3, {sa_family=AF_UNIX, sun_path="/run/x"}, 110) = 0
1     sendto(5, "POST /v1/messages HTTP/1.1\r\nhos"..., 400, MSG_NOSIGNAL, NULL, 0) = 400
1     sendto(10, [{nlmsg_len=20, nlmsg_type=RTM_GETADDR, nlmsg_flags=NLM_F_REQUEST|NLM_F_DUMP, nlmsg_seq=1, nlmsg_pid=0}, {ifa_family=AF_UNSPEC, ...}], 20, 0, {sa_family=AF_NETLINK, nl_pid=0, nl_groups=00000000}, 12) = 20
1     openat(AT_FDCWD, "/etc/hosts", O_RDONLY|O_CLOEXEC) = 3
"""  # noqa: E501  (strace's lines as it prints them)


def test_network_calls_are_read_and_judged_by_address_and_lookup(tmp_path):
    """Every connect or send that names an IPv4/IPv6 address is a call (attempts count); a DNS
    question in a buffer is a lookup by name; unix and netlink sockets and plain writes are not
    network calls. Outside: any address but loopback (IPv4-mapped included), and port 53 anywhere."""
    from harnesscheck.loopback.adapter import outside_loopback, read_network

    log = tmp_path / "strace.log"
    log.write_text(STRACE_LINES)
    calls = read_network(log)
    assert [c["lookup"] for c in calls if "lookup" in c] == ["ab.chatgpt.com", "api.example.com"]
    judged = [(c["address"], c["port"], outside_loopback(c)) for c in calls if "address" in c]
    assert judged == [
        ("10.255.255.53", 53, True),
        ("127.0.0.1", 41000, False),
        ("127.0.0.53", 53, True),  # a local stub resolver asks the network in turn
        ("2001:db8::1", 443, True),
        ("::ffff:127.0.0.1", 8080, False),
        ("::1", 8080, False),
    ]
    assert read_network(tmp_path / "absent.log") == []


def test_a_dns_question_is_told_from_other_buffers():
    from harnesscheck.loopback.adapter import dns_question

    assert dns_question(r"\0 \1\0\0\1\0\0\0\0\0\0\3api\7example\3com\0\0\1\0\1") == "api.example.com"
    assert dns_question(r"\0 \1\0\0\1\0\0\0\0\0\0\20averyveryveryl") == "averyveryveryl..."  # cut by strace
    assert dns_question(r"\0 \201\200\0\1\0\1\0\0\0\0\3api\7example\3com\0") is None  # an answer, not a query
    assert dns_question("POST /v1/messages HTTP/1.1") is None
    assert dns_question(r"{\"jsonrpc\":\"2.0\",\"id\":1}") is None
    assert dns_question("\\") is None
    assert dns_question(r"\N{x}\q") is None  # not strace's escapes: no query, no warning


def test_the_wrappers_strace_records_network_calls_and_opens(tmp_path):
    """Through the loopback wrapper under strace, a process's UDP connect to a documentation
    address (no packet leaves: a UDP connect only sets the destination) and a DNS-shaped
    datagram to its own socket on 127.0.0.1 are read back, with the files it opened."""
    import shutil
    import subprocess
    import sys

    from harnesscheck.loopback.adapter import STRACE_LOG, outside_loopback, read_network, read_opens, write_wrapper

    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("strace is not installed (apt-get install strace)")
    real = tmp_path / "real" / "cli"
    real.parent.mkdir()
    real.write_text(
        f"#!{sys.executable} -I\n"
        "import socket\n"
        "u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "try:\n    u.connect(('192.0.2.1', 9))\nexcept OSError:\n    pass\n"
        "r = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "r.bind(('127.0.0.1', 0))\n"
        "q = b'\\x12\\x34\\x01\\x00\\x00\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x07example\\x03org\\x00\\x00\\x01\\x00\\x01'\n"
        "socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(q, r.getsockname())\n"
        "open(__file__).close()\n"
    )
    real.chmod(0o755)
    wrapper, _record = write_wrapper(tmp_path / "bin", real, "cli", strace=strace)
    subprocess.run([str(wrapper)], check=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    log = wrapper.parent / STRACE_LOG
    calls = read_network(log)
    outside = {(c["address"], c["port"]) for c in calls if "address" in c and outside_loopback(c)}
    assert outside == {("192.0.2.1", 9)}
    assert any(c.get("address") == "127.0.0.1" for c in calls)
    assert [c["lookup"] for c in calls if "lookup" in c] == ["example.org"]
    assert str(real) in {o["path"] for o in read_opens(log)}


def test_the_wrapper_gives_the_cli_the_short_session_env_and_records_the_backends(tmp_path):
    """The CLI the wrapper execs runs with SHORT_SESSION_ENV on top of the env it was started
    with (JavaScriptCore's top tier off: doc/performance.md); the record holds the env the
    backend gave, without it, so no env check takes the kit's tuning for the backend's."""
    import subprocess
    import sys

    from harnesscheck.loopback.adapter import SHORT_SESSION_ENV, read_records, write_wrapper

    assert SHORT_SESSION_ENV == {"JSC_useFTLJIT": "0"}
    seen = tmp_path / "seen.json"
    real = tmp_path / "real" / "cli"
    real.parent.mkdir()
    real.write_text(f"#!{sys.executable} -I\nimport json, os\nopen({str(seen)!r}, 'w').write(json.dumps(dict(os.environ)))\n")
    real.chmod(0o755)
    wrapper, record = write_wrapper(tmp_path / "bin", real, "cli")
    subprocess.run([str(wrapper), "--task"], check=True, timeout=60, env={"PATH": "/usr/bin:/bin", "GIVEN": "1"})
    child_env = json.loads(seen.read_text())
    assert child_env["GIVEN"] == "1" and child_env["JSC_useFTLJIT"] == "0"
    (rec,) = read_records(record)
    assert rec["argv"][1:] == ["--task"]
    assert rec["env"].get("GIVEN") == "1" and "JSC_useFTLJIT" not in rec["env"]
