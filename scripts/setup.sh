#!/usr/bin/env bash
# Installs what Surge needs to build and test on a fresh Debian machine.
set -euo pipefail
cd "$(dirname "$0")/.."

# Open MPI, parallel HDF5 and fio: the interposer compatibility tests, the
# workloads and the benchmarks run them for real. iproute2 (ip, tc): the
# multi-host test bed (`surge testbed`, `surge bench conns`). MPICH, beside
# Open MPI (which stays the default mpicc/mpirun by its alternatives
# priority): libsurge_mpiio is tested against both. fuse3 (fusermount3): the
# /surge FUSE mount for users other than root; rsync and git: the
# compatibility tests run them on the mount. redis-server: the BBOS drain
# state's Redis backend (`surge start --state redis://HOST:PORT`); its tests
# start their own. netcdf-bin (ncgen, ncdump, nccopy): the compatibility
# tests run netCDF's tools on its three formats; autoconf, automake and
# libtool: they build Darshan's runtime from ../shared/third_party;
# autoconf, automake and perl (prove): `make conformance` builds and runs
# pjdfstest on the mount. attr (setfattr, getfattr): the extended-attribute
# scenarios (crates/surge-preload/tests/stage_fidelity.rs). autoconf,
# automake and Open MPI also build IOR and mdtest for `surge bench io500`.
# glusterfs-server: the peer file system of `surge bench fio --peer glusterfs`.
APT_PACKAGES=(build-essential pkg-config openmpi-bin libopenmpi-dev libhdf5-openmpi-dev hdf5-tools fio iproute2 mpich libmpich-dev fuse3 rsync git redis-server e2fsprogs mount netcdf-bin autoconf automake libtool perl attr glusterfs-server)

apt_install() {
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    # The first try can fail on a cleaned package cache: retry once.
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" \
        || $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
}

missing=()
for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    apt_install "${missing[@]}"
fi

if ! command -v cargo >/dev/null; then
    echo "setup: cargo not found; install Rust with rustup (https://rustup.rs) and re-run" >&2
    exit 1
fi
# `make test` checks the style with rustfmt and clippy.
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
    if command -v rustup >/dev/null; then
        rustup component add rustfmt clippy
    else
        echo "setup: cargo fmt and cargo clippy are needed (rustup component add rustfmt clippy)" >&2
        exit 1
    fi
fi
cargo fetch --locked -q

# The tuner (`surge tune`): a Python package with its dependencies
# (pydarshan, pandas, pyarrow, scikit-learn, xgboost-cpu, matplotlib), and
# its test extra (pytest, and ruff, which `make test` runs over tuner/).
python3 -m pip install -q -e "tuner[test]" \
    || python3 -m pip install -q -e "tuner[test]"
# h5py: the compatibility tests run it on the mount.
python3 -m pip install -q h5py || python3 -m pip install -q h5py
echo "setup: ready ($(cargo --version))"
# `make demo` and `make test` run this script again only when this stamp is
# missing or older than the script (or a tool it installs is gone).
mkdir -p target && date -u > target/.setup-done
