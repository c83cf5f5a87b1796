/// <reference types="node" />
/**
 * `@strata/streams/node`: what only Node-like runtimes (Node, Bun, Deno with
 * its Node compatibility) can do — a producer state store in files, so a
 * restarted process continues its producers' sequences.
 */

import { createHash } from "node:crypto";
import { mkdir, open, readFile, rename } from "node:fs/promises";
import { join } from "node:path";

import type { ProducerState, ProducerStore } from "./producer.js";

/**
 * Producer states as files in `dir`, one per producer (named by a digest of
 * its key). A save writes a temporary file, syncs it and renames it over the
 * old one, then syncs the directory, so a crash leaves the old state or
 * the new, never a torn one.
 */
export class FileProducerStore implements ProducerStore {
  constructor(private readonly dir: string) {}

  private file(key: string): string {
    return join(this.dir, createHash("sha256").update(key).digest("hex").slice(0, 32) + ".json");
  }

  async load(key: string): Promise<ProducerState | undefined> {
    let text: string;
    try {
      text = await readFile(this.file(key), "utf8");
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT") return undefined;
      throw e;
    }
    const stored = JSON.parse(text) as { key: string; state: ProducerState };
    if (stored.key !== key) throw new Error(`producer state file of another key in ${this.dir}`);
    return stored.state;
  }

  async save(key: string, state: ProducerState): Promise<void> {
    await mkdir(this.dir, { recursive: true });
    const target = this.file(key);
    const temporary = `${target}.${process.pid}.tmp`;
    const handle = await open(temporary, "w");
    try {
      await handle.writeFile(JSON.stringify({ key, state }));
      await handle.sync();
    } finally {
      await handle.close();
    }
    await rename(temporary, target);
    // The rename itself survives a power loss once the directory is synced
    // (where a directory can be opened; elsewhere the rename stands).
    const dir = await open(this.dir, "r").catch(() => undefined);
    if (dir) await dir.sync().catch(() => undefined).finally(() => dir.close());
  }
}
