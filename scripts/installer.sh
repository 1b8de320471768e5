# Sourced by the setup scripts: `install PYTHON ARGS...` installs ARGS into PYTHON's virtualenv
# with uv (https://github.com/astral-sh/uv) where it can, else with pip.
# - Why: uv resolves and fetches in parallel. Measured on a 2-core machine, from PyPI, into a
#   fresh virtualenv that already holds torch: the dev install (`-e .[dev]`, 238 packages) took
#   125 s with pip and 13 s with uv, the same 238 packages at the same versions; vLLM's CPU wheel
#   and its dependencies 13 s with uv.
# - torch is never installed this way: pip takes the CPU build lying on this disk (pip's own
#   configuration), which uv does not read; once it is installed, uv keeps it, as pip does.
# - uv goes into the virtualenv itself (`pip install uv`, about 4 s). Where that fails (no
#   index reachable for it, an unsupported platform), where uv's install fails, or with
#   CTXLEAK_INSTALLER=pip, pip does the install, as before.
# - uv compiles no bytecode unless asked: what `pip install --no-compile` does (setup.sh says
#   why); without CTXLEAK_PIP_NO_COMPILE=1 it is asked to, as pip does by default.
install() {
  local py=$1
  shift
  if [ "${CTXLEAK_INSTALLER:-uv}" = uv ] && { "$py" -m uv --version >/dev/null 2>&1 \
       || "$py" -m pip install -q uv >/dev/null 2>&1; }; then
    local compile=(--compile-bytecode)
    [ "${CTXLEAK_PIP_NO_COMPILE:-0}" = 1 ] && compile=()
    # an install uv cannot finish (an index only pip's configuration names, say) goes to pip
    "$py" -m uv pip install --python "$py" "${compile[@]}" "$@" && return 0
    echo "setup: uv could not install $*; trying pip" >&2
  fi
  {
    local opts=()
    [ "${CTXLEAK_PIP_NO_COMPILE:-0}" = 1 ] && opts+=(--no-compile)
    "$py" -m pip install "${opts[@]}" "$@"
  }
}
