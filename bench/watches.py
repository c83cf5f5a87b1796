#!/usr/bin/env python3
"""Watch observations (docs/BENCHMARKS.md): memory per parked observation and
invalidation latency.

Starts `strata serve` on a local-directory store, creates a JSON collection
with one watch on /customerId, and signs capabilities as a client does
(docs/FORMATS.md §9.3, in plain Python: an independent check of the
derivation). Then:

1. parks --parked observations at once (one watch key each, raw HTTP/1.1
   over asyncio), waits until the server's resident memory stops growing,
   and reports the growth per parked observation; then closes them and
   reports the memory again (the server must shed them);
2. runs --rounds rounds of: observe one key (long-poll), append a record of
   that key, and time the observation's answer from the append's request
   (`send_to_wake`: includes the append's durable write) and from its
   acknowledgement reaching the client (`ack_to_wake`: the server publishes
   before it writes the append's response, so this can be below zero).

Prints one JSON line.

    STRATA_BIN=target/release/strata python3 bench/watches.py
"""

import argparse
import asyncio
import base64
import hashlib
import hmac
import json
import os
import resource
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKEN = "bench-token-of-project-p"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def hkdf(salt, ikm, info):
    prk = hmac.new(salt, ikm, hashlib.sha256).digest()
    return hmac.new(prk, info + b"\x01", hashlib.sha256).digest()


def canonical(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class Signer:
    def __init__(self, epoch, stream_key, collection):
        touch = hkdf(epoch, stream_key, b"touch-capability-v1")
        self.sig = hkdf(epoch, touch, b"wait-sig-v1")
        self.epoch = epoch
        self.collection = collection
        definition = canonical({"fields": ["/customerId"], "name": "by-customer"})
        self.def_id = hashlib.sha256(
            b"strata/watch-definition/v1\0" + epoch + definition.encode()).digest()[:16]

    def key(self, customer):
        values = canonical([customer]).encode()
        return hashlib.sha256(b"strata/watch-key/v1\0" + self.def_id + values).digest()[:8].hex()

    def capability(self, key, expiry):
        fields = [b"p", self.collection.encode(), self.epoch, b"by-customer", key.encode(),
                  b"GET", str(expiry).encode()]
        message = b"strata/watch-capability/v1\0" + b"".join(
            struct.pack("<I", len(f)) + f for f in fields)
        return "p.%d.%s" % (expiry, hmac.new(self.sig, message, hashlib.sha256).digest()[:16].hex())


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def http(method, url, headers=None, body=None):
    req = urllib.request.Request(url, data=body, method=method)
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    with urllib.request.urlopen(req, timeout=60) as answer:
        return answer.status, answer.read()


async def park(port, path_of, count):
    """Opens `count` observations and returns their writers (kept open)."""
    writers = []
    for n in range(count):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        path, cap = path_of(n)
        writer.write((f"GET {path}?timeoutMs=25000 HTTP/1.1\r\nHost: x\r\n"
                      f"Authorization: Prisma-Watch {cap}\r\n\r\n").encode())
        writers.append((reader, writer))
        if n % 500 == 0:
            await writer.drain()
    return writers


def settle(pid, seconds_max=20):
    """Waits until the server's RSS stops growing (or seconds_max)."""
    last, stable, started = rss_kib(pid), 0, time.monotonic()
    while stable < 5 and time.monotonic() - started < seconds_max:
        time.sleep(0.2)
        now = rss_kib(pid)
        stable = stable + 1 if abs(now - last) < 64 else 0
        last = now
    return last


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parked", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, 2 * args.parked + 1024))
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    binary = os.environ.get("STRATA_BIN", os.path.join(ROOT, "target", "release", "strata"))
    stream_key_text = subprocess.check_output([binary, "keys", "generate"], text=True).strip()
    stream_key = base64.urlsafe_b64decode(stream_key_text + "=" * (-len(stream_key_text) % 4))
    with tempfile.TemporaryDirectory(prefix="strata-watch.") as run:
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        log = open(os.path.join(run, "server.log"), "wb")
        server = subprocess.Popen(
            [binary, "serve", "--listen", f"127.0.0.1:{port}", "--store",
             os.path.join(run, "store"), "--project-token", f"p:{TOKEN}"],
            stdout=log, stderr=log)
        try:
            for _ in range(200):
                try:
                    urllib.request.urlopen(base + "/healthz", timeout=1).read()
                    break
                except OSError:
                    time.sleep(0.05)
            auth = {"Authorization": f"Bearer {TOKEN}", "Prisma-Encryption-Key": stream_key_text}
            doc = b'{"format":{"kind":"json"},"watches":[{"name":"by-customer","fields":["/customerId"]}]}'
            _, meta = http("PUT", f"{base}/v1/streams/orders", auth, doc)
            epoch = bytes.fromhex(json.loads(meta)["epoch"])
            signer = Signer(epoch, stream_key, "orders")
            expiry = int(time.time()) + 250

            def path_of(n):
                key = signer.key(f"c{n}")
                return (f"/v1/streams/orders/watches/by-customer/keys/{key}",
                        signer.capability(key, expiry))

            # 1. Memory per parked observation.
            idle_kib = settle(server.pid)
            loop = asyncio.new_event_loop()
            writers = loop.run_until_complete(park(port, path_of, args.parked))
            parked_kib = settle(server.pid)
            for _, writer in writers:
                writer.close()
            loop.run_until_complete(asyncio.sleep(0.5))
            loop.close()
            after_kib = settle(server.pid)

            # 2. Invalidation latency: append acknowledged -> observation answered.
            latencies, from_send = [], []
            cursor = None
            key = signer.key("hot")
            cap_expiry = int(time.time()) + 250
            for n in range(args.rounds):
                if n % 100 == 0:
                    cap_expiry = int(time.time()) + 250
                cap = signer.capability(key, cap_expiry)
                answered = {}

                def observe(cursor=cursor, cap=cap):
                    url = f"{base}/v1/streams/orders/watches/by-customer/keys/{key}?timeoutMs=25000"
                    if cursor:
                        url += "&cursor=" + cursor
                    _, body = http("GET", url, {"Authorization": f"Prisma-Watch {cap}"})
                    answered["at"] = time.perf_counter()
                    answered["body"] = json.loads(body)

                if cursor is None:
                    # The first cursor: an observation that times out at once.
                    _, body = http("GET", f"{base}/v1/streams/orders/watches/by-customer/keys/{key}?timeoutMs=0",
                                   {"Authorization": f"Prisma-Watch {cap}"})
                    cursor = json.loads(body)["cursor"]
                    continue
                thread = threading.Thread(target=observe)
                thread.start()
                time.sleep(0.005)  # let the observation park (its cursor makes it exact anyway)
                sent = time.perf_counter()
                http("POST", f"{base}/v1/streams/orders/records",
                     {**auth, "Content-Type": "application/json", "Prisma-Routing-Key": "hot"},
                     json.dumps({"customerId": "hot", "n": n}).encode())
                acked = time.perf_counter()
                thread.join()
                assert answered["body"]["invalidated"], answered["body"]
                latencies.append((answered["at"] - acked) * 1000)
                from_send.append((answered["at"] - sent) * 1000)
                cursor = answered["body"]["cursor"]
        finally:
            server.terminate()
            server.wait(timeout=60)
    latencies.sort()
    from_send.sort()

    def pct(p, values=latencies):
        return round(values[min(len(values) - 1, int(p * len(values)))], 2)

    print(json.dumps({
        "bench": "watches", "parked": args.parked,
        "rss_idle_mib": round(idle_kib / 1024, 1), "rss_parked_mib": round(parked_kib / 1024, 1),
        "rss_after_close_mib": round(after_kib / 1024, 1),
        "bytes_per_parked": round((parked_kib - idle_kib) * 1024 / args.parked),
        "invalidations": len(latencies), "ack_to_wake_ms_p50": pct(0.5),
        "ack_to_wake_ms_p99": pct(0.99), "ack_to_wake_ms_max": round(latencies[-1], 2),
        "send_to_wake_ms_p50": pct(0.5, from_send), "send_to_wake_ms_p99": pct(0.99, from_send),
    }))


if __name__ == "__main__":
    main()
