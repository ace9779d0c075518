// Drives a rein-agui server with the official AG-UI client (@ag-ui/client's HttpAgent) and
// prints, per scenario, one JSON line: the event types of each run (CUSTOM events as
// CUSTOM:<name>), the outcome and what the client reported. The Rust test asserts on them.
// Usage: node agui_driver.cjs <node_modules dir> <endpoint url> <scenario>...
const { createRequire } = require("node:module");
const path = require("node:path");
const [modules, url, ...scenarios] = process.argv.slice(2);
const requireFrom = createRequire(path.join(modules, "noop.js"));
const { HttpAgent, buildResumeArray } = requireFrom("@ag-ui/client");

const uid = (p) => `${p}-${Math.random().toString(36).slice(2, 10)}`;

// One run through the client; returns the event types, the outcome and the interrupts.
async function run(agent, params, onEvent) {
  const types = [];
  const seen = { interrupts: [], results: [], text: "", decisions: [], custom: [] };
  try {
    await agent.runAgent(params ?? {}, {
      onEvent({ event }) {
        types.push(event.type === "CUSTOM" ? `CUSTOM:${event.name}` : event.type);
        if (event.type === "CUSTOM") seen.custom.push({ name: event.name, value: event.value });
        if (event.type === "CUSTOM" && event.name === "rein.decision") seen.decisions.push(event.value);
        if (event.type === "TEXT_MESSAGE_CONTENT") seen.text += event.delta;
        if (event.type === "TOOL_CALL_RESULT") seen.results.push(event.content);
        if (event.type === "RUN_ERROR") seen.error = { code: event.code, message: event.message };
        if (onEvent) onEvent(event);
      },
      onRunFinishedEvent(params) {
        seen.outcome = params.outcome;
        if (params.outcome === "interrupt") seen.interrupts = params.interrupts;
      },
    });
  } catch (e) {
    seen.thrown = { message: String(e.message), status: e.status, payload: e.payload };
  }
  return { types, ...seen };
}

// The server's token (REIN_AGUI_TOKEN), sent as the client's own header option.
const headers = process.env.REIN_AGUI_TOKEN ? { Authorization: `Bearer ${process.env.REIN_AGUI_TOKEN}` } : {};

function agentFor(threadId) {
  return new HttpAgent({ url, threadId, headers });
}

function say(agent, text) {
  agent.addMessage({ id: uid("m"), role: "user", content: text });
}

// An approval of interrupt `i` (with `fields`): it names the action it approves, echoing the
// fingerprint the interrupt carries (ag-ui-protocol/ag-ui#2278).
function approval(i, fields) {
  const governance = i.metadata && i.metadata.governance;
  const named = governance ? { approvedActionFingerprint: governance.actionFingerprint } : {};
  return { approved: true, ...named, ...fields };
}

async function confirmThenAnswer(prefix, respond) {
  const agent = agentFor(uid(prefix));
  say(agent, "Please delete a.txt");
  const first = await run(agent);
  const pendingOnClient = agent.pendingInterrupts.map((i) => i.id);
  const resume = buildResumeArray(agent.pendingInterrupts, Object.fromEntries(first.interrupts.map((i) => [i.id, respond(i)])));
  const second = await run(agent, { resume });
  return { runs: [first, second], pendingOnClient, pendingAfter: agent.pendingInterrupts.length, messages: agent.messages.length };
}

const scenariosImpl = {
  async plain() {
    const agent = agentFor(uid("plain"));
    say(agent, "Hi");
    const r = await run(agent);
    return { runs: [r], lastMessage: agent.messages.at(-1) };
  },
  async tool() {
    const agent = agentFor(uid("tool"));
    say(agent, "What time is it?");
    const r = await run(agent);
    const assistant = agent.messages.find((m) => m.role === "assistant" && m.toolCalls);
    return { runs: [r], toolCalls: assistant ? assistant.toolCalls : [], roles: agent.messages.map((m) => m.role) };
  },
  approve: () => confirmThenAnswer("approve", (i) => ({ status: "resolved", payload: approval(i, {}) })),
  reject: () => confirmThenAnswer("reject", () => ({ status: "cancelled" })),
  edit: () => confirmThenAnswer("edit", (i) => ({ status: "resolved", payload: approval(i, { edit: { path: "b.txt" } }) })),
  async inject() {
    const threadId = uid("inject");
    const agent = agentFor(threadId);
    say(agent, "Do the slow thing");
    let injected;
    const first = run(agent, {}, (event) => {
      // While the slow tool runs, a second client on the same thread sends a message.
      if (event.type === "TOOL_CALL_END" && !injected) {
        const other = agentFor(threadId);
        say(other, "also check X");
        injected = run(other);
      }
    });
    const main = await first;
    return { runs: [main, await injected] };
  },
  async refusals() {
    // A client that does not know about the open interrupt (a fresh agent on the thread) is
    // refused by the server; a bad answer and an unknown id too; then the right answer works.
    const threadId = uid("refuse");
    const agent = agentFor(threadId);
    say(agent, "Please delete a.txt");
    const first = await run(agent);
    const fresh = agentFor(threadId);
    say(fresh, "something else");
    const blocked = await run(fresh);
    const asked = first.interrupts[0];
    const id = asked.id;
    const badSchema = await run(agentFor(threadId), { resume: [{ interruptId: id, status: "resolved", payload: approval(asked, { approved: "yes" }) }] });
    const unknown = await run(agentFor(threadId), { resume: [{ interruptId: "v1:nope", status: "cancelled" }] });
    const ok = await run(agent, { resume: [{ interruptId: id, status: "resolved", payload: approval(asked, {}) }] });
    const again = await run(agentFor(threadId), { resume: [{ interruptId: id, status: "resolved", payload: approval(asked, {}) }] });
    return { runs: [first, blocked, badSchema, unknown, ok, again] };
  },
  async replay() {
    // The model repeats its tool-use id: the first approval, sent again after the new pause,
    // approves nothing; the new pause's id with the first call's fingerprint is refused.
    const threadId = uid("replay");
    const agent = agentFor(threadId);
    say(agent, "Clean up");
    const first = await run(agent);
    const a = first.interrupts[0];
    const approveA = [{ interruptId: a.id, status: "resolved", payload: approval(a, {}) }];
    const second = await run(agent, { resume: approveA });
    const b = second.interrupts[0];
    const replayed = await run(agentFor(threadId), { resume: approveA });
    const forged = await run(agentFor(threadId), {
      resume: [{ interruptId: b.id, status: "resolved", payload: approval(b, { approvedActionFingerprint: (a.metadata.governance || {}).actionFingerprint }) }],
    });
    const ok = await run(agent, { resume: [{ interruptId: b.id, status: "resolved", payload: approval(b, {}) }] });
    return { runs: [first, second, replayed, forged, ok], sameToolCall: a.toolCallId === b.toolCallId };
  },
};

(async () => {
  for (const name of scenarios) {
    const impl = scenariosImpl[name];
    const out = impl ? await impl() : { error: `unknown scenario ${name}` };
    process.stdout.write(JSON.stringify({ scenario: name, ...out }) + "\n");
  }
})().catch((e) => {
  process.stderr.write(`driver failed: ${e.stack || e}\n`);
  process.exit(1);
});
