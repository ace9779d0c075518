// Rein approval console: a small client of the AG-UI wire protocol (HTTP POST of a
// RunAgentInput, the run's events as server-sent events, `resume` entries to answer interrupts)
// and of the server's `GET threads/{id}` (what a thread waits for, its conversation).
const $ = (id) => document.getElementById(id);
// crypto.randomUUID needs a secure context (https or localhost); elsewhere, random hex will do.
const uuid = () => (crypto.randomUUID ? crypto.randomUUID()
  : Array.from(crypto.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, "0")).join(""));
const base = location.origin + location.pathname;
const endpoint = new URL("agent", base).toString();
const params = new URLSearchParams(location.search);
let threadId = params.get("thread") || uuid();
// The token: from the URL the server printed (`?token=`, as Jupyter's) or typed into the
// sign-in form; kept in this origin's localStorage and sent as `Authorization: Bearer` — a
// header, not a cookie, so no other site's page can make the browser send it (no CSRF), and
// the page's policy lets no script but this one run to read it.
const TOKEN_KEY = "rein-agui-token";
if (params.get("token")) localStorage.setItem(TOKEN_KEY, params.get("token"));
const token = () => localStorage.getItem(TOKEN_KEY) || "";
let pending = []; // the open interrupts of the thread
let parked = []; // interrupts of injected messages parked on a confirm while a run goes
let loaded = false; // whether the page knows what the thread waits for
const answers = new Map(); // interrupt id -> resume entry
const calls = new Map(); // tool call id -> {name, input}
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

// A banner in plain words; what the server said exactly goes in its details.
function showError(text, raw) {
  $("error-text").textContent = text;
  $("error-raw").textContent = raw || "";
  $("error-details").hidden = !raw;
  $("error").style.display = text ? "block" : "none";
}

function status(text) { $("status").textContent = text; }

function headers() {
  const h = { "Content-Type": "application/json", Accept: "text/event-stream" };
  if (token()) h.Authorization = `Bearer ${token()}`;
  return h;
}

// `delete_file` / `issueRefund` as words: "Delete file", "Issue refund".
function words(name) {
  const w = String(name).replace(/([a-z0-9])([A-Z])/g, "$1 $2").replace(/[_\-.]+/g, " ").trim().toLowerCase();
  return w.charAt(0).toUpperCase() + w.slice(1);
}

function shown(v) { return typeof v === "string" ? v : JSON.stringify(v); }

// A tool input's fields, one `key: value` each.
function fields(input) {
  if (input && typeof input === "object" && !Array.isArray(input)) {
    return Object.entries(input).map(([k, v]) => `${words(k).toLowerCase()}: ${shown(v)}`).join(", ");
  }
  return input === undefined || input === null ? "" : shown(input);
}

function parseArgs(text) { try { return JSON.parse(text); } catch { return text; } }

// ---- signing in ----

function signIn(why) {
  loaded = false;
  $("signin").hidden = false;
  $("signin-why").textContent = why || "";
  $("sign-out").hidden = true;
  $("approvals").replaceChildren(el("p", "note", "Sign in to see what waits for you."));
  status("signed out");
  $("token").focus();
}

$("signin").addEventListener("submit", (e) => {
  e.preventDefault();
  localStorage.setItem(TOKEN_KEY, $("token").value.trim());
  $("token").value = "";
  $("signin").hidden = true;
  showError("");
  restore();
});

$("sign-out-link").addEventListener("click", (e) => {
  e.preventDefault();
  localStorage.removeItem(TOKEN_KEY);
  signIn("Signed out.");
});

// ---- the server's refusals, in plain words ----

const REFUSALS = {
  FORBIDDEN: "You are not allowed to do this in this conversation.",
  FOUR_EYES: "You asked for this yourself: another person must approve it (four-eyes). It still waits for them; you may reject it.",
  INTERRUPTS_PENDING: "This conversation waits for an approval first (see “Waiting for you”).",
  FINGERPRINT_MISMATCH: "The request changed since it was shown to you. Reload the page to see it as it is now.",
  RUN_IN_PROGRESS: "The agent is still working on this conversation: try again when it is done.",
  UNKNOWN_INTERRUPT: "This approval was already answered (perhaps in another window). Reload the page.",
  TOO_MANY_RUNS: "The server is busy: try again in a moment.",
  TOO_MANY_THREADS: "The server is busy: try again in a moment.",
};

// What the server says about an answer, without its ids: "`7` is not a string (field: path)".
function plainReason(message) {
  let m = message;
  for (const i of [...pending, ...parked]) m = m.split(i.id).join("");
  m = m.replace(/^the answer to interrupt\s*( does not match its response schema)?:\s*/, "");
  return m.replace(/\(at `\/(?:edit|content)\/([^`]*)`\)/, (_, p) => `(field: ${p.split("/").join(" › ")})`)
    .replace(/\(at `\/edit`\)/, "(the changed request)");
}

async function refused(res) {
  const text = await res.text();
  let j = {};
  try { j = JSON.parse(text); } catch { /* plain text */ }
  const raw = `HTTP ${res.status} ${j.code || ""}: ${j.message || text}`;
  if (res.status === 401) { signIn("The server did not accept the token: sign in again."); return; }
  if (j.code === "INTERRUPTS_PENDING" && j.details && j.details.interrupts) {
    pending = j.details.interrupts; answers.clear(); renderApprovals();
  }
  if (j.code === "INVALID_RESUME_PAYLOAD") {
    showError(`The server refused this answer: ${plainReason(j.message || "")}`, raw);
  } else {
    showError(REFUSALS[j.code] || "The server refused the request.", raw);
  }
}

// After a refused answer every card can be answered again (what was typed stays).
function reopenCards() {
  answers.clear();
  document.querySelectorAll("#approvals .approval").forEach((card) => {
    card.querySelectorAll("button, input, textarea, select").forEach((b) => { b.disabled = false; });
  });
}

// ---- a run ----

// POST one RunAgentInput and apply its events as they arrive.
async function runAgent(messages, resume) {
  const body = { threadId, runId: uuid(), messages, tools: [], context: [], state: {}, forwardedProps: {} };
  if (resume) body.resume = resume;
  showError("");
  running++;
  followRun(false);
  status("working…");
  try {
    const res = await fetch(endpoint, { method: "POST", headers: headers(), body: JSON.stringify(body) });
    if (!res.ok) {
      await refused(res);
      if (resume) reopenCards();
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
    showError("The server cannot be reached.", e.message);
    if (resume) reopenCards();
  } finally {
    running--;
    status(running ? "working…" : pending.length ? "waiting for approval" : "idle");
  }
}

function showCall(id, name, input) {
  calls.set(id, { name, input });
  add(el("div", "msg tool call", `→ ${words(name)}${fields(input) ? ` (${fields(input)})` : ""}`));
}

const open = new Map(); // text message id -> element
const streaming = new Map(); // tool call id -> {name, args}
function apply(ev) {
  switch (ev.type) {
    case "TEXT_MESSAGE_START": open.set(ev.messageId, add(el("div", "msg assistant", ""))); break;
    case "TEXT_MESSAGE_CONTENT": { const m = open.get(ev.messageId); if (m) m.textContent += ev.delta; break; }
    case "TEXT_MESSAGE_END": open.delete(ev.messageId); break;
    case "TOOL_CALL_START": streaming.set(ev.toolCallId, { name: ev.toolCallName, args: "" }); break;
    case "TOOL_CALL_ARGS": { const t = streaming.get(ev.toolCallId); if (t) t.args += ev.delta; break; }
    case "TOOL_CALL_END": { const t = streaming.get(ev.toolCallId); if (t) showCall(ev.toolCallId, t.name, parseArgs(t.args)); break; }
    case "TOOL_CALL_RESULT": add(el("div", "msg tool result", `← ${ev.content}`)); break;
    case "CUSTOM": custom(ev.name, ev.value); break;
    case "RUN_ERROR": showError("The agent stopped with an error.", `${ev.code || "ERROR"}: ${ev.message}`); break;
    case "RUN_FINISHED":
      loaded = true;
      if (ev.outcome && ev.outcome.type === "interrupt") { pending = ev.outcome.interrupts; answers.clear(); renderApprovals(); }
      else if (!(ev.result && ev.result.injected)) { pending = []; renderApprovals(); }
      if (ev.outcome && ev.outcome.type === "cancelled") add(el("div", "note", "(stopped)"));
      break;
    default: break;
  }
}

function custom(name, v) {
  if (name === "rein.decision") return decision(v);
  if (name === "rein.injection_queued") return add(el("div", "note", "passed on to the agent while it works"));
  if (name === "rein.injection_awaiting_approval") {
    parked.push(...v.interrupts.map((i) => ({ ...i, injectionId: v.injectionId })));
    return renderApprovals();
  }
  if (name === "rein.injection_consumed" || name === "rein.injection_rejected") {
    parked = parked.filter((i) => i.injectionId !== v.injectionId);
    renderApprovals();
    return add(el("div", "note", name === "rein.injection_consumed" ? `the agent took in: ${v.text}` : `message refused: ${v.reason}`));
  }
  if (name === "rein.response_discarded") return add(el("div", "note", `(answer withdrawn: ${v.reason})`));
  if (name === "rein.response_replaced") return add(el("div", "note", `(answer replaced: ${v.text})`));
}

// What a rule decided, in words; which handler at which point stays in the row's tooltip.
const ACTIONS = { deny: "Blocked", guide: "Redirected", transform: "Changed", error: "Failed", proceed: "Allowed" };
const CONFIRMED = { asked: "Asked for approval", approved: "Approved", rejected: "Rejected", refused: "Answer refused" };
function decision(d) {
  const list = $("decisions");
  // The placeholder goes; a row's own notes (who answered, the reason) are no placeholder.
  if (list.querySelector(":scope > p.note")) list.replaceChildren();
  const row = el("div", "decision");
  const status = d.confirmation && d.confirmation.status;
  const action = d.action === "confirm" ? (CONFIRMED[status] || words(status || "confirm")) : (ACTIONS[d.action] || words(d.action));
  const kind = ["deny", "guide", "transform", "confirm", "error"].includes(d.action) ? d.action : "other";
  row.appendChild(el("span", `tag ${kind}`, action));
  const call = d.tool_use_id && calls.get(d.tool_use_id);
  const what = call ? words(call.name) : "";
  const text = d.confirmation && status !== "asked" ? "" : d.text || "";
  row.appendChild(document.createTextNode(` ${[what, text].filter(Boolean).join(": ")}`));
  if (d.answeredBy) {
    // Who answered is who the server authenticated; a name the answer claimed is shown beside.
    const claimed = d.claimedAnsweredBy && d.claimedAnsweredBy !== d.answeredBy ? ` (said “${d.claimedAnsweredBy}”)` : "";
    row.appendChild(el("span", "note", ` by ${d.answeredBy}${claimed}`));
  }
  const answer = d.confirmation && d.confirmation.answer;
  if (answer && typeof answer === "object" && answer.note) row.appendChild(el("div", "note", `reason: ${answer.note}`));
  if (answer && typeof answer === "object" && answer.edit !== undefined) row.appendChild(el("div", "note", `changed to: ${fields(answer.edit)}`));
  row.title = `${d.handler} @ ${d.event}${d.outcome && d.outcome !== "applied" ? ` (${d.outcome})` : ""}`;
  row.dataset.action = d.action === "confirm" ? `confirm ${status}` : d.action;
  list.prepend(row);
}

// A stored approval record (`GET threads/{id}`'s `approvals`), shown like the decision it was
// when it happened: who asked, who answered (the authenticated principal), the edit, the reason.
function record(r) {
  const proceeded = r.outcome === "proceeded";
  decision({
    action: proceeded ? "proceed" : "confirm",
    confirmation: proceeded ? undefined : { status: r.outcome, answer: { note: r.refusal ? `${r.note ? `${r.note}; ` : ""}refused: ${r.refusal}` : r.note ?? undefined, edit: r.edit ?? undefined } },
    tool_use_id: r.toolCallId,
    text: r.reason || "",
    answeredBy: r.approver,
    claimedAnsweredBy: r.claimedApprover,
    handler: r.handler,
    event: "stored",
  });
}

// ---- the cards ----

// The call an interrupt holds: as the server sends it, as the run streamed it, or as
// human_approval's question names it.
function callOf(i) {
  const rein = (i.metadata && i.metadata.rein) || {};
  if (rein.toolCall) return rein.toolCall;
  const seen = i.toolCallId && calls.get(i.toolCallId);
  if (seen) return seen;
  const r = rein.reason;
  if (r && typeof r === "object" && r.tool) return { name: r.tool, input: r.input };
  return null;
}

function renderApprovals() {
  const box = $("approvals");
  box.replaceChildren();
  if (!loaded) { box.appendChild(el("p", "note", "Loading…")); return; }
  if (!pending.length && !parked.length) { box.appendChild(el("p", "note", "Nothing waits for you.")); return; }
  for (const i of [...pending, ...parked]) box.appendChild(card(i));
}

function card(i) {
  const c = el("div", "approval");
  c.dataset.interruptId = i.id;
  const call = callOf(i);
  const question = i.message || "";
  const props = (i.responseSchema && i.responseSchema.properties) || {};
  const isApproval = !!props.approved;
  const offered = isApproval ? null : choicesOf(i.responseSchema);
  if (call) {
    c.appendChild(el("h3", "q", `${words(call.name)} needs ${offered ? "your answer" : "your approval"}`));
    if (question && (offered || !question.startsWith("Allow "))) c.appendChild(el("p", "ask", question));
    const input = call.input;
    if (input && typeof input === "object" && !Array.isArray(input)) {
      const list = el("dl", "fields");
      for (const [k, v] of Object.entries(input)) list.append(el("dt", "", words(k)), el("dd", "", shown(v)));
      c.appendChild(list);
    } else if (input !== undefined && input !== null) {
      c.appendChild(el("p", "ask", shown(input)));
    }
  } else {
    c.appendChild(el("h3", "q", i.injectionId ? "A message for the agent needs your approval" : question || "The agent needs your answer"));
    if (i.injectionId) c.appendChild(el("p", "ask", i.text ? `“${i.text}” — ${question}` : question));
  }
  if (offered) {
    answerForms(c, i, offered);
    c.appendChild(technical(i, call));
    return c;
  }
  const buttons = el("div", "buttons");
  const button = (text, cls, action, onclick) => {
    const b = el("button", cls, text);
    b.type = "button";
    b.dataset.action = action;
    b.onclick = onclick;
    buttons.append(b);
    return b;
  };
  button("Approve", "approve", "approve", () => answer(i, isApproval ? { approved: true } : "yes"));
  const reason = el("div", "reason");
  reason.hidden = true;
  button("Reject…", "reject", "reject", () => { reason.hidden = false; reason.querySelector("textarea").focus(); });
  if (isApproval) button("Change…", "", "edit", () => { form.hidden = false; });
  if (props.trust) {
    button(call ? `Always allow ${words(call.name).toLowerCase()}` : "Always allow", "", "always",
      () => answer(i, { approved: true, trust: true }));
  }
  c.appendChild(buttons);

  const why = el("textarea", "note-input");
  why.rows = 2;
  why.placeholder = "Why? (optional, kept with the decision)";
  why.setAttribute("aria-label", "Reason for rejecting");
  const send = el("button", "reject", "Reject");
  send.type = "button";
  send.dataset.action = "confirm-reject";
  send.onclick = () => {
    const note = why.value.trim();
    answer(i, isApproval ? { approved: false, ...(note ? { note } : {}) } : null);
  };
  reason.append(why, send);
  c.appendChild(reason);

  const form = editForm(props.edit, call ? call.input : undefined, (edit) => answer(i, { approved: true, edit }));
  form.hidden = true;
  if (isApproval) c.appendChild(form);

  c.appendChild(technical(i, call));
  return c;
}

// Which interrupt this is, who asked it and about what: for whoever debugs, folded away.
function technical(i, call) {
  const details = el("details", "tech");
  details.appendChild(el("summary", "", "Technical details"));
  const rein = (i.metadata && i.metadata.rein) || {};
  details.appendChild(el("pre", "", [
    `interrupt ${i.id}`,
    rein.name ? `asked by ${rein.name}${rein.point ? ` at ${rein.point}` : ""}` : "",
    call ? `${call.name} ${JSON.stringify(call.input)}` : "",
  ].filter(Boolean).join("\n")));
  return details;
}

const isObjectSchema = (s) => !!s && typeof s === "object" && !!s.properties && typeof s.properties === "object";

// The answers an interrupt's `responseSchema` offers, when the console can build them (SPEC
// §11): a `oneOf` of objects told apart by `const` properties — a button each, named by the
// alternative's `title` — whose one other property, if any, is an object schema filled in by a
// form (an MCP elicitation: Accept with the form's `content`, Decline, Cancel); or one object
// schema: a form whose values are the answer. Null: the schema is not one of these (any JSON).
function choicesOf(schema) {
  if (!schema || typeof schema !== "object") return null;
  if (!Array.isArray(schema.oneOf)) {
    return isObjectSchema(schema) ? [{ label: "Submit", action: "submit", fixed: null, key: null, form: schema }] : null;
  }
  const out = [];
  for (const alt of schema.oneOf) {
    // A bare constant (an MCP form's `false`, AG-UI's dismissal) is not a button of its own.
    if (alt && typeof alt === "object" && "const" in alt && !alt.properties) continue;
    if (!isObjectSchema(alt)) return null;
    const fixed = {};
    const rest = [];
    for (const [k, p] of Object.entries(alt.properties)) {
      if (p && typeof p === "object" && "const" in p) fixed[k] = p.const; else rest.push([k, p]);
    }
    const constants = Object.values(fixed);
    if (!constants.length || rest.length > 1 || (rest.length && !isObjectSchema(rest[0][1]))) return null;
    const [key, form] = rest[0] || [null, null];
    const label = typeof alt.title === "string" && alt.title ? alt.title : words(shown(constants[0]));
    out.push({ label, action: shown(constants[0]), fixed, key, form });
  }
  return out.length ? out : null;
}

// The answer forms of an interrupt whose response schema offers `choices`: the question, a
// link the question names (http and https only: never `javascript:`), a form for the choice
// that has one (its button checks the fields first) and a button for each other choice.
function answerForms(c, i, choices) {
  const rein = (i.metadata && i.metadata.rein) || {};
  const url = rein.reason && typeof rein.reason === "object" && typeof rein.reason.url === "string" ? rein.reason.url : "";
  let link = null;
  try { link = url && ["http:", "https:"].includes(new URL(url).protocol) ? url : null; } catch { link = null; }
  if (link) {
    const a = el("a", "link", link);
    a.href = link;
    a.target = "_blank";
    a.rel = "noopener noreferrer";
    const p = el("p", "ask", "Open ");
    p.append(a, document.createTextNode(", then say when you are done."));
    c.appendChild(p);
  }
  // The choices without a form go beside the form's button (they send no form: unchecked).
  let buttons = el("div", "buttons");
  const button = (choice, parent, type) => {
    const b = el("button", choice.action === "accept" || choice.action === "submit" ? "approve" : choice.action === "decline" ? "reject" : "", choice.label);
    b.type = type;
    b.dataset.action = `answer-${choice.action}`;
    parent.appendChild(b);
    return b;
  };
  for (const choice of choices) {
    if (!choice.form) {
      button(choice, buttons, "button").onclick = () => answer(i, choice.fixed);
      continue;
    }
    const form = el("form", "answer");
    const fields = fieldsOf(choice.form, null);
    const problem = el("p", "field-error");
    form.append(...fields.rows, problem);
    const row = el("div", "buttons");
    button(choice, row, "submit");
    form.appendChild(row);
    if (!buttons.children.length && !buttons.parentNode) buttons = row;
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      problem.textContent = "";
      try {
        const values = fields.read();
        answer(i, choice.key === null ? (choice.fixed ? { ...values, ...choice.fixed } : values) : { ...choice.fixed, [choice.key]: values });
      } catch (err) {
        problem.textContent = err.message;
      }
    });
    c.appendChild(form);
  }
  // A bare form may still be dismissed: the protocol's `cancelled`.
  if (choices.length === 1 && choices[0].action === "submit") {
    button({ label: "Cancel", action: "cancel" }, buttons, "button").onclick = () => answer(i, null);
  }
  if (!buttons.parentNode && buttons.children.length) c.appendChild(buttons);
}

const typeOf = (s) => (Array.isArray(s.type) ? s.type.find((t) => t !== "null") : s.type);

// The choices of an enum field as [value, label]: `enum` (labelled by `enumNames` where given,
// as MCP's legacy titled enums) or a `oneOf` of `const`s with `title`s. Null: not an enum.
function enumOf(s) {
  if (Array.isArray(s.enum)) return s.enum.map((v, n) => [v, Array.isArray(s.enumNames) && typeof s.enumNames[n] === "string" ? s.enumNames[n] : shown(v)]);
  const alts = s.oneOf || s.anyOf;
  if (Array.isArray(alts) && alts.length && alts.every((a) => a && typeof a === "object" && "const" in a)) {
    return alts.map((a) => [a.const, typeof a.title === "string" ? a.title : shown(a.const)]);
  }
  return null;
}

// One labelled input per property of an object schema, by type: text (with the string's
// format and length bounds), number (integer steps, bounds), checkbox, select for an enum,
// JSON text otherwise; filled from `current`, else the field's default. Titles and
// descriptions come from whoever wrote the schema (an MCP server): text only, never markup.
// The bounds let the browser help the person; the server checks the answer against the schema.
// Returns the rows and a reader of the object they make (throws on a field that is not JSON).
function fieldsOf(schema, current) {
  const required = new Set(Array.isArray(schema.required) ? schema.required : []);
  const rows = [];
  const readers = [];
  for (const [key, raw] of Object.entries(schema.properties)) {
    const s = raw && typeof raw === "object" ? raw : {};
    const row = el("label", "field");
    const label = el("span", "", typeof s.title === "string" ? s.title : words(key));
    if (required.has(key)) {
      const mark = el("span", "required", " *");
      mark.title = "required";
      label.appendChild(mark);
    } else {
      label.appendChild(document.createTextNode(" (optional)"));
    }
    row.appendChild(label);
    const has = !!current && key in current;
    const v = has ? current[key] : s.default;
    const given = v !== undefined;
    const type = typeOf(s);
    const choices = enumOf(s);
    let input;
    let read;
    if (choices) {
      input = el("select");
      if (!required.has(key) || !given) input.appendChild(el("option", "", ""));
      for (const [value, text] of choices) {
        const o = el("option", "", text);
        o.value = JSON.stringify(value);
        input.appendChild(o);
      }
      if (given) input.value = JSON.stringify(v);
      read = () => (input.value === "" ? undefined : JSON.parse(input.value));
    } else if (type === "boolean") {
      input = el("input");
      input.type = "checkbox";
      input.checked = v === true;
      read = () => (input.checked || has || required.has(key) ? input.checked : undefined);
    } else if (type === "number" || type === "integer") {
      input = el("input");
      input.type = "number";
      input.step = type === "integer" ? "1" : "any";
      if (typeof s.minimum === "number") input.min = String(s.minimum);
      if (typeof s.maximum === "number") input.max = String(s.maximum);
      if (given) input.value = String(v);
      read = () => (input.value === "" ? undefined : Number(input.value));
    } else if (type === "string") {
      input = el("input");
      input.type = { email: "email", uri: "url", date: "date" }[s.format] || "text";
      if (Number.isInteger(s.minLength)) input.minLength = s.minLength;
      if (Number.isInteger(s.maxLength)) input.maxLength = s.maxLength;
      if (given) input.value = String(v);
      read = () => (input.value === "" && !has && !required.has(key) ? undefined : input.value);
    } else {
      input = el("textarea");
      input.rows = 3;
      if (given) input.value = JSON.stringify(v, null, 2);
      read = () => {
        if (input.value.trim() === "") return undefined;
        try { return JSON.parse(input.value); } catch { throw new Error(`${words(key)} is not valid JSON`); }
      };
    }
    if (required.has(key) && type !== "boolean") input.required = true;
    input.name = key;
    row.appendChild(input);
    if (typeof s.description === "string" && s.description) row.appendChild(el("span", "note", s.description));
    rows.push(row);
    readers.push([key, read]);
  }
  const read = () => {
    const out = { ...(current || {}) };
    for (const [key, r] of readers) {
      const v = r();
      if (v === undefined) delete out[key]; else out[key] = v;
    }
    return out;
  };
  return { rows, read };
}

// A form for the call's new input, built from the tool's input schema and filled with the
// current input. It submits the whole object: a field the form does not show is kept as it was.
function editForm(schema, value, submit) {
  const form = el("form", "edit");
  const props = schema && schema.properties;
  const current = value && typeof value === "object" && !Array.isArray(value) ? value : null;
  let read;
  const problem = el("p", "field-error");
  if (props && (current || value === undefined)) {
    const f = fieldsOf(schema, current);
    form.append(...f.rows);
    read = f.read;
  } else {
    // No schema to build from (or an input that is not an object): the new value as text.
    const area = el("textarea");
    area.rows = 4;
    area.name = "edit";
    area.value = value === undefined ? "" : typeof value === "string" ? value : JSON.stringify(value, null, 2);
    form.appendChild(area);
    read = () => parseArgs(area.value);
  }
  const ok = el("button", "approve", "Approve with these changes");
  ok.type = "submit";
  ok.dataset.action = "approve-edit";
  form.append(problem, ok);
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    problem.textContent = "";
    try {
      submit(read());
    } catch (err) {
      problem.textContent = err.message;
    }
  });
  return form;
}

// Records one answer; once every open interrupt has one, resumes the run (the protocol wants
// them all in one resume). Who answers is who the token says: the console claims no name.
function answer(interrupt, payload) {
  // An approval names the action it approves: the fingerprint the interrupt carries, echoed
  // (the server refuses it for any other action).
  const governance = interrupt.metadata && interrupt.metadata.governance;
  if (governance && governance.actionFingerprint && payload !== null && typeof payload === "object") {
    payload = { ...payload, approvedActionFingerprint: governance.actionFingerprint };
  }
  const entry = payload === null
    ? { interruptId: interrupt.id, status: "cancelled" }
    : { interruptId: interrupt.id, status: "resolved", payload };
  const c = document.querySelector(`[data-interrupt-id="${CSS.escape(interrupt.id)}"]`);
  if (c) c.querySelectorAll("button, input, textarea, select").forEach((b) => { b.disabled = true; });
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
  pending = []; parked = []; answers.clear();
  $("transcript").replaceChildren();
  renderApprovals();
  showThread();
});

// ---- the inbox: what waits across conversations (`GET approvals`, where the server has it) ----

let inboxNext = null;
async function showInbox(more) {
  $("inbox").hidden = false;
  const list = $("inbox-list");
  const u = new URL("approvals", base);
  if (more && inboxNext) u.searchParams.set("after", inboxNext);
  let res;
  try {
    res = await fetch(u, { headers: headers() });
  } catch (e) {
    showError("The server cannot be reached.", e.message);
    return;
  }
  if (!more) list.replaceChildren();
  $("inbox-more").hidden = true;
  if (res.status === 404) { list.replaceChildren(el("p", "note", "No inbox on this server: open a conversation's link.")); return; }
  if (res.status === 501) { list.replaceChildren(el("p", "note", "This server's store cannot list what waits: open a conversation's link.")); return; }
  if (!res.ok) { await refused(res); return; }
  const j = await res.json();
  // Messages sent into a going run and waiting for approval (first page only), then the rest.
  for (const a of [...(j.parkedInjections || []), ...(j.approvals || [])]) list.appendChild(inboxItem(a));
  if (!list.children.length) list.appendChild(el("p", "note", "Nothing waits for you."));
  inboxNext = j.next || null;
  $("inbox-more").hidden = !inboxNext;
}

function inboxItem(a) {
  const row = el("a", "inbox-item");
  row.href = `?thread=${encodeURIComponent(a.threadId)}`;
  const title = a.injectionId ? "A message sent during a run needs your approval"
    : a.toolName ? `${words(a.toolName)} needs your approval` : "The agent needs your answer";
  row.appendChild(el("strong", "", title));
  if (a.injectionId) row.appendChild(el("div", "", a.text));
  else if (fields(a.input)) row.appendChild(el("div", "", fields(a.input)));
  // An RFC 3339 time, or seconds / milliseconds since the epoch.
  const when = a.askedAt ? new Date(typeof a.askedAt === "number" && a.askedAt < 1e12 ? a.askedAt * 1000 : a.askedAt) : null;
  const meta = [a.reason, a.requester ? `${a.injectionId ? "sent" : "asked"} by ${a.requester}` : "", when && !isNaN(when) ? when.toLocaleString() : ""];
  row.appendChild(el("div", "note", meta.filter(Boolean).join(" · ")));
  return row;
}

$("inbox-link").addEventListener("click", (e) => {
  e.preventDefault();
  if ($("inbox").hidden) showInbox(false); else $("inbox").hidden = true;
});
$("inbox-more").addEventListener("click", () => showInbox(true));

// The conversation as the store holds it (AG-UI messages).
function showMessages(messages, omitted) {
  $("transcript").replaceChildren();
  if (omitted) add(el("div", "note", `(${omitted} earlier messages not shown)`));
  for (const m of messages || []) {
    if (m.role === "user") add(el("div", "msg user", m.content));
    else if (m.role === "assistant") {
      if (m.content) add(el("div", "msg assistant", m.content));
      for (const t of m.toolCalls || []) showCall(t.id, t.function.name, parseArgs(t.function.arguments));
    } else if (m.role === "tool") add(el("div", "msg tool result", `← ${m.content}`));
  }
}

// A (re)loaded page shows the conversation and what it waits for — once signed in.
async function restore() {
  showThread();
  let res;
  try {
    res = await fetch(new URL(`threads/${encodeURIComponent(threadId)}`, base), { headers: headers() });
  } catch (e) {
    showError("The server cannot be reached.", e.message);
    return;
  }
  if (res.status === 401) {
    signIn(token() ? "The server did not accept the token: sign in again." : "");
    return;
  }
  $("signin").hidden = true;
  $("sign-out").hidden = !token();
  loaded = true;
  if (res.status === 404) { renderApprovals(); status("idle"); return; } // a new conversation
  if (!res.ok) {
    await refused(res);
    $("approvals").replaceChildren(el("p", "note", "What waits here could not be loaded (see above)."));
    return;
  }
  const t = await res.json();
  showMessages(t.messages, t.messagesOmitted);
  $("decisions").replaceChildren();
  for (const r of t.approvals || []) record(r);
  if (!$("decisions").children.length) $("decisions").appendChild(el("p", "note", "Decisions appear here as they happen."));
  parked = [];
  for (const p of t.parkedInjections || []) {
    parked.push(...p.interrupts.map((i) => ({ ...i, text: p.text, injectionId: p.injectionId })));
  }
  pending = t.pendingInterrupts || [];
  // Read again while following a run: the cards are drawn anew only when what waits changed,
  // so a reason being typed on a parked message's card survives.
  const waiting = [...pending, ...parked].map((i) => i.id).join(" ");
  if (!follow.delay || waiting !== follow.waiting) {
    answers.clear();
    renderApprovals();
  }
  follow.waiting = waiting;
  status(t.runningRunId ? "working…" : pending.length ? "waiting for approval" : "idle");
  followRun(!!t.runningRunId);
}

// A run this page did not start — one it started before a reload, or another page's — streams
// its events to whoever started it. This page reads the thread again until the run ends
// (every 0.5 s, backing off to 5 s), then shows what it left: the answer, or what it waits
// for. Polling rather than joining the stream: it works for a run in any process with any
// store, and the server keeps no replay buffer per run for a client that may never come.
const follow = { timer: 0, delay: 0, waiting: "" };
function followRun(going) {
  clearTimeout(follow.timer);
  if (!going || running) { follow.delay = 0; return; }
  follow.delay = Math.min(follow.delay ? follow.delay * 2 : 500, 5000);
  follow.timer = setTimeout(() => { if (!running) restore(); }, follow.delay);
}
restore();
