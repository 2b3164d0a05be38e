// The official Codex SDK (@openai/codex-sdk, TypeScript) doing bench_vs_sdk.py's turn: one
// thread.run() over the same codex binary and scripted loopback server. The SDK has no
// in-process tools: the host's tool is an MCP server in CODEX_HOME/config.toml (the same
// minimal server the floor uses), with the loopback provider there too.
//
//   node bench/_sdk_codex.mjs CODEX CODEX_HOME HOME CWD
//
// Installed in the bench's own directory (bench/.node-sdk: `npm install @openai/codex-sdk`),
// never the project's. Prints one JSON line: {"in_host_s": run() start -> end, "ok": ...}.
const tStart = performance.now();
const { Codex } = await import(new URL("./.node-sdk/node_modules/@openai/codex-sdk/dist/index.js", import.meta.url));
const [codexPath, codexHome, home, cwd] = process.argv.slice(2);
const codex = new Codex({
  codexPathOverride: codexPath,
  env: { PATH: process.env.PATH, HOME: home, CODEX_HOME: codexHome, HARNESSCHECK_LOOPBACK_KEY: "sk-loopback-dummy-0000" },
});
const t0 = performance.now();
const thread = codex.startThread({ sandboxMode: "read-only", skipGitRepoCheck: true, workingDirectory: cwd, approvalPolicy: "never" });
const turn = await thread.run("Say hello.");
console.log(JSON.stringify({ in_host_s: (performance.now() - t0) / 1000, ok: !!turn.finalResponse, text: String(turn.finalResponse).slice(0, 80), import_s: (t0 - tStart) / 1000 }));
