"""The privacy proxy (``ctxleak serve``) against calling the library directly, on the default model
in-process: the proxy's overhead per request (ms) and its tokens per second at λ = 0.5 and at a
bounded ε.

Each request is one bundled demo example (its context as one document, its question as the user
message), exactly ``--tokens`` new tokens (``min_tokens`` = ``max_tokens``), the same seed both
ways, so the proxy and :func:`ctxleak.proxy.answering.answer_alone` decode the same tokens. The
proxy runs in this process (uvicorn in a thread, a SQLite ledger in a temporary folder) and is
called with the real ``openai`` client; the runs are interleaved, best of ``--repeat``.

    python bench/bench_proxy.py [--requests 4] [--tokens 32] [--repeat 3] [--tiny]
    python bench/bench_proxy.py --server-url http://127.0.0.1:8000 [--served-model NAME]

With ``--server-url`` the proxy decodes through that vLLM server (started with
``--max-logprobs -1``), and the library side is the server's own sampling of the same prompt
tokens (plain vLLM generation): the proxy's overhead at λ = 1, T = 1 (the server samples, the
proxy answers, then scores the answer with and without the context for the ledger), and its
tokens per second at λ = 0.5 (served CID, one request per stream and token).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import openai
from _common import device_line, load_default, timed_rounds

from ctxleak.methods.influence import load_examples
from ctxleak.proxy.answering import answer_alone
from ctxleak.proxy.budget import SQLiteLedger
from ctxleak.proxy.config import ProxyConfig
from ctxleak.proxy.request import parse_request

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from helpers.proxy_server import serving  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tiny", action="store_true", help="a tiny random model (tests/helpers): "
                    "decoding costs almost nothing, so the time is the proxy's own")
    ap.add_argument("--server-url", help="decode through this vLLM server")
    ap.add_argument("--served-model", help="its model's name there (default: its only one)")
    args = ap.parse_args()
    if args.server_url:
        return served(args)
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
                        req = parse_request(b, config)
                        out.append(answer_alone(lm, req, req.documents).answer.response_ids)
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


def served(args: argparse.Namespace) -> None:
    from ctxleak.engine.generation import sample
    from ctxleak.engine.served import serve
    from ctxleak.proxy.answering import answer_parts
    from ctxleak.proxy.request import Document

    lm = serve("default", args.server_url, served_model=args.served_model)
    examples = [e for e in load_examples("demo") if e.query][:args.requests]
    print(f"served: {args.server_url} ({lm.info.served_model})")
    with tempfile.TemporaryDirectory() as tmp:
        ledger = SQLiteLedger(Path(tmp) / "ledger.db")
        with serving(lm, ledger, max_tokens=args.tokens, max_tokens_limit=4 * args.tokens) \
                as (url, _):
            client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)

            def proxied(lam: float, tokens: int):
                def run():
                    out = []
                    for ex in examples:
                        r = client.chat.completions.create(
                            model="default", max_tokens=tokens, seed=1, temperature=1.0,
                            messages=[{"role": "user", "content": ex.query}],
                            extra_body={"min_tokens": tokens, "ctxleak": {"lambda": lam,
                                        "documents": [{"id": str(ex.id), "text": ex.context}]}})
                        out.append(r.model_extra["ctxleak"]["tokens"])
                    return out
                return run

            parts = [answer_parts(lm, [Document(str(ex.id), ex.context)], ex.query,
                                  args.tokens)[0] for ex in examples]

            def plain():
                return [len(g[0].token_ids) for g in sample(
                    lm, [p.full for p in parts], [1] * len(parts), temperature=1.0,
                    max_new_tokens=args.tokens, min_new_tokens=args.tokens)]

            plain()
            proxied(1.0, args.tokens)()  # warm up
            res = timed_rounds({"vllm": plain, "proxy": proxied(1.0, args.tokens)},
                               repeat=args.repeat)
            (t_plain, n_plain), (t_proxy, n_proxy) = res["vllm"], res["proxy"]
            n = len(examples)
            print(f"lambda=1, T=1: {n} requests of {args.tokens} tokens; plain vLLM "
                  f"{t_plain / n * 1e3:.0f} ms/request ({sum(n_plain) / t_plain:.1f} tok/s), "
                  f"proxy {t_proxy / n * 1e3:.0f} ms/request ({sum(n_proxy) / t_proxy:.1f} "
                  f"tok/s); overhead {(t_proxy - t_plain) / n * 1e3:.0f} ms/request")
            few = min(args.tokens, 4)
            t_mix, n_mix = timed_rounds({"mix": proxied(0.5, few)}, repeat=1)["mix"]
            print(f"lambda=0.5 (served CID): {n} requests of {few} tokens, proxy "
                  f"{sum(n_mix) / t_mix:.2f} tok/s")
        ledger.close()


if __name__ == "__main__":
    main()
