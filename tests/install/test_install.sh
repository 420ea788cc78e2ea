#!/bin/bash
# test_install.sh BUILD_DIR SOURCE_DIR LIBDIR BINDIR INCLUDEDIR CC VERSION PYTHON|-
#
# Installs the build (cmake --install BUILD_DIR --prefix <temp>) and uses it from outside the
# tree, as other builds would: checks the installed files (header, library with its SONAME and
# version links, every tool, chorus.pc, the CMake package), then builds consumer/consumer.c
#   (a) with `pkg-config --cflags --libs chorus` and runs it alone and under the installed
#       chorus-run with 2 ranks;
#   (b) as an outside CMake project with find_package(Chorus) and Chorus::chorus, and checks
#       that a version the package does not satisfy (1.0) is refused;
#   (c) installs python/ with pip into a venv of PYTHON (--system-site-packages, offline),
#       finding the library through PKG_CONFIG_PATH, and into a --target directory through
#       CHORUS_PREFIX, and runs a collective with each (1 rank, and 2 ranks under chorus-run);
#       PYTHON "-" leaves (c) out (CHORUS_BUILD_PYTHON=OFF).
# LIBDIR, BINDIR, INCLUDEDIR are CMAKE_INSTALL_<dir> of the build (relative to the prefix).
# Exits 0 when everything works, 1 naming the first failure, 77 (skip) without pkg-config.
# Every temporary file lives under one directory, removed on every exit.
set -u -o pipefail

BUILD=${1:?usage: test_install.sh BUILD_DIR SOURCE_DIR LIBDIR BINDIR INCLUDEDIR CC VERSION PYTHON}
SOURCE=${2:?source dir}
LIBDIR=${3:?libdir}
BINDIR=${4:?bindir}
INCLUDEDIR=${5:?includedir}
CC=${6:?C compiler}
VERSION=${7:?version}
PYTHON=${8:?python interpreter or -}
HERE=$(cd "$(dirname "$0")" && pwd)

TMP=$(mktemp -d "${TMPDIR:-/tmp}/chorus-install-test.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
PREFIX=$TMP/prefix
LOG=$TMP/log

fail() {
  echo "FAIL (install): $*" >&2
  exit 1
}

# run WHAT COMMAND...: runs COMMAND with its output in $LOG, shown when it fails.
run() {
  local what=$1
  shift
  if ! "$@" >"$LOG" 2>&1; then
    cat "$LOG" >&2
    fail "$what: exited non-zero: $*"
  fi
}

if ! command -v pkg-config >/dev/null 2>&1; then
  echo "SKIP: pkg-config is not installed (scripts/test.sh installs it)"
  exit 77
fi

# Nothing of the build or the environment may leak into the outside builds.
unset CHORUS_LIBRARY CHORUS_PREFIX PYTHONPATH LD_LIBRARY_PATH PKG_CONFIG_PATH CMAKE_PREFIX_PATH

# ---- install
run "cmake --install" cmake --install "$BUILD" --prefix "$PREFIX"
LIB=$PREFIX/$LIBDIR
[ -f "$PREFIX/$INCLUDEDIR/chorus.h" ] || fail "no $INCLUDEDIR/chorus.h in the prefix"
if [ ! -f "$LIB/libchorus.so.$VERSION" ] || [ -L "$LIB/libchorus.so.$VERSION" ]; then
  fail "no library file $LIBDIR/libchorus.so.$VERSION"
fi
[ "$(readlink "$LIB/libchorus.so.0")" = "libchorus.so.$VERSION" ] ||
  fail "$LIBDIR/libchorus.so.0 is not a link to libchorus.so.$VERSION"
[ "$(readlink "$LIB/libchorus.so")" = "libchorus.so.0" ] ||
  fail "$LIBDIR/libchorus.so is not a link to libchorus.so.0"
if command -v readelf >/dev/null 2>&1; then
  readelf -d "$LIB/libchorus.so.$VERSION" | grep -q 'Library soname: \[libchorus.so.0\]' ||
    fail "the library's SONAME is not libchorus.so.0"
fi
for tool in chorus-run chorus-perf chorus-diag chorus-trace-merge; do
  [ -x "$PREFIX/$BINDIR/$tool" ] || fail "$tool is not installed in $BINDIR"
done
for f in pkgconfig/chorus.pc cmake/Chorus/ChorusConfig.cmake cmake/Chorus/ChorusConfigVersion.cmake \
  cmake/Chorus/ChorusTargets.cmake; do
  [ -f "$LIB/$f" ] || fail "no $LIBDIR/$f in the prefix"
done
# The installed files name the prefix, never the build or source tree.
if grep -rl -e "$BUILD" -e "$SOURCE" "$LIB/pkgconfig" "$LIB/cmake" >"$LOG"; then
  fail "installed package files name the build or source tree: $(cat "$LOG")"
fi
# Installed tools run from the prefix (their run path finds the prefix's library).
run "installed chorus-diag --version" "$PREFIX/$BINDIR/chorus-diag" --version
grep -q "^chorus $VERSION" "$LOG" || fail "chorus-diag --version said: $(cat "$LOG")"
RUN=$PREFIX/$BINDIR/chorus-run

# expect_ok LOG NRANKS: the consumer's output names every rank once.
expect_ok() {
  local r
  for ((r = 0; r < $2; r++)); do
    grep -q "^consumer ok: rank $r of $2\$" "$1" || { cat "$1" >&2; fail "$3: no 'consumer ok' from rank $r of $2"; }
  done
}

# ---- (a) pkg-config
export PKG_CONFIG_PATH=$LIB/pkgconfig
[ "$(pkg-config --modversion chorus)" = "$VERSION" ] || fail "pkg-config --modversion chorus is not $VERSION"
[ "$(pkg-config --variable=prefix chorus)" = "$PREFIX" ] || fail "chorus.pc's prefix is not $PREFIX"
[ "$(pkg-config --variable=libdir chorus)" = "$LIB" ] || fail "chorus.pc's libdir is not $LIB"
PC_FLAGS=$(pkg-config --cflags --libs chorus) || fail "pkg-config --cflags --libs chorus failed"
[[ " $PC_FLAGS " == *" -lchorus "* && " $PC_FLAGS " == *" -I$PREFIX/$INCLUDEDIR "* ]] ||
  fail "pkg-config gave '$PC_FLAGS'"
pkg-config --libs --static chorus >/dev/null || fail "pkg-config --libs --static chorus failed"
# shellcheck disable=SC2086 # PC_FLAGS is a list of flags
run "build with pkg-config" "$CC" "$HERE/consumer/consumer.c" $PC_FLAGS -Wl,-rpath,"$LIB" -o "$TMP/consumer-pc"
run "consumer (pkg-config), 1 rank" timeout 60 "$TMP/consumer-pc"
expect_ok "$LOG" 1 "consumer (pkg-config)"
run "consumer (pkg-config), 2 ranks under the installed chorus-run" \
  timeout 60 "$RUN" -n 2 --timeout 50 "$TMP/consumer-pc"
expect_ok "$LOG" 2 "consumer (pkg-config) under chorus-run"
unset PKG_CONFIG_PATH

# ---- (b) find_package(Chorus)
run "configure the find_package project" cmake -S "$HERE/consumer" -B "$TMP/cmake-build" \
  -DCMAKE_C_COMPILER="$CC" -DCMAKE_PREFIX_PATH="$PREFIX"
grep -qx "Chorus_DIR:PATH=$LIB/cmake/Chorus" "$TMP/cmake-build/CMakeCache.txt" ||
  fail "find_package(Chorus) found $(grep '^Chorus_DIR' "$TMP/cmake-build/CMakeCache.txt"), not the prefix's"
run "build the find_package project" cmake --build "$TMP/cmake-build"
run "consumer (find_package)" timeout 60 "$TMP/cmake-build/consumer"
expect_ok "$LOG" 1 "consumer (find_package)"
if cmake -S "$HERE/consumer" -B "$TMP/cmake-v1" -DCMAKE_C_COMPILER="$CC" -DCMAKE_PREFIX_PATH="$PREFIX" \
  -DCHORUS_WANT_VERSION=1.0 >"$LOG" 2>&1; then
  fail "find_package(Chorus 1.0) accepted version $VERSION"
fi
grep -q "ChorusConfig.cmake, version: $VERSION" "$LOG" ||
  { cat "$LOG" >&2; fail "find_package(Chorus 1.0) failed for another reason"; }

# ---- (c) the Python package, against the prefix
if [ "$PYTHON" = "-" ]; then
  echo "install test: ok (C; Python part off: CHORUS_BUILD_PYTHON=OFF)"
  exit 0
fi
mkdir -p "$TMP/pysrc"
cp "$SOURCE/python/setup.py" "$TMP/pysrc/" || fail "cannot copy python/setup.py"
# A copy without caches or bundled libraries, away from the repository's build directories.
(cd "$SOURCE/python" && tar -c --exclude=__pycache__ --exclude='*.so*' chorus) | tar -x -C "$TMP/pysrc" ||
  fail "cannot copy python/chorus"
run "python3 -m venv" "$PYTHON" -m venv --system-site-packages "$TMP/venv"
VPY=$TMP/venv/bin/python
PIP=(-m pip install --no-deps --no-build-isolation --no-index --no-cache-dir --disable-pip-version-check)

CHECK=$(cat <<'EOF'
import os, sys
import numpy as np
import chorus
from chorus import _install_info
prefix_lib, found_by = sys.argv[1], sys.argv[2]
assert chorus.library_path.startswith(prefix_lib + "/"), chorus.library_path
assert _install_info.FOUND_BY == found_by, _install_info.FOUND_BY
if "CHORUS_RANK" in os.environ:
    comm = chorus.init()
else:
    comm = chorus.Communicator.from_unique_id(1, 0, chorus.UniqueId.new())
n, r = comm.size, comm.rank
x = np.arange(5, dtype=np.int32) * (r + 1)
comm.allreduce(x)
want = (np.arange(5, dtype=np.int32) * (n * (n + 1) // 2)).tolist()
assert x.tolist() == want, (x.tolist(), want)
comm.destroy()
print(f"python ok: rank {r} of {n} via {found_by}")
EOF
)

# Through pkg-config, into the venv.
run "pip install (PKG_CONFIG_PATH)" env PKG_CONFIG_PATH="$LIB/pkgconfig" "$VPY" "${PIP[@]}" "$TMP/pysrc"
VPKG=$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/chorus
[ -f "$VPKG/_install_info.py" ] || fail "pip installed no chorus package with _install_info.py in $VPKG"
[ ! -e "$VPKG/libchorus.so" ] || fail "pip bundled a library instead of using the prefix's"
cd "$TMP" || fail "cd $TMP"
run "python (pkg-config), 1 rank" timeout 60 "$VPY" -c "$CHECK" "$LIB" pkg-config
grep -q "^python ok: rank 0 of 1" "$LOG" || fail "python (pkg-config): $(cat "$LOG")"
run "python (pkg-config), 2 ranks under the installed chorus-run" \
  timeout 90 "$RUN" -n 2 --timeout 80 "$VPY" -c "$CHECK" "$LIB" pkg-config
[ "$(grep -c '^python ok: rank [01] of 2' "$LOG")" = 2 ] || fail "python under chorus-run: $(cat "$LOG")"

# Through CHORUS_PREFIX, into a plain directory (pkg-config knows no chorus here).
run "pip install --target (CHORUS_PREFIX)" env CHORUS_PREFIX="$PREFIX" "$VPY" "${PIP[@]}" --target "$TMP/site" "$TMP/pysrc"
run "python (CHORUS_PREFIX), 1 rank" env PYTHONPATH="$TMP/site" timeout 60 "$VPY" -c "$CHECK" "$LIB" CHORUS_PREFIX
grep -q "^python ok: rank 0 of 1" "$LOG" || fail "python (CHORUS_PREFIX): $(cat "$LOG")"

echo "install test: ok (pkg-config, find_package, pip via PKG_CONFIG_PATH and CHORUS_PREFIX)"
