#!/usr/bin/env python3
"""Snapshot-scan throughput over a sealed collection (docs/BENCHMARKS.md).

Loads one JSON collection with about --mib MiB of records (--record-bytes
each, in 4 MiB records:batch appends, each batch to the next of --keys
routing keys; the JSON line reports the keys used), stops
the server with SIGTERM (a clean stop seals every shard), starts it again on
the same local-directory store, and scans the whole collection twice with
--page-bytes pages: cold (the first scan after the restart reads the segment
objects) and warm (through the chunk cache). Prints one JSON line: payload
MB/s and records/s of each scan, its pages, and the segment objects sealed.

    python3 bench/scan.py                     # 256 MiB, 1 KiB records
    STRATA_BIN=target/release/strata python3 bench/scan.py --mib 64
"""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BATCH_BYTES = 4 << 20


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(binary, store, port, log, extra):
    args = [binary, "serve", "--listen", f"127.0.0.1:{port}", "--store", store] + extra
    server = subprocess.Popen(args, stdout=log, stderr=log)
    base = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            urllib.request.urlopen(base + "/healthz", timeout=1).read()
            return server, base
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.05)
    server.kill()
    sys.exit("the server did not start")


def request(method, url, key, body=None, headers=None):
    req = urllib.request.Request(url, data=body, method=method)
    req.add_header("Prisma-Encryption-Key", key)
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    with urllib.request.urlopen(req, timeout=60) as answer:
        return answer.status, answer.headers, answer.read()


def load(base, key, args):
    pad = "x" * max(1, args.record_bytes - 40)
    per_batch = max(1, BATCH_BYTES // args.record_bytes)
    total = (args.mib << 20) // args.record_bytes
    n, payload = 0, 0
    started = time.monotonic()
    while n < total:
        count = min(per_batch, total - n)
        records = [json.dumps({"n": n + i, "pad": pad}, separators=(",", ":"))
                   for i in range(count)]
        payload += sum(len(r) for r in records)
        body = "[" + ",".join(records) + "]"
        routing_key = f"k{(n // per_batch) % args.keys}"
        status, _, _ = request(
            "POST", f"{base}/v1/streams/scan-bench/records:batch", key, body.encode(),
            {"Prisma-Routing-Key": routing_key, "Content-Type": "application/json"},
        )
        assert status == 200, status
        n += count
    batches = -(-total // per_batch)
    return n, payload, min(batches, args.keys), time.monotonic() - started


def scan(base, key, page_bytes):
    cursor, pages, body_bytes, records = None, 0, 0, 0
    started = time.monotonic()
    while True:
        url = f"{base}/v1/streams/scan-bench:scan?maxBytes={page_bytes}"
        if cursor:
            url += "&cursor=" + cursor
        status, headers, body = request("GET", url, key)
        assert status == 200, status
        pages += 1
        body_bytes += len(body)
        records += body.count(b'{"routingKey"')
        cursor = headers.get("Prisma-Next-Scan-Cursor")
        if headers.get("Prisma-Scan-Complete") == "true":
            break
        assert cursor, "a page carries a cursor or completion"
    return {"seconds": time.monotonic() - started, "pages": pages,
            "body_bytes": body_bytes, "records": records}


def segments(store):
    found = 0
    for dirpath, _, files in os.walk(os.path.join(store, "shards")):
        if os.path.basename(dirpath) == "seg":
            found += len(files)
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--record-bytes", type=int, default=1024)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--page-bytes", type=int, default=8 << 20)
    args = parser.parse_args()
    binary = os.environ.get("STRATA_BIN", os.path.join(ROOT, "target", "release", "strata"))
    key = subprocess.check_output([binary, "keys", "generate"], text=True).strip()
    with tempfile.TemporaryDirectory(prefix="strata-scan.") as run:
        store = os.path.join(run, "store")
        extra = ["--cache-dir", os.path.join(run, "cache")]
        with open(os.path.join(run, "server.log"), "wb") as log:
            server, base = start(binary, store, free_port(), log, extra)
            try:
                request("PUT", f"{base}/v1/streams/scan-bench", key,
                        b'{"format":{"kind":"json"}}')
                loaded, payload, keys_used, load_s = load(base, key, args)
            finally:
                server.send_signal(signal.SIGTERM)
                server.wait(timeout=120)
            sealed = segments(store)
            server, base = start(binary, store, free_port(), log, extra)
            try:
                cold = scan(base, key, args.page_bytes)
                warm = scan(base, key, args.page_bytes)
            finally:
                server.send_signal(signal.SIGTERM)
                server.wait(timeout=120)
    assert cold["records"] == loaded == warm["records"], (cold, warm, loaded)
    row = {"bench": "scan", "records": loaded, "record_bytes": args.record_bytes,
           "keys": keys_used, "payload_mib": round(payload / (1 << 20), 1),
           "segments": sealed, "page_bytes": args.page_bytes,
           "load_s": round(load_s, 2)}
    for name, result in (("cold", cold), ("warm", warm)):
        row[f"{name}_mb_s"] = round(payload / 1e6 / result["seconds"], 1)
        row[f"{name}_records_s"] = round(loaded / result["seconds"])
        row[f"{name}_pages"] = result["pages"]
    print(json.dumps(row))


if __name__ == "__main__":
    main()
