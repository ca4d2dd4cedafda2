#!/usr/bin/env bash
# POSIX conformance of the Surge mount, measured with pjdfstest (the suite
# FUSE file systems run): builds pjdfstest from its tarball in a scratch
# directory, starts a cluster and mounts it (FUSE alone, `--allow-other`
# so that the suite's other users reach it), runs `prove -r` from a
# directory on the mount, and prints the tests passed of those planned.
# Fails when fewer than MIN percent pass.
#
#   scripts/conformance.sh [--bin DIR] [--min PERCENT] [TEST_DIR...]
#
# TEST_DIR: pjdfstest's test directories to run (chown, link, ...); all by
# default. --bin: where `surge` and `surged` are (default target/release).
# Needs root (pjdfstest switches users), FUSE, a C compiler, autotools and
# prove; exits 77 saying what is missing otherwise. PJDFSTEST_TARBALL names
# the tarball (default ../shared/third_party/pjdfstest-85a8aea.tar.gz).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
bin="$repo/target/release"
min=95
dirs=()
while [ $# -gt 0 ]; do
    case "$1" in
        --bin) bin="$(cd "$2" && pwd)"; shift 2 ;;
        --min) min="$2"; shift 2 ;;
        -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "conformance: unknown option $1" >&2; exit 2 ;;
        *) dirs+=("$1"); shift ;;
    esac
done
tarball="${PJDFSTEST_TARBALL:-$repo/../shared/third_party/pjdfstest-85a8aea.tar.gz}"

unready() {
    echo "conformance: cannot run: $*" >&2
    exit 77
}
[ "$(id -u)" -eq 0 ] || unready "pjdfstest needs root (it switches to other users)"
[ -e /dev/fuse ] || unready "no /dev/fuse"
for tool in cc make autoreconf prove; do
    command -v "$tool" >/dev/null || unready "$tool is missing (scripts/setup.sh installs it)"
done
[ -f "$tarball" ] || unready "no pjdfstest tarball at $tarball (set PJDFSTEST_TARBALL)"
for b in surge surged; do
    [ -x "$bin/$b" ] || unready "$bin/$b is missing (cargo build --workspace, or make build)"
done

# Built once per tarball, in the target directory (never in the repository).
build="$repo/target/pjdfstest"
suite="$build/pjdfstest"
if [ ! -x "$suite/pjdfstest" ] || [ "$tarball" -nt "$suite/pjdfstest" ]; then
    rm -rf "$build"
    mkdir -p "$build"
    tar -xzf "$tarball" -C "$build"
    (cd "$suite" && autoreconf -ifs >/dev/null 2>&1 && ./configure -q >/dev/null && make -s pjdfstest) >&2
fi

work="$(mktemp -d /tmp/surge-conformance.XXXXXX)"
export SURGE_CLUSTER="$work/cluster.toml"
stop() {
    cd /
    "$bin/surge" umount "$work/mnt" >/dev/null 2>&1 || true
    "$bin/surge" stop >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap stop EXIT
"$bin/surge" start --daemons 2 --buffer "$work/bb" --pfs "$work/pfs" >"$work/start.log" 2>&1 \
    || { cat "$work/start.log" >&2; exit 1; }
mkdir "$work/mnt"
"$bin/surge" mount --allow-other --log "$work/mount.log" "$work/mnt" >&2
mkdir "$work/mnt/run"
cd "$work/mnt/run"

targets=()
if [ ${#dirs[@]} -eq 0 ]; then
    targets=("$suite/tests")
else
    for d in "${dirs[@]}"; do targets+=("$suite/tests/$d"); done
fi
prove -r "${targets[@]}" >"$work/prove.log" 2>&1 || true
cd /

# Tests planned; failed ones and those a file planned but never ran count as not passed.
read -r planned failed < <(awk '
    /^Files=[0-9]+, Tests=/ { split($2, t, "="); sub(",", "", t[2]); run = t[2] }
    /Failed: [0-9]+\)/ { match($0, /Failed: [0-9]+/); failed += substr($0, RSTART + 8, RLENGTH - 8) }
    /You planned [0-9]+ tests but ran [0-9]+/ {
        match($0, /planned [0-9]+/); p = substr($0, RSTART + 8, RLENGTH - 8)
        match($0, /ran [0-9]+/); r = substr($0, RSTART + 4, RLENGTH - 4)
        unrun += p - r
    }
    END { print run + unrun, failed + unrun }' "$work/prove.log")
if [ -z "$planned" ] || [ "$planned" -eq 0 ]; then
    cat "$work/prove.log" >&2
    echo "conformance: prove ran no tests" >&2
    exit 1
fi
grep -E '^(/.*\.t +\(Wstat|  Failed tests?:)' "$work/prove.log" | sed "s|$suite/tests/||" >&2 || true
passed=$((planned - failed))
percent=$(awk -v p="$passed" -v t="$planned" 'BEGIN { printf "%.2f", 100 * p / t }')
echo "conformance: pjdfstest on the Surge mount: $passed of $planned tests passed ($percent%)"
awk -v p="$passed" -v t="$planned" -v m="$min" 'BEGIN { exit !(100 * p >= m * t) }' \
    || { echo "conformance: below the $min% required" >&2; exit 1; }
