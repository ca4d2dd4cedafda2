#!/usr/bin/env bash
# `make demo`: the main job on its embedded defaults. `surge run` brings up
# a job-scoped 4-daemon cluster and runs the bundled MPI checkpoint/restart
# workload (workloads/ckpt_restart.c), unmodified, through the LD_PRELOAD
# interposer: 4 ranks write N-N files (POSIX) and an N-1 shared file
# (collective MPI-IO) for 2 steps, then a second mpirun restarts from the
# last step and verifies every byte. `surge run` stages everything out to
# the PFS with verification, stops the cluster and prints its summary.
# Last, the restart runs again straight on the PFS copy, without Surge,
# to show the staged-out checkpoint is whole.
set -euo pipefail
cd "$(dirname "$0")/.."
SURGE=${SURGE:-$PWD/target/release/surge}
CKPT=$PWD/workloads/build/ckpt_restart
WORK=${SURGE_DEMO_DIR:-$(mktemp -d /tmp/surge-demo.XXXXXX)}
RANKS=${SURGE_DEMO_RANKS:-4}
MIB_PER_RANK=${SURGE_DEMO_MIB:-64}
STEPS=${SURGE_DEMO_STEPS:-2}
# No running cluster is joined: the demo's cluster is its own.
export SURGE_CLUSTER=$WORK/no-cluster.toml
# Open MPI refuses root without these (CI machines run as root).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

cleanup() { if [ "${SURGE_DEMO_KEEP:-0}" != 1 ]; then rm -rf "$WORK"; fi; }
trap cleanup EXIT

MPIRUN="mpirun --oversubscribe -np $RANKS"
ARGS="--mb-per-rank $MIB_PER_RANK --steps $STEPS --xfer 1M"
echo "== surge run: $RANKS ranks, $STEPS checkpoint steps of $MIB_PER_RANK MiB per rank (N-N and N-1), then a restart"
"$SURGE" run --daemons 4 --pfs "$WORK/pfs" --profile "$WORK/profile.jsonl" -- sh -c "
    $MPIRUN $CKPT --dir /surge/ckpt $ARGS --phase checkpoint &&
    $MPIRUN $CKPT --dir /surge/ckpt $ARGS --phase restart"

echo
echo "== restart from the staged-out PFS copy, without Surge"
$MPIRUN "$CKPT" --dir "$WORK/pfs/ckpt" $ARGS --phase restart
echo
echo "== the job's I/O profile (docs/profile.md): per process and file, Darshan-style counters"
python3 - "$WORK/profile.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    rec = json.loads(line)
    w = sum(f["counters"]["POSIX_BYTES_WRITTEN"] for f in rec["files"])
    r = sum(f["counters"]["POSIX_BYTES_READ"] for f in rec["files"])
    print(f"  rank {rec['rank']:>2} pid {rec['pid']:>7}: {len(rec['files'])} files, "
          f"{w / 2**20:.0f} MiB written, {r / 2**20:.0f} MiB read")
PY
echo "demo: OK"
