#!/usr/bin/env bash
# CID on a GPU, as docs/benchmarks.md's "On a GPU" section reports it: bounded CID's λ_t search
# at the default model's vocabulary (49,152) and an 8B model's (128,256), then CID's decoding
# step inside `generate` (plain, CID, bounded CID), in ctxleak's own batched decoder, and with
# each of three seeded draws (bench_draw.py: ctxleak's hashed race on the GPU, torch.multinomial
# on the CPU, its draw before, and an inverse transform), on
# random weights of the default model's architecture and of an 8B-sized one (Llama 3 8B's
# shapes), bfloat16. Each benchmark runs in its own process; each prints its own table.
#
#   MODEL_DIR=folder-with-config-and-tokenizer bash bench/gpu_cid.sh
#   DRY_RUN=1 MODEL_DIR=... bash bench/gpu_cid.sh   (on a CPU: 2-layer models, a few tokens)
#
# MODEL_DIR holds the default model's config.json, generation_config.json, tokenizer and chat
# template (no weights): the folder `ctxleak.load_model("default").info.path` names.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
: "${MODEL_DIR:?name the folder of the default model config and tokenizer}"
if [ "${DRY_RUN:-0}" = 1 ]; then
  RW=(--model-dir "$MODEL_DIR" --device cpu --dtype float32 --tiny)
  LAMBDA=(--rows 1 --eps 2 --repeat 1 --device cpu)
  PROC=(--batch 2 --tokens 4 --repeat 1)
  BATCHED=(--only cid --examples 2)
  DRAW=(--repeat 2 --device cpu --noise --cid 2 --tokens 4)
  BOUNDED=(--answers 2 --tokens 4 --repeat 1)
  STEP=(--device cpu --vocab 49152 --answers 1 2 --steps 2 --repeat 1)
else
  RW=(--model-dir "$MODEL_DIR")
  LAMBDA=(--rows 8 1 --repeat 10 --device cuda)
  PROC=(--batch 4 --tokens 50 --repeat 3)
  BATCHED=(--only cid --examples 16)
  DRAW=(--repeat 20 --device cuda --noise --cid 16 --tokens 50)
  BOUNDED=(--answers 16 --tokens 50 --repeat 2)
  STEP=(--device cuda --answers 1 8 32 --search together alone --draws hashed multinomial)
  nvidia-smi --query-gpu=name,driver_version,memory.total,utilization.gpu,temperature.gpu \
    --format=csv
fi
"$PY" -c "import torch, transformers; print('# torch', torch.__version__, 'cuda', \
torch.version.cuda, 'transformers', transformers.__version__)"
status=0
run() { echo "## $*"; "$@" || { echo "## exit $? for: $*"; status=1; }; }
if [ "${SECTIONS:-all}" = all ]; then
for vocab in 49152 128256; do
  run "$PY" bench/random_weights.py "${RW[@]}" bench_bounded_lambda --vocab "$vocab" "${LAMBDA[@]}"
done
for arch in default llama-8b; do
  run "$PY" bench/random_weights.py "${RW[@]}" --arch "$arch" bench_cid_processor "${PROC[@]}"
  run "$PY" bench/random_weights.py "${RW[@]}" --arch "$arch" bench_batched "${BATCHED[@]}"
done
fi
# the seeded draw, CID's step with each draw, bounded CID's shared λ_t search in-process and
# the vLLM plugin's own step (set SECTIONS=draw to run this part alone)
for arch in default llama-8b; do
  run "$PY" bench/random_weights.py "${RW[@]}" --arch "$arch" bench_draw "${DRAW[@]}"
  run "$PY" bench/random_weights.py "${RW[@]}" --arch "$arch" bench_bounded_decoding \
    "${BOUNDED[@]}"
done
run "$PY" bench/bench_plugin_step.py "${STEP[@]}"
exit $status
