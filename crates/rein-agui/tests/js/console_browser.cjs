// Drives the approval console in headless Chromium (playwright-core): type a request, see the
// approval, click approve, see the tool result and the final answer. Prints one JSON line with
// what the page showed; keeps screenshots in the given directory.
// Usage: node console_browser.cjs <node_modules dir> <chromium> <console url> <screenshot dir>
const { createRequire } = require("node:module");
const fs = require("node:fs");
const os = require("node:os");
const path = require("node:path");
const [modules, chromiumPath, url, shots] = process.argv.slice(2);
const { chromium } = createRequire(path.join(modules, "noop.js"))("playwright-core");

(async () => {
  fs.mkdirSync(shots, { recursive: true });
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), "rein-agui-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: chromiumPath,
    headless: true,
    viewport: { width: 1100, height: 640 },
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  const out = {};
  try {
    const page = context.pages()[0] || (await context.newPage());
    const errors = [];
    page.on("pageerror", (e) => errors.push(String(e)));
    // The token as `rein serve` prints it: in the console's URL (the page keeps it and takes it
    // out of the address bar).
    const start = new URL(url);
    start.searchParams.set("thread", `browser-${Date.now()}`);
    if (process.env.REIN_AGUI_TOKEN) start.searchParams.set("token", process.env.REIN_AGUI_TOKEN);
    await page.goto(start.toString());
    await page.fill("#prompt", "Please delete a.txt");
    await page.click("#send");
    const approve = page.locator("#approvals [data-action=approve]");
    await approve.waitFor({ timeout: 10000 });
    out.addressBar = page.url();
    out.question = await page.locator("#approvals .approval .q").innerText();
    out.askedCall = await page.locator("#approvals .approval pre").innerText();
    out.askedDecision = await page.locator("#decisions .decision").first().innerText();
    await page.screenshot({ path: path.join(shots, "console-approval.png") });
    await approve.click();
    await page.locator("#transcript .result").waitFor({ timeout: 10000 });
    await page.getByText("Done: I asked before deleting.").waitFor({ timeout: 10000 });
    await page.waitForFunction(() => document.getElementById("status").textContent === "idle");
    out.transcript = await page.locator("#transcript").innerText();
    out.decisions = await page.locator("#decisions").innerText();
    out.approvals = await page.locator("#approvals").innerText();
    out.error = await page.locator("#error").innerText();
    await page.screenshot({ path: path.join(shots, "console-approved.png") });

    // A second request on the same thread while it waits is refused, and the page says so.
    await page.fill("#prompt", "Please delete a.txt");
    await page.click("#send");
    await page.locator("#approvals [data-action=approve]").waitFor({ timeout: 10000 });
    const other = await context.newPage();
    await other.goto(page.url());
    await other.locator("#approvals [data-action=approve]").waitFor({ timeout: 10000 });
    out.reloadedApprovals = await other.locator("#approvals").innerText();
    await other.fill("#prompt", "ignore that, do something else");
    await other.click("#send");
    await other.locator("#error").waitFor({ state: "visible", timeout: 10000 });
    out.refusal = await other.locator("#error").innerText();
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
