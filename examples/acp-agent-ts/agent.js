#!/usr/bin/env node
// @ts-check
// A small coding agent speaking the Agent Client Protocol on stdio, on the ACP TypeScript SDK
// (@agentclientprotocol/sdk). Its tools are the host's: the MCP servers the client names in
// session/new (harnesscheck gives its bridge). Its model speaks Anthropic Messages at
// ANTHROPIC_BASE_URL with ANTHROPIC_API_KEY. It asks the client before every tool call, honours
// a rejection, stops on session/cancel, answers an auth failure at once, gives its MCP servers
// only the env their entry names, and exits when its stdin closes.
import { Readable, Writable } from "node:stream";
import { agent, ndJsonStream, RequestError, PROTOCOL_VERSION } from "@agentclientprotocol/sdk";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const MAX_TURNS = 20;
/** sessionId -> { mcp: [{client, tools}], controller } */
const sessions = new Map();

async function connectServers(servers) {
  const out = [];
  for (const server of servers || []) {
    if (!server.command) continue; // stdio servers only
    const env = Object.fromEntries((server.env || []).map((e) => [e.name, e.value]));
    // never this process's own env (its key): the SDK's default safe set plus the entry's env
    const transport = new StdioClientTransport({ command: server.command, args: server.args || [], env, stderr: "ignore" });
    const client = new Client({ name: "example-acp-agent", version: "0.1.0" });
    await client.connect(transport);
    const { tools } = await client.listTools();
    out.push({ name: server.name, client, tools });
  }
  return out;
}

async function callModel(messages, tools, signal) {
  const base = (process.env.ANTHROPIC_BASE_URL || "").replace(/\/$/, "");
  const response = await fetch(`${base}/v1/messages`, {
    method: "POST",
    signal,
    headers: { "content-type": "application/json", "x-api-key": process.env.ANTHROPIC_API_KEY || "",
               "anthropic-version": "2023-06-01" },
    body: JSON.stringify({ model: process.env.ANTHROPIC_MODEL || "claude-sonnet-4-5", max_tokens: 4096, messages, tools }),
  });
  if (response.status === 401 || response.status === 403) throw new RequestError(-32000, "Authentication required");
  if (!response.ok) {
    throw new RequestError(-32603, `Internal error: model answered HTTP ${response.status}`, { httpStatus: response.status });
  }
  return response.json();
}

const app = agent({ name: "example-acp-agent" })
  .onRequest("initialize", () => ({
    protocolVersion: PROTOCOL_VERSION,
    agentCapabilities: { loadSession: false, mcpCapabilities: { http: false, sse: false } },
    authMethods: [],
    agentInfo: { name: "example-acp-agent", version: "0.1.0" },
  }))
  .onRequest("session/new", async ({ params }) => {
    const sessionId = `s-${sessions.size + 1}-${Date.now()}`;
    sessions.set(sessionId, { mcp: await connectServers(params.mcpServers), controller: null });
    return { sessionId };
  })
  .onNotification("session/cancel", ({ params }) => {
    sessions.get(params.sessionId)?.controller?.abort();
  })
  .onRequest("session/prompt", async ({ params, client }) => {
    const session = sessions.get(params.sessionId);
    if (!session) throw new RequestError(-32602, "unknown session");
    const controller = (session.controller = new AbortController());
    const byName = new Map();
    const tools = [];
    for (const server of session.mcp) {
      for (const tool of server.tools) {
        byName.set(tool.name, server);
        tools.push({ name: tool.name, description: tool.description || "", input_schema: tool.inputSchema });
      }
    }
    const text = params.prompt.filter((b) => b.type === "text").map((b) => b.text).join("\n");
    const messages = [{ role: "user", content: text }];
    const say = (chunk) => client.notify("session/update", { sessionId: params.sessionId,
      update: { sessionUpdate: "agent_message_chunk", content: { type: "text", text: chunk } } });
    try {
      for (let turn = 0; turn < MAX_TURNS; turn++) {
        const reply = await callModel(messages, tools, controller.signal);
        messages.push({ role: "assistant", content: reply.content });
        const calls = reply.content.filter((b) => b.type === "tool_use");
        for (const block of reply.content) if (block.type === "text" && block.text) await say(block.text);
        if (calls.length === 0) return { stopReason: "end_turn" };
        const results = [];
        for (const call of calls) {
          const toolCall = { toolCallId: call.id, title: call.name, kind: "other", status: "pending", rawInput: call.input };
          await client.notify("session/update", { sessionId: params.sessionId, update: { sessionUpdate: "tool_call", ...toolCall } });
          const permission = await client.request("session/request_permission", { sessionId: params.sessionId, toolCall,
            options: [{ optionId: "allow", name: "Allow", kind: "allow_once" }, { optionId: "reject", name: "Reject", kind: "reject_once" }] });
          if (controller.signal.aborted) return { stopReason: "cancelled" };
          const allowed = permission.outcome.outcome === "selected" && permission.outcome.optionId === "allow";
          let output = "refused by the user";
          let failed = true;
          if (allowed && byName.has(call.name)) {
            const result = await byName.get(call.name).client.callTool({ name: call.name, arguments: call.input }, undefined,
                                                                        { signal: controller.signal });
            output = (result.content || []).map((c) => (c.type === "text" ? c.text : "")).join("");
            failed = Boolean(result.isError);
          } else if (allowed) {
            output = `no such tool: ${call.name}`;
          }
          await client.notify("session/update", { sessionId: params.sessionId, update: {
            sessionUpdate: "tool_call_update", toolCallId: call.id, status: failed ? "failed" : "completed",
            content: [{ type: "content", content: { type: "text", text: output } }] } });
          results.push({ type: "tool_result", tool_use_id: call.id, content: output, is_error: failed });
        }
        messages.push({ role: "user", content: results });
      }
      return { stopReason: "max_turn_requests" };
    } catch (error) {
      if (controller.signal.aborted) return { stopReason: "cancelled" };
      throw error;
    } finally {
      session.controller = null;
    }
  });

const connection = app.connect(ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin)));
await connection.closed; // stdin closed: end the MCP servers and exit
for (const session of sessions.values()) for (const server of session.mcp) await server.client.close().catch(() => {});
process.exit(0);
