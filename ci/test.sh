#!/usr/bin/env bash
# The README's test command: install, lint, then the whole test suite (slow tests included).
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/install.sh
bash ci/lint.sh
python -m pytest -q -p no:cacheprovider "$@"
