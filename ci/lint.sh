#!/usr/bin/env bash
# Lint, format check and the layers contract (import-linter, config in pyproject.toml).
set -euo pipefail
cd "$(dirname "$0")/.."
ruff check zarr3_backend tests benchmarks notebooks
ruff format --check zarr3_backend tests benchmarks notebooks
lint-imports
