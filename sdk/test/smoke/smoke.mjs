// The packed SDK from plain JavaScript, as an application installs it:
// create a collection with a watch, append, read, subscribe, derive a watch
// key and observe it, and produce with the state in files. Runs unchanged on Node, Bun and Deno; prints one JSON
// line and exits 0 when every step agreed with the server.
import { StreamsClient, generateKey } from "@strata/streams";

const baseUrl = globalThis.process?.env?.STRATA_URL ?? globalThis.Deno?.env.get("STRATA_URL");
const token = globalThis.process?.env?.STRATA_TOKEN ?? globalThis.Deno?.env.get("STRATA_TOKEN");
const runtime = globalThis.Bun ? "bun" : globalThis.Deno ? "deno" : "node";
const name = `smoke/${runtime}-${Date.now()}`;

const fail = (what) => {
  throw new Error(`${runtime}: ${what}`);
};
const client = new StreamsClient({ baseUrl, token });
const orders = await client.createStream(name, {
  encryptionKey: generateKey(),
  format: { kind: "json" },
  watches: [{ name: "by-customer", fields: ["/customerId"] }],
});
const watch = orders.watch("by-customer");
const key = await watch.key({ customerId: "c1" });
const start = await watch.wait(key, { timeoutMs: 50 });
await orders.append({ customerId: "c1", total: 42 }, { routingKey: "c1" });
await orders.appendMany([{ n: 1 }, { n: 2 }], { routingKey: "c2" });
const page = await orders.read({ routingKey: "c1" });
if (JSON.stringify(page.records) !== '[{"customerId":"c1","total":42}]') fail(`read ${JSON.stringify(page.records)}`);
const seen = [];
for await (const r of orders.subscribe({ routingKey: "c2" })) {
  seen.push(r.value.n);
  if (seen.length === 2) break;
}
if (seen.join() !== "1,2") fail(`subscribe ${seen}`);
const changed = await watch.wait(key, { cursor: start.cursor, timeoutMs: 5_000 });
if (!changed.invalidated) fail("no invalidation");
// The producer keeps its state in files (the package's Node entry point).
const { FileProducerStore } = await import("@strata/streams/node");
const store = new FileProducerStore(`producer-state-${runtime}`);
const producer = orders.producer("smoke", { routingKey: "p", store });
await Promise.all([producer.append(1), producer.append(2), producer.append(3)]);
await producer.close();
const produced = await orders.read({ routingKey: "p" });
if (produced.records.join() !== "1,2,3") fail(`producer ${produced.records}`);
const state = await store.load(JSON.stringify([name, "p", "smoke"]));
if (state?.epoch !== 0 || state?.seq < 1) fail(`producer state ${JSON.stringify(state)}`);
await orders.delete();
console.log(JSON.stringify({ runtime, ok: true, watchKey: key }));
