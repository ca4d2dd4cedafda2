#!/usr/bin/env bash
# Installs a built Surge under PREFIX in FHS places (what `make install` runs
# once everything is built):
#   bin/      surge, surged
#   lib/      libsurge_preload.so and its handler libsurge_preload_handler.so
#             (the shim loads the handler from its own directory),
#             libsurge_client.so/.a, libsurge_mpiio.so/.a
#   include/  surge.h
#   lib/pkgconfig/surge.pc   (pkg-config --cflags --libs surge)
# `surge` finds surged beside itself and the interposer in ../lib, so the
# prefix can be anywhere. DESTDIR (environment) is put before every path
# written, for staged installs and packages; surge.pc names PREFIX itself.
#
# Usage: scripts/install.sh [--from DIR] [--mpiio DIR | --no-mpiio] PREFIX
#   --from DIR    cargo's output directory (default target/release)
#   --mpiio DIR   where `make -C mpiio lib` put libsurge_mpiio (default mpiio/build)
#   --no-mpiio    leave libsurge_mpiio out (it needs an MPI compiler to build)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
from=$repo/target/release
mpiio=$repo/mpiio/build
prefix=""

usage() {
    echo "usage: scripts/install.sh [--from DIR] [--mpiio DIR | --no-mpiio] PREFIX" >&2
    exit 2
}

while [ $# -gt 0 ]; do
    case "$1" in
        --from) from=${2:?--from needs a directory}; shift 2 ;;
        --mpiio) mpiio=${2:?--mpiio needs a directory}; shift 2 ;;
        --no-mpiio) mpiio=""; shift ;;
        -*) usage ;;
        *) [ -z "$prefix" ] || usage; prefix=$1; shift ;;
    esac
done
[ -n "$prefix" ] || usage
case "$prefix" in
    /*) ;;
    *) echo "install: PREFIX must be an absolute path (surge.pc names it): $prefix" >&2; exit 2 ;;
esac

# Every part first, so a partial build installs nothing.
parts=("$from/surge" "$from/surged" "$from/libsurge_preload.so" "$from/libsurge_preload_handler.so"
       "$from/libsurge_client.so" "$from/libsurge_client.a" "$repo/crates/surge-client/include/surge.h")
[ -z "$mpiio" ] || parts+=("$mpiio/libsurge_mpiio.so" "$mpiio/libsurge_mpiio.a")
missing=()
for part in "${parts[@]}"; do
    [ -f "$part" ] || missing+=("$part")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "install: not built: ${missing[*]}" >&2
    echo "install: build first (make install does: cargo build --release --workspace; make -C mpiio lib)" >&2
    exit 1
fi

root=${DESTDIR:-}$prefix
install -d "$root/bin" "$root/lib/pkgconfig" "$root/include"
install -m 755 "$from/surge" "$from/surged" "$root/bin/"
install -m 755 "$from/libsurge_preload.so" "$from/libsurge_preload_handler.so" "$from/libsurge_client.so" "$root/lib/"
install -m 644 "$from/libsurge_client.a" "$root/lib/"
if [ -n "$mpiio" ]; then
    install -m 755 "$mpiio/libsurge_mpiio.so" "$root/lib/"
    install -m 644 "$mpiio/libsurge_mpiio.a" "$root/lib/"
fi
install -m 644 "$repo/crates/surge-client/include/surge.h" "$root/include/"

version=$("$from/surge" --version | awk '{print $2}')
# Libs.private: what the static library needs besides libc (surge.h says the same).
cat > "$root/lib/pkgconfig/surge.pc" <<EOF
prefix=$prefix
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: surge
Description: Surge burst-buffer file system client library (surge.h)
Version: $version
Cflags: -I\${includedir}
Libs: -L\${libdir} -lsurge_client
Libs.private: -lgcc_s -lutil -lrt -lpthread -lm -ldl
EOF
chmod 644 "$root/lib/pkgconfig/surge.pc"
note=""
[ -n "$mpiio" ] || note=" (without libsurge_mpiio: --no-mpiio)"
echo "install: Surge $version installed under $root$note; run $prefix/bin/surge"
