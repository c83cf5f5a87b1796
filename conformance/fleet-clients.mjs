// The upstream Durable Streams client (@durable-streams/client, its
// IdempotentProducer) producing through one member of a three-member strata
// fleet while the shard's owner is killed (SIGKILL) and, when the new owner is
// the third member, drained (SIGTERM). Afterwards the stream holds every
// message exactly once, in order, read through every live member.
//
// Run by conformance/fleet-clients.sh (it starts the fleet and passes
// MEMBER_URLS, MEMBER_PIDS, STRATA_BIN and STORE).
import { execFileSync } from "node:child_process";
import { DurableStream, IdempotentProducer } from "@durable-streams/client";

const urls = process.env.MEMBER_URLS.split(",");
const pids = process.env.MEMBER_PIDS.split(",").map(Number);
const MESSAGES = 600;

function ownerUrl() {
  const out = execFileSync(process.env.STRATA_BIN, [
    "fleet", "status", "--store", process.env.STORE, "--fleet-lease-ms", "2000", "--json",
  ]);
  const status = JSON.parse(out);
  const row = status.shards[0];
  return row.computed_owner === row.manifest_instance ? row.computed_owner_url : null;
}

async function until(what, condition, ms = 30000) {
  const deadline = Date.now() + ms;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function readAll(base, name) {
  const out = [];
  let offset = "-1";
  for (let i = 0; i < 10000; i++) {
    const r = await fetch(`${base}/v1/stream/${name}?offset=${offset}`);
    if (r.status === 503) { await new Promise((res) => setTimeout(res, 100)); continue; }
    if (r.status !== 200) throw new Error(`read via ${base}: ${r.status} ${await r.text()}`);
    out.push(...(await r.json()));
    const next = r.headers.get("stream-next-offset");
    if (r.headers.has("stream-up-to-date") || next === offset) return out;
    offset = next;
  }
  throw new Error("read did not end");
}

const owner = ownerUrl();
if (!owner) throw new Error("the fleet has not settled");
const others = urls.filter((u) => u !== owner);
const via = others[0];
const name = `fleet-client-${process.pid}`;
const stream = await DurableStream.create({ url: `${via}/v1/stream/${name}`, contentType: "application/json" });
const errors = [];
const producer = new IdempotentProducer(stream, "fleet-client", {
  lingerMs: 2,
  onError: (e) => errors.push(String(e)),
});

for (let i = 0; i < MESSAGES; i++) {
  producer.append(JSON.stringify(`m${i}`));
  if (i === 200) {
    await producer.flush();
    process.kill(pids[urls.indexOf(owner)], "SIGKILL");
    console.log(`killed the owner ${owner}; producing through ${via}`);
  }
  if (i === 400) {
    await producer.flush();
    let next = null;
    await until("a new owner", async () => (next = ownerUrl()) !== null && next !== owner);
    if (next !== via) {
      process.kill(pids[urls.indexOf(next)], "SIGTERM");
      console.log(`drained the new owner ${next}`);
    } else {
      console.log(`the new owner is ${via} itself; not draining it`);
    }
  }
  if (i % 50 === 0) await producer.flush();
}
await producer.flush();
await producer.detach();
if (errors.length) throw new Error(`producer errors: ${errors.slice(0, 5).join("; ")}`);

const expected = Array.from({ length: MESSAGES }, (_, i) => `m${i}`);
const records = await readAll(via, name);
const same = records.length === expected.length && records.every((r, i) => r === expected[i]);
if (!same) {
  throw new Error(`${records.length} records for ${MESSAGES} messages; first difference at ${records.findIndex((r, i) => r !== expected[i])}`);
}
console.log(`fleet-clients: ${MESSAGES} messages exactly once, in order, through a fleet that lost its owner`);
