#!/usr/bin/env bash
# Install the package with its test extra from this repo's own files (fresh machine or not).
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install --quiet --disable-pip-version-check --root-user-action=ignore -e ".[test]"
