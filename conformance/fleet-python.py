"""The upstream Python client (durable-streams from PyPI) against a strata fleet.

Produces through one member of a three-member fleet with `Stream-Seq` (one
sequence number per message, so a retry of an append whose answer was lost is
refused as a conflict rather than written twice) and tails the stream live
(long-poll) through the same member, while conformance/fleet-clients.mjs kills
the shard's owner and drains the next one. Runs until STOP_FILE exists and at
least MESSAGES_MIN messages are acknowledged. Afterwards the stream holds every
message exactly once, in order, read through every live member, and the tail
saw exactly that.

Retryable answers (503, a connection that failed) are retried, bounded; any
other error fails the run.

Run by conformance/fleet-clients.sh (it passes MEMBER_URLS, STRATA_BIN, STORE
and STOP_FILE).
"""

import json
import os
import subprocess
import sys
import threading
import time

import httpx
from durable_streams import (
    DurableStream,
    DurableStreamError,
    FetchError,
    SeqConflictError,
    StreamExistsError,
    stream,
)

URLS = os.environ["MEMBER_URLS"].split(",")
STOP_FILE = os.environ["STOP_FILE"]
MESSAGES_MIN = 300
MESSAGES_MAX = 5000
ATTEMPTS_MAX = 600
DEADLINE_S = 120


def owner_url():
    out = subprocess.check_output(
        [os.environ["STRATA_BIN"], "fleet", "status", "--store", os.environ["STORE"],
         "--fleet-lease-ms", "2000", "--json"])
    row = json.loads(out)["shards"][0]
    return row["computed_owner_url"] if row["computed_owner"] == row["manifest_instance"] else None


def retryable(error):
    """503 and a failed connection are retryable (the fleet is moving a
    shard); nothing else is."""
    if isinstance(error, (FetchError, httpx.TransportError)):
        return True
    return isinstance(error, DurableStreamError) and error.status in (502, 503, 504)


def answers(member):
    try:
        return httpx.get(f"{member}/healthz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def with_retries(what, action):
    for _ in range(ATTEMPTS_MAX):
        try:
            return action()
        except Exception as error:  # noqa: BLE001 - classified below
            if not retryable(error):
                raise RuntimeError(f"{what}: a non-retryable error: {error!r}") from error
            time.sleep(0.1)
    raise RuntimeError(f"{what}: no answer after {ATTEMPTS_MAX} attempts")


def append_once(handle, index):
    """Appends message `index` exactly once: a conflict on a retry means an
    earlier attempt landed."""
    seq = f"{index:08d}"
    for attempt in range(ATTEMPTS_MAX):
        try:
            handle.append(f"m{index}", seq=seq)
            return
        except SeqConflictError:
            if attempt == 0:
                raise RuntimeError(f"message {index}: a conflict on its first attempt")
            return
        except Exception as error:  # noqa: BLE001 - classified below
            if not retryable(error):
                raise RuntimeError(f"message {index}: a non-retryable error: {error!r}") from error
            time.sleep(0.1)
    raise RuntimeError(f"message {index}: not acknowledged after {ATTEMPTS_MAX} attempts")


class Tail(threading.Thread):
    """Follows the stream live (long-poll), reconnecting from its last
    offset when a connection ends."""

    def __init__(self, url):
        super().__init__(daemon=True)
        self.url = url
        self.seen = []
        # A live read names its offset; "-1" is the stream's start.
        self.offset = "-1"
        self.error = None
        self.stop = threading.Event()
        # Notified on every batch seen (and when the tail gives up).
        self.seen_more = threading.Condition()

    def run(self):
        reconnects = 0
        while not self.stop.is_set():
            try:
                with stream(self.url, offset=self.offset, live="long-poll", timeout=10) as res:
                    for batch in res.iter_json_batches():
                        with self.seen_more:
                            self.seen.extend(batch)
                            self.offset = res.offset
                            self.seen_more.notify_all()
                        if self.stop.is_set():
                            return
            except Exception as error:  # noqa: BLE001 - classified below
                if not retryable(error):
                    self.give_up(f"tail: a non-retryable error: {error!r}")
                    return
                reconnects += 1
                if reconnects > ATTEMPTS_MAX:
                    self.give_up("tail: too many reconnects")
                    return
                time.sleep(0.1)

    def give_up(self, error):
        with self.seen_more:
            self.error = error
            self.seen_more.notify_all()

    def count(self):
        with self.seen_more:
            return len(self.seen)

    def wait_for(self, count, timeout_s):
        """Waits (at most timeout_s) until the tail saw `count` records or
        gave up."""
        with self.seen_more:
            self.seen_more.wait_for(
                lambda: len(self.seen) >= count or self.error is not None, timeout=timeout_s)


def read_all(url):
    def read():
        with stream(url, live=False, timeout=10) as res:
            return list(res.iter_json())
    return with_retries(f"read {url}", read)


def main():
    owner = owner_url()
    if owner is None:
        raise RuntimeError("the fleet has not settled")
    via = [u for u in URLS if u != owner][0]
    url = f"{via}/v1/stream/fleet-python-{os.getpid()}"

    def create():
        try:
            DurableStream.create(url, content_type="application/json")
        except StreamExistsError:
            pass  # an earlier attempt landed
    with_retries("create", create)
    tail = Tail(url)
    tail.start()
    handle = DurableStream(url, content_type="application/json", batching=False, timeout=10)
    started = time.monotonic()
    sent = 0
    while sent < MESSAGES_MAX and (sent < MESSAGES_MIN or not os.path.exists(STOP_FILE)):
        if time.monotonic() - started > DEADLINE_S:
            raise RuntimeError(f"{sent} messages in {DEADLINE_S} s; the fleet never let go")
        append_once(handle, sent)
        sent += 1
    expected = [f"m{i}" for i in range(sent)]
    tail.wait_for(sent, 30)
    tail.stop.set()
    if tail.error:
        raise RuntimeError(tail.error)
    if tail.seen != expected:
        raise RuntimeError(f"the tail saw {tail.count()} records for {sent} messages")
    live = [member for member in URLS if answers(member)]
    if via not in live:
        raise RuntimeError(f"the member produced through ({via}) stopped answering")
    for member in live:
        records = read_all(f"{member}/v1/stream/fleet-python-{os.getpid()}")
        if records != expected:
            raise RuntimeError(f"{member}: {len(records)} records for {sent} messages")
    print(f"fleet-python: {sent} messages exactly once, in order, produced and tailed "
          "by the Python client through a fleet that lost its owner")


if __name__ == "__main__":
    try:
        main()
    except RuntimeError as error:
        print(f"fleet-python: {error}", file=sys.stderr)
        sys.exit(1)
