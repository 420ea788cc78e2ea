#!/bin/sh
# Runs PyTorch's own distributed backend suite against chorus, with gloo as the control (see
# run_suite.py), niced, on Debian's /usr/bin/python3 and torch, with the library of a build tree.
#   tests/torchsuite/run_suite.sh [--build DIR] [run_suite.py options: --out DIR, -k PATTERN, ...]
# Default build tree: ./build of the source tree. Exit status: run_suite.py's.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
source_dir=$(cd "$here/../.." && pwd)
build_dir=$source_dir/build
if [ "${1:-}" = "--build" ]; then
  build_dir=$2
  shift 2
fi
library=$build_dir/libchorus.so
if [ ! -e "$library" ]; then
  echo "run_suite.sh: no $library; build first (cmake --build $build_dir)" >&2
  exit 2
fi
if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  echo "SKIP: torch is not installed for /usr/bin/python3"
  exit 77
fi
CHORUS_LIBRARY=$library
PYTHONPATH=$source_dir/python${PYTHONPATH:+:$PYTHONPATH}
# Both backends get one intra-op thread: the machine has two cores and each test three processes.
OMP_NUM_THREADS=1
PYTHONDONTWRITEBYTECODE=1
unset CHORUS_TIMEOUT_SEC  # torch's timeouts must bound the operations, as they do for gloo
export CHORUS_LIBRARY PYTHONPATH OMP_NUM_THREADS PYTHONDONTWRITEBYTECODE
exec nice -n 10 /usr/bin/python3 "$here/run_suite.py" "$@"
