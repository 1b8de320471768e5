#!/usr/bin/env bash
# What CI runs after scripts/setup.sh --dev: lint (ruff), types (mypy: strict on the engine and
# the runner, see pyproject.toml), the layer contracts (import-linter), the documentation site
# (mkdocs build --strict: broken links and missing pages fail; built into a temporary folder),
# then the tests.
# Arguments go to pytest (e.g. bash scripts/check.sh -x tests/run).
# Usage: bash scripts/check.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check src tests bench examples
.venv/bin/python -m mypy
.venv/bin/lint-imports
SITE=$(mktemp -d)
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet --site-dir "$SITE"
rm -rf "$SITE"
.venv/bin/python -m pytest -q "$@"
