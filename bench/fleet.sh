#!/usr/bin/env bash
# Fleet throughput: appends per second of one fleet member against three
# members on one store, over a local directory store with 25 ms of emulated
# PUT latency (an object-store-like write), measured with wrk.
#
#   bench/fleet.sh                            3 rounds of (a) then (b)
#   ROUNDS=1 DURATION=10 bench/fleet.sh       shorter
#   STRATA_BIN=/path/to/strata KEEP_DATA=1 bench/fleet.sh
#
# Each run starts on a fresh store directory:
#   (a) one member (`strata serve --fleet`, alone: it owns all shards) and one
#       `wrk -t1 -c1024` against it;
#   (b) three members, and three `wrk -t1 -c341` at once, each against a
#       different member. A stream's shard is owned by one member, so about
#       two thirds of the appends reach a non-owner and are forwarded.
# Both: --shards 12, 64 streams (bench/append.lua: 100-byte POSTs round-robin
# over bench-<i>, with a Stream-Encryption-Key), fleet heartbeat 2 s / lease
# 6 s. Before the measured run: wait until every member is live and every
# shard is claimed by its computed owner (`strata fleet status`), create the
# streams, probe one append through every member, warm up (WARMUP s).
#
# Prints one JSON line per run: req/s (summed over the wrk processes), p50 and
# p99 latency in ms (for (b), of the three wrk latency distributions merged,
# each sampled at 0.1 % steps), non-2xx and socket errors, the CPU of the
# strata processes and of wrk (utime+stime from /proc over the wall time, in
# cores) and the load average; then one summary line with the median of the
# per-round ratios b/a. Exits non-zero if a run failed (a member died, no
# result, or mostly non-2xx).
#
# Environment (all optional):
#   STRATA_BIN      strata binary (default target/release/strata; this script
#                   builds nothing: cargo build --release -p strata-server)
#   ROUNDS          rounds of (a) and (b), alternating (default 3)
#   DURATION        seconds per measured wrk run (default 20)
#   WARMUP          seconds of unmeasured load before each run (default 2, 0 = none)
#   CONNS           total connections (default 1024; split evenly in (b))
#   STREAMS         streams (default 64)
#   MEMBERS         members in (b) (default 3)
#   SHARDS          --shards (default 12)
#   PUT_LATENCY_MS  --emulate-put-latency-ms (default 25)
#   RECORD_BYTES    append body size (default 100)
#   WORKER_THREADS  --worker-threads of each member (default: the server's)
#   HEARTBEAT_MS, LEASE_MS   fleet timings (default 2000, 6000)
#   BENCH_TMP       parent of the run directory (default ${TMPDIR:-/tmp})
#   KEEP_DATA=1     keep the run directory (stores, member logs, wrk output)
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"

ROUNDS="${ROUNDS:-3}"
DURATION="${DURATION:-20}"
WARMUP="${WARMUP:-2}"
CONNS="${CONNS:-1024}"
STREAMS="${STREAMS:-64}"
MEMBERS="${MEMBERS:-3}"
SHARDS="${SHARDS:-12}"
PUT_LATENCY_MS="${PUT_LATENCY_MS:-25}"
RECORD_BYTES="${RECORD_BYTES:-100}"
HEARTBEAT_MS="${HEARTBEAT_MS:-2000}"
LEASE_MS="${LEASE_MS:-6000}"
BENCH_TMP="${BENCH_TMP:-${TMPDIR:-/tmp}}"
STRATA_BIN="${STRATA_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/strata}"

log() { printf '[fleet-bench] %s\n' "$*" >&2; }
err() { printf '[fleet-bench] ERROR: %s\n' "$*" >&2; }

for tool in wrk curl python3; do
    command -v "$tool" >/dev/null || { err "$tool is not installed"; exit 1; }
done
[ -x "$STRATA_BIN" ] || { err "no strata binary at $STRATA_BIN (set STRATA_BIN)"; exit 1; }

ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
mkdir -p "$BENCH_TMP"
RUN_DIR="$(mktemp -d "$BENCH_TMP/strata-fleet-bench.XXXXXX")"
CLK_TCK="$(getconf CLK_TCK)"
PIDS=()
FAILED=0

stop_members() {
    local pid i
    [ "${#PIDS[@]}" -gt 0 ] || return 0
    for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for i in $(seq 1 100); do
        local alive=0
        for pid in "${PIDS[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
        [ "$alive" = 0 ] && break
        sleep 0.1
    done
    for pid in "${PIDS[@]}"; do
        if kill -0 "$pid" 2>/dev/null; then
            log "member $pid did not stop within 10 s of SIGTERM, killing it"
            kill -KILL "$pid" 2>/dev/null || true
        fi
        wait "$pid" 2>/dev/null || true
    done
    PIDS=()
}
cleanup() {
    stop_members
    if [ "${KEEP_DATA:-}" = 1 ]; then
        log "kept run directory $RUN_DIR"
    else
        rm -rf "$RUN_DIR"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

cpu_ticks() { # utime+stime of a process (all threads), in clock ticks
    local stat rest
    stat="$(cat "/proc/$1/stat" 2>/dev/null)" || { echo 0; return; }
    rest="${stat##*) }" # drop "pid (comm) "; comm may contain spaces
    # shellcheck disable=SC2086
    set -- $rest
    echo $((${12} + ${13}))
}

members_ticks() { # the summed utime+stime of every member
    local pid sum=0
    for pid in "${PIDS[@]}"; do sum=$((sum + $(cpu_ticks "$pid"))); done
    echo "$sum"
}

child_ticks() { # cutime+cstime of this shell: CPU of its waited-for children (wrk)
    local stat rest
    stat="$(cat "/proc/$$/stat")"
    rest="${stat##*) }"
    # shellcheck disable=SC2086
    set -- $rest
    echo $((${14} + ${15}))
}

now() { date +%s.%N; }

wait_ready() { # wait_ready URL PID LOG: poll until the member answers /healthz
    local url="$1" pid="$2" logf="$3" i code
    for i in $(seq 1 600); do # at most ~60 s
        code="$(curl -s -o /dev/null -m 1 -w '%{http_code}' "$url/healthz" 2>/dev/null || true)"
        if [ -n "$code" ] && [ "$code" != 000 ]; then return 0; fi
        if ! kill -0 "$pid" 2>/dev/null; then
            err "member $url exited before becoming ready; its log:"
            tail -n 30 "$logf" >&2
            return 1
        fi
        sleep 0.1
    done
    err "member $url not ready after 60 s; its log:"
    tail -n 30 "$logf" >&2
    return 1
}

wait_settled() { # wait_settled STORE N: until N members serve and every shard is claimed by its owner
    local store="$1" n="$2" i
    for i in $(seq 1 120); do # at most ~60 s
        if "$STRATA_BIN" fleet status --store "$store" --fleet-lease-ms "$LEASE_MS" --json 2>/dev/null |
            python3 -c '
import json, sys
st, n, shards = json.load(sys.stdin), int(sys.argv[1]), int(sys.argv[2])
live = {m["instance"] for m in st["members"] if m["live"] and m["state"] == "serving"}
ok = len(live) == n and len(st["shards"]) == shards and all(
    s["computed_owner"] in live and s["computed_owner"] == s["manifest_instance"] for s in st["shards"])
sys.exit(0 if ok else 1)' "$n" "$SHARDS"; then
            return 0
        fi
        sleep 0.5
    done
    err "the fleet on $store did not settle within 60 s:"
    "$STRATA_BIN" fleet status --store "$store" --fleet-lease-ms "$LEASE_MS" >&2 || true
    return 1
}

create_streams() { # create_streams BASE -> prints how many creations got 2xx
    local base="$1" i
    for i in $(seq 0 $((STREAMS - 1))); do
        printf 'url = "%s/v1/stream/bench-%d"\noutput = "/dev/null"\n' "$base" "$i"
    done | curl -s -K - --parallel --parallel-max 16 -X PUT \
        -H "Content-Type: application/octet-stream" -H "Stream-Encryption-Key: $STRATA_KEY" \
        -w '%{http_code}\n' 2>/dev/null | grep -c '^2' || true
}

probe_append() { # probe_append BASE -> HTTP status of one append to bench-0
    curl -s -o /dev/null -m 20 -w '%{http_code}' -X POST \
        -H "Content-Type: application/octet-stream" -H "Stream-Encryption-Key: $STRATA_KEY" \
        --data-binary "$(head -c "$RECORD_BYTES" /dev/zero | tr '\0' x)" \
        "$1/v1/stream/bench-0" || true
}

# append.lua, plus a done() that writes the request count and the latency
# distribution at 0.1 % steps (microseconds) to $QUANTILES_OUT, so that the
# distributions of several wrk processes can be merged.
cat >"$RUN_DIR/append-quantiles.lua" <<'LUA'
dofile(os.getenv("APPEND_LUA"))
function done(summary, latency, requests)
  local out = io.open(os.getenv("QUANTILES_OUT"), "w")
  out:write(string.format("requests %d\n", summary.requests))
  for i = 1, 999 do
    out:write(string.format("%d\n", latency:percentile(i / 10)))
  end
  out:write(string.format("%d\n", latency.max))
  out:close()
end
LUA

STRATA_KEY="$("$STRATA_BIN" keys generate)"
RESULTS="$RUN_DIR/runs.jsonl"
: >"$RESULTS"

run() { # run MODE ROUND: MODE a (one member) or b ($MEMBERS members)
    local mode="$1" round="$2" n i
    [ "$mode" = a ] && n=1 || n="$MEMBERS"
    local per=$((CONNS / n))
    local dir
    dir="$(mktemp -d "$RUN_DIR/$mode$round.XXXXXX")"
    local store="$dir/store"
    local -a urls=() logs=()
    log "($mode, round $round) $n member(s), $n x wrk -c$per, store $store"
    for i in $(seq 0 $((n - 1))); do
        local port
        port="$(free_port)"
        urls+=("http://127.0.0.1:$port")
        logs+=("$dir/member-$i.log")
        "$STRATA_BIN" serve --fleet --advertise-url "http://127.0.0.1:$port" \
            --listen "127.0.0.1:$port" --store "$store" --shards "$SHARDS" \
            --heartbeat-ms "$HEARTBEAT_MS" --fleet-lease-ms "$LEASE_MS" \
            --emulate-put-latency-ms "$PUT_LATENCY_MS" --cache-dir "$dir/cache-$i" \
            ${WORKER_THREADS:+--worker-threads "$WORKER_THREADS"} \
            >"$dir/member-$i.log" 2>&1 &
        PIDS+=($!)
    done
    local mark=""
    for i in $(seq 0 $((n - 1))); do
        wait_ready "${urls[$i]}" "${PIDS[$i]}" "${logs[$i]}" || mark="not ready"
    done
    if [ -z "$mark" ]; then
        wait_settled "$store" "$n" || mark="not settled"
    fi
    if [ -z "$mark" ]; then
        local created probe
        created="$(create_streams "${urls[0]}")"
        [ "$created" -eq "$STREAMS" ] || mark="create: $created/$STREAMS 2xx"
        for i in $(seq 0 $((n - 1))); do
            probe="$(probe_append "${urls[$i]}")"
            [ "${probe:0:1}" = 2 ] || mark="${mark:+$mark; }probe append via member $i: HTTP $probe"
        done
    fi
    if [ -n "$mark" ]; then
        err "($mode, round $round) $mark; member logs in $dir (kept with KEEP_DATA=1)"
        printf '{"round":%d,"mode":"%s","members":%d,"failed":"%s"}\n' "$round" "$mode" "$n" "$mark" |
            tee -a "$RESULTS"
        stop_members
        FAILED=1
        return
    fi

    local -a wrk_env=(APPEND_LUA="$here/append.lua" STREAMS="$STREAMS" RECORD_BYTES="$RECORD_BYTES"
        PREFIX=/v1/stream/ STREAM_KEY="$STRATA_KEY")
    local -a wpids=()
    if [ "$WARMUP" != 0 ]; then
        for i in $(seq 0 $((n - 1))); do
            env "${wrk_env[@]}" QUANTILES_OUT=/dev/null wrk -t1 -c"$per" -d"${WARMUP}s" \
                -s "$RUN_DIR/append-quantiles.lua" "${urls[$i]}" >"$dir/warmup-$i.wrk" 2>&1 &
            wpids+=($!)
        done
        for i in "${wpids[@]}"; do wait "$i" || true; done
        wpids=()
    fi
    local load c0 c1 w0 w1 t0 t1
    load="$(cut -d' ' -f1-3 /proc/loadavg)"
    c0="$(members_ticks)"
    w0="$(child_ticks)"
    t0="$(now)"
    for i in $(seq 0 $((n - 1))); do
        env "${wrk_env[@]}" QUANTILES_OUT="$dir/quantiles-$i" wrk -t1 -c"$per" -d"${DURATION}s" \
            --latency -s "$RUN_DIR/append-quantiles.lua" "${urls[$i]}" >"$dir/run-$i.wrk" 2>&1 &
        wpids+=($!)
    done
    for i in "${wpids[@]}"; do wait "$i" || true; done
    t1="$(now)"
    c1="$(members_ticks)"
    w1="$(child_ticks)"
    local died=""
    for i in $(seq 0 $((n - 1))); do
        if ! kill -0 "${PIDS[$i]}" 2>/dev/null; then
            err "($mode, round $round) member $i died during the run; its log:"
            tail -n 30 "${logs[$i]}" >&2
            died="member $i died"
        fi
    done
    stop_members

    python3 - "$dir" "$n" "$mode" "$round" "$per" "$c0" "$c1" "$w0" "$w1" "$t0" "$t1" "$CLK_TCK" \
        "$load" "$died" "$STREAMS" "$SHARDS" "$PUT_LATENCY_MS" "$DURATION" <<'PY' | tee -a "$RESULTS"
import json, os, re, sys
(d, n, mode, rnd, per, c0, c1, w0, w1, t0, t1, hz, load, died,
 streams, shards, put_ms, duration) = sys.argv[1:]
n, per, hz = int(n), int(per), int(hz)
wall = float(t1) - float(t0)

def pct(points, p):  # points: [(latency_us, weight)], ascending
    total = sum(w for _, w in points)
    acc = 0.0
    for v, w in points:
        acc += w
        if acc >= total * p / 100 - 1e-9:
            return v
    return points[-1][0] if points else None

def ms(us):
    return None if us is None else round(us / 1000, 2)

per_member, merged, failures = [], [], []
rps_sum = non2xx = total = 0
sock = {}
for i in range(n):
    text = open(os.path.join(d, f"run-{i}.wrk")).read()
    m = re.search(r"^Requests/sec:\s+([\d.]+)", text, re.M)
    rps = float(m.group(1)) if m else 0.0
    m = re.search(r"^\s*(\d+) requests in", text, re.M)
    reqs = int(m.group(1)) if m else 0
    m = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
    bad = int(m.group(1)) if m else 0
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    if m:
        for k, v in zip(("connect", "read", "write", "timeout"), m.groups()):
            sock[k] = sock.get(k, 0) + int(v)
    q = os.path.join(d, f"quantiles-{i}")
    lat = []
    if os.path.exists(q):
        lines = open(q).read().split()
        count, lat = int(lines[1]), [int(x) for x in lines[2:]]
        merged += [(v, count / len(lat)) for v in lat]
    if reqs == 0 or rps == 0:
        failures.append(f"wrk {i} produced no result")
    elif reqs and bad * 2 > reqs:
        failures.append(f"wrk {i}: {bad} of {reqs} not 2xx")
    rps_sum += rps
    non2xx += bad
    total += reqs
    one = sorted((v, 1) for v in lat)
    per_member.append({"req_s": round(rps), "p50_ms": ms(pct(one, 50)), "p99_ms": ms(pct(one, 99))})
merged.sort()
if died:
    failures.append(died)
out = {
    "round": int(rnd), "mode": mode, "members": n, "conns": per * n, "conns_per_member": per,
    "streams": int(streams), "shards": int(shards), "put_latency_ms": int(put_ms),
    "duration_s": int(duration),
    "req_s": round(rps_sum), "p50_ms": ms(pct(merged, 50)), "p99_ms": ms(pct(merged, 99)),
    "requests": total, "non2xx": non2xx, "socket_errors": sock,
    "server_cpu_cores": round((int(c1) - int(c0)) / hz / wall, 2),
    "wrk_cpu_cores": round((int(w1) - int(w0)) / hz / wall, 2),
    "loadavg_before": load,
}
if n > 1:
    out["per_member"] = per_member
if failures:
    out["failed"] = "; ".join(failures)
print(json.dumps(out), flush=True)
PY
    if grep -q '"failed"' <(tail -n 1 "$RESULTS"); then FAILED=1; fi
}

log "run directory $RUN_DIR ($(df -PT "$RUN_DIR" | awk 'NR == 2 {print $2}')), binary $STRATA_BIN, loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq 1 "$ROUNDS"); do
    run a "$round"
    run b "$round"
done

python3 - "$RESULTS" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ok = {(r["mode"], r["round"]): r for r in runs if "failed" not in r}
rounds = sorted({r["round"] for r in runs})
ratios = [round(ok[("b", k)]["req_s"] / ok[("a", k)]["req_s"], 3)
          for k in rounds if ("a", k) in ok and ("b", k) in ok and ok[("a", k)]["req_s"]]
def med(mode, key):
    xs = [r[key] for (m, _), r in ok.items() if m == mode and r.get(key) is not None]
    return statistics.median(xs) if xs else None
print(json.dumps({
    "summary": True,
    "ratio_b_a": ratios,
    "median_ratio_b_a": statistics.median(ratios) if ratios else None,
    "a_median": {"req_s": med("a", "req_s"), "p50_ms": med("a", "p50_ms"), "p99_ms": med("a", "p99_ms"),
                 "server_cpu_cores": med("a", "server_cpu_cores")},
    "b_median": {"req_s": med("b", "req_s"), "p50_ms": med("b", "p50_ms"), "p99_ms": med("b", "p99_ms"),
                 "server_cpu_cores": med("b", "server_cpu_cores")},
    "failed_runs": len(runs) - len(ok),
}), flush=True)
PY
exit "$FAILED"
