// The packed tarball, installed into a fresh directory as an application
// would, smoke-tested from plain JavaScript on Node, Bun and Deno (both
// installed from the npm registry at the versions pinned here) against a
// real strata serve.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { copyFileSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { StrataServer, TOKEN } from "./server.mjs";

const sdk = fileURLToPath(new URL("../..", import.meta.url));
const RUNTIMES = { bun: "1.4.4", deno: "2.9.6" };

let server;
let app;
before(async () => {
  server = await StrataServer.start();
  app = mkdtempSync(join(tmpdir(), "strata-sdk-app-"));
  const packed = JSON.parse(execFileSync("npm", ["pack", "--json", "--pack-destination", app], { cwd: sdk, encoding: "utf8" }));
  const tarball = join(app, packed[0].filename);
  writeFileSync(
    join(app, "package.json"),
    JSON.stringify({ name: "smoke-app", private: true, type: "module", dependencies: { "@strata/streams": `file:${tarball}`, ...RUNTIMES } }),
  );
  execFileSync("npm", ["install", "--no-audit", "--no-fund", "--loglevel=error"], { cwd: app, stdio: "inherit" });
  copyFileSync(join(sdk, "test/smoke/smoke.mjs"), join(app, "smoke.mjs"));
});
after(async () => {
  await server?.stop();
  if (app) rmSync(app, { recursive: true, force: true });
});

function run(command, args) {
  const out = execFileSync(command, args, {
    cwd: app,
    encoding: "utf8",
    env: { ...process.env, STRATA_URL: server.url, STRATA_TOKEN: TOKEN },
    timeout: 120_000,
  });
  return JSON.parse(out.trim().split("\n").pop());
}

test("the tarball holds the build and its types, and no sources or tests", () => {
  const listed = JSON.parse(execFileSync("npm", ["pack", "--dry-run", "--json"], { cwd: sdk, encoding: "utf8" }))[0].files.map((f) => f.path);
  assert.ok(listed.includes("dist/index.js") && listed.includes("dist/index.d.ts"), listed.join());
  assert.ok(listed.includes("README.md") && listed.includes("CHANGELOG.md"));
  assert.ok(!listed.some((p) => p.startsWith("src/") || p.startsWith("test/")), listed.join());
});

test("Node runs the installed package", () => {
  assert.deepEqual(run(process.execPath, ["smoke.mjs"]).runtime, "node");
});

test("Bun runs the installed package", () => {
  assert.deepEqual(run(join(app, "node_modules/.bin/bun"), ["smoke.mjs"]).runtime, "bun");
});

test("Deno runs the installed package", () => {
  const answer = run(join(app, "node_modules/.bin/deno"), ["run", "--allow-net", "--allow-env", "--allow-read", "--allow-write", "smoke.mjs"]);
  assert.deepEqual(answer.runtime, "deno");
});
