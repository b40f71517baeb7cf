#!/usr/bin/env bash
# The README's main job: install, then run the end-to-end demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/install.sh
python -m zarr3_backend.demo "$@"
