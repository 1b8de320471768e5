"""One CID answer through ctxleak's vLLM plugin against vLLM decoding the same two prompts
without CID (two plain completion requests sent at once, the same number of new tokens, T =
0.8): what one answer's speed through the server can be at most, measured on the same server
in one run. Both sides' HTTP clients share ctxleak's one TLS build (building one reads the CA
bundle, about 29 ms), and both find the prompts in the server's prefix cache (an untimed plain
pass first). For each of the first ``--examples`` demo examples, one after another: plain vLLM,
CID at λ = 0.5 through the plugin, bounded CID at ε = 2 per token through the plugin, each
``--tokens`` new tokens (EOS masked throughout); tokens/s of one answer (new tokens over the
wall time) and the plugin's speed as a share of vLLM's plain speed.

    python bench/bench_served_ceiling.py [--server-url URL --served-model NAME] [--examples 4]
        [--tokens 16]

Without ``--server-url`` a server is started with the plugin as bench_served_cid.py starts it.
"""

from __future__ import annotations

import argparse
import concurrent.futures as futures
import time

import httpx
from _common import load_default, vllm_server_for

from ctxleak.engine.served import serve
from ctxleak.engine.served_client import tls_context
from ctxleak.methods.influence.data import load_examples
from ctxleak.methods.influence.pipeline import InfluenceOptions, Setting, example_parts
from ctxleak.mitigations.cid import CIDConfig, _generate_many


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--server-url", default=None)
    ap.add_argument("--served-model", default=None)
    ap.add_argument("--examples", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=16)
    a = ap.parse_args()
    lm = load_default()
    server, url, name = vllm_server_for(lm, a.server_url, a.served_model)
    try:
        plugin = serve("default", url, served_model=name)
        examples = load_examples("demo", task="auto")[:a.examples]
        n = a.tokens
        configs = {"CID": CIDConfig(lam=0.5, temperature=0.8, max_new_tokens=n, min_new_tokens=n),
                   "bounded": CIDConfig(lam=1.0, temperature=0.8, bounded_eps=2.0,
                                        max_new_tokens=n, min_new_tokens=n)}

        def plain(prompt: list[int]) -> None:
            httpx.post(url + "/v1/completions", timeout=300, verify=tls_context(), json={
                "model": plugin.info.served_model, "prompt": prompt, "max_tokens": n,
                "min_tokens": n, "temperature": 0.8, "seed": 1}).raise_for_status()

        print("| example | prompts (tokens) | vLLM plain, both prompts, tokens/s | CID plugin | "
              "bounded plugin | CID / plain | bounded / plain |")
        print("|---|---|---|---|---|---|---|")
        for k, example in enumerate(examples):
            p = example_parts(lm, example, Setting.cid(0.5, 0.8), InfluenceOptions())[0]
            with futures.ThreadPoolExecutor(2) as pool:
                # untimed: the prompts into the server's prefix cache, which the plugin's
                # answers find there too (each side then prefills the same uncached tail)
                list(pool.map(plain, [list(p.full), list(p.empty)]))
                t0 = time.perf_counter()
                list(pool.map(plain, [list(p.full), list(p.empty)]))
            speed = {"plain": n / (time.perf_counter() - t0)}
            for label, config in configs.items():
                t0 = time.perf_counter()
                _generate_many(plugin, [(p.full, p.empty, config, 1000 + k)])
                speed[label] = n / (time.perf_counter() - t0)
            print(f"| {example.id} | {len(p.full)} / {len(p.empty)} | {speed['plain']:.1f} | "
                  f"{speed['CID']:.1f} | {speed['bounded']:.1f} | "
                  f"{speed['CID'] / speed['plain']:.2f}x | "
                  f"{speed['bounded'] / speed['plain']:.2f}x |", flush=True)
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
