// The SDK in headless Chromium (Debian's chromium, driven by puppeteer-core):
// a page served here loads dist/ as ES modules and talks to a strata serve
// on another origin. The test asserts on what the page reports and saves a
// screenshot to sdk/test-output/browser.png.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { mkdirSync, readFileSync } from "node:fs";
import { join, normalize } from "node:path";
import { fileURLToPath } from "node:url";
import puppeteer from "puppeteer-core";
import { StrataServer, TOKEN } from "./server.mjs";

const sdk = fileURLToPath(new URL("../..", import.meta.url));
const CHROMIUM = process.env.CHROMIUM_BIN ?? "/usr/bin/chromium";

let server;
let pages;
let browser;
before(async () => {
  server = await StrataServer.start();
  pages = createServer((req, res) => {
    const url = new URL(req.url, "http://x");
    let file;
    if (url.pathname === "/") file = join(sdk, "test/browser/page.html");
    else if (url.pathname.startsWith("/sdk/")) file = join(sdk, "dist", normalize(url.pathname.slice(5)).replace(/^(\.\.[/\\])+/, ""));
    try {
      const body = readFileSync(file);
      const type = file.endsWith(".html") ? "text/html" : file.endsWith(".js") ? "text/javascript" : "application/octet-stream";
      res.writeHead(200, { "content-type": type }).end(body);
    } catch {
      res.writeHead(404).end();
    }
  });
  await new Promise((resolve) => pages.listen(0, "127.0.0.1", resolve));
  browser = await puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
  });
});
after(async () => {
  await browser?.close();
  pages?.close();
  await server?.stop();
});

test("a page creates a collection, appends, subscribes and observes a watch", async () => {
  const page = await browser.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  const origin = `http://127.0.0.1:${pages.address().port}`;
  const query = new URLSearchParams({ server: server.url, token: TOKEN });
  await page.goto(`${origin}/?${query}`);
  await page.waitForFunction(() => window.__result !== undefined, { timeout: 60_000 });
  const result = await page.evaluate(() => window.__result);
  mkdirSync(join(sdk, "test-output"), { recursive: true });
  await page.screenshot({ path: join(sdk, "test-output/browser.png") });
  assert.deepEqual(errors, []);
  assert.equal(result.ok, true, result.error);
  assert.deepEqual(result.seen, [42, 43]);
  assert.equal(result.invalidated, true);
  assert.match(result.watchKey, /^[0-9a-f]{16}$/);
  assert.equal(result.producerSeq, 1);
  assert.equal(result.secure, true);
});
