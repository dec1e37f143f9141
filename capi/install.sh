#!/bin/sh
# Installs the C library: libxfer.so, libxfer.a, xfer.h and a pkg-config file.
# Build first:  cargo build --release --locked -p xfer-capi
#
#   PREFIX=/opt/xfer capi/install.sh
#
# Variables (all optional):
#   PREFIX      install prefix (default /usr/local)
#   LIBDIR      libraries and pkgconfig/ (default $PREFIX/lib)
#   INCLUDEDIR  the header (default $PREFIX/include)
#   DESTDIR     staging root put before every path, not written into xfer.pc
#   LIB_SRC     where the built libraries are (default: the release directory
#               of cargo's target directory, which honours CARGO_TARGET_DIR and
#               build.target-dir; target/release without cargo)
set -eu
cd "$(dirname "$0")/.."
if [ -z "${LIB_SRC:-}" ]; then
    # Asked after the cd so that a relative CARGO_TARGET_DIR means what it
    # meant to `make install`'s build (run from the repository root).
    target=$(${CARGO:-cargo} metadata --format-version 1 --no-deps 2>/dev/null |
        sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p') || target=
    LIB_SRC=${target:-target}/release
fi
PREFIX=${PREFIX:-/usr/local}
LIBDIR=${LIBDIR:-$PREFIX/lib}
INCLUDEDIR=${INCLUDEDIR:-$PREFIX/include}
DESTDIR=${DESTDIR:-}
VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)

for f in libxfer.so libxfer.a; do
    if [ ! -f "$LIB_SRC/$f" ]; then
        echo "install: $LIB_SRC/$f is missing; run: cargo build --release --locked -p xfer-capi" >&2
        exit 1
    fi
done
install -d "$DESTDIR$LIBDIR/pkgconfig" "$DESTDIR$INCLUDEDIR"
install -m 644 include/xfer.h "$DESTDIR$INCLUDEDIR/xfer.h"
install -m 755 "$LIB_SRC/libxfer.so" "$DESTDIR$LIBDIR/libxfer.so"
install -m 644 "$LIB_SRC/libxfer.a" "$DESTDIR$LIBDIR/libxfer.a"
sed -e "s|@PREFIX@|$PREFIX|g" -e "s|@LIBDIR@|$LIBDIR|g" -e "s|@INCLUDEDIR@|$INCLUDEDIR|g" \
    -e "s|@VERSION@|$VERSION|g" capi/xfer.pc.in >"$DESTDIR$LIBDIR/pkgconfig/xfer.pc"
echo "install: libxfer $VERSION in $DESTDIR$LIBDIR, xfer.h in $DESTDIR$INCLUDEDIR"
