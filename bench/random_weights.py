"""Run one of bench/*.py on a machine the default model's file cannot reach (a lent GPU): its
``_common.load_default`` replaced by the default model's architecture (SmolLM2-135M-Instruct's
config.json, generation_config.json, tokenizer and chat template, copied into MODEL_DIR from the
folder ``ctxleak.load_model("default").info.path`` names) with RANDOM weights (seed 0); the
clocks of ``bench/_common.py`` wait for the GPU's queued work. Timing depends on the
architecture, not the weights; a random model almost never draws EOS, so every response runs
to its full length. docs/benchmarks.md's GPU section was measured so.

    python bench/random_weights.py --model-dir MODEL_DIR --device cuda --dtype bfloat16 \
        BENCH [bench args...]
    python bench/random_weights.py --model-dir MODEL_DIR --device cpu --tiny BENCH ...
        (a 2-layer config of the same vocabulary, for a dry run)
    python bench/random_weights.py --model-dir MODEL_DIR --arch llama-8b BENCH ...
        (an 8B-sized model: Llama 3 8B's published shapes, 32 layers, hidden size 4,096, MLP
        14,336, 32 heads and 8 KV heads, vocabulary 128,256, untied embeddings; the default
        model's tokenizer and chat template, whose 49,152 ids the larger vocabulary contains:
        an id past them decodes to no text)

BENCH: bench_batched, bench_cid_processor, bench_draw, bench_bounded_decoding,
bench_bounded_lambda (no model), bench_influence, bench_scoring, bench_proxy, bench_proxy_clients.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT / "src"), str(ROOT / "tests")]

import torch  # noqa: E402

#: Llama 3 8B's shapes (its config.json): 8.03 B parameters with this vocabulary.
LLAMA_8B = dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=128256,
                tie_word_embeddings=False, max_position_embeddings=8192,
                rope_parameters={"rope_theta": 500000.0, "rope_type": "default"})


def build_lm(a: argparse.Namespace):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    from ctxleak.engine.models import from_objects

    folder = a.model_dir
    config = AutoConfig.from_pretrained(folder)
    if a.arch == "llama-8b":  # Llama 3 8B's config.json shapes (Meta, 2024), random weights
        for key, value in LLAMA_8B.items():
            setattr(config, key, value)
    if a.tiny:  # dry run on a CPU: same vocabulary and tokenizer, 2 thin layers
        config.num_hidden_layers = 2
        config.hidden_size = 64
        config.intermediate_size = 128
        config.num_attention_heads = 4
        config.num_key_value_heads = 2
        config.head_dim = 16
    dtype = getattr(torch, a.dtype)
    t0 = time.perf_counter()
    torch.manual_seed(0)
    with torch.device(a.device):  # initialised where it runs: 8B random numbers on a GPU, fast
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.generation_config = GenerationConfig.from_pretrained(folder)
    tok = AutoTokenizer.from_pretrained(folder)
    # load_model("default") uses the tokenizer's chat template (chat_template="auto")
    arch = "Llama-3-8B-shaped" if a.arch == "llama-8b" else "SmolLM2-135M-Instruct-arch"
    lm = from_objects(model, tok, name=f"{arch} (random weights, seed 0)",
                      chat_template=bool(getattr(tok, "chat_template", None)))
    if a.device.startswith("cuda"):
        torch.cuda.synchronize()
    n = sum(p.numel() for p in model.parameters())
    print(f"# [driver] random-init {config.model_type} {config.num_hidden_layers} layers "
          f"hidden {config.hidden_size}, {n / 1e6:.1f}M params, dtype {dtype}, device "
          f"{a.device}, chat template {lm.use_chat_template}, eos {lm.eos_ids}, built in "
          f"{time.perf_counter() - t0:.1f}s", flush=True)
    return lm


def patch_common(args: argparse.Namespace):
    import _common

    def load_default():
        torch.manual_seed(0)
        return build_lm(args)

    _common.load_default = load_default


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--model-dir", required=True,
                    help="config.json, generation_config.json and the tokenizer of the model")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--arch", default="default", choices=["default", "llama-8b"],
                    help="default: the default model's own config; llama-8b: Llama 3 8B's shapes")
    ap.add_argument("bench")
    ap.add_argument("rest", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    if args.device.startswith("cuda"):
        print(f"# [driver] torch {torch.__version__}, cuda {torch.version.cuda}, "
              f"{torch.cuda.get_device_name()}, dtype {args.dtype}", flush=True)
    else:
        print(f"# [driver] torch {torch.__version__} on {args.device}, dtype {args.dtype}")
    patch_common(args)
    import importlib

    mod = importlib.import_module(args.bench)
    sys.argv = [args.bench + ".py", *args.rest]
    t0 = time.perf_counter()
    mod.main()
    print(f"# [driver] {args.bench} {' '.join(args.rest)}: {time.perf_counter() - t0:.1f}s "
          f"wall", flush=True)
    if args.device.startswith("cuda"):
        print(f"# [driver] peak CUDA memory {torch.cuda.max_memory_allocated() / 2**20:.0f} MiB",
              flush=True)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
