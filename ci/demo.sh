#!/usr/bin/env bash
# The README's quick start: install the package alone (its base dependencies, no test extra),
# then run the end-to-end demo.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install --quiet --disable-pip-version-check --root-user-action=ignore -e .
python -m zarr3_backend.demo "$@"
