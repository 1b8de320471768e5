"""What each mitigation costs in decoding speed: tokens per second of every mode against plain
decoding, measured in one run on the same questions, default model.

The modes are those a RAG team weighs (docs/mitigations.md): plain decoding (the model reads
every retrieved document, one stream per question), Context Influence Decoding at λ = 0.5
and bounded CID at ε = 2 per token (two streams per question, "Estimating Privacy Leakage of
Augmented Contextual Knowledge in Language Models"), and each mechanism given by name
(``--mechanism``, as ``ctxleak influence`` takes them): the DP vote over shards and its
sparse form (one stream per shard plus the no-retrieval stream, "Privacy-Preserving
Retrieval-Augmented Generation with Differential Privacy"), DP-RAG (one stream per retrieved
document plus a prior, "RAG with Differential Privacy") and Presidio scrubbing (the documents
scrubbed, then plain decoding).

Only decoding is timed (the influence run's scoring is the same for every mode). Each mode
decodes the same ``--limit`` questions of ``--data`` (each from its own seed, ``--tokens`` new
tokens at most), best of ``--repeat`` rounds with the modes interleaved; tokens/s counts the
released tokens, and the last column is the mode's speed as a share of plain decoding's.

    python bench/bench_mechanisms.py [--data demo-qa-large] [--limit 16] [--tokens 32]
        [--mechanism dp-vote:eps=2,shards=4 ...]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from _common import device_line, load_default, timed_rounds

from ctxleak.engine.generation import derive_seed, sample
from ctxleak.methods.influence.data import load_log, prompt_parts
from ctxleak.methods.influence.mechanism_mode import answer_request
from ctxleak.methods.influence.pipeline import Job
from ctxleak.methods.influence.setting import InfluenceOptions, Setting
from ctxleak.mitigations.cid import CIDConfig, _generate_many
from ctxleak.mitigations.mechanisms import Decoding
from ctxleak.mitigations.named import parse_mechanism

MECHANISMS = ("dp-vote:eps=2,shards=4", "dp-sparse-vote:eps=2,shards=4", "dp-rag:eps=5",
              "scrub:operator=replace")


def modes(lm, args) -> dict[str, Callable[[], int]]:
    """Each mode as a function that decodes every question and returns the released tokens."""
    examples = load_log(args.data, limit=args.limit)[0][:args.limit]
    options = InfluenceOptions(max_new_tokens=args.tokens, min_new_tokens=min(10, args.tokens))
    setting = Setting.cid(1.0, args.temperature)
    jobs = [(ex, setting, derive_seed(0, k)) for k, ex in enumerate(examples)]
    parts = [prompt_parts(lm, ex, options.template, reserve=args.tokens)[0] for ex in examples]
    decoding = Decoding(args.temperature, args.tokens, options.min_new_tokens)

    def plain() -> int:
        drawn = sample(lm, [p.full for p in parts], [seed for _, _, seed in jobs],
                       temperature=args.temperature, max_new_tokens=args.tokens,
                       min_new_tokens=options.min_new_tokens)
        return sum(len(g.token_ids) + int(g.stopped_on_eos) for (g,) in drawn)

    def cid(lam: float, eps: float | None) -> Callable[[], int]:
        config = CIDConfig(lam=lam, temperature=args.temperature, max_new_tokens=args.tokens,
                           min_new_tokens=options.min_new_tokens, bounded_eps=eps)
        return lambda: sum(len(r.entries) for r in _generate_many(
            lm, [(p.full, p.empty, config, seed) for p, (_, _, seed) in zip(parts, jobs)]))

    def mechanism(spec: str) -> Callable[[], int]:
        m = parse_mechanism(spec)
        return lambda: sum(a.released for a in m.answer(
            lm, [answer_request(lm, Job(*job), options) for job in jobs], decoding))

    out = {"plain decoding": plain, "CID λ = 0.5": cid(0.5, None),
           "bounded CID ε = 2": cid(1.0, 2.0)}
    out.update({spec: mechanism(spec) for spec in args.mechanism or MECHANISMS})
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="demo-qa-large")
    ap.add_argument("--limit", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--mechanism", action="append", help="a mechanism by name (repeatable); "
                    "default: " + ", ".join(MECHANISMS))
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    lm = load_default()
    fns = modes(lm, args)
    for fn in fns.values():  # warm every path once (kernels, caches), untimed
        fn()
    got = timed_rounds(fns, repeat=args.repeat)
    plain_rate = got["plain decoding"][1] / got["plain decoding"][0]
    print(f"# bench_mechanisms on {device_line(lm)}")
    print(f"# {args.data}, {args.limit} questions, at most {args.tokens} new tokens, "
          f"T = {args.temperature:g}, best of {args.repeat}")
    print("| mode | seconds | released tokens | tokens/s | share of plain decoding |")
    print("|---|---:|---:|---:|---:|")
    for name, (seconds, tokens) in got.items():
        rate = tokens / seconds
        print(f"| {name} | {seconds:.2f} | {tokens} | {rate:.1f} | "
              f"{100 * rate / plain_rate:.0f} % |")


if __name__ == "__main__":
    main()
