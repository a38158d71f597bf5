#!/usr/bin/env bash
# The GPU path's figures on a machine with a card (issue 34's targets):
# each N in NS counted on the card with its defaults, the tuner's fastest
# settings at TUNE_N and the card's rate with them (what `plan N
# --estimate --gpu-rate R` projects record runs from), then with those
# settings a local count of LOOP_N against one worker counting it through
# a loopback coordinator.
#
#   tests/bench/card.sh [nqueens binary]   (default: target/release/nqueens)
#   NS="18 19 20 21" TUNE_N=20 LOOP_N=21     (the defaults)
#   API=cuda                                 (the CUDA path, tuned by its own knobs)
#   SWEEP="NAME=VALUE ..."                   (settings tried one at a time)
#
# Every count is checked against the published one: a command that finds
# a difference exits non-zero, and so does this script. Times are whole
# processes, as a user sees them (the worker's start and self-test, and
# the coordinator's planning, included).
set -euo pipefail
bin=$(realpath "${1:-target/release/nqueens}")
NS=${NS:-18 19 20 21}
TUNE_N=${TUNE_N:-20}
LOOP_N=${LOOP_N:-21}
export NQUEENS_GPU_API=${API:-${NQUEENS_GPU_API:-wgpu}}
read -r -a sweep <<<"${SWEEP:-}"
for kv in "${sweep[@]}"; do
    if ! [[ $kv =~ ^NQUEENS_GPU_[A-Z]+=[A-Za-z0-9]+$ ]]; then
        echo "SWEEP takes NQUEENS_GPU_NAME=VALUE settings; '$kv' is not one" >&2
        exit 2
    fi
done
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait; rm -rf "$work"' EXIT
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }

echo "== $(uname -n): $(nproc) cores; $(nvidia-smi -L 2>/dev/null | head -1 || true)"
echo "== each N on the card through $NQUEENS_GPU_API, its defaults"
for n in $NS; do
    "$bin" solve "$n" --core gpu | grep -E '^(total|known|time|nodes|card) '
done

# The card's rate (nodes/s) at N=TUNE_N, counted as `bench` counts it,
# with the settings given as arguments (NAME=VALUE) on top of those
# exported.
rate_of() {
    env "$@" "$bin" bench "$TUNE_N" --core gpu --no-baseline --json |
        sed -E 's/.*"nodes":"([0-9]+)".*"seconds_mt":([0-9.eE+-]+).*/\1 \2/' |
        awk '{ printf "%.4g", $1 / $2 }'
}

echo "== tuning at N=$TUNE_N"
"$bin" bench "$TUNE_N" --core gpu --tune | tee "$work/tune"
settings=$(tail -n 1 "$work/tune")
for kv in $settings; do export "${kv?}"; done
# SWEEP: settings tried one at a time on top of those; the fastest, if
# faster than without, is kept.
if [ "${#sweep[@]}" -gt 0 ]; then
    best="" best_rate=$(rate_of)
    echo "== sweep at N=$TUNE_N: as it is, $best_rate nodes/s"
    for kv in "${sweep[@]}"; do
        r=$(rate_of "$kv")
        echo "   $kv: $r nodes/s"
        if awk -v r="$r" -v b="$best_rate" 'BEGIN { exit !(r > b) }'; then
            best=$kv best_rate=$r
        fi
    done
    if [ -n "$best" ]; then
        export "${best?}"
        settings="${settings:+$settings }$best"
    fi
fi
settings=${settings:-the defaults}
rate=$(rate_of)
echo "== the card's rate at N=$TUNE_N with those settings: $rate nodes/s" \
    "(nqueens plan 28 --estimate --mode backtrack --gpu-rate $rate)"

echo "== N=$LOOP_N with $settings"

start=$(now)
"$bin" solve "$LOOP_N" --core gpu >"$work/local"
local_s=$(since "$start")
grep -E '^(total|known|time|card) ' "$work/local"
want=$(awk '$1 == "total" { print $2 }' "$work/local")

"$bin" coordinator --data-dir "$work/coordinator" --listen 127.0.0.1:0 >"$work/coordinator.out" 2>&1 &
for _ in $(seq 300); do
    grep -q ready "$work/coordinator.out" && break
    sleep 0.1
done
url="http://$(grep -m 1 'listening on' "$work/coordinator.out" | awk '{ print $NF }')"
start=$(now)
"$bin" worker --coordinator "$url" --core gpu >"$work/worker.out" 2>&1 &
"$bin" submit "$LOOP_N" --mode backtrack --coordinator "$url" --watch >"$work/watch"
worker_s=$(since "$start")
tail -n 1 "$work/watch"
got=$(tail -n 1 "$work/watch" | sed -E 's/.* total ([0-9,]+),.*/\1/; s/,//g')
if [ "$got" != "$want" ]; then
    echo "the worker's total $got differs from the local count's $want" >&2
    exit 1
fi
echo "local ${local_s} s, one worker through a loopback coordinator ${worker_s} s:" \
    "$(awk -v l="$local_s" -v w="$worker_s" 'BEGIN { printf "%.1f%%", 100 * l / w }') of local's rate"
