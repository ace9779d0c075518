// Rein approval console: a small client of the AG-UI wire protocol (HTTP POST of a
// RunAgentInput, the run's events as server-sent events, `resume` entries to answer interrupts).
const $ = (id) => document.getElementById(id);
// crypto.randomUUID needs a secure context (https or localhost); elsewhere, random hex will do.
const uuid = () => (crypto.randomUUID ? crypto.randomUUID()
  : Array.from(crypto.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, "0")).join(""));
const endpoint = new URL("agent", location.origin + location.pathname).toString();
const params = new URLSearchParams(location.search);
let threadId = params.get("thread") || uuid();
// The token: from the URL the server printed (`?token=`, as Jupyter's), kept in this origin's
// localStorage and taken out of the address bar; sent as `Authorization: Bearer` — a header, not
// a cookie, so no other site's page can make the browser send it.
const TOKEN_KEY = "rein-agui-token";
if (params.get("token")) {
  localStorage.setItem(TOKEN_KEY, params.get("token"));
}
$("token").value = localStorage.getItem(TOKEN_KEY) || "";
$("token").addEventListener("change", () => localStorage.setItem(TOKEN_KEY, $("token").value.trim()));
let pending = []; // the open interrupts of the thread
let parked = []; // interrupts of injected messages parked on a confirm while a run goes
const answers = new Map(); // interrupt id -> resume entry
const toolArgs = new Map(); // tool call id -> {name, args}
let running = 0;

function showThread() {
  $("thread").textContent = threadId;
  history.replaceState(null, "", `?thread=${encodeURIComponent(threadId)}`);
}

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function add(node) {
  $("transcript").appendChild(node);
  $("transcript").scrollTop = $("transcript").scrollHeight;
  return node;
}

function showError(text) {
  const box = $("error");
  box.textContent = text;
  box.style.display = text ? "block" : "none";
}

function status(text) { $("status").textContent = text; }

function headers() {
  const h = { "Content-Type": "application/json", Accept: "text/event-stream" };
  const token = $("token").value.trim();
  if (token) h.Authorization = `Bearer ${token}`;
  return h;
}

// POST one RunAgentInput and apply its events as they arrive.
async function runAgent(messages, resume) {
  const body = { threadId, runId: uuid(), messages, tools: [], context: [], state: {}, forwardedProps: {} };
  if (resume) body.resume = resume;
  showError("");
  running++;
  status("running…");
  try {
    const res = await fetch(endpoint, { method: "POST", headers: headers(), body: JSON.stringify(body) });
    if (!res.ok) {
      let detail = await res.text();
      try { const j = JSON.parse(detail); detail = `${j.code}: ${j.message}`; } catch { /* plain text */ }
      showError(`HTTP ${res.status} — ${detail}`);
      return;
    }
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      const frames = buffer.split("\n\n");
      buffer = frames.pop();
      for (const frame of frames) {
        const data = frame.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart()).join("\n");
        if (data) apply(JSON.parse(data));
      }
    }
  } catch (e) {
    showError(`connection failed: ${e.message}`);
  } finally {
    running--;
    status(running ? "running…" : pending.length ? "waiting for approval" : "idle");
  }
}

const open = new Map(); // text message id -> element
function apply(ev) {
  switch (ev.type) {
    case "TEXT_MESSAGE_START": open.set(ev.messageId, add(el("div", "msg assistant", ""))); break;
    case "TEXT_MESSAGE_CONTENT": { const m = open.get(ev.messageId); if (m) m.textContent += ev.delta; break; }
    case "TEXT_MESSAGE_END": open.delete(ev.messageId); break;
    case "TOOL_CALL_START": toolArgs.set(ev.toolCallId, { name: ev.toolCallName, args: "" }); break;
    case "TOOL_CALL_ARGS": { const t = toolArgs.get(ev.toolCallId); if (t) t.args += ev.delta; break; }
    case "TOOL_CALL_END": { const t = toolArgs.get(ev.toolCallId); if (t) add(el("div", "msg tool call", `→ ${t.name} ${t.args}`)); break; }
    case "TOOL_CALL_RESULT": add(el("div", "msg tool result", `← ${ev.content}`)); break;
    case "CUSTOM": custom(ev.name, ev.value); break;
    case "RUN_ERROR": showError(`run failed — ${ev.code || "ERROR"}: ${ev.message}`); break;
    case "RUN_FINISHED":
      if (ev.outcome && ev.outcome.type === "interrupt") { pending = ev.outcome.interrupts; answers.clear(); renderApprovals(); }
      else if (!(ev.result && ev.result.injected)) { pending = []; renderApprovals(); }
      if (ev.outcome && ev.outcome.type === "cancelled") add(el("div", "note", "(cancelled)"));
      break;
    default: break;
  }
}

function custom(name, v) {
  if (name === "rein.decision") return decision(v);
  if (name === "rein.injection_queued") return add(el("div", "note", `injected into the running run (${v.injectionId})`));
  if (name === "rein.injection_awaiting_approval") {
    parked.push(...v.interrupts.map((i) => ({ ...i, injectionId: v.injectionId })));
    return renderApprovals();
  }
  if (name === "rein.injection_consumed" || name === "rein.injection_rejected") {
    parked = parked.filter((i) => i.injectionId !== v.injectionId);
    renderApprovals();
    return add(el("div", "note", name === "rein.injection_consumed" ? `the agent took in: ${v.text}` : `injection refused: ${v.reason}`));
  }
  if (name === "rein.response_discarded") return add(el("div", "note", `(response withdrawn: ${v.reason})`));
  if (name === "rein.response_replaced") return add(el("div", "note", `(response replaced: ${v.text})`));
}

function decision(d) {
  const list = $("decisions");
  if (list.querySelector(".note")) list.innerHTML = "";
  const row = el("div", "decision");
  const action = d.action === "confirm" && d.confirmation ? `confirm ${d.confirmation.status}` : d.action;
  const kind = ["deny", "guide", "transform", "confirm", "error"].includes(d.action) ? d.action : "other";
  row.appendChild(el("span", `tag ${kind}`, action));
  row.appendChild(document.createTextNode(` ${d.handler} @ ${d.event}${d.text ? ": " + d.text : ""}`));
  if (d.outcome && d.outcome !== "applied") row.appendChild(el("span", "note", ` (${d.outcome})`));
  if (d.confirmation && d.confirmation.answer !== undefined) {
    const claimed = d.claimedAnsweredBy && d.claimedAnsweredBy !== d.answeredBy ? ` (as "${d.claimedAnsweredBy}")` : "";
    const by = d.answeredBy ? ` by ${d.answeredBy}${claimed}` : "";
    row.appendChild(el("div", "note", `answered${by}: ${JSON.stringify(d.confirmation.answer)}`));
  }
  row.dataset.action = action;
  list.prepend(row);
}

function renderApprovals() {
  const box = $("approvals");
  box.innerHTML = "";
  if (!pending.length && !parked.length) { box.appendChild(el("p", "note", "Nothing waits for you.")); return; }
  for (const i of [...pending, ...parked]) {
    const card = el("div", "approval");
    card.dataset.interruptId = i.id;
    card.appendChild(el("div", "q", i.message || i.reason));
    const call = i.toolCallId && toolArgs.get(i.toolCallId);
    if (call) card.appendChild(el("pre", "", `${call.name} ${call.args}`));
    const isApproval = i.responseSchema && i.responseSchema.properties && i.responseSchema.properties.approved;
    const buttons = el("div");
    const approve = el("button", "approve", "Approve");
    approve.dataset.action = "approve";
    approve.onclick = () => answer(i, isApproval ? { approved: true } : "yes");
    const reject = el("button", "reject", "Reject");
    reject.dataset.action = "reject";
    reject.onclick = () => answer(i, null);
    buttons.append(approve, " ", reject);
    if (isApproval) {
      const edit = el("button", "", "Edit…");
      edit.dataset.action = "edit";
      edit.onclick = () => {
        const area = el("textarea");
        area.rows = 4;
        area.value = call ? call.args : "";
        const ok = el("button", "approve", "Approve with edit");
        ok.dataset.action = "approve-edit";
        ok.onclick = () => {
          let v = area.value;
          try { v = JSON.parse(v); } catch { /* a text edit */ }
          answer(i, { approved: true, edit: v });
        };
        card.append(area, ok);
        edit.disabled = true;
      };
      buttons.append(" ", edit);
    }
    card.appendChild(buttons);
    box.appendChild(card);
  }
}

// Records one answer; once every open interrupt has one, resumes the run (the protocol wants
// them all in one resume).
function answer(interrupt, payload) {
  const who = $("who").value.trim();
  // An approval names the action it approves: the fingerprint the interrupt carries, echoed
  // (the server refuses it for any other action).
  const governance = interrupt.metadata && interrupt.metadata.governance;
  if (governance && governance.actionFingerprint && payload !== null && typeof payload === "object") {
    payload = { ...payload, approvedActionFingerprint: governance.actionFingerprint };
  }
  const entry = payload === null
    ? { interruptId: interrupt.id, status: "cancelled" }
    : { interruptId: interrupt.id, status: "resolved", payload };
  if (who) entry.metadata = { answeredBy: who };
  const card = document.querySelector(`[data-interrupt-id="${CSS.escape(interrupt.id)}"]`);
  if (card) card.querySelectorAll("button").forEach((b) => { b.disabled = true; });
  // A parked injected message is answered on its own, into the run that is going.
  if (parked.some((i) => i.id === interrupt.id)) {
    parked = parked.filter((i) => i.id !== interrupt.id);
    runAgent([], [entry]);
    return;
  }
  answers.set(interrupt.id, entry);
  if (pending.every((i) => answers.has(i.id))) {
    const resume = pending.map((i) => answers.get(i.id));
    runAgent([], resume);
  }
}

$("ask").addEventListener("submit", (e) => {
  e.preventDefault();
  const text = $("prompt").value.trim();
  if (!text) return;
  $("prompt").value = "";
  add(el("div", "msg user", text));
  runAgent([{ id: uuid(), role: "user", content: text }]);
});

$("new-thread").addEventListener("click", (e) => {
  e.preventDefault();
  threadId = uuid();
  pending = []; answers.clear();
  $("transcript").innerHTML = "";
  renderApprovals();
  showThread();
});

// A reloaded page picks up what the thread waits for.
async function restore() {
  showThread();
  const res = await fetch(new URL(`threads/${encodeURIComponent(threadId)}`, location.origin + location.pathname), { headers: headers() });
  if (res.status === 401) { showError("the server wants its token: open the URL `rein serve` printed, or fill in the token field"); return; }
  if (!res.ok) return;
  const t = await res.json();
  for (const p of t.parkedInjections || []) {
    parked.push(...p.interrupts.map((i) => ({ ...i, message: `${i.message} — "${p.text}"`, injectionId: p.injectionId })));
  }
  if (parked.length) renderApprovals();
  if (t.pendingInterrupts && t.pendingInterrupts.length) {
    pending = t.pendingInterrupts;
    add(el("div", "note", `this thread waits for ${pending.length} approval(s)`));
    renderApprovals();
    status("waiting for approval");
  }
}
restore();
