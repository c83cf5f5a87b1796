// The README's TypeScript examples compile against the built declarations:
// each ```ts block becomes a module (importing the package by its own name)
// and tsc type-checks them all. A renamed method or option fails here.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const sdk = fileURLToPath(new URL("../..", import.meta.url));

// What the examples use without defining it.
const PRELUDE = {
  token: "declare const token: string;",
  store: "declare const store: ProducerStore;",
  signal: "declare const signal: AbortSignal;",
  bill: "declare function bill(value: unknown): Promise<void>;",
  orders: "declare const orders: Collection<any>;",
};

test("every TypeScript example in the README type-checks", () => {
  const readme = readFileSync(join(sdk, "README.md"), "utf8");
  const blocks = [...readme.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]);
  assert.ok(blocks.length >= 4, `only ${blocks.length} examples found`);
  const dir = join(sdk, "test-output", "readme-examples");
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const files = blocks.map((code, i) => {
    const own = new Set([...code.matchAll(/\b(?:const|let|function)\s+(\w+)/g)].map((m) => m[1]));
    const imports = code.includes('from "@strata/streams"') ? "" : 'import { StreamsClient, generateKey } from "@strata/streams";\n';
    const prelude = Object.entries(PRELUDE)
      .filter(([name]) => !own.has(name))
      .map(([, line]) => line)
      .join("\n");
    const file = join(dir, `example${i}.ts`);
    writeFileSync(
      file,
      `import type { Collection, ProducerStore } from "@strata/streams";\n${imports}${prelude}\n${code}\nexport {};\n`,
    );
    return file;
  });
  const tsc = join(sdk, "node_modules/.bin/tsc");
  const args = ["--noEmit", "--strict", "--target", "ES2022", "--module", "NodeNext", "--moduleResolution", "NodeNext", "--lib", "ES2022,DOM", "--skipLibCheck", ...files];
  try {
    execFileSync(tsc, args, { cwd: sdk, encoding: "utf8" });
  } catch (e) {
    assert.fail(`README examples do not compile:\n${e.stdout}`);
  }
});
