#!/usr/bin/env python3
"""Fan-in benchmark: many idempotent producers, each sending one small batch a
second, into one `strata serve` over an emulated slow store.

Starts `strata serve` on a fresh local-directory store with
--emulate-put-latency-ms (default 25) and a metrics listener, creates
--streams JSON streams, and runs --producers producers for --duration
seconds. Producer i appends to stream i mod --streams, with its own
Producer-Id (epoch 0, sequence 0, 1, 2...), one JSON array of
--batch-records records of --record-bytes bytes a second, at a phase of its
own within the second. A producer waits for each answer before its next
tick; a tick that comes while a request is still out is skipped (counted).

Prints one JSON line: batches acknowledged per second, acknowledgement
latency p50/p99/max, WAL PUTs per second (from the server's
`strata_wal_puts_total`, read before and after the measured window), records
per PUT, non-2xx answers and skipped ticks. Progress goes to stderr.

    python3 bench/fanin.py                         # 1,000 producers over 100 streams
    python3 bench/fanin.py --producers 200 --duration 10
    STRATA_BIN=/path/to/strata python3 bench/fanin.py

The binary is $STRATA_BIN (or --bin), else target/release/strata (build it
first). Python standard library only.
"""

import argparse
import asyncio
import json
import math
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEV_KEY = "dGVzdC1kZXZlbG9wbWVudC1rZXktMzItYnl0ZXMhISE"


def log(msg):
    print(f"[fanin {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wal_puts(metrics_url):
    text = urllib.request.urlopen(metrics_url, timeout=10).read().decode()
    total = 0.0
    records = 0.0
    for line in text.splitlines():
        if line.startswith("strata_wal_puts_total{"):
            total += float(line.rsplit(" ", 1)[1])
        elif line.startswith("strata_wal_records_total{"):
            records += float(line.rsplit(" ", 1)[1])
    return total, records


def percentile(values, p):
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(1, math.ceil(p / 100 * len(ordered))) - 1]


class Producer:
    def __init__(self, index, stream, body, port):
        self.index = index
        self.stream = stream
        self.body = body
        self.port = port
        self.seq = 0
        self.reader = None
        self.writer = None

    async def connect(self):
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)

    async def send(self):
        head = (
            f"POST /v1/stream/{self.stream} HTTP/1.1\r\nhost: 127.0.0.1\r\n"
            f"content-type: application/json\r\ncontent-length: {len(self.body)}\r\n"
            f"stream-encryption-key: {DEV_KEY}\r\nproducer-id: fanin-{self.index}\r\n"
            f"producer-epoch: 0\r\nproducer-seq: {self.seq}\r\n\r\n"
        )
        self.writer.write(head.encode() + self.body)
        await self.writer.drain()
        status_line = await self.reader.readline()
        status = int(status_line.split()[1])
        length = 0
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b""):
                break
            name, _, value = line.decode().partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
        if length:
            await self.reader.readexactly(length)
        if 200 <= status < 300:
            self.seq += 1
        return status


async def run_producers(args, port, streams):
    record = json.dumps("x" * max(args.record_bytes - 2, 0))
    body = ("[" + ",".join([record] * args.batch_records) + "]").encode()
    producers = [Producer(i, streams[i % len(streams)], body, port) for i in range(args.producers)]
    for p in producers:
        await p.connect()
    latencies = []
    statuses = {}
    skipped = 0
    measuring = {"on": False}
    start = time.monotonic() + 1.0
    end = start + args.warmup + args.duration

    async def loop(p):
        nonlocal skipped
        rng = random.Random(p.index)
        tick = start + rng.random()
        while tick < end:
            now = time.monotonic()
            if tick > now:
                await asyncio.sleep(tick - now)
            sent = time.monotonic()
            status = await p.send()
            took_ms = (time.monotonic() - sent) * 1000
            if measuring["on"]:
                latencies.append(took_ms)
                statuses[status] = statuses.get(status, 0) + 1
            tick += 1.0
            while tick < time.monotonic():
                tick += 1.0
                if measuring["on"]:
                    skipped += 1

    tasks = [asyncio.create_task(loop(p)) for p in producers]
    await asyncio.sleep(max(0.0, start + args.warmup - time.monotonic()))
    return tasks, latencies, statuses, measuring, lambda: skipped


async def main_async(args, port, metrics_url, streams):
    tasks, latencies, statuses, measuring, skipped = await run_producers(args, port, streams)
    puts_before, records_before = wal_puts(metrics_url)
    measuring["on"] = True
    window_start = time.monotonic()
    log(f"measuring {args.duration} s")
    await asyncio.sleep(args.duration)
    measuring["on"] = False
    window = time.monotonic() - window_start
    puts_after, records_after = wal_puts(metrics_url)
    await asyncio.gather(*tasks)
    puts = puts_after - puts_before
    records = records_after - records_before
    acked = sum(n for s, n in statuses.items() if 200 <= s < 300)
    return {
        "producers": args.producers,
        "streams": len(streams),
        "batch_records": args.batch_records,
        "record_bytes": args.record_bytes,
        "emulate_put_latency_ms": args.emulate_put_latency_ms,
        "duration_s": round(window, 1),
        "batches_acked_per_s": round(acked / window, 1),
        "ack_ms": {
            "p50": round(percentile(latencies, 50) or 0, 1),
            "p99": round(percentile(latencies, 99) or 0, 1),
            "max": round(max(latencies, default=0), 1),
        },
        "wal_puts_per_s": round(puts / window, 1),
        "records_per_put": round(records / puts, 1) if puts else None,
        "non_2xx": sum(n for s, n in statuses.items() if not 200 <= s < 300),
        "skipped_ticks": skipped(),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--producers", type=int, default=1000)
    ap.add_argument("--streams", type=int, default=100)
    ap.add_argument("--batch-records", type=int, default=10)
    ap.add_argument("--record-bytes", type=int, default=100)
    ap.add_argument("--duration", type=float, default=20)
    ap.add_argument("--warmup", type=float, default=3)
    ap.add_argument("--emulate-put-latency-ms", type=int, default=25)
    ap.add_argument("--serve-arg", action="append", default=[], help="extra strata serve argument")
    ap.add_argument("--bin", default=None)
    args = ap.parse_args()
    binary = args.bin or os.environ.get("STRATA_BIN") or os.path.join(ROOT, "target/release/strata")
    if not os.access(binary, os.X_OK):
        sys.exit(f"no strata binary at {binary} (cargo build --release -p strata-server)")
    run_dir = tempfile.mkdtemp(prefix="strata-fanin.")
    port, metrics_port = free_port(), free_port()
    log_file = open(os.path.join(run_dir, "server.log"), "w")
    cmd = [binary, "serve", "--listen", f"127.0.0.1:{port}", "--store", os.path.join(run_dir, "store"),
           "--metrics-listen", f"127.0.0.1:{metrics_port}", "--dev-default-key", DEV_KEY,
           "--emulate-put-latency-ms", str(args.emulate_put_latency_ms), *args.serve_arg]
    server = subprocess.Popen(cmd, stdout=log_file, stderr=log_file)
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(200):
            try:
                urllib.request.urlopen(base + "/healthz", timeout=1)
                break
            except OSError:
                time.sleep(0.05)
        streams = [f"fanin-{i}" for i in range(args.streams)]
        for name in streams:
            req = urllib.request.Request(f"{base}/v1/stream/{name}", method="PUT",
                                         headers={"content-type": "application/json"})
            urllib.request.urlopen(req, timeout=10)
        log(f"{args.producers} producers over {args.streams} streams, one batch of "
            f"{args.batch_records} a second each, {args.emulate_put_latency_ms} ms PUTs")
        result = asyncio.run(main_async(args, port, f"http://127.0.0.1:{metrics_port}/metrics", streams))
        result["loadavg"] = open("/proc/loadavg").read().split()[:3]
        print(json.dumps(result))
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        shutil.rmtree(run_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
