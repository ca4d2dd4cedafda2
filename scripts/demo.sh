#!/usr/bin/env bash
# `make demo`: start a 4-daemon Surge cluster on embedded defaults, write a
# checkpoint-sized set of files (an N-N checkpoint of 8 ranks plus one
# shared file), read every byte back, stage everything out to the PFS with
# verification, and print a summary. Everything lives under one work
# directory and is removed at the end unless SURGE_DEMO_KEEP=1.
set -euo pipefail
cd "$(dirname "$0")/.."
SURGE=${SURGE:-$PWD/target/release/surge}
WORK=${SURGE_DEMO_DIR:-$(mktemp -d /tmp/surge-demo.XXXXXX)}
BUFFER=/dev/shm/$(basename "$WORK")-buffer
[ -d /dev/shm ] || BUFFER=$WORK/buffer
RANKS=${SURGE_DEMO_RANKS:-8}
MIB_PER_RANK=${SURGE_DEMO_MIB:-32}
export SURGE_CLUSTER=$WORK/cluster.toml

cleanup() {
    "$SURGE" stop >/dev/null 2>&1 || true
    if [ "${SURGE_DEMO_KEEP:-0}" != 1 ]; then rm -rf "$WORK" "$BUFFER"; fi
}
trap cleanup EXIT

now() { date +%s.%N; }
rate() { awk -v b="$1" -v t0="$2" -v t1="$3" 'BEGIN { printf "%.0f MB/s", b / (t1 - t0) / 1e6 }'; }

echo "== starting a 4-daemon cluster (buffer $BUFFER, PFS $WORK/pfs)"
"$SURGE" start --daemons 4 --buffer "$BUFFER" --pfs "$WORK/pfs"

echo "== preparing $RANKS x $MIB_PER_RANK MiB of checkpoint data"
mkdir -p "$WORK/input"
for r in $(seq 0 $((RANKS - 1))); do
    head -c $((MIB_PER_RANK << 20)) /dev/urandom > "$WORK/input/rank$r.ckpt"
done
cat "$WORK"/input/rank*.ckpt > "$WORK/input/shared.ckpt"
bytes=$(du -cb "$WORK"/input/*.ckpt | tail -1 | cut -f1)

echo "== writing the checkpoint: N-N files striped over 1 daemon each, one shared file over all 4"
"$SURGE" mkdir -p /ckpt/step1/nn
"$SURGE" setstripe -c 1 -S 1M /ckpt/step1/nn
"$SURGE" setstripe -c -1 -S 1M /ckpt/step1/shared.ckpt
t0=$(now)
"$SURGE" cp "$WORK"/input/rank*.ckpt /surge/ckpt/step1/nn/
"$SURGE" cp "$WORK/input/shared.ckpt" /surge/ckpt/step1/shared.ckpt
t1=$(now)
"$SURGE" ls -l /ckpt/step1/nn /ckpt/step1
"$SURGE" getstripe /ckpt/step1/shared.ckpt

echo "== restart read: every byte compared"
t2=$(now)
for r in $(seq 0 $((RANKS - 1))); do
    "$SURGE" cat "/ckpt/step1/nn/rank$r.ckpt" | cmp - "$WORK/input/rank$r.ckpt"
done
"$SURGE" cat /ckpt/step1/shared.ckpt | cmp - "$WORK/input/shared.ckpt"
t3=$(now)

echo "== staging out to the PFS"
t4=$(now)
"$SURGE" stage-out --all
t5=$(now)
for r in $(seq 0 $((RANKS - 1))); do
    cmp "$WORK/pfs/ckpt/step1/nn/rank$r.ckpt" "$WORK/input/rank$r.ckpt"
done
cmp "$WORK/pfs/ckpt/step1/shared.ckpt" "$WORK/input/shared.ckpt"
"$SURGE" ls -l /ckpt/step1
"$SURGE" status

echo
echo "== summary"
echo "  checkpoint written: $((bytes >> 20)) MiB in $((RANKS + 1)) files, $(rate "$bytes" "$t0" "$t1") (surge cp from local disk)"
echo "  restart read:       $((bytes >> 20)) MiB, every byte identical, $(rate "$bytes" "$t2" "$t3")"
echo "  staged out:         $((bytes >> 20)) MiB to $WORK/pfs, every copy verified and identical, $(rate "$bytes" "$t4" "$t5")"
echo "demo: OK"
