#!/usr/bin/env bash
# Same-run comparison of strata with a peer server: runs two bench/http.sh
# configurations alternately (strata first in odd rounds, the peer first in
# even ones), ROUNDS times, and prints one JSON line with every round's
# req/s and p99 and the median ratio strata / peer (the HTTP targets in
# docs/BENCHMARKS.md are stated as that ratio). Progress and each round's
# table go to stderr.
#
#   bench/peer-ratio.sh                     strata a (c=64, local dir) vs Rust peer c (c=64)
#   PAIR="b d" bench/peer-ratio.sh          c=1,024 over the 25 ms store vs the peer's c=1,024
#   ROUNDS=5 DURATION=20 bench/peer-ratio.sh
#
# Environment: ROUNDS (default 3), PAIR ("<strata config> <peer config>",
# default "a c"), and everything bench/http.sh reads (DURATION, WARMUP,
# STRATA_BIN, SKIP_BUILD, PEERS_DIR...). The first round builds what is
# missing (strata in release, the peer from crates.io); the rounds after it
# build nothing. Exits non-zero if any run failed.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
ROUNDS="${ROUNDS:-3}"
PAIR="${PAIR:-a c}"
read -r ours theirs <<<"$PAIR"
[ -n "${ours:-}" ] && [ -n "${theirs:-}" ] || { echo "PAIR needs two configurations" >&2; exit 2; }
[ "$ROUNDS" -ge 1 ] 2>/dev/null || { echo "ROUNDS must be a positive number" >&2; exit 2; }

log() { printf '[peer-ratio] %s\n' "$*" >&2; }

row_field() { # row_field TABLE CONFIG COLUMN -> a cell of that configuration's row
    awk -F'|' -v cfg="$2" -v col="$3" '$2 ~ "^ *" cfg " *$" { gsub(/ /, "", $col); print $col }' "$1"
}

work="$(mktemp -d "${TMPDIR:-/tmp}/strata-peer-ratio.XXXXXX")"
trap 'rm -rf "$work"' EXIT
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
ours_rps=() theirs_rps=() ours_p99=() theirs_p99=() ratios=()
for round in $(seq 1 "$ROUNDS"); do
    if [ $((round % 2)) -eq 1 ]; then order="$ours $theirs"; else order="$theirs $ours"; fi
    log "round $round of $ROUNDS: $order"
    table="$work/round-$round.md"
    skip="${SKIP_BUILD:-}"
    [ "$round" -gt 1 ] && skip=1
    if ! ONLY="$order" SKIP_BUILD="$skip" "$here/http.sh" >"$table"; then
        cat "$table" >&2
        log "round $round failed"
        exit 1
    fi
    cat "$table" >&2
    a="$(row_field "$table" "$ours" 6)" b="$(row_field "$table" "$theirs" 6)"
    ours_rps+=("$a") theirs_rps+=("$b")
    ours_p99+=("$(row_field "$table" "$ours" 8)") theirs_p99+=("$(row_field "$table" "$theirs" 8)")
    ratios+=("$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", (b > 0 ? a / b : 0) }')")
done

json_list() { local IFS=,; echo "[$*]"; }
quoted_list() { local out=() v; for v in "$@"; do out+=("\"$v\""); done; json_list "${out[@]}"; }
median="$(printf '%s\n' "${ratios[@]}" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }')"
commit="$(cd "$here/.." && git rev-parse --short HEAD 2>/dev/null || echo '?')"
printf '{"pair":"%s","rounds":%s,"strata_config":"%s","peer_config":"%s","strata_rps":%s,"peer_rps":%s,"strata_p99":%s,"peer_p99":%s,"ratios":%s,"median_ratio":%s,"commit":"%s","loadavg_before":"%s","loadavg_after":"%s"}\n' \
    "$PAIR" "$ROUNDS" "$ours" "$theirs" \
    "$(json_list "${ours_rps[@]}")" "$(json_list "${theirs_rps[@]}")" \
    "$(quoted_list "${ours_p99[@]}")" "$(quoted_list "${theirs_p99[@]}")" \
    "$(json_list "${ratios[@]}")" "$median" "$commit" "$load_before" "$(cut -d' ' -f1-3 /proc/loadavg)"
