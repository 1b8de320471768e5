"""Whole served runs against in-process, one run: ``ctxleak.influence`` and ``ctxleak.iclinf``
on the demo data, once with the default model loaded in-process and once through a vLLM server,
interleaved (best of ``--repeat``), each a fresh run folder with nothing to resume.

The influence workload is ``ctxleak influence --data demo --limit 3 --max-new-tokens 24
--temperature 1 --ngram 32``: the model's own answers, scored with and without the context and
without each 32-token window, EOS masked before 10 tokens, and the control. It runs again with
``min_new_tokens=0``, without the EOS masking: a server answers the masked positions' EOS
log-probs with one extra request per position and sequence, which in-process come from the same
forward pass. The ICL workload is ``ctxleak icl --data demo --limit 3``. The CID workload is
``ctxleak influence --data demo --limit 6 --max-new-tokens 12 --min-new-tokens 12 --temperature
0.8 --lambda 0.5``: answers decoded by Context Influence Decoding, then scored under it with the
context, without it and under each control context; through a server with ctxleak's plugin both
happen in the plugin (teacher-forced pairs for the scoring), without it by whole next-token
distributions. Printed: the seconds of each and the served speed as a ratio of the in-process
speed. The server samples its own answers, so the two sides score answers of their own (at
λ = 0.5 both decode the same CID answers from the same seeds); the ratio compares the same work.

    python bench/bench_served_run.py [--server-url URL --served-model NAME] [--limit 3]
        [--repeat 2] [--rows influence,eos,icl,cid] [--cid-limit 6]

Without ``--server-url`` a server is started on a free port (``<repo>/.venv-vllm`` or
``$CTXLEAK_VLLM_PYTHON``; tests/helpers/vllm_server.py) as docs/served-models.md starts it,
every core for the model and 32-token prefix-cache blocks, and stopped at the end.
"""

from __future__ import annotations

import argparse
import datetime
import os
import tempfile

from _common import device_line, load_default, timed_rounds, vllm_server_for

import ctxleak
from ctxleak.engine.capabilities import CID_DECODING, CID_SCORING


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server-url")
    ap.add_argument("--served-model")
    ap.add_argument("--limit", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=24)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--rows", default="influence,eos,icl,cid",
                    help="which workloads, comma-separated: influence, eos (influence without "
                         "EOS masking), icl, cid (λ = 0.5, T = 0.8)")
    ap.add_argument("--cid-limit", type=int, default=6)
    args = ap.parse_args()
    rows = {r.strip() for r in args.rows.split(",") if r.strip()}
    lm = load_default()
    server, url, name = vllm_server_for(lm, args.server_url, args.served_model)
    try:
        served = ctxleak.load_model("default", server_url=url, served_model=name)
        influence = dict(data="demo", limit=args.limit, max_new_tokens=args.tokens,
                         temperature=1.0, ngram=32, progress=False)
        icl = dict(data="demo", limit=args.limit, progress=False)
        no_min = {**influence, "min_new_tokens": 0}
        cid = dict(data="demo", limit=args.cid_limit, max_new_tokens=12, min_new_tokens=12,
                   temperature=0.8, lambda_=[0.5], progress=False)
        workloads = {"influence": (ctxleak.influence, influence),
                     "influence without EOS masking": (ctxleak.influence, no_min),
                     "icl": (ctxleak.iclinf, icl), "cid": (ctxleak.influence, cid)}
        names = {"influence": "influence", "eos": "influence without EOS masking", "icl": "icl",
                 "cid": "cid"}
        chosen = [w for key, w in names.items() if key in rows]

        def fresh(fn, model, kw):  # a new run folder each time: nothing to resume
            return lambda: fn(model=model, **kw, output=tempfile.mkdtemp(dir=scratch) + "/run")

        with tempfile.TemporaryDirectory() as scratch:
            fns = {}
            for what in chosen:
                fn, kw = workloads[what]
                fns[f"{what}, in-process"] = fresh(fn, lm, kw)
                fns[f"{what}, served"] = fresh(fn, served, kw)
            runs = timed_rounds(fns, repeat=args.repeat)
    finally:
        if server is not None:
            server.stop()
    load = os.getloadavg()[0]
    print(f"# bench_served_run on {device_line(lm)}; {datetime.date.today()}; load average "
          f"{load:.1f} at the end; server at {url}; best of {args.repeat}, interleaved")
    print(f"# influence: {args.limit} demo examples, {args.tokens} new tokens, T = 1, 32-token "
          f"windows, the control; icl: {args.limit} demo examples; cid: {args.cid_limit} demo "
          f"examples, 12 new tokens (EOS masked throughout), λ = 0.5, T = 0.8, the control; "
          f"server's CID plugin: {plugin_line(served)}")
    print("| run | in-process s | served s | served speed / in-process |")
    print("|---|---|---|---|")
    for what in chosen:
        local, _ = runs[f"{what}, in-process"]
        remote, _ = runs[f"{what}, served"]
        print(f"| {what} | {local:.1f} | {remote:.1f} | {local / remote:.2f}x |")


def plugin_line(served) -> str:
    """What the server's plugin does for the CID row, in words."""
    caps = served.capabilities
    if CID_SCORING in caps:
        return "decodes and scores (teacher-forced pairs)"
    if CID_DECODING in caps:
        return "decodes; scoring by whole distributions (a plugin of protocol 1)"
    return "none: decoding and scoring by whole distributions"


if __name__ == "__main__":
    main()
