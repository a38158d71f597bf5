#!/usr/bin/env bash
# The quick start of deploy/README.md, on one machine: a coordinator with
# tokens, three workers and an operator, all plain processes on loopback.
# Counts N (default 14), audits the job, stops everything, and exits 0 only
# if the count matches the published one.
#
#   deploy/quickstart.sh 15
#   NQUEENS=target/release/nqueens deploy/quickstart.sh
set -euo pipefail

n="${1:-14}"
nqueens="${NQUEENS:-nqueens}"
work="$(mktemp -d)"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

# 1. Tokens: one for workers, one for operators.
head -c 32 /dev/urandom | base64 > "$work/worker.token"
head -c 32 /dev/urandom | base64 > "$work/operator.token"

# 2. The coordinator (port 0: any free port; it prints the one it took at
#    once, then "ready" once its state is recovered: health says
#    NOT_SERVING until then).
"$nqueens" coordinator --listen 127.0.0.1:0 --data-dir "$work/data" \
    --worker-token-file "$work/worker.token" \
    --operator-token-file "$work/operator.token" \
    > "$work/coordinator.out" 2> "$work/coordinator.log" &
pids+=("$!")
for _ in $(seq 100); do
    grep -q ready "$work/coordinator.out" 2>/dev/null && break
    sleep 0.1
done
url="http://$(awk '/listening/ {print $NF; exit}' "$work/coordinator.out")"
export NQUEENS_COORDINATOR="$url"
"$nqueens" health

# 3. Three workers (one thread each here; leave --threads out to use every core).
for i in 1 2 3; do
    "$nqueens" worker --token-file "$work/worker.token" --threads 1 --name "quick-$i" \
        2> "$work/worker-$i.log" &
    pids+=("$!")
done

# 4. The operator: wait for the three workers to join (each runs its
#    self-test first), submit, follow to the end (exit 0 only if the
#    counts match OEIS), then audit the job from the journal.
export NQUEENS_OPERATOR_TOKEN="$(cat "$work/operator.token")"
for _ in $(seq 100); do
    [ "$("$nqueens" workers 2>/dev/null | grep -c quick-)" -ge 3 ] && break
    sleep 0.1
done
"$nqueens" submit "$n" --strategy frame --watch --interval 1
"$nqueens" audit 1
"$nqueens" workers
