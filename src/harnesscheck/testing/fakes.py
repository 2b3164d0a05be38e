"""Install a fake vendor CLI for one test: a wrapper executable, its sidecar and its record file.

The env policy strips unknown variables from every child, so a fake cannot be told its
scenario through the environment; it reads `<its path>.scenario.json` instead
(fake_clis/_fakecli.py documents the scenario format). See doc/SPEC-fakecli.md.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from harnesscheck.core.paths import fake_clis_dir, fixtures_dir

#: fake executable name -> fixtures/ sub-directory
FIXTURE_DIRS = {
    "claude": "claude",
    "codex": "codex",
    "cursor-agent": "cursor",
    "deepseek": "deepseek",
    "gemini": "gemini",
    "opencode": "opencode",
    "zcode": "zcode",
}


@dataclass(frozen=True)
class FakeCli:
    """A per-test fake CLI: run `path`; read what it saw with `records()`."""

    path: Path
    record_path: Path
    scenario_path: Path

    def records(self) -> list[dict]:
        """One dict per invocation (argv, env, cwd, stdin_type, stdin, mcp_configs, grandchildren,
        mcp_server_pids: the MCP servers the fake started, as the real CLI starts them; and
        stdin_eof_mono: when stdin reached EOF, None if it never did)."""
        if not self.record_path.is_file():
            return []
        invocations: list[dict] = []
        by_pid: dict[int, dict] = {}
        for line in self.record_path.read_text(encoding="utf-8").split("\n"):  # JSONL: "\n" only
            if not line.strip():
                continue
            rec = json.loads(line)
            if rec.get("kind") == "invocation":
                rec["grandchildren"] = []
                rec["mcp_server_pids"] = []
                rec.setdefault("stdin_eof_mono", None)
                invocations.append(rec)
                by_pid[rec["pid"]] = rec
            elif rec.get("kind") == "mcp_server" and rec.get("pid") in by_pid:
                by_pid[rec["pid"]]["mcp_server_pids"].append(rec["child_pid"])
            elif rec.get("kind") == "stdin_eof" and rec.get("pid") in by_pid:
                by_pid[rec["pid"]]["stdin_eof_mono"] = rec.get("mono")
            elif rec.get("kind") == "spawn" and rec.get("pid") in by_pid:
                by_pid[rec["pid"]]["grandchildren"].append({"pid": rec["child_pid"], "setsid": rec.get("setsid", False)})
        return [_host_pids(rec) for rec in invocations]

    def last(self) -> dict:
        """The most recent invocation record (AssertionError if the fake never ran)."""
        recs = self.records()
        assert recs, f"fake {self.path.name} was never run (no records in {self.record_path})"
        return recs[-1]


def _host_pids(rec: dict) -> dict:
    """A sandboxed fake records the pids of its own PID namespace (`pidns`): they are given
    as the host sees them (sandbox.host_pid), so a survivor check looks at the right process."""
    pidns = rec.get("pidns") or ""
    if not pidns:
        return rec
    from harnesscheck.contain.sandbox import host_pid, own_pidns

    if pidns == own_pidns():
        return rec
    born = rec.get("pidns_born")  # the namespace, not a later one with its number (sandbox.pidns_born)
    rec["ns_pid"] = rec["pid"]  # as the record file's other lines name it
    rec["pid"] = host_pid(int(rec["pid"]), pidns, born)
    rec["grandchildren"] = [{**g, "pid": host_pid(int(g["pid"]), pidns, born)} for g in rec["grandchildren"]]
    rec["mcp_server_pids"] = [host_pid(int(p), pidns, born) for p in rec["mcp_server_pids"]]
    return rec


def fixture_path(cli_name: str, scenario: str) -> Path:
    """fixtures/<cli>/<scenario>.json for a fake executable name (claude, codex, cursor-agent)."""
    return fixtures_dir() / FIXTURE_DIRS.get(cli_name, cli_name) / f"{scenario}.json"


def load_fixture(cli_name: str, scenario: str) -> dict:
    return json.loads(fixture_path(cli_name, scenario).read_text(encoding="utf-8"))


#: In a fixture's steps: the session's scope root, which a fake cannot know (the kit fills it in).
WORKTREE_PLACEHOLDER = "{{worktree}}"


def with_worktree(scenario: dict, root: Path | str) -> dict:
    """`scenario` with `{{worktree}}` in its steps replaced by `root` (a built-in call the model
    aims at the worktree names it; doc/SPEC-fakecli.md)."""
    text = json.dumps(scenario.get("steps", []))
    if WORKTREE_PLACEHOLDER not in text:
        return scenario
    filled = json.dumps(str(root))[1:-1]  # as a JSON string's body
    return {**scenario, "steps": json.loads(text.replace(WORKTREE_PLACEHOLDER, filled))}


def fake_plugin_deps(dest_dir: Path, version: str) -> Path:
    """Beside a fake `opencode`, the pre-filled plugin dir `install-clis` writes beside the
    real one (backends/opencode/__init__.py PLUGIN_DEPS_DIR): manifest, lock and the plugin package
    at the CLI's version (its manifest only: the fake loads no plugin)."""
    from harnesscheck.backends.opencode import PLUGIN_DEPS_DIR, PLUGIN_PACKAGE

    root = Path(dest_dir) / PLUGIN_DEPS_DIR
    pkg = root / "node_modules" / PLUGIN_PACKAGE
    pkg.mkdir(parents=True, exist_ok=True)
    deps = {PLUGIN_PACKAGE: version}
    (root / "package.json").write_text(json.dumps({"dependencies": deps}), encoding="utf-8")
    (root / "package-lock.json").write_text(
        json.dumps({"lockfileVersion": 3, "packages": {"": {"dependencies": deps}, f"node_modules/{PLUGIN_PACKAGE}": {"version": version}}}), encoding="utf-8"
    )
    (pkg / "package.json").write_text(json.dumps({"name": PLUGIN_PACKAGE, "version": version}), encoding="utf-8")
    return root


def install_fake_cli(cli_name: str, scenario: Path | dict | str, dest_dir: Path) -> FakeCli:
    """Create dest_dir/<cli_name> (a wrapper running the fake engine) and its sidecar.

    `scenario` is a scenario file, a scenario dict, or a canonical fixture name
    (`"success"` -> fixtures/<cli>/success.json).
    """
    engine_dir = fake_clis_dir()
    if not (engine_dir / "_fakecli.py").is_file():
        raise FileNotFoundError(f"fake CLI engine not found in {engine_dir}")
    dest_dir = Path(dest_dir).resolve()
    dest_dir.mkdir(parents=True, exist_ok=True)
    if isinstance(scenario, dict):
        scenario_path = dest_dir / f"{cli_name}.scenario-data.json"
        scenario_path.write_text(json.dumps(scenario), encoding="utf-8")  # C encoder: indent would take the pure-Python one
    elif isinstance(scenario, str) and not os.sep in scenario and not scenario.endswith(".json"):
        scenario_path = fixture_path(cli_name, scenario)
    else:
        scenario_path = Path(scenario).resolve()
    if not scenario_path.is_file():
        raise FileNotFoundError(f"scenario not found: {scenario_path}")
    wrapper = dest_dir / cli_name
    record = dest_dir / f"{cli_name}.record.jsonl"
    wrapper.write_text(
        f"#!{sys.executable} -IS\n"  # isolated, no site: the engine is stdlib only and starts faster
        f'"""Per-test fake {cli_name}: scenario and record path in {wrapper.name}.scenario.json."""\n'
        "import sys\n"
        f"sys.path.insert(0, {str(engine_dir)!r})\n"
        "import _fakecli\n"
        f"sys.exit(_fakecli.main({cli_name!r}))\n",
        encoding="utf-8",
    )
    wrapper.chmod(0o755)
    if cli_name == "opencode":
        data = scenario if isinstance(scenario, dict) else json.loads(scenario_path.read_text(encoding="utf-8"))
        fake_plugin_deps(dest_dir, str(data.get("version") or "1.18.33"))
    Path(str(wrapper) + ".scenario.json").write_text(json.dumps({"scenario": str(scenario_path), "record": str(record)}), encoding="utf-8")
    return FakeCli(path=wrapper, record_path=record, scenario_path=scenario_path)
