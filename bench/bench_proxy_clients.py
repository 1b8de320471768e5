"""The in-process privacy proxy (``ctxleak serve --decode in-process``: one decoding at a time,
behind a lock) under C concurrent clients: each client posts requests one after another (plain
httpx, one thread per client); every request is a bundled demo example (its context as one
document, its question as the user message), exactly --tokens new tokens, T = 0.8, lambda = 0.5.
Prints total tokens/s and per-request latency (median, max) per concurrency, and the library's
own sequential decode (answer_alone, no HTTP) as the reference.

    python bench/bench_proxy_clients.py [--tokens 32] [--per-client 4] [--clients 1,2,4,8]
    python bench/random_weights.py --model-dir DIR --device cuda bench_proxy_clients ...
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from _common import device_line, load_default, timed

from ctxleak.methods.influence import load_examples
from ctxleak.proxy.answering import answer_alone
from ctxleak.proxy.budget import SQLiteLedger
from ctxleak.proxy.config import ProxyConfig
from ctxleak.proxy.request import parse_request

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from helpers.proxy_server import serving  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--per-client", type=int, default=4)
    ap.add_argument("--clients", default="1,2,4,8")
    ap.add_argument("--lam", type=float, default=0.5)
    args = ap.parse_args()
    levels = [int(c) for c in args.clients.split(",")]
    lm = load_default()
    examples = [e for e in load_examples("demo") if e.query]
    print(f"# bench_proxy_clients on {device_line(lm)}; {len(examples)} demo examples with a query")
    config = ProxyConfig(max_tokens=args.tokens)

    def body(k):
        ex = examples[k % len(examples)]
        return {"model": "default", "messages": [{"role": "user", "content": ex.query}],
                "max_tokens": args.tokens, "min_tokens": args.tokens, "seed": k,
                "temperature": 0.8,
                "ctxleak": {"documents": [{"id": str(ex.id), "text": ex.context}],
                            "lambda": args.lam}}

    n_ref = max(levels) * args.per_client

    def direct():
        n = 0
        for k in range(n_ref):
            req = parse_request(body(k), config)
            n += len(answer_alone(lm, req, req.documents).answer.response_ids)
        return n

    direct()  # warm-up
    t_direct, n_direct = timed(direct)
    print("| clients | requests | tokens | wall (s) | tokens/s | requests/s | latency median "
          "(ms) | latency max (ms) |")
    print("|---|---|---|---|---|---|---|---|")
    print(f"| library, sequential answer_alone (no HTTP) | {n_ref} | {n_direct} | "
          f"{t_direct:.2f} | {n_direct / t_direct:.1f} | {n_ref / t_direct:.2f} | "
          f"{1e3 * t_direct / n_ref:.0f} | — |", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        ledger = SQLiteLedger(Path(tmp) / "ledger.db")
        with serving(lm, ledger, max_tokens=args.tokens, max_tokens_limit=4 * args.tokens,
                     max_concurrent=max(64, max(levels))) as (url, _):
            with httpx.Client(base_url=url, timeout=600) as c:  # warm-up
                c.post("/v1/chat/completions", json=body(0)).raise_for_status()
            for n_clients in levels:
                lat: list[float] = []
                toks: list[int] = []
                errors: list[str] = []
                lock = threading.Lock()

                def client(i, n_clients=n_clients, lat=lat, toks=toks, errors=errors,
                           lock=lock):
                    with httpx.Client(base_url=url, timeout=600) as c:
                        for j in range(args.per_client):
                            t0 = time.perf_counter()
                            r = c.post("/v1/chat/completions", json=body(i * args.per_client + j))
                            dt = time.perf_counter() - t0
                            with lock:
                                if r.status_code != 200:
                                    errors.append(f"{r.status_code} {r.text[:200]}")
                                    continue
                                lat.append(dt)
                                toks.append(r.json()["usage"]["completion_tokens"])

                threads = [threading.Thread(target=client, args=(i,)) for i in range(n_clients)]
                t0 = time.perf_counter()
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                wall = time.perf_counter() - t0
                n_req = len(lat)
                print(f"| proxy, {n_clients} concurrent client(s) | {n_req} | {sum(toks)} | "
                      f"{wall:.2f} | {sum(toks) / wall:.1f} | {n_req / wall:.2f} | "
                      f"{1e3 * statistics.median(lat):.0f} | {1e3 * max(lat):.0f} |"
                      + (f" errors: {len(errors)} ({errors[0]})" if errors else ""),
                      flush=True)
        ledger.close()


if __name__ == "__main__":
    main()
