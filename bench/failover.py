#!/usr/bin/env python3
"""Fleet failover benchmark: how long the streams of a killed member stay
unwritable.

Starts a fleet of 3 `strata serve --fleet` members on a fresh store (a local
directory, or an S3 bucket on moto with --s3), creates 24 JSON streams over
12 shards and runs one producer thread per stream, appending `"x"`
continuously. A producer sends each append to the next live member in turn
(non-owners forward), and retries 429, 503 and connection errors after
--retry-ms. Then, --kills times:

  1. wait until the fleet has settled (all members live, every shard's
     computed owner is the instance its manifest names, per
     `strata fleet status`) and every producer has an append acknowledged
     since;
  2. pick a member that owns the shard of at least one stream (the one
     killed least often so far; ties at random) and `kill -9` it; the
     producers stop sending to it;
  3. for every stream whose shard it owned, measure the time from the kill to
     the stream's first append acknowledged by another member (the acking
     member is the one `Streams-Replay-To` names, or the member asked);
  4. restart the killed member on the same port (a new process, a new
     instance) and wait for the fleet to settle again.

A stream's shard is (first 8 bytes of its id, little endian) mod the shard
count, its id the first 16 bytes of SHA-256("strata/stream-id/v1\\0" ||
u64_le(len(project)) || project || name), project "default". The script
checks that against the owner each acknowledgement names.

At the end the producers stop, every stream is read back in full and its
record count compared with the appends acknowledged (a count below means an
acknowledged append was lost; above, a retried append whose first attempt
landed too). It prints one JSON line on stdout (progress and per-kill lines
go to stderr) and exits non-zero if a producer saw a non-retryable answer,
an acknowledged append was lost, or a kill's streams did not recover.
Besides failover_ms (nearest-rank percentiles over every affected stream of
every kill) it reports: unaffected_max_stall_ms, the longest gap between
acknowledgements of a stream the victim did not own, during a kill;
rejoin_max_stall_ms, the longest gap of any stream from a restart until the
fleet settled; refusals, the 429/503 answers by message; duplicates, as
above; per_kill, each kill's samples.

    python3 bench/failover.py --kills 10            # local directory store
    python3 bench/failover.py --kills 10 --s3       # S3 API on moto
    python3 bench/failover.py --heartbeat-ms 500 --lease-ms 2000 --kills 3
    STRATA_BIN=/path/to/strata python3 bench/failover.py --keep

The binary is $STRATA_BIN (or --bin), else target/release/strata (build it
first: cargo build --release -p strata-server). --s3 runs moto_server from .venv (scripts/moto.sh installs
it there) or $MOTO_SERVER. Each member's stderr goes to member-<i>.log in the
run directory, with a marker line at every kill and restart; the directory is
removed at exit unless --keep (or a run failed). Python standard library only.
"""

import argparse
import collections
import hashlib
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEV_KEY = "dGVzdC1kZXZlbG9wbWVudC1rZXktMzItYnl0ZXMhISE"
PROJECT = "default"
BODY = b'"x"'
JSON_HEADERS = {"Content-Type": "application/json"}
REQUEST_TIMEOUT_S = 40.0  # above the server's longest forward (35 s)


def log(msg):
    print(f"[failover {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def shard_of(name, shards, project=PROJECT):
    p = project.encode()
    digest = hashlib.sha256(
        b"strata/stream-id/v1\0" + struct.pack("<Q", len(p)) + p + name.encode()
    ).digest()
    return struct.unpack("<Q", digest[:8])[0] % shards


def percentile(sorted_values, p):
    """Nearest-rank percentile of an ascending list (None when empty)."""
    if not sorted_values:
        return None
    rank = max(1, -(-len(sorted_values) * p // 100))  # ceil(n * p / 100)
    return sorted_values[int(rank) - 1]


def refusal_reason(body):
    """An error answer's message, URLs and numbers blanked (for tallies)."""
    try:
        message = json.loads(body)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return "(no JSON error)"
    message = re.sub(r"https?://[^ )]+", "URL", str(message))
    return re.sub(r"\d+", "N", message)[:90]


def http_call(url, method="GET", body=None, headers=None, timeout=10.0):
    """One request; returns (status, headers, body) or raises OSError."""
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        path = u.path + ("?" + u.query if u.query else "")
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.headers, resp.read()
    except http.client.HTTPException as e:
        raise OSError(f"{type(e).__name__}: {e}") from e
    finally:
        conn.close()


class Window:
    """One measured interval (a kill, or a rejoin): for every stream, the
    time from `start` to its first acknowledgement by a member other than
    `excluded_url`, and the longest gap between its acknowledgements."""

    def __init__(self, start, excluded_url, streams):
        self.start = start
        self.excluded_url = excluded_url
        self.first = {s: None for s in streams}  # seconds after start
        self.held = {s: None for s in streams}  # how long that first acked request took
        self.refusals = collections.Counter()  # 429/503 answers by reason
        self.last = {s: start for s in streams}
        self.max_gap = {s: 0.0 for s in streams}
        self.closed_at = None

    def ack(self, stream, sent, recv, owner_url):
        if self.closed_at is not None or recv <= self.start:
            return
        if self.first[stream] is None and owner_url != self.excluded_url:
            self.first[stream] = recv - self.start
            self.held[stream] = recv - sent
        self.max_gap[stream] = max(self.max_gap[stream], recv - self.last[stream])
        self.last[stream] = recv

    def close(self, now):
        self.closed_at = now
        for s in self.last:
            self.max_gap[s] = max(self.max_gap[s], now - self.last[s])


class Fleet:
    """The member processes, the store, and what producers share."""

    def __init__(self, args, run_dir):
        self.args = args
        self.run_dir = run_dir
        self.bin = args.bin
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.moto = None
        self.env = dict(os.environ, NO_COLOR="1")
        self.env.pop("RUST_LOG", None)
        if args.member_log:
            self.env["RUST_LOG"] = args.member_log
        if args.s3:
            self.start_moto()
        else:
            self.store = os.path.join(run_dir, "store")
            self.store_flags = []
        self.ports = [free_port() for _ in range(args.members)]
        self.urls = [f"http://127.0.0.1:{p}" for p in self.ports]
        self.procs = [None] * args.members
        self.logs = [os.path.join(run_dir, f"member-{i}.log") for i in range(args.members)]
        self.rotation = list(self.urls)  # members producers send to
        self.window = None  # the current Window, if one is open
        # Producer tallies (under self.lock).
        self.acked = collections.Counter()
        self.retryable = collections.Counter()
        self.refusals = collections.Counter()  # 429/503 answers by reason
        self.non_retryable = []
        self.last_ack = {}  # stream -> (sent, recv, owner url)

    # ------------------------------------------------------------- store --
    def start_moto(self):
        moto = os.environ.get("MOTO_SERVER") or os.path.join(ROOT, ".venv", "bin", "moto_server")
        if not os.access(moto, os.X_OK):
            sys.exit(f"no moto_server at {moto}: run `. scripts/moto.sh; strata_start_moto` once "
                     "(it installs moto into .venv), or set MOTO_SERVER")
        port = free_port()
        self.moto_log = open(os.path.join(self.run_dir, "moto.log"), "ab")
        self.moto = subprocess.Popen([moto, "-H", "127.0.0.1", "-p", str(port)],
                                     stdout=self.moto_log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        endpoint = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                status, _, _ = http_call(endpoint + "/strata-failover", "PUT", timeout=2)
                if status in (200, 409):
                    break
            except OSError:
                pass
            if time.monotonic() > deadline or self.moto.poll() is not None:
                sys.exit(f"moto did not start; see {self.run_dir}/moto.log")
            time.sleep(0.2)
        self.env.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
        self.store = f"s3://strata-failover/run-{int(time.time())}-{os.getpid()}"
        self.store_flags = ["--s3-endpoint", endpoint, "--s3-region", "us-east-1", "--s3-allow-http"]
        log(f"moto on {endpoint}, store {self.store}")

    # ----------------------------------------------------------- members --
    def mark(self, text):
        """A marker line in every member's log (appended, like the member's own)."""
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + f".{int(time.time() * 1e6) % 1000000:06d}Z"
        for path in self.logs:
            with open(path, "a") as f:
                f.write(f"{stamp} ===== failover.py: {text} =====\n")

    def start_member(self, i):
        a = self.args
        cmd = [self.bin, "serve", "--fleet",
               "--advertise-url", self.urls[i], "--listen", f"127.0.0.1:{self.ports[i]}",
               "--store", self.store, *self.store_flags,
               "--shards", str(a.shards),
               "--heartbeat-ms", str(a.heartbeat_ms), "--fleet-lease-ms", str(a.lease_ms),
               "--dev-default-key", DEV_KEY,
               "--cache-dir", os.path.join(self.run_dir, f"cache-{i}")]
        if a.emulate_put_latency_ms:
            cmd += ["--emulate-put-latency-ms", str(a.emulate_put_latency_ms)]
        for extra in a.serve_arg:
            cmd += extra.split("=", 1) if extra.startswith("--") and "=" in extra else [extra]
        out = open(self.logs[i], "ab")
        self.procs[i] = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=self.env,
                                         start_new_session=True)
        out.close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.procs[i].poll() is not None:
                raise RuntimeError(f"member {i} exited with {self.procs[i].returncode}; see {self.logs[i]}")
            try:
                http_call(self.urls[i] + "/healthz", timeout=1)
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"member {i} did not answer /healthz within 60 s; see {self.logs[i]}")

    def kill_member(self, i):
        proc = self.procs[i]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)

    def stop_all(self):
        for p in self.procs:
            if p is not None and p.poll() is None:
                p.terminate()
        deadline = time.monotonic() + 15
        for p in self.procs:
            if p is None:
                continue
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)
        if self.moto is not None and self.moto.poll() is None:
            self.moto.terminate()
            try:
                self.moto.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.moto.kill()
                self.moto.wait(timeout=10)

    # ------------------------------------------------------------ status --
    def status(self):
        cmd = [self.bin, "fleet", "status", "--store", self.store, *self.store_flags,
               "--fleet-lease-ms", str(self.args.lease_ms), "--json"]
        out = subprocess.run(cmd, env=self.env, capture_output=True, timeout=60)
        if out.returncode != 0:
            raise RuntimeError(f"fleet status failed: {out.stderr.decode(errors='replace').strip()}")
        return json.loads(out.stdout)

    def settled(self, st):
        """Whether `st` shows every member live and serving and every shard
        claimed by its computed owner; returns (ok, why)."""
        live = [m for m in st["members"] if m["live"]]
        urls = sorted(m["url"] or "" for m in live)
        if urls != sorted(self.urls):
            return False, f"live members {urls}"
        if any(m["state"] != "serving" for m in live):
            return False, "a member is not serving"
        live_ids = {m["instance"] for m in live}
        if len(st["shards"]) != self.args.shards:
            return False, f"{len(st['shards'])} shards"
        moving = [s["shard"] for s in st["shards"]
                  if s["computed_owner"] is None or s["computed_owner"] not in live_ids
                  or s["computed_owner"] != s["manifest_instance"]]
        if moving:
            return False, f"shards not claimed by their owner: {','.join(moving)}"
        return True, ""

    def wait_settled(self, timeout):
        deadline = time.monotonic() + timeout
        why = "no status yet"
        while time.monotonic() < deadline:
            try:
                st = self.status()
                ok, why = self.settled(st)
                if ok:
                    return st
            except (RuntimeError, subprocess.TimeoutExpired, ValueError) as e:
                why = str(e)
            time.sleep(0.5)
        raise RuntimeError(f"the fleet did not settle within {timeout} s: {why}")

    def owners(self, st):
        """Shard index -> member index, from a settled status."""
        by_url = {u: i for i, u in enumerate(self.urls)}
        return {int(s["shard"][1:]): by_url[s["computed_owner_url"]] for s in st["shards"]}

    # --------------------------------------------------------- producers --
    def on_ack(self, stream, sent, recv, owner):
        with self.lock:
            self.acked[stream] += 1
            self.last_ack[stream] = (sent, recv, owner)
            if self.window is not None:
                self.window.ack(stream, sent, recv, owner)

    def produce(self, index, stream):
        path = "/v1/stream/" + urllib.parse.quote(stream)
        conns = {}
        turn = index
        pause = self.args.retry_ms / 1000
        while not self.stop.is_set():
            rotation = self.rotation
            if not rotation:
                time.sleep(pause)
                continue
            url = rotation[turn % len(rotation)]
            turn += 1
            conn = conns.get(url)
            if conn is None:
                u = urllib.parse.urlsplit(url)
                conn = conns[url] = http.client.HTTPConnection(u.hostname, u.port, timeout=REQUEST_TIMEOUT_S)
            sent = time.monotonic()
            try:
                conn.request("POST", path, body=BODY, headers=JSON_HEADERS)
                resp = conn.getresponse()
                body = resp.read()
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                del conns[url]
                kind = "timeout" if isinstance(e, socket.timeout) else "connection"
                with self.lock:
                    self.retryable[kind] += 1
                self.stop.wait(pause)
                continue
            recv = time.monotonic()
            if resp.will_close:
                conn.close()
                del conns[url]
            if 200 <= resp.status < 300:
                owner = (resp.getheader("Streams-Replay-To") or url).rstrip("/")
                self.on_ack(stream, sent, recv, owner)
                if self.args.pace_ms:
                    self.stop.wait(self.args.pace_ms / 1000)
            elif resp.status in (429, 503):
                why = f"{resp.status} {refusal_reason(body)}"
                with self.lock:
                    self.retryable[str(resp.status)] += 1
                    self.refusals[why] += 1
                    if self.window is not None:
                        self.window.refusals[why] += 1
                self.stop.wait(pause)
            else:
                with self.lock:
                    self.non_retryable.append({"stream": stream, "status": resp.status, "member": url,
                                               "at": time.strftime("%H:%M:%S")})
                log(f"NON-RETRYABLE {resp.status} from {url} for {stream}")
                self.stop.wait(pause)
        for c in conns.values():
            c.close()

    # ------------------------------------------------------------- reads --
    def count_records(self, stream, deadline):
        """Records in `stream`, read from the start in pages (bounded)."""
        offset, total = "-1", 0
        while time.monotonic() < deadline:
            url = random.choice(self.urls)
            q = urllib.parse.urlencode({"offset": offset})
            try:
                status, headers, body = http_call(f"{url}/v1/stream/{urllib.parse.quote(stream)}?{q}",
                                                  timeout=REQUEST_TIMEOUT_S)
            except OSError:
                time.sleep(0.2)
                continue
            if status in (429, 503):
                time.sleep(0.2)
                continue
            if status != 200:
                raise RuntimeError(f"reading {stream}: HTTP {status}: {body[:200]!r}")
            total += len(json.loads(body)) if body.strip() else 0
            offset = headers.get("Stream-Next-Offset")
            if headers.get("Stream-Up-To-Date") == "true" or offset is None:
                return total
        raise RuntimeError(f"reading {stream} did not finish in time")


def tail_lines(path, since, limit=60):
    """The lines a log gained after byte offset `since` (the last `limit`),
    the per-request "forwarding failed" warnings counted, not listed."""
    with open(path, "rb") as f:
        f.seek(since)
        lines = f.read().decode(errors="replace").splitlines()
    forward_failed = [l for l in lines if "forwarding failed" in l]
    rest = [l for l in lines if "forwarding failed" not in l][-limit:]
    if forward_failed:
        rest.append(f"({len(forward_failed)} 'fleet: forwarding failed' warnings, "
                    f"{forward_failed[0][:27]} .. {forward_failed[-1][:27]})")
    return rest


def main():
    ap = argparse.ArgumentParser(description="Fleet failover benchmark (see the header of this file).")
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--s3", action="store_true", help="an S3 store on moto instead of a local directory")
    ap.add_argument("--members", type=int, default=3)
    ap.add_argument("--shards", type=int, default=12)
    ap.add_argument("--streams", type=int, default=24)
    ap.add_argument("--heartbeat-ms", type=int, default=2000)
    ap.add_argument("--lease-ms", type=int, default=6000, help="--fleet-lease-ms of the members")
    ap.add_argument("--emulate-put-latency-ms", type=int, default=0)
    ap.add_argument("--retry-ms", type=int, default=50, help="pause after a retryable failure")
    ap.add_argument("--pace-ms", type=int, default=0, help="pause after each acknowledged append (0: none)")
    ap.add_argument("--settle-timeout", type=float, default=120, help="seconds to wait for the fleet to settle")
    ap.add_argument("--recover-timeout", type=float, default=60,
                    help="seconds past the lease to wait for a kill's streams")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--bin", default=None, help="strata binary (default $STRATA_BIN, else target/release/strata)")
    ap.add_argument("--serve-arg", action="append", default=[],
                    help="one more argument for every member's `strata serve` (--flag=value splits in two)")
    ap.add_argument("--member-log", default=None, help="RUST_LOG of the members (default: theirs)")
    ap.add_argument("--keep", action="store_true", help="keep the run directory (store, logs)")
    ap.add_argument("--run-dir", default=None, help="parent of the run directory (default $TMPDIR)")
    args = ap.parse_args()
    if args.bin is None:
        args.bin = os.environ.get("STRATA_BIN") or os.path.join(ROOT, "target", "release", "strata")
    if not args.bin or not os.access(args.bin, os.X_OK):
        sys.exit(f"no strata binary ({args.bin}); set STRATA_BIN or --bin")
    if args.seed is None:
        args.seed = random.randrange(1 << 30)
    rng = random.Random(args.seed)

    run_dir = tempfile.mkdtemp(prefix="strata-failover.", dir=args.run_dir)
    log(f"run directory {run_dir}, binary {args.bin}, seed {args.seed}, loadavg {open('/proc/loadavg').read().strip()}")

    def on_term(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    fleet = None
    failed = True
    threads = []
    try:
        fleet = Fleet(args, run_dir)
        for i in range(args.members):
            fleet.start_member(i)
        log(f"members {fleet.urls} up; waiting for the fleet to settle")
        fleet.wait_settled(args.settle_timeout)

        streams = [f"failover-{i}" for i in range(args.streams)]
        shard = {s: shard_of(s, args.shards) for s in streams}
        for s in streams:
            deadline = time.monotonic() + 30
            while True:
                try:
                    status, _, body = http_call(f"{rng.choice(fleet.urls)}/v1/stream/{s}", "PUT",
                                                headers=JSON_HEADERS, timeout=REQUEST_TIMEOUT_S)
                except OSError:
                    status, body = None, b""
                if status is not None and 200 <= status < 300:
                    break
                if (status not in (None, 429, 503)) or time.monotonic() > deadline:
                    raise RuntimeError(f"creating {s}: HTTP {status}: {body[:200]!r}")
                time.sleep(0.2)
        for i, s in enumerate(streams):
            t = threading.Thread(target=fleet.produce, args=(i, s), name=s, daemon=True)
            t.start()
            threads.append(t)
        started = time.monotonic()
        log(f"{len(streams)} producers running")

        kills = []
        kill_count = collections.Counter()
        owner_mismatch = 0
        for k in range(args.kills):
            st = fleet.wait_settled(args.settle_timeout)
            owner_of = fleet.owners(st)
            # Every producer has an append acknowledged since the fleet settled.
            since = time.monotonic()
            deadline = since + 30
            while time.monotonic() < deadline:
                with fleet.lock:
                    fresh = all(fleet.last_ack.get(s, (0, 0, ""))[0] > since for s in streams)
                if fresh:
                    break
                time.sleep(0.1)
            else:
                raise RuntimeError("some producers had no append acknowledged for 30 s after the fleet settled")
            with fleet.lock:
                acked_by = {s: fleet.last_ack[s][2] for s in streams}
            mismatched = [s for s in streams if acked_by[s] != fleet.urls[owner_of[shard[s]]]]
            owner_mismatch += len(mismatched)
            if mismatched:
                log(f"acknowledging member differs from the computed owner for {mismatched}")

            owned = collections.defaultdict(list)
            for s in streams:
                owned[owner_of[shard[s]]].append(s)
            fewest = min(kill_count[m] for m in owned)
            victim = rng.choice(sorted(m for m in owned if kill_count[m] == fewest))
            kill_count[victim] += 1
            affected = owned[victim]
            victim_shards = sorted(i for i, m in owner_of.items() if m == victim)
            offsets = [os.path.getsize(p) for p in fleet.logs]
            fleet.mark(f"kill {k + 1}: kill -9 member {victim} ({fleet.urls[victim]}), "
                       f"shards {victim_shards}, {len(affected)} streams")
            window = Window(time.monotonic(), fleet.urls[victim], streams)
            with fleet.lock:
                fleet.window = window
            kill_t = time.monotonic()
            fleet.kill_member(victim)
            fleet.rotation = [u for u in fleet.urls if u != fleet.urls[victim]]

            deadline = kill_t + args.lease_ms / 1000 + args.recover_timeout
            while time.monotonic() < deadline:
                with fleet.lock:
                    done = all(window.first[s] is not None for s in affected)
                if done:
                    break
                time.sleep(0.05)
            with fleet.lock:
                window.close(time.monotonic())
                fleet.window = None
            samples = sorted(round(window.first[s] * 1000) for s in affected if window.first[s] is not None)
            # How long each of those first acknowledged requests was held
            # (sent → answered), in the order of `samples`.
            held = [round(window.held[s] * 1000) for s in
                    sorted((s for s in affected if window.first[s] is not None), key=lambda s: window.first[s])]
            missing = [s for s in affected if window.first[s] is None]
            others = [s for s in streams if s not in affected]
            other_stall = max((window.max_gap[s] for s in others), default=0.0)
            fleet.mark(f"kill {k + 1}: {len(samples)} of {len(affected)} streams recovered, "
                       f"slowest {samples[-1] if samples else '-'} ms")
            rec = {"kill": k + 1, "member": victim, "shards": victim_shards, "streams": len(affected),
                   "failover_ms": samples, "held_ms": held, "missing": len(missing),
                   "unaffected_max_stall_ms": round(other_stall * 1000)}
            log(f"kill {k + 1}: member {victim}, shards {victim_shards}, failover ms {samples}"
                + f" (held {held})"
                + (f", {len(missing)} streams NOT recovered" if missing else "")
                + f", longest stall of the other streams {rec['unaffected_max_stall_ms']} ms"
                + f", refusals {dict(window.refusals)}")
            slow_ms = args.lease_ms + 3000
            if missing or (samples and samples[-1] > slow_ms):
                log(f"kill {k + 1} was slow (over lease + 3 s = {slow_ms} ms); the survivors' logs since the kill:")
                for i, path in enumerate(fleet.logs):
                    if i != victim:
                        for line in tail_lines(path, offsets[i]):
                            print(f"    member {i}: {line}", file=sys.stderr)
                rec["slow"] = True

            # Rejoin: the same port, a new process (and instance).
            fleet.mark(f"kill {k + 1}: restarting member {victim}")
            rejoin = Window(time.monotonic(), None, streams)
            with fleet.lock:
                fleet.window = rejoin
            fleet.start_member(victim)
            fleet.rotation = list(fleet.urls)
            fleet.wait_settled(args.settle_timeout)
            time.sleep(1)  # let routing views catch up before closing the window
            with fleet.lock:
                rejoin.close(time.monotonic())
                fleet.window = None
            rec["rejoin_s"] = round(rejoin.closed_at - rejoin.start - 1, 1)
            rec["rejoin_max_stall_ms"] = round(max(rejoin.max_gap.values()) * 1000)
            log(f"kill {k + 1}: member {victim} rejoined and the fleet settled in {rec['rejoin_s']} s; "
                f"longest stall of any stream meanwhile {rec['rejoin_max_stall_ms']} ms, "
                f"refusals {dict(rejoin.refusals)}")
            kills.append(rec)

        elapsed = time.monotonic() - started
        fleet.stop.set()
        for t in threads:
            t.join(timeout=REQUEST_TIMEOUT_S + 5)
        alive = [t.name for t in threads if t.is_alive()]
        if alive:
            raise RuntimeError(f"producers still running after stop: {alive}")

        log("reading every stream back")
        lost, duplicated = 0, 0
        deadline = time.monotonic() + 300
        with fleet.lock:
            acked = dict(fleet.acked)
        for s in streams:
            n = fleet.count_records(s, deadline)
            lost += max(0, acked.get(s, 0) - n)
            duplicated += max(0, n - acked.get(s, 0))

        all_samples = sorted(x for r in kills for x in r["failover_ms"])
        missing = sum(r["missing"] for r in kills)
        with fleet.lock:
            non_retryable = list(fleet.non_retryable)
            retryable = dict(fleet.retryable)
            refusals = dict(fleet.refusals.most_common(8))
        total_acked = sum(acked.values())
        result = {
            "kills": len(kills),
            "store": "s3" if args.s3 else "local",
            "lease_ms": args.lease_ms,
            "heartbeat_ms": args.heartbeat_ms,
            "members": args.members,
            "shards": args.shards,
            "streams": args.streams,
            "failover_ms": {
                "p50": percentile(all_samples, 50),
                "p99": percentile(all_samples, 99),
                "max": all_samples[-1] if all_samples else None,
                "min": all_samples[0] if all_samples else None,
                "samples": len(all_samples),
            },
            "not_recovered": missing,
            "non_retryable": len(non_retryable),
            "retryable": retryable,
            "refusals": refusals,
            "owner_mismatch": owner_mismatch,
            "acked": total_acked,
            "acked_per_s": round(total_acked / elapsed) if elapsed > 0 else None,
            "lost_acked": lost,
            "duplicates": duplicated,
            "unaffected_max_stall_ms": max((r["unaffected_max_stall_ms"] for r in kills), default=None),
            "rejoin_max_stall_ms": max((r["rejoin_max_stall_ms"] for r in kills), default=None),
            "per_kill": [{"member": r["member"], "failover_ms": r["failover_ms"], "held_ms": r["held_ms"],
                          "rejoin_max_stall_ms": r["rejoin_max_stall_ms"]} for r in kills],
            "emulate_put_latency_ms": args.emulate_put_latency_ms,
            "serve_args": args.serve_arg,
            "seed": args.seed,
            "elapsed_s": round(elapsed),
        }
        if non_retryable:
            result["non_retryable_first"] = non_retryable[:5]
        print(json.dumps(result), flush=True)
        failed = bool(non_retryable or missing or lost)
        if all_samples and result["failover_ms"]["p99"] > args.lease_ms + 3000:
            log(f"failover p99 {result['failover_ms']['p99']} ms exceeds lease + 3 s")
        return 1 if failed else 0
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    finally:
        if fleet is not None:
            fleet.stop.set()
            fleet.stop_all()
        if args.keep or failed:
            log(f"kept the run directory {run_dir} (member logs member-<i>.log)")
        else:
            shutil.rmtree(run_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
