// Drives the approval console in headless Chromium (playwright-core). Prints one JSON line with
// what the page showed; keeps screenshots in the given directory.
// Usage: node console_browser.cjs <node_modules dir> <chromium> <console url> <screenshot dir>
//          <scenario> <width> <thread>
// Scenarios:
//   approve       type a request, see the approval, click approve, see the result and answer;
//                 a second tab sees the open approval, and its new request is refused
//   reload-auth   open a thread that waits, without a token: sign in; the conversation and the
//                 call come back; an edit the server refuses leaves the card working; an edit
//                 through the form is approved
//   reject        reject with a reason
//   always        human_approval's "always": approve and trust the tool for the session
//   follow        open a thread whose run is going (the test started it): the page says it is
//                 working, prints READY (the test then lets the run finish) and shows the
//                 answer once the run ends, without a reload
//   elicit        a tool asks for a form (an MCP elicitation's interrupt, its message and field
//                 titles markup): the form is built from the interrupt's responseSchema; a
//                 value the server refuses (the browser's own checks turned off) leaves the
//                 form as it was; a valid one resumes the run with the answer
//   visit         a URL-mode question: the link and the buttons; Done resumes the run
//   layout        the page with an approval waiting (for the phone layout's measurements)
//   four-eyes     bob asks for a refund and may not approve it himself; alice signs in and does
//                 (the tokens of the identity tests' server: bob-token-…, alice-token-…)
const { createRequire } = require("node:module");
const fs = require("node:fs");
const os = require("node:os");
const path = require("node:path");
const [modules, chromiumPath, url, shots, scenario, width, thread] = process.argv.slice(2);
const { chromium } = createRequire(path.join(modules, "noop.js"))("playwright-core");
const token = process.env.REIN_AGUI_TOKEN;
const wait = { timeout: 10000 };

// The page's width against the viewport, and where the card's buttons are.
async function layout(page) {
  return page.evaluate(() => {
    const box = (sel) => {
      const e = document.querySelector(sel);
      if (!e) return null;
      const r = e.getBoundingClientRect();
      return { left: r.left, right: r.right, top: r.top, bottom: r.bottom };
    };
    return {
      innerWidth: window.innerWidth,
      innerHeight: window.innerHeight,
      scrollWidth: document.documentElement.scrollWidth,
      approve: box("#approvals [data-action=approve]"),
      reject: box("#approvals [data-action=reject]"),
    };
  });
}

const text = (page, sel) => page.locator(sel).innerText();

const scenarios = {
  async approve(page, context, out) {
    await page.goto(withToken(url, thread));
    await page.fill("#prompt", "Please delete a.txt");
    await page.click("#send");
    const approve = page.locator("#approvals [data-action=approve]");
    await approve.waitFor(wait);
    out.addressBar = page.url();
    out.title = await text(page, "#approvals .approval .q");
    out.card = await text(page, "#approvals .approval");
    out.askedDecision = await page.locator("#decisions .decision").first().innerText();
    await page.screenshot({ path: path.join(shots, `console-approval-${width}.png`) });
    await approve.click();
    await page.locator("#transcript .result").waitFor(wait);
    await page.getByText("Done: I asked before deleting.").waitFor(wait);
    await page.waitForFunction(() => document.getElementById("status").textContent === "idle");
    out.transcript = await text(page, "#transcript");
    out.decisions = await text(page, "#decisions");
    out.approvals = await text(page, "#approvals");
    out.error = await text(page, "#error-text");
    // A reload brings the finished conversation back from the store.
    await page.reload();
    await page.getByText("Done: I asked before deleting.").waitFor(wait);
    out.reloadedTranscript = await text(page, "#transcript");
    out.reloadedDecisions = await text(page, "#decisions");
    // A second request on the same thread while it waits is refused, and the page says so.
    await page.fill("#prompt", "Please delete a.txt");
    await page.click("#send");
    await page.locator("#approvals [data-action=approve]").waitFor(wait);
    const other = await context.newPage();
    await other.goto(page.url());
    await other.locator("#approvals [data-action=approve]").waitFor(wait);
    out.reloadedApprovals = await text(other, "#approvals");
    await other.fill("#prompt", "ignore that, do something else");
    await other.click("#send");
    await other.locator("#error").waitFor({ state: "visible", ...wait });
    out.refusal = await text(other, "#error-text");
    out.refusalDetails = await other.locator("#error-raw").textContent();
    // The inbox view: what waits across the threads.
    await other.click("#inbox-link");
    await other.locator("#inbox-list .note").first().waitFor(wait);
    out.inbox = await text(other, "#inbox-list");
  },

  async "reload-auth"(page, context, out) {
    // The thread waits (the test started it); the page is opened without a token, as after a
    // restart of `rein serve --token`.
    await page.goto(`${url}?thread=${thread}`);
    await page.locator("#signin").waitFor({ state: "visible", ...wait });
    out.signedOutApprovals = await text(page, "#approvals");
    await page.screenshot({ path: path.join(shots, `console-signin-${width}.png`) });
    await page.fill("#token", token);
    await page.click("#signin-submit");
    const approve = page.locator("#approvals [data-action=approve]");
    await approve.waitFor(wait);
    out.card = await text(page, "#approvals .approval");
    out.transcript = await text(page, "#transcript");
    // The form: built from the tool's schema, filled with the current input.
    await page.click("#approvals [data-action=edit]");
    const field = page.locator("#approvals form.edit input[name=path]");
    out.prefilled = await field.inputValue();
    await page.screenshot({ path: path.join(shots, `console-edit-${width}.png`) });
    // An edit the tool's schema refuses: a plain reason, the card works again.
    await field.fill("../etc/passwd");
    await page.click("#approvals [data-action=approve-edit]");
    await page.locator("#error").waitFor({ state: "visible", ...wait });
    out.refusal = await text(page, "#error-text");
    out.refusalDetails = await page.locator("#error-raw").textContent();
    await page.waitForFunction(() => !document.querySelector("#approvals [data-action=approve-edit]").disabled);
    out.buttonsAfterRefusal = await page.$$eval("#approvals button", (bs) => bs.map((b) => b.disabled));
    await field.fill("b.txt");
    await page.click("#approvals [data-action=approve-edit]");
    await page.getByText("deleted b.txt").waitFor(wait);
    await page.waitForFunction(() => document.getElementById("status").textContent === "idle");
    out.transcriptAfter = await text(page, "#transcript");
    out.decisions = await text(page, "#decisions");
    out.approvals = await text(page, "#approvals");
  },

  async reject(page, context, out) {
    await page.goto(withToken(url, thread));
    await page.fill("#prompt", "Please delete a.txt");
    await page.click("#send");
    await page.locator("#approvals [data-action=reject]").waitFor(wait);
    await page.click("#approvals [data-action=reject]");
    await page.fill("#approvals .reason textarea", "not this file, it is the ledger");
    await page.screenshot({ path: path.join(shots, `console-reject-${width}.png`) });
    await page.click("#approvals [data-action=confirm-reject]");
    await page.getByText("Done: I asked before deleting.").waitFor(wait);
    await page.waitForFunction(() => document.getElementById("status").textContent === "idle");
    out.transcript = await text(page, "#transcript");
    out.decisions = await text(page, "#decisions");
    out.approvals = await text(page, "#approvals");
  },

  async always(page, context, out) {
    await page.goto(withToken(url, thread));
    await page.fill("#prompt", "Refund order 17");
    await page.click("#send");
    const always = page.locator("#approvals [data-action=always]");
    await always.waitFor(wait);
    out.card = await text(page, "#approvals .approval");
    out.always = await always.innerText();
    await always.click();
    await page.getByText("Refunded.").waitFor(wait);
    await page.waitForFunction(() => document.getElementById("status").textContent === "idle");
    // The tool is trusted for the session: the next refund runs without asking.
    await page.fill("#prompt", "Refund order 18");
    await page.click("#send");
    await page.getByText("Refunded again.").waitFor(wait);
    await page.waitForFunction(() => document.getElementById("status").textContent === "idle");
    out.transcript = await text(page, "#transcript");
    out.approvals = await text(page, "#approvals");
  },

  async "four-eyes"(page, context, out) {
    const as = (who) => {
      const start = new URL(url);
      start.searchParams.set("thread", thread);
      start.searchParams.set("token", `${who}-token-0123456789`);
      return start.toString();
    };
    await page.goto(as("bob"));
    await page.fill("#prompt", "Refund order 17");
    await page.click("#send");
    const approve = page.locator("#approvals [data-action=approve]");
    await approve.waitFor(wait);
    await approve.click();
    await page.locator("#error").waitFor({ state: "visible", ...wait });
    out.refusal = await text(page, "#error-text");
    out.refusalDetails = await page.locator("#error-raw").textContent();
    await page.waitForFunction(() => !document.querySelector("#approvals [data-action=approve]").disabled);
    out.stillWaiting = await text(page, "#approvals");
    await page.screenshot({ path: path.join(shots, `console-four-eyes-${width}.png`) });
    // Alice signs in on the same page and approves.
    await page.click("#sign-out-link");
    await page.locator("#signin").waitFor({ state: "visible", ...wait });
    await page.fill("#token", "alice-token-0123456789");
    await page.click("#signin-submit");
    await approve.waitFor(wait);
    await approve.click();
    await page.getByText("Done.").waitFor(wait);
    await page.waitForFunction(() => document.getElementById("status").textContent === "idle");
    out.transcript = await text(page, "#transcript");
    out.decisions = await text(page, "#decisions");
  },

  async follow(page, context, out) {
    await page.goto(withToken(url, thread));
    await page.waitForFunction(() => document.getElementById("status").textContent === "working…", null, wait);
    out.statusWhileRunning = await text(page, "#status");
    await page.screenshot({ path: path.join(shots, `console-following-${width}.png`) });
    process.stdout.write("READY\n");
    await page.getByText("Through the gate.").waitFor(wait);
    await page.waitForFunction(() => document.getElementById("status").textContent === "idle", null, wait);
    out.transcript = await text(page, "#transcript");
    out.approvals = await text(page, "#approvals");
  },

  async elicit(page, context, out) {
    await page.goto(withToken(url, thread));
    await page.fill("#prompt", "Sign me up");
    await page.click("#send");
    const accept = page.locator("#approvals [data-action=answer-accept]");
    await accept.waitFor(wait);
    out.title = await text(page, "#approvals .approval .q");
    out.card = await text(page, "#approvals .approval");
    out.buttons = await page.$$eval("#approvals button", (bs) => bs.map((b) => `${b.dataset.action}:${b.textContent}`));
    out.inputs = await page.$$eval("#approvals form.answer [name]", (is) => is.map((i) => `${i.name}:${i.tagName.toLowerCase()}:${i.type}:${i.required}`));
    out.planOptions = await page.$$eval("#approvals select[name=plan] option", (os) => os.map((o) => o.textContent));
    out.markup = await page.$$eval("#approvals img, #approvals script", (n) => n.length);
    await page.screenshot({ path: path.join(shots, `console-elicitation-${width}.png`) });
    // A value the schema refuses, past the browser's checks (they are a convenience): the
    // server refuses it, the page says why, and the form keeps what was typed.
    await page.fill("#approvals input[name=name]", "Ada");
    await page.fill("#approvals input[name=age]", "-5");
    await page.selectOption("#approvals select[name=plan]", { label: "Pro" });
    await page.check("#approvals input[name=newsletter]");
    await page.$eval("#approvals form.answer", (f) => { f.noValidate = true; });
    await accept.click();
    await page.locator("#error").waitFor({ state: "visible", ...wait });
    out.refusal = await text(page, "#error-text");
    out.refusalDetails = await page.locator("#error-raw").textContent();
    await page.waitForFunction(() => !document.querySelector("#approvals [data-action=answer-accept]").disabled, null, wait);
    out.keptAge = await page.inputValue("#approvals input[name=age]");
    out.keptName = await page.inputValue("#approvals input[name=name]");
    // The browser's own check stops an empty required field before it is sent.
    await page.$eval("#approvals form.answer", (f) => { f.noValidate = false; });
    await page.fill("#approvals input[name=name]", "");
    await page.fill("#approvals input[name=age]", "36");
    await accept.click();
    out.blockedByBrowser = await page.$eval("#approvals input[name=name]", (i) => !i.validity.valid);
    await page.fill("#approvals input[name=name]", "Ada");
    await accept.click();
    await page.getByText("Signed up.").waitFor(wait);
    await page.waitForFunction(() => document.getElementById("status").textContent === "idle", null, wait);
    out.transcript = await text(page, "#transcript");
    out.approvals = await text(page, "#approvals");
    out.pwned = await page.evaluate(() => window.__pwned === 1);
  },

  async visit(page, context, out) {
    await page.goto(withToken(url, thread));
    await page.fill("#prompt", "Pay for my order");
    await page.click("#send");
    const done = page.locator("#approvals [data-action=answer-accept]");
    await done.waitFor(wait);
    out.title = await text(page, "#approvals .approval .q");
    out.link = await page.$eval("#approvals a", (a) => ({ href: a.href, text: a.textContent, rel: a.rel, target: a.target }));
    out.buttons = await page.$$eval("#approvals button", (bs) => bs.map((b) => `${b.dataset.action}:${b.textContent}`));
    await page.screenshot({ path: path.join(shots, `console-url-elicitation-${width}.png`) });
    await done.click();
    await page.getByText("Paid.").waitFor(wait);
    out.transcript = await text(page, "#transcript");
  },

  async layout(page, context, out) {
    await page.goto(withToken(url, thread));
    await page.fill("#prompt", "Please delete a.txt");
    await page.click("#send");
    await page.locator("#approvals [data-action=approve]").waitFor(wait);
    await page.getByText("Delete file needs your approval").waitFor(wait);
    out.layout = await layout(page);
    await page.screenshot({ path: path.join(shots, `console-layout-${width}.png`) });
  },
};

function withToken(u, t) {
  const start = new URL(u);
  start.searchParams.set("thread", t);
  start.searchParams.set("token", token);
  return start.toString();
}

(async () => {
  fs.mkdirSync(shots, { recursive: true });
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), "rein-agui-chromium-"));
  const w = Number(width);
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: chromiumPath,
    headless: true,
    viewport: { width: w, height: w < 600 ? 844 : 800 },
    deviceScaleFactor: 1,
    isMobile: w < 600,
    hasTouch: w < 600,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  const out = {};
  try {
    const page = context.pages()[0] || (await context.newPage());
    const errors = [];
    page.on("pageerror", (e) => errors.push(String(e)));
    await scenarios[scenario](page, context, out);
    out.pageErrors = errors;
  } finally {
    await context.close();
    fs.rmSync(profile, { recursive: true, force: true });
  }
  process.stdout.write(JSON.stringify(out) + "\n");
})().catch((e) => {
  process.stderr.write(`browser driver failed: ${e.stack || e}\n`);
  process.exit(1);
});
