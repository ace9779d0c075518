// Attacks a rein-agui server on 127.0.0.1 from pages of other origins in headless Chromium
// (playwright-core), the way any web page the user visits could:
// 1. a page on another origin (a second server on 127.0.0.1, another port) sends a "simple"
//    no-cors fetch (text/plain: no preflight), a JSON fetch with a token it somehow knows
//    (preflighted), and an HTML form post (enctype text/plain, a body that is valid JSON);
// 2. a DNS-rebinding page: served as http://rebind.test:<port>/ with rebind.test resolving to
//    127.0.0.1, so the browser takes the server for the page's own origin and lets it read.
// Prints one JSON line with what each page saw; the Rust test checks that the store holds none
// of the threads the pages tried to start.
// Usage: node cross_site_browser.cjs <node_modules dir> <chromium> <server base url> <token>
const { createRequire } = require("node:module");
const fs = require("node:fs");
const http = require("node:http");
const os = require("node:os");
const path = require("node:path");
const [modules, chromiumPath, base, token] = process.argv.slice(2);
const { chromium } = createRequire(path.join(modules, "noop.js"))("playwright-core");
const target = new URL(base);

const run = (thread) => JSON.stringify({ threadId: thread, runId: "r1", messages: [{ id: "m1", role: "user", content: "delete a.txt" }] });

// The attacker's page. The form's one field is named so that `name=value` is a JSON document.
const formName = run("xsite-form").slice(0, -3) + ',"pad":"';
const attackPage = `<!doctype html><html><body>
<form id="f" method="POST" action="${target.origin}/agent" enctype="text/plain" target="sink">
<input type="hidden" name='${formName.replace(/'/g, "&#39;")}' value='"}]}'>
</form>
<iframe name="sink" id="sink"></iframe>
<script>
window.results = {};
window.done = (async () => {
  const r = window.results;
  try {
    await fetch("${target.origin}/agent", { method: "POST", mode: "no-cors", headers: { "Content-Type": "text/plain" }, body: ${JSON.stringify(run("xsite-nocors"))} });
    r.noCors = "sent (opaque answer)";
  } catch (e) { r.noCors = "failed: " + e.message; }
  try {
    const res = await fetch("${target.origin}/agent", { method: "POST", headers: { "Content-Type": "application/json", Authorization: "Bearer ${token}" }, body: ${JSON.stringify(run("xsite-json"))} });
    r.json = "answered " + res.status;
  } catch (e) { r.json = "blocked: " + e.message; }
  try {
    const res = await fetch("${target.origin}/threads/xsite-json", { headers: { Authorization: "Bearer ${token}" } });
    r.read = "answered " + res.status;
  } catch (e) { r.read = "blocked: " + e.message; }
  await new Promise((resolve) => {
    document.getElementById("sink").addEventListener("load", resolve, { once: true });
    document.getElementById("f").submit();
    setTimeout(resolve, 5000);
  });
  r.form = "submitted";
})();
</script></body></html>`;

// The rebinding page: same origin as the server in the browser's eyes.
const rebindPage = `<!doctype html><html><body><script>
window.results = {};
window.done = (async () => {
  const r = window.results;
  const post = await fetch("/agent", { method: "POST", headers: { "Content-Type": "application/json" }, body: ${JSON.stringify(run("xsite-rebind"))} });
  r.post = { status: post.status, body: await post.text() };
  const read = await fetch("/threads/xsite-rebind");
  r.read = { status: read.status, body: await read.text() };
  const page = await fetch("/console.js");
  r.console = { status: page.status };
})();
</script></body></html>`;

(async () => {
  const attacker = http.createServer((req, res) => {
    res.writeHead(200, { "Content-Type": "text/html" });
    res.end(attackPage);
  });
  await new Promise((resolve) => attacker.listen(0, "127.0.0.1", resolve));
  const attackerUrl = `http://127.0.0.1:${attacker.address().port}/`;
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), "rein-agui-xsite-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: chromiumPath,
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync",
      `--host-resolver-rules=MAP rebind.test 127.0.0.1`,
      // The browser's own local-network protections vary by version and vendor: turned off,
      // so what stops these pages is the server.
      "--disable-features=LocalNetworkAccessChecks,PrivateNetworkAccessSendPreflights,PrivateNetworkAccessRespectPreflightResults,BlockInsecurePrivateNetworkRequests"],
  });
  const out = { attackerOrigin: attackerUrl };
  try {
    const page = context.pages()[0] || (await context.newPage());
    await page.goto(attackerUrl);
    await page.evaluate(() => window.done);
    out.crossOrigin = await page.evaluate(() => window.results);

    const rebindUrl = `http://rebind.test:${target.port}/`;
    await context.route(rebindUrl, (route) => route.fulfill({ status: 200, contentType: "text/html", body: rebindPage }));
    const rebound = await context.newPage();
    await rebound.goto(rebindUrl);
    await rebound.evaluate(() => window.done);
    out.rebinding = await rebound.evaluate(() => window.results);
  } finally {
    await context.close();
    attacker.close();
    fs.rmSync(profile, { recursive: true, force: true });
  }
  process.stdout.write(JSON.stringify(out) + "\n");
})().catch((e) => {
  process.stderr.write(`browser driver failed: ${e.stack || e}\n`);
  process.exit(1);
});
