// Starts and kills a real `strata serve` (STRATA_BIN) for the end-to-end
// tests: a fresh local-directory store per server, a free port, and a wait
// on /healthz (a condition, not a sleep).
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

export const TOKEN = "sdk-e2e-token-0123456789";

function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

function binary() {
  const bin = process.env.STRATA_BIN;
  if (!bin) throw new Error("STRATA_BIN is not set (sdk/test/run.sh sets it)");
  return bin;
}

export class StrataServer {
  static async start(flags = []) {
    const server = await StrataServer.make(mkdtempSync(join(tmpdir(), "strata-sdk-")), flags);
    await server.launch();
    return server;
  }

  /** Two fleet members on one store; `flags` for both. */
  static async fleet(flags = []) {
    const store = mkdtempSync(join(tmpdir(), "strata-sdk-fleet-"));
    const ports = [await freePort(), await freePort()];
    const members = ports.map(
      (port) =>
        new StrataServer(binary(), store, port, [
          "--fleet", "--advertise-url", `http://127.0.0.1:${port}`, "--shards", "1",
          "--heartbeat-ms", "300", "--fleet-lease-ms", "2000", ...flags,
        ]),
    );
    await Promise.all(members.map((m) => m.launch()));
    return members;
  }

  static async make(store, flags) {
    return new StrataServer(binary(), store, await freePort(), flags);
  }

  constructor(bin, store, port, flags) {
    Object.assign(this, { bin, store, port, flags, log: "" });
    this.url = `http://127.0.0.1:${port}`;
  }

  async launch() {
    const args = ["serve", "--listen", `127.0.0.1:${this.port}`, "--store", this.store, "--auth-token", TOKEN, ...this.flags];
    this.child = spawn(this.bin, args, { stdio: ["ignore", "ignore", "pipe"] });
    this.child.stderr.on("data", (d) => {
      this.log = (this.log + d).slice(-20_000);
    });
    const exited = new Promise((resolve) => this.child.once("exit", resolve));
    for (let i = 0; i < 600; i++) {
      const up = await fetch(`${this.url}/healthz`).then((r) => r.ok, () => false);
      if (up) return;
      const gone = await Promise.race([exited.then(() => true), new Promise((r) => setTimeout(() => r(false), 50))]);
      if (gone) throw new Error(`strata exited at start:\n${this.log}`);
    }
    throw new Error(`strata did not answer /healthz:\n${this.log}`);
  }

  /**
   * kill -9, then start again on the same store and port. Calls made while
   * one is under way wait for it (a test may crash the server from a fetch
   * hook while its main loop crashes it too: the second kill must not hit
   * the process the first is starting).
   */
  async crashAndRestart() {
    const previous = this.restarting ?? Promise.resolve();
    const next = previous.then(async () => {
      await this.kill();
      await this.launch();
    });
    this.restarting = next.catch(() => {});
    return next;
  }

  async kill() {
    if (!this.child || this.child.exitCode !== null || this.child.signalCode !== null) return;
    const exited = new Promise((resolve) => this.child.once("exit", resolve));
    this.child.kill("SIGKILL");
    await exited;
  }

  async stop() {
    await this.kill();
    rmSync(this.store, { recursive: true, force: true });
  }
}
