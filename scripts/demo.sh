#!/usr/bin/env bash
# The main job: installs and builds what it needs (scripts/setup.sh), then
# runs a small 4-worker data-parallel training job on CPU under ccrun
# (examples/ddp_logreg.py: PyTorch, gloo all_reduce).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$here/scripts/setup.sh" >/dev/null
# Debian's torch lives in /usr/bin/python3, not in the python3 first on PATH.
export PYTHON_EXEC=${PYTHON_EXEC:-/usr/bin/python3}
exec "${BUILD_DIR:-$here/build}/launcher/ccrun" --standalone --nproc-per-node 4 \
  "$here/examples/ddp_logreg.py" --epochs 20 "$@"
