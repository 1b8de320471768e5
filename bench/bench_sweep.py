"""A sweep of k mitigation settings in one run against k separate runs, default model.

``ctxleak influence --lambda 0,0.5,1`` measures every setting of the sweep in one run: one model
load, one read of the data, each example's prompts tokenised once, and the settings' CID
streams decoded together in one batched KV cache (an example's prompt with and without its
context is the same in every setting, so each one's prefill is computed once and shared by the
settings' streams). The k separate runs are what a user would otherwise type: one
``ctxleak.influence`` call per setting, on the same loaded model (the model's load, 0.2 s, is
not counted against them).

Both sides produce the same records (each example samples from its own seed whatever the
setting's neighbours); the benchmark checks it, then prints the wall time of each side (best of
``--repeat``, the rounds interleaved) and the ratio sweep / separate (below 1: the sweep is
cheaper).

    python bench/bench_sweep.py [--limit 6] [--lambda 0,0.5,1] [--bounded-eps ""] [--tokens 16]
"""

from __future__ import annotations

import argparse
import tempfile

from _common import device_line, load_default, timed_rounds

import ctxleak


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="demo-qa")
    ap.add_argument("--limit", type=int, default=6)
    ap.add_argument("--lambda", dest="lams", default="0,0.5,1")
    ap.add_argument("--bounded-eps", default="", help="e.g. 2,8: bounded settings as well")
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    lm = load_default()
    lams = [float(x) for x in args.lams.split(",")]
    eps = [float(x) for x in args.bounded_eps.split(",")] if args.bounded_eps else []
    common = dict(limit=args.limit, max_new_tokens=args.tokens, progress=False)
    tmp = tempfile.mkdtemp(prefix="bench_sweep_")
    runs = {"n": 0}

    def out() -> str:
        runs["n"] += 1
        return f"{tmp}/run{runs['n']}"

    def sweep():
        results = [ctxleak.influence(lm, args.data, lambda_=lams, output=out(), **common)]
        if eps:
            results.append(ctxleak.influence(lm, args.data, lambda_=lams, bounded_eps=eps,
                                             output=out(), **common))
        return [r for res in results for r in res.records]

    def separate():
        records = []
        for lam in lams:
            records += ctxleak.influence(lm, args.data, lambda_=lam, output=out(),
                                         **common).records
        for e in eps:
            for lam in lams:
                records += ctxleak.influence(lm, args.data, lambda_=lam, bounded_eps=e,
                                             output=out(), **common).records
        return records

    ctxleak.influence(lm, args.data, limit=1, max_new_tokens=2, progress=False, output=out())
    got = timed_rounds({"sweep": sweep, "separate": separate}, repeat=args.repeat)
    (t_sweep, a), (t_sep, b) = got["sweep"], got["separate"]
    key = lambda r: (r["id"], r["setting"])  # noqa: E731
    a_by, b_by = {key(r): r for r in a}, {key(r): r for r in b}
    same = a_by.keys() == b_by.keys() and all(
        a_by[k]["response_ids"] == b_by[k]["response_ids"] for k in a_by)
    gap = max(abs(a_by[k]["influence"] - b_by[k]["influence"]) for k in a_by)
    settings = len(lams) * (1 + len(eps))
    print(f"# bench_sweep on {device_line(lm)}")
    print(f"# {args.data}, {args.limit} examples, {settings} settings (λ {args.lams}"
          f"{'; bounded ε ' + args.bounded_eps if eps else ''}), {args.tokens} new tokens, "
          f"control on; same tokens in both: {same}; max |Δ influence| {gap:.1e} nats")
    print("| settings | k separate runs (s) | one sweep (s) | sweep / separate |")
    print("|---|---|---|---|")
    print(f"| {settings} | {t_sep:.1f} | {t_sweep:.1f} | {t_sweep / t_sep:.2f} |")


if __name__ == "__main__":
    main()
