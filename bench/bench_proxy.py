"""The privacy proxy (``ctxleak serve``) against calling the library directly, on the default model
in-process: the proxy's overhead per request (ms) and its tokens per second at λ = 0.5 and at a
bounded ε.

Each request is one bundled demo example (its context as one document, its question as the user
message), exactly ``--tokens`` new tokens (``min_tokens`` = ``max_tokens``), the same seed both
ways, so the proxy and :func:`ctxleak.proxy.decode.decode_answer` decode the same tokens. The
proxy runs in this process (uvicorn in a thread, a SQLite ledger in a temporary folder) and is
called with the real ``openai`` client; the runs are interleaved, best of ``--repeat``.

    python bench/bench_proxy.py [--requests 4] [--tokens 32] [--repeat 3] [--tiny]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import openai
from _common import device_line, load_default, timed_rounds

from ctxleak.methods.influence import load_examples
from ctxleak.proxy.budget import SQLiteLedger
from ctxleak.proxy.config import ProxyConfig
from ctxleak.proxy.decode import decode_answer
from ctxleak.proxy.request import parse_cid_request

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from helpers.proxy_server import serving  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tiny", action="store_true", help="a tiny random model (tests/helpers): "
                    "decoding costs almost nothing, so the time is the proxy's own")
    args = ap.parse_args()
    if args.tiny:
        from helpers.tiny_models import tiny_llama

        lm = tiny_llama()
    else:
        lm = load_default()
    examples = [e for e in load_examples("demo") if e.query][:args.requests]
    config = ProxyConfig(max_tokens=args.tokens)
    print(device_line(lm))

    def body(ex, marked):
        return {"model": "default", "messages": [{"role": "user", "content": ex.query}],
                "max_tokens": args.tokens, "min_tokens": args.tokens, "seed": 1,
                "temperature": 0.8,
                "ctxleak": {"documents": [{"id": str(ex.id), "text": ex.context}], **marked}}

    with tempfile.TemporaryDirectory() as tmp:
        ledger = SQLiteLedger(Path(tmp) / "ledger.db")
        with serving(lm, ledger, max_tokens=args.tokens, max_tokens_limit=4 * args.tokens) \
                as (url, _):
            client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
            for name, marked in [("lambda=0.5", {"lambda": 0.5}), ("eps=1.0", {"epsilon": 1.0})]:
                bodies = [body(ex, marked) for ex in examples]

                def direct(bodies=bodies):
                    out = []
                    for b in bodies:
                        req = parse_cid_request(b, config)
                        out.append(decode_answer(lm, req, req.documents).ledger.response_ids)
                    return out

                def proxied(bodies=bodies):
                    out = []
                    for b in bodies:
                        extra = {"ctxleak": b["ctxleak"], "min_tokens": b["min_tokens"]}
                        r = client.chat.completions.create(
                            model="default", messages=b["messages"], max_tokens=args.tokens,
                            seed=1, temperature=0.8, extra_body=extra)
                        info = r.model_extra["ctxleak"]
                        out.append(info["token_ids"][:len(info["token_ids"])
                                                     - int(info["stopped_on_eos"])])
                    return out

                direct()
                proxied()  # warm up
                res = timed_rounds({"direct": direct, "proxy": proxied}, repeat=args.repeat)
                (t_direct, ids_direct), (t_proxy, ids_proxy) = res["direct"], res["proxy"]
                assert ids_direct == ids_proxy, "the proxy decoded other tokens"
                n_tokens = sum(len(ids) for ids in ids_proxy)
                n = len(bodies)
                print(f"{name}: {n} requests, {n_tokens} tokens; library {t_direct / n * 1e3:.0f} "
                      f"ms/request ({n_tokens / t_direct:.1f} tok/s), proxy "
                      f"{t_proxy / n * 1e3:.0f} ms/request ({n_tokens / t_proxy:.1f} tok/s); "
                      f"overhead {(t_proxy - t_direct) / n * 1e3:.1f} ms/request")
        ledger.close()


if __name__ == "__main__":
    main()
