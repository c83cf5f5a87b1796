#!/usr/bin/env python3
"""Consumer-group throughput and latency (docs/BENCHMARKS.md).

Two modes. `--mode drain` (the default) is described first; `--mode e2e`
appends while the workers pull: --appenders threads append --records records
(records:batch of --batch, each batch to the next routing key) while the
workers long-poll (waitMs 1000) and ack, and the line adds the delivery
latency from each batch's append acknowledgement to the pull that received
its record (p50/p99), and the WAL objects the shard wrote per 1,000 messages
(counted from the WAL slots of the local store: slots are numbered in order).

Loads one JSON collection with --records records over --keys routing keys (in
records:batch appends of --batch records, one key per batch), configures one
consumer (maxBatchRecords = --max), and runs --workers threads that each loop
pull(max) -> settle(ack every message) until the consumer's backlog is 0.
Prints one JSON line: messages/s over the drain, pull and settle latency
percentiles, redeliveries (messages seen twice), the server's peak RSS, and
with --put-latency-ms the store latency the server emulated. Every pull and
settle waits for its change's WAL write, like an append.

    python3 bench/consumers.py                                  # local dir
    STRATA_BIN=target/release/strata python3 bench/consumers.py --put-latency-ms 25
"""

import argparse
import json
import os
import tempfile
import threading
import time
import urllib.request

from scan import free_port, start  # the same server start as the scan bench

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KEY = "c3RyYXRhLWJlbmNoLWtleS0zMi1ieXRlcy1sb25nISE"
NAME = "consumer-bench"


def request(method, url, body=None, headers=None):
    req = urllib.request.Request(url, data=body, method=method)
    req.add_header("Prisma-Encryption-Key", KEY)
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    with urllib.request.urlopen(req, timeout=60) as answer:
        return answer.status, answer.read()


def load(base, args):
    url = f"{base}/v1/streams/{NAME}/records:batch"
    n = 0
    while n < args.records:
        count = min(args.batch, args.records - n)
        body = "[" + ",".join(json.dumps({"n": n + i}) for i in range(count)) + "]"
        key = f"k{(n // args.batch) % args.keys}"
        status, _ = request("POST", url, body.encode(),
                            {"Prisma-Routing-Key": key, "Content-Type": "application/json"})
        assert status == 200, status
        n += count


def percentile(values, p):
    if not values:
        return None
    values = sorted(values)
    return round(values[min(len(values) - 1, int(len(values) * p))] * 1000, 2)


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return None


def wal_slot_max(data):
    best = 0
    shards = os.path.join(data, "shards")
    for shard in os.listdir(shards) if os.path.isdir(shards) else []:
        wal = os.path.join(shards, shard, "wal")
        for name in os.listdir(wal) if os.path.isdir(wal) else []:
            if name.isdigit():
                best = max(best, int(name))
    return best


def appender(base, args, stats, lock, first, step):
    url = f"{base}/v1/streams/{NAME}/records:batch"
    batches = (args.records + args.batch - 1) // args.batch
    for b in range(first, batches, step):
        lo = b * args.batch
        count = min(args.batch, args.records - lo)
        body = "[" + ",".join(json.dumps({"n": lo + i}) for i in range(count)) + "]"
        status, _ = request("POST", url, body.encode(),
                            {"Prisma-Routing-Key": f"k{b % args.keys}",
                             "Content-Type": "application/json"})
        assert status == 200, status
        acked = time.monotonic()
        with lock:
            for i in range(count):
                stats["acked_at"][lo + i] = acked


def worker(base, args, stats, lock, done):
    pull_url = f"{base}/v1/streams/{NAME}/consumers/bench:pull"
    settle_url = f"{base}/v1/streams/{NAME}/consumers/bench:settle"
    pull_body = json.dumps({"max": args.max, "waitMs": 1000 if args.mode == "e2e" else 0}).encode()
    while not done.is_set():
        t0 = time.monotonic()
        status, body = request("POST", pull_url, pull_body)
        t1 = time.monotonic()
        assert status == 200, status
        answer = json.loads(body)
        messages = answer["messages"]
        with lock:
            stats["pull"].append(t1 - t0)
            for m in messages:
                if m["id"] in stats["seen"]:
                    stats["redelivered"] += 1
                stats["seen"].add(m["id"])
                acked = stats["acked_at"].get(m["value"]["n"])
                if acked is not None:
                    stats["delivery"].append(max(0.0, t1 - acked))
        if not messages:
            if answer["backlog"] == 0 and stats["appended_all"].is_set():
                done.set()
            continue
        acks = [{"leaseToken": m["leaseToken"]} for m in messages]
        t2 = time.monotonic()
        status, body = request("POST", settle_url, json.dumps({"acks": acks}).encode())
        t3 = time.monotonic()
        assert status == 200, status
        settled = json.loads(body)
        with lock:
            stats["settle"].append(t3 - t2)
            stats["acked"] += settled["acked"]
            stats["stale"] += settled["stale"]
            if settled["backlog"] == 0 and stats["appended_all"].is_set():
                done.set()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--keys", type=int, default=1_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--max", type=int, default=10)
    parser.add_argument("--put-latency-ms", type=int, default=0)
    parser.add_argument("--mode", choices=["drain", "e2e"], default="drain")
    parser.add_argument("--appenders", type=int, default=4)
    args = parser.parse_args()
    binary = os.environ.get("STRATA_BIN", os.path.join(ROOT, "target/release/strata"))
    with tempfile.TemporaryDirectory() as store, open(os.path.join(store, "server.log"), "w") as log:
        extra = ["--dev-default-key", KEY]
        if args.put_latency_ms:
            extra += ["--emulate-put-latency-ms", str(args.put_latency_ms)]
        server, base = start(binary, os.path.join(store, "data"), free_port(), log, extra)
        try:
            status, _ = request("PUT", f"{base}/v1/streams/{NAME}",
                                b'{"format":{"kind":"json"}}')
            assert status == 201, status
            stats = {"pull": [], "settle": [], "seen": set(), "redelivered": 0,
                     "acked": 0, "stale": 0, "acked_at": {}, "delivery": [],
                     "appended_all": threading.Event()}
            if args.mode == "drain":
                load(base, args)
                stats["appended_all"].set()
            doc = json.dumps({"maxBatchRecords": args.max, "visibilityTimeoutMs": 600_000})
            status, _ = request("PUT", f"{base}/v1/streams/{NAME}/consumers/bench", doc.encode())
            assert status == 201, status
            lock, done = threading.Lock(), threading.Event()
            threads = [threading.Thread(target=worker, args=(base, args, stats, lock, done))
                       for _ in range(args.workers)]
            appenders = []
            if args.mode == "e2e":
                appenders = [threading.Thread(target=appender,
                                              args=(base, args, stats, lock, i, args.appenders))
                             for i in range(args.appenders)]
            slots_before = wal_slot_max(os.path.join(store, "data"))
            started = time.monotonic()
            for t in threads + appenders:
                t.start()
            for t in appenders:
                t.join()
            stats["appended_all"].set()
            for t in threads:
                t.join()
            seconds = time.monotonic() - started
            wal_objects = wal_slot_max(os.path.join(store, "data")) - slots_before
            print(json.dumps({
                "records": args.records, "keys": args.keys, "workers": args.workers,
                "max": args.max, "put_latency_ms": args.put_latency_ms,
                "seconds": round(seconds, 2),
                "messages_per_sec": round(stats["acked"] / seconds, 1),
                "acked": stats["acked"], "stale": stats["stale"],
                "redelivered": stats["redelivered"], "distinct": len(stats["seen"]),
                "pulls": len(stats["pull"]),
                "pull_ms_p50": percentile(stats["pull"], 0.5),
                "pull_ms_p99": percentile(stats["pull"], 0.99),
                "settle_ms_p50": percentile(stats["settle"], 0.5),
                "settle_ms_p99": percentile(stats["settle"], 0.99),
                "mode": args.mode,
                "delivery_ms_p50": percentile(stats["delivery"], 0.5),
                "delivery_ms_p99": percentile(stats["delivery"], 0.99),
                "wal_objects_per_1000_messages": round(wal_objects * 1000 / max(1, stats["acked"]), 1),
                "server_peak_rss_kib": rss_kib(server.pid),
            }))
        finally:
            server.terminate()
            server.wait()


if __name__ == "__main__":
    main()
