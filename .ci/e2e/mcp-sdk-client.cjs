// A third-party MCP client for `rein mcp serve`'s tests: the official TypeScript SDK's client
// (@modelcontextprotocol/sdk), installed by .ci/peers-mcp.sh into the directory REIN_MCP_SDK
// names. It lists the tools, calls them and prints one JSON object with what it saw.
//
// Usage: node mcp-sdk-client.cjs stdio APPROVE COMMAND ARGS...
//        node mcp-sdk-client.cjs http APPROVE URL TOKEN
// APPROVE (`yes` or `no`): what it answers to an approval (an elicitation); `none` declares no
// elicitation capability at all. The calls: read_file a.txt, read_file .env, delete_file a.txt;
// or, when the server serves one tool `agent` (`rein mcp serve --agent`), the prompt
// "delete notes.txt".
"use strict";
const { createRequire } = require("node:module");
const sdkDir = process.env.REIN_MCP_SDK;
if (!sdkDir) {
  console.error("REIN_MCP_SDK is not set");
  process.exit(2);
}
const sdk = createRequire(sdkDir.replace(/\/?$/, "/"));
const { Client } = sdk("@modelcontextprotocol/sdk/client/index.js");
const { StdioClientTransport } = sdk("@modelcontextprotocol/sdk/client/stdio.js");
const { StreamableHTTPClientTransport } = sdk("@modelcontextprotocol/sdk/client/streamableHttp.js");
const { ElicitRequestSchema } = sdk("@modelcontextprotocol/sdk/types.js");

async function main() {
  const [mode, approve, ...rest] = process.argv.slice(2);
  const capabilities = approve === "none" ? {} : { elicitation: { form: {} } };
  const client = new Client({ name: "sdk-e2e", version: "0" }, { capabilities });
  const asked = [];
  if (approve !== "none") {
    client.setRequestHandler(ElicitRequestSchema, async (request) => {
      asked.push(request.params.message);
      return approve === "yes"
        ? { action: "accept", content: { approved: true } }
        : { action: "decline" };
    });
  }
  let transport;
  if (mode === "stdio") {
    transport = new StdioClientTransport({ command: rest[0], args: rest.slice(1), stderr: "inherit" });
  } else {
    const [url, token] = rest;
    transport = new StreamableHTTPClientTransport(new URL(url), {
      requestInit: { headers: { Authorization: `Bearer ${token}` } },
    });
  }
  await client.connect(transport);
  const tools = (await client.listTools()).tools.map((t) => t.name);
  const text = (r) => r.content.filter((c) => c.type === "text").map((c) => c.text).join("");
  const call = async (name, args) => {
    const r = await client.callTool({ name, arguments: args });
    return { isError: r.isError === true, text: text(r) };
  };
  if (tools.includes("agent")) {
    // `rein mcp serve --agent`: one prompt whose run asks for an approval.
    const agent = await call("agent", { prompt: "delete notes.txt" });
    console.log(JSON.stringify({ tools, agent, asked }));
    await client.close();
    return;
  }
  const read = await call("read_file", { path: "a.txt" });
  const secret = await call("read_file", { path: ".env" });
  const del = await call("delete_file", { path: "a.txt" });
  console.log(JSON.stringify({ tools, read, secret, delete: del, asked }));
  await client.close();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
