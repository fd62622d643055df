// Browser tests of the live page (GET / of `sluice serve`): Playwright
// (playwright-core: no browser of its own) driving Debian's chromium headless
// against real servers on loopback ports. Run by tests/web_page_test.cpp:
//   node page.mjs   with SLUICE_BINARY, SLUICE_SHARED_DIR, SLUICE_SOURCE_DIR,
//                   CHROMIUM (the browser), and optionally SCREENSHOT_DIR (PNGs
//                   of the page during a streamed run, for docs/).
// Prints "ok - NAME" or "not ok - NAME: why" per check; exits 1 if any failed.
import { spawn } from "node:child_process";
import assert from "node:assert/strict";
import { chromium } from "playwright-core";

const BIN = process.env.SLUICE_BINARY;
const SHARED = process.env.SLUICE_SHARED_DIR;
const SRC = process.env.SLUICE_SOURCE_DIR;
const DENSE = `${SHARED}/models/stories260K/stories260K.gguf`;
const MOE = `${SRC}/models/stories-moe-f16.gguf`;  // shipped; streamed below: --mem-budget 1.5 MB of its 2.6 MB
const TEMPLATE = `${SRC}/src/server/templates/qwen2.jinja`;
const SHOTS = process.env.SCREENSHOT_DIR || "";

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// `sluice serve` on a free port; resolves once /health says ok.
async function startServer(args, waitS = 30) {
  const child = spawn(BIN, ["serve", "--host", "127.0.0.1", "--port", "0", "-t", "1", ...args],
                      { stdio: ["ignore", "ignore", "pipe"] });
  let log = "";
  // Set from the start: a server whose model fails to load may exit right
  // after it says "listening", before a handler added later would see it.
  let exited = false;
  child.on("exit", () => { exited = true; });
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("no port after 30 s:\n" + log)), 30000);
    child.stderr.on("data", (d) => {
      log += d;
      const m = /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(log);
      if (m) { clearTimeout(timer); resolve(Number(m[1])); }
    });
    child.on("exit", (code) => reject(new Error(`sluice serve exited ${code}:\n${log}`)));
  });
  const url = `http://127.0.0.1:${port}`;
  let healthy = false;
  for (let i = 0; i < 10 * waitS && !exited && !healthy; i++) {
    try { healthy = (await fetch(url + "/health")).ok; } catch { /* not yet */ }
    if (!healthy) await sleep(100);
  }
  return { url, child, log: () => log, stop: () => child.kill("SIGTERM"), exited: () => exited,
           healthy: () => healthy };
}

let failed = 0;
async function check(name, fn) {
  try {
    await fn();
    console.log(`ok - ${name}`);
  } catch (e) {
    failed++;
    console.log(`not ok - ${name}: ${e && e.stack ? e.stack : e}`);
  }
}

// A page with console errors and page errors collected.
async function openPage(browser, url, viewport = { width: 1280, height: 900 }) {
  const context = await browser.newContext({ viewport });
  const page = await context.newPage();
  const errors = [];
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(url + "/");
  return { page, errors, context };
}

async function waitLive(page) {
  await page.waitForFunction(() => document.getElementById("status").textContent === "live", null, { timeout: 20000 });
}

// Fills the chat settings and sends one message; returns the assistant node.
async function sendChat(page, text, settings = {}) {
  await page.evaluate((s) => { document.getElementById("settings").open = true; }, settings);
  for (const [k, v] of Object.entries(settings)) {
    if (k === "mode") await page.selectOption("#mode", v);
    else await page.fill("#" + k, String(v));
  }
  await page.fill("#prompt", text);
  await page.press("#prompt", "Enter");
  return page.locator(".msg.assistant").last();
}

const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || "/usr/bin/chromium", headless: true,
                                         args: ["--no-sandbox"] });
const dense = await startServer(["-m", DENSE, "--chat-template", TEMPLATE, "--max-seqs", "16"]);
try {
  await check("the page loads, shows the model and the stats, without console errors", async () => {
    const { page, errors, context } = await openPage(browser, dense.url);
    await waitLive(page);
    await page.waitForFunction(() => document.getElementById("model-info").textContent.includes("llama"));
    const layers = await page.locator("#layers span").count();
    assert.ok(layers > 0, "one cell per layer");
    assert.equal(await page.locator("#layers span").first().getAttribute("data-tier"), "ram");
    assert.equal(await page.locator("#layers span").first().getAttribute("data-tiers"), "ram");
    await sleep(2200);  // a few polls
    assert.deepEqual(errors, []);
    await context.close();
  });

  await check("a chat streams a reply from stories260K, and the conversation survives a reload", async () => {
    const { page, errors, context } = await openPage(browser, dense.url);
    await waitLive(page);
    await page.evaluate(() => {
      window.__updates = 0;
      // Records, not callbacks: under load one callback can carry many pieces.
      new MutationObserver((records) => { window.__updates += records.length; }).observe(document.getElementById("log"),
                                                             { subtree: true, characterData: true, childList: true });
    });
    const node = await sendChat(page, "Tell me a story.", { temperature: 0.8, max_tokens: 200, system: "Be kind." });
    await page.waitForFunction(() => document.querySelector(".msg.assistant:last-child")?.dataset.done === "1", null,
                               { timeout: 20000 });
    const text = await node.locator(".text").textContent();
    assert.ok(text.length > 20, "a reply of some length: " + JSON.stringify(text));
    assert.ok(await page.evaluate(() => window.__updates) > 3, "the reply arrived in several pieces");
    assert.match(await node.locator(".note").textContent(), /\[(stop|length)\]/);
    await page.reload();
    await waitLive(page);
    assert.equal(await page.locator(".msg.user .text").first().textContent(), "Tell me a story.");
    assert.equal(await page.locator(".msg.assistant .text").first().textContent(), text);
    if (SHOTS) await page.locator("#clear").click();
    assert.deepEqual(errors, []);
    await context.close();
  });

  await check("Stop ends a streaming reply (and Escape does too)", async () => {
    const { page, context } = await openPage(browser, dense.url);
    await waitLive(page);
    // A slow link (2 KB/s) so the reply is still arriving when Stop is pressed.
    const cdp = await context.newCDPSession(page);
    await cdp.send("Network.enable");
    await cdp.send("Network.emulateNetworkConditions",
                   { offline: false, latency: 0, downloadThroughput: 2000, uploadThroughput: -1 });
    for (const how of ["button", "escape"]) {
      const node = await sendChat(page, "Once upon a time", { temperature: 0.8, max_tokens: 400, mode: "text" });
      await page.waitForFunction(() => (document.querySelector(".msg.assistant:last-child .text")?.textContent || "").length > 0,
                                 null, { timeout: 20000 });
      assert.equal(await page.locator("#stop").isEnabled(), true);
      if (how === "button") await page.locator("#stop").click();
      else await page.keyboard.press("Escape");
      await page.waitForFunction(() => document.querySelector(".msg.assistant:last-child")?.dataset.done === "1");
      assert.equal(await node.getAttribute("data-stopped"), "1");
      assert.match(await node.locator(".note").textContent(), /stopped/);
      const at = await node.locator(".text").textContent();
      await sleep(700);
      assert.equal(await node.locator(".text").textContent(), at, "nothing arrives after Stop");
      assert.equal(await page.locator("#send").isEnabled(), true);
    }
    await cdp.send("Network.emulateNetworkConditions", { offline: false, latency: 0, downloadThroughput: -1, uploadThroughput: -1 });
    // The server let the requests go: nothing stays in flight.
    await page.waitForFunction(() => document.getElementById("sched").textContent.includes("HTTP in flight 0"), null,
                               { timeout: 20000 });
    await context.close();
  });

  await check("during a burst of API requests the KV and throughput panels change", async () => {
    const { page, errors, context } = await openPage(browser, dense.url);
    await waitLive(page);
    const kv0 = await page.locator("#kv-used").textContent();
    let busy = true, sent = 0;
    const one = async () => {
      while (busy) {
        sent++;
        await fetch(dense.url + "/v1/completions", {
          method: "POST", headers: { "Content-Type": "application/json" },
          body: JSON.stringify({ prompt: "Once upon a time", max_tokens: 300, temperature: 1, ignore_eos: true }),
        }).then((r) => r.text());
      }
    };
    const workers = Array.from({ length: 12 }, one);
    let shot = false;
    try {
      await page.waitForFunction(() => {
        const kv = Number(document.getElementById("kv-plot").dataset.last || 0);
        const tps = Number(document.getElementById("tps-plot").dataset.last || 0);
        return kv > 0 && tps > 0;
      }, null, { timeout: 30000, polling: 100 });
      if (SHOTS) {
        await sendChat(page, "Tell me a story about a dog.", { temperature: 0.8, max_tokens: 300, mode: "chat" });
        await sleep(1500);
        await page.screenshot({ path: `${SHOTS}/page-dense.png` });
        shot = true;
      }
    } finally {
      busy = false;
      await Promise.all(workers);
    }
    assert.ok(sent >= 12);
    assert.notEqual(await page.locator("#kv-used").textContent(), "–");
    assert.match(await page.locator("#lat-table").textContent(), /TTFTp50 [0-9.]+ ms/);
    assert.ok(kv0 !== undefined && (!SHOTS || shot));
    assert.deepEqual(errors, []);
    await context.close();
  });

  await check("model output holding <script> renders as text", async () => {
    const { page, context } = await openPage(browser, dense.url);
    await waitLive(page);
    const evil = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2"><b>bold</b>';
    // The server's stream, with the model's text replaced by markup.
    await page.route("**/v1/chat/completions", (route) => {
      const chunk = (delta, finish) => "data: " + JSON.stringify({ id: "x", object: "chat.completion.chunk",
        choices: [{ index: 0, delta, finish_reason: finish }] }) + "\n\n";
      route.fulfill({ status: 200, contentType: "text/event-stream",
                      body: chunk({ role: "assistant", content: evil.slice(0, 20) }, null) +
                            chunk({ content: evil.slice(20) }, null) + chunk({}, "stop") + "data: [DONE]\n\n" });
    });
    const node = await sendChat(page, "<i>also the user's text</i>", { mode: "chat" });
    await page.waitForFunction(() => document.querySelector(".msg.assistant:last-child")?.dataset.done === "1");
    assert.equal(await node.locator(".text").textContent(), evil);
    assert.equal(await page.locator("#log script, #log img, #log b, #log i").count(), 0);
    assert.equal(await page.evaluate(() => window.__pwned), undefined);
    assert.equal(await page.locator(".msg.user .text").last().textContent(), "<i>also the user's text</i>");
    await sleep(300);
    assert.equal(await page.evaluate(() => window.__pwned), undefined);
    await context.close();
  });

  await check("at 360 px the page fits and works by keyboard alone", async () => {
    const { page, errors, context } = await openPage(browser, dense.url, { width: 360, height: 740 });
    await waitLive(page);
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    assert.ok(overflow <= 0, "no horizontal scrolling: " + overflow + " px too wide");
    let reached = false;
    for (let i = 0; i < 40 && !reached; i++) {
      await page.keyboard.press("Tab");
      reached = await page.evaluate(() => document.activeElement?.id === "prompt");
    }
    assert.ok(reached, "Tab reaches the message box");
    await page.keyboard.type("Hi");
    await page.keyboard.press("Enter");
    await page.waitForFunction(() => document.querySelector(".msg.assistant:last-child")?.dataset.done === "1", null,
                               { timeout: 20000 });
    await page.keyboard.press("Shift+Tab");  // focus moves on, and is shown
    assert.ok(await page.evaluate(() => document.activeElement && document.activeElement !== document.body));
    assert.deepEqual(errors, []);
    await context.close();
  });
} finally {
  dense.stop();
}

const moe = await startServer(["-m", MOE, "--chat-template", TEMPLATE, "--mem-budget", "1500000"]);
try {
  await check("stories-moe, experts streamed: the heat map, routed and per expert, changes after a request", async () => {
    const { page, errors, context } = await openPage(browser, moe.url);
    await waitLive(page);
    await page.waitForFunction(() => !document.getElementById("experts-box").classList.contains("hidden"));
    await page.waitForFunction(() => document.getElementById("heat").dataset.chosen !== undefined);
    // Routed layers: the experts' bytes on disk, the rest in RAM, each tier apart.
    assert.equal(await page.locator("#layers span").first().getAttribute("data-tiers"), "ram,disk");
    assert.match(await page.locator("#layers span").first().getAttribute("title"), /RAM [0-9.]+ [KM]B, disk [0-9.]+ [KM]B/);
    assert.equal(await page.locator("#heat-mode option[value=resident]").isDisabled(), false);
    const before = Number(await page.locator("#heat").getAttribute("data-total"));
    const chosen0 = Number(await page.locator("#heat").getAttribute("data-chosen"));
    const r = await fetch(moe.url + "/v1/completions", {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ prompt: "Once upon a time", max_tokens: 24, temperature: 0 }),
    });
    assert.equal(r.status, 200);
    await page.waitForFunction((b) => Number(document.getElementById("heat").dataset.total) > b, before,
                               { timeout: 10000 });
    assert.match(await page.locator("#heat-text").textContent(), /layer 0: expert \d+/);
    // Per expert: which are in slots, and how often each was ready or predicted when chosen.
    await page.waitForFunction((c) => Number(document.getElementById("heat").dataset.chosen) > c, chosen0,
                               { timeout: 10000 });
    await page.selectOption("#heat-mode", "resident");
    assert.equal(await page.locator("#heat").getAttribute("data-mode"), "resident");
    assert.ok(Number(await page.locator("#heat").getAttribute("data-resident")) > 0);
    assert.match(await page.locator("#heat-text").textContent(), /^in a slot: layer 0: \d+ of 16 experts/);
    for (const [mode, name] of [["ready", "ready when chosen"], ["predicted", "predicted when chosen"]]) {
      await page.selectOption("#heat-mode", mode);
      assert.match(await page.locator("#heat-text").textContent(),
                   new RegExp("^" + name + ": layer 0: least for expert \\d+ \\([0-9.]+ %\\)"));
      assert.match(await page.locator("#heat-note").textContent(), /red: never, green: every time \([1-9]\d* experts/);
    }
    await page.selectOption("#heat-mode", "window");
    if (SHOTS) {
      await page.locator("#heat").scrollIntoViewIfNeeded();
      const node = await sendChat(page, "Tell me a story about a cat.", { temperature: 0.8, max_tokens: 300, mode: "chat" });
      await sleep(1200);
      await page.screenshot({ path: `${SHOTS}/page-moe.png`, fullPage: true });
      await node.isVisible();
    }
    assert.deepEqual(errors, []);
    await context.close();
  });
} finally {
  moe.stop();
}

// Three tiers on the GPU (a device, or a build for the CUDA emulator,
// tests/cuda_emu): the layer the device holds is drawn as GPU, the streamed
// ones as disk. Without a cuda backend here the check says why and skips.
// A busy machine (or the emulator) may take long to load or to give up.
const gpu = await startServer(["-m", DENSE, "--backend", "cuda", "--kv-budget-mib", "1", "--gpu-budget", "2000K",
                               "--mem-budget", "1000K"], 120);
try {
  const name = "three tiers on cuda: the layer the GPU holds is drawn as GPU, the streamed ones as disk";
  if (gpu.exited()) {
    console.log(`ok - ${name} # SKIP ${gpu.log().trim().split("\n").pop()}`);
  } else {
    await check(name, async () => {
      assert.ok(gpu.healthy(), "the server neither loaded the model nor exited in 120 s:\n" + gpu.log());
      const { page, errors, context } = await openPage(browser, gpu.url);
      await waitLive(page);
      await page.waitForFunction(() => document.querySelectorAll("#layers span").length === 5);
      assert.equal(await page.locator("#layers span").nth(0).getAttribute("data-tiers"), "gpu");
      assert.match(await page.locator("#layers span").nth(0).getAttribute("title"), /^layer 0: GPU [0-9.]+ [KM]B$/);
      for (let l = 1; l < 5; ++l) assert.equal(await page.locator("#layers span").nth(l).getAttribute("data-tiers"), "disk");
      const r = await fetch(gpu.url + "/v1/completions", {
        method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ prompt: "Once upon a time", max_tokens: 8, temperature: 0 }),
      });
      assert.equal(r.status, 200);
      assert.match((await r.json()).choices[0].text, /^, there was a little girl/);
      assert.deepEqual(errors, []);
      await context.close();
    });
  }
} finally {
  gpu.stop();
}

const keyed = await startServer(["-m", DENSE, "--api-key", "sekrit-key"]);
try {
  await check("with --api-key the stats need it; the page asks for it and then goes live", async () => {
    const { page, context } = await openPage(browser, keyed.url);
    await page.waitForFunction(() => document.getElementById("status").textContent.includes("API key"));
    assert.equal(await page.evaluate(async () => (await fetch("/stats")).status), 401);
    assert.equal(await page.evaluate(async () => (await fetch("/stats", { headers: { Authorization: "Bearer nope" } })).status), 401);
    await page.fill("#api-key", "sekrit-key");
    await page.click("#key-save");
    await waitLive(page);
    assert.equal(await page.evaluate(async () => (await fetch("/stats", { headers: { Authorization: "Bearer sekrit-key" } })).status), 200);
    await page.waitForFunction(() => document.getElementById("model-info").textContent.includes("llama"));
    await context.close();
  });
} finally {
  keyed.stop();
}

await browser.close();
console.log(failed ? `${failed} check(s) failed` : "all page checks passed");
process.exit(failed ? 1 : 0);
