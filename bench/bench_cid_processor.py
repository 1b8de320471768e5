"""CID inside ``model.generate`` (ctxleak.integrations.transformers) against plain ``generate`` on
the same prompts, per generated token, default model (issue 17; target <= 2.2x: the processor
runs a second, no-context stream with its own KV cache).

Prompts: the bundled demo examples (context + question, ``Document: {context}. {query}``), left-
padded in one batch; sampling at T = 0.8 with no top-k, exactly ``--tokens`` new tokens per row
(EOS masked until then) so both runs produce the same number of tokens.

    python bench/bench_cid_processor.py [--batch 4] [--tokens 50] [--repeat 2] [--skip-bounded]
"""

from __future__ import annotations

import argparse

import torch
from _common import device_line, load_default, timed

from ctxleak.engine.forward import left_pad, pad_id
from ctxleak.integrations.transformers import ContextInfluenceProcessor
from ctxleak.methods.influence import load_examples, prompt_parts


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--skip-bounded", action="store_true", help="time CID with fixed lambda only")
    args = ap.parse_args()
    lm = load_default()
    examples = [e for e in load_examples("demo") if e.query][:args.batch]
    parts = [prompt_parts(lm, e)[0] for e in examples]
    pad = pad_id(lm)
    ids, mask, _ = left_pad([p.full for p in parts], pad, lm.device)
    settings = dict(do_sample=True, temperature=0.8, top_k=0, max_new_tokens=args.tokens,
                    min_new_tokens=args.tokens, pad_token_id=pad, eos_token_id=lm.eos_ids)

    def plain():
        with torch.inference_mode():
            return lm.model.generate(input_ids=ids, attention_mask=mask, **settings)

    def cid(**kw):
        def run():
            proc = ContextInfluenceProcessor(lm, [p.empty for p in parts], lambda_=kw.get("lam", 0.5),
                                             temperature=0.8, bounded_eps=kw.get("eps"))
            with torch.inference_mode():
                out = lm.model.generate(input_ids=ids, attention_mask=mask,
                                        **proc.generate_kwargs(), **settings)
            return out, proc.ledger
        return run

    torch.manual_seed(0)
    plain()
    cid()()  # warm up both
    t_plain = t_cid = t_bounded = float("inf")
    for _ in range(args.repeat):  # interleaved, best of each: load drift favours neither
        t_plain = min(t_plain, timed(plain)[0])
        t, (out, ledger) = timed(cid())
        t_cid = min(t_cid, t)
        if not args.skip_bounded:
            t, (_, bounded) = timed(cid(lam=1.0, eps=2.0))
            t_bounded = min(t_bounded, t)
    n = ids.shape[0] * args.tokens
    assert out.shape[1] == ids.shape[1] + args.tokens
    mean_lam = float("nan") if args.skip_bounded else \
        sum(sum(r.lambdas) for r in bounded) / sum(len(r.lambdas) for r in bounded)
    print(f"# bench_cid_processor on {device_line(lm)}")
    print(f"# {ids.shape[0]} prompts of up to {ids.shape[1]} tokens (no-context up to "
          f"{max(len(p.empty) for p in parts)}), {args.tokens} new tokens each, T = 0.8; "
          f"mean influence per token at lambda=0.5: "
          f"{sum(r.influence for r in ledger) / n:.3f}; bounded eps=2: mean lambda {mean_lam:.2f}")
    # (both runs include their prefill: the no-context prompts are shorter than the full ones)
    print("| run | seconds | ms / token | ratio to plain generate |")
    print("|---|---|---|---|")
    for name, t in (("plain generate", t_plain), ("generate + CID processor (lambda=0.5)", t_cid),
                    ("generate + bounded CID processor (eps=2, lambda_max=1)", t_bounded)):
        if t != float("inf"):  # (bounded skipped)
            print(f"| {name} | {t:.2f} | {1000 * t / n:.1f} | {t / t_plain:.2f}x |")


if __name__ == "__main__":
    main()
