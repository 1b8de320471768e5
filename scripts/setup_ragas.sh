#!/usr/bin/env bash
# A third virtualenv, ./.venv-ragas, for the ragas metric's integration test
# (tests/integrations/test_ragas.py). Called by `scripts/setup.sh --dev` once ./.venv is set up;
# runs alone too; never fatal there.
# - Why its own: every ragas release that imports cleanly needs instructor, and every instructor
#   release asks rich<15 (ours: rich 15) and openai<4 with jiter<0.15 (ours: openai 3.57);
#   ragas 0.4.3 also imports langchain_community.chat_models.vertexai, gone from
#   langchain-community 0.4. Beside ./.venv's pins, pip would downgrade them.
# - Layered on ./.venv: a .pth file adds ./.venv's site-packages after its own (site.addsitedir,
#   so ./.venv's .pth files run too: the editable ctxleak, coverage's subprocess hook). It holds
#   only what differs (ragas, instructor, rich 14, openai 3.3, langchain-community 0.3 and the
#   ragas-only packages, about 20 wheels); torch, transformers and the model come from ./.venv.
# - Idempotent: a venv that already holds the pinned ragas is not installed again.
# Usage: bash scripts/setup_ragas.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PINS=(ragas==0.4.3 instructor==1.17.0 langchain-community==0.3.31)
VENV=.venv-ragas
PIP_OPTS=(-q)
[ "${CTXLEAK_PIP_NO_COMPILE:-0}" = 1 ] && PIP_OPTS+=(--no-compile)
[ -x .venv/bin/python ] || { echo "setup: $VENV needs ./.venv first" >&2; exit 1; }
PY=$(.venv/bin/python -c 'import sys; print(sys._base_executable)')
have=$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("ragas"))' \
       2>/dev/null || true)
if [ "$have" = "${PINS[0]#*==}" ]; then
  echo "setup: $VENV already holds ${PINS[0]}"
  exit 0
fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
main=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
own=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "import site; site.addsitedir('$(cd "$main" && pwd)')" > "$own/zz_ctxleak_main_venv.pth"
# First the locked list (scripts/ragas-lock.txt: every package this virtualenv holds of its own,
# exact) without resolving: 12 s instead of 31 s measured side by side on a 2-core machine (pip
# spends the rest resolving against ./.venv's packages and fetching metadata). Where that
# install or its import fails (./.venv's pins moved, a wheel gone), pip resolves the pins as before.
ready() { RAGAS_DO_NOT_TRACK=true "$VENV/bin/python" -c 'import ragas.metrics.base, instructor, ctxleak'; }
if "$VENV/bin/python" -m pip install "${PIP_OPTS[@]}" --no-deps -r scripts/ragas-lock.txt \
    && ready 2>/dev/null; then
  echo "setup: $VENV ready (${PINS[*]}, from scripts/ragas-lock.txt)"
  exit 0
fi
echo "setup: $VENV: the locked install did not import; resolving ${PINS[*]} instead" >&2
"$VENV/bin/python" -m pip install "${PIP_OPTS[@]}" "${PINS[@]}"
ready && echo "setup: $VENV ready (${PINS[*]})"
