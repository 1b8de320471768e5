"""The privacy proxy (``ctxleak serve``) under load: C concurrent clients (the real ``openai``
client, one thread per client), each sending ``--per-client`` requests one after another, a mix
of pass-through, λ = 0.5 and bounded-ε requests. Prints, per target and concurrency, throughput
(completion tokens/s and requests/s) and the p50/p99 latency of a request, then checks the
ledger: each document charged exactly ε × the tokens released with it (the stopping EOS
included), no reservation left open.

Targets, each in one run:

- ``vLLM directly`` (``--vllm-url``): every request a plain chat request, its document in the
  user message (what an app without the proxy sends);
- ``proxy, pass-through``: the same requests through the proxy (``--decode upstream``);
- ``proxy, CID through the upstream``: the mix through that proxy, CID decoded by the upstream
  (a vLLM with ctxleak's plugin decodes both streams itself, docs/served-models.md; without it,
  the whole-distribution route);
- ``proxy, in-process, batched``: the mix through ``ctxleak serve --decode in-process``, the
  answers in flight decoded together (``ctxleak.proxy.batching``); pass-through requests go to
  ``--vllm-url`` (without it, the mix is λ = 0.5 and ε only). Also run at 1 client, and the
  throughput at 8 clients over 1 client is printed (the aim: 3× or more).

Each proxy runs as its own process (``python -m ctxleak serve``, a SQLite ledger in a temporary
folder, every budget unlimited), so the clients do not share the decoding's interpreter. Every
request is a bundled demo example (its context as one document, its question as the user
message), exactly ``--tokens`` new tokens (``min_tokens`` = ``max_tokens``), T = 0.8, request k
seeded with k.

    python bench/bench_proxy_load.py --in-process-only [--clients 8,32] [--per-client 4]
    python bench/bench_proxy_load.py --vllm-url http://127.0.0.1:8000 [--served-model NAME]
    python bench/bench_proxy_load.py --vllm-url URL --upstream-only --clients 8

With ``--vllm-url`` the proxy before it also runs λ = 0.5 alone and bounded ε alone, and their
throughput is printed as a ratio of vLLM's plain throughput at the same number of clients
(about 0.5 is the limit: two forward passes per token); ``--upstream-only`` leaves out the
in-process proxy.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai

from ctxleak.methods.influence import load_examples
from ctxleak.proxy.budget import SQLiteLedger

LAMBDA, EPSILON, TEMPERATURE = 0.5, 1.0, 0.8
MIX = ("pass-through", "lambda", "epsilon")


@dataclass
class Level:
    """What one concurrency level measured: latencies (s), completion tokens, errors, and the ε
    each document should have been charged (its bounded answers' ε × tokens released)."""

    clients: int
    wall: float = 0.0
    latencies: list[float] = field(default_factory=list)
    tokens: int = 0
    errors: list[str] = field(default_factory=list)
    charged: dict[str, float] = field(default_factory=lambda: defaultdict(float))

    def row(self, target: str) -> str:
        lat = sorted(self.latencies) or [float("nan")]
        p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))]
        err = f" errors: {len(self.errors)} ({self.errors[0]})" if self.errors else ""
        return (f"| {target} | {self.clients} | {len(self.latencies)} | {self.tokens} | "
                f"{self.wall:.2f} | {self.tokens / self.wall:.3g} | "
                f"{len(self.latencies) / self.wall:.3g} | {1e3 * statistics.median(lat):.0f} | "
                f"{1e3 * p99:.0f} |{err}")


def request(kind: str, k: int, examples: list[Any], tokens: int, model: str) -> dict[str, Any]:
    """The ``openai`` keywords of request ``k`` of ``kind``: pass-through carries the document
    in the user message; λ and ε mark it as the ctxleak field's document."""
    ex = examples[k % len(examples)]
    extra: dict[str, Any] = {"min_tokens": tokens}
    if kind == "pass-through":
        content = f"Document: {ex.context}. {ex.query}"
    else:
        content = ex.query
        marked = {"lambda": LAMBDA} if kind == "lambda" else {"epsilon": EPSILON}
        extra["ctxleak"] = {"documents": [{"id": str(ex.id), "text": ex.context}], **marked}
    return {"model": model, "messages": [{"role": "user", "content": content}],
            "max_tokens": tokens, "seed": k, "temperature": TEMPERATURE, "extra_body": extra}


def run_level(url: str, clients: int, per_client: int, kinds: tuple[str, ...],
              examples: list[Any], tokens: int, model: str) -> Level:
    """``clients`` threads, each sending ``per_client`` requests one after another, request k
    of kind ``kinds[k % len(kinds)]``."""
    level, lock = Level(clients), threading.Lock()
    start = threading.Barrier(clients + 1)

    def client(i: int) -> None:
        api = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=900)
        start.wait()
        for j in range(per_client):
            k = i * per_client + j
            kind = kinds[k % len(kinds)]
            t0 = time.perf_counter()
            try:
                out = api.chat.completions.create(**request(kind, k, examples, tokens, model))
            except openai.APIError as exc:
                with lock:
                    level.errors.append(f"{kind}: {exc}"[:200])
                continue
            dt = time.perf_counter() - t0
            info = (out.model_extra or {}).get("ctxleak")
            with lock:
                level.latencies.append(dt)
                level.tokens += out.usage.completion_tokens if out.usage else 0
                if kind == "epsilon" and info is not None:
                    for doc in info["documents"]:
                        level.charged[doc] += EPSILON * info["tokens"]

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    level.wall = time.perf_counter() - t0
    return level


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_proxy(args: argparse.Namespace, ledger: Path, decode: str,
                log: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``ctxleak serve`` in a process of its own on a free port, once ``/health`` answers."""
    port = free_port()
    cmd = [sys.executable, "-m", "ctxleak", "serve", "--model", args.model, "--decode", decode,
           "--port", str(port), "--ledger", f"sqlite:///{ledger}", "--max-concurrent", "256",
           "--max-tokens-limit", str(max(512, args.tokens)), "--upstream-timeout", "900"]
    if args.vllm_url:
        cmd += ["--upstream", args.vllm_url.rstrip("/") + "/v1"]
    if args.served_model and decode == "upstream":
        cmd += ["--served-model", args.served_model]
    proc = subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT,
                            env=dict(os.environ))
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the proxy exited ({proc.returncode}); its log: {log}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.terminate()
    raise SystemExit(f"the proxy did not start in 900 s; its log: {log}")


def check_ledger(path: Path, levels: list[Level], ids: list[str]) -> str:
    """Every document's charge against what its bounded answers released: ε × tokens each."""
    want: dict[str, float] = defaultdict(float)
    for level in levels:
        for doc, eps in level.charged.items():
            want[doc] += eps
    ledger = SQLiteLedger(path)
    try:
        wrong = [(doc, ledger.document(doc).spent, want.get(doc, 0.0)) for doc in ids
                 if abs(ledger.document(doc).spent - want.get(doc, 0.0)) > 1e-9 * max(
                     1.0, want.get(doc, 0.0))]
        still_open = ledger.open_reservations()
    finally:
        ledger.close()
    if wrong or still_open:
        return (f"ledger: WRONG: {len(wrong)} document(s) charged other than ε × tokens "
                f"released (doc, charged, released: {wrong[:3]}); {len(still_open)} "
                f"reservation(s) left open")
    total = sum(want.values())
    return (f"ledger: each of {len(ids)} documents charged exactly ε × tokens released "
            f"({total:.1f} ε in all), no reservation open")


def proxy_target(args: argparse.Namespace, name: str, decode: str, plans: list[tuple[str, int,
                 tuple[str, ...]]], examples: list[Any], tmp: Path) -> dict[str, list[Level]]:
    """One proxy process: each (row name, clients, kinds) of ``plans`` measured in turn (after
    a warm-up request of each kind), then its ledger checked."""
    ledger = tmp / f"{name}.db"
    proc, url = start_proxy(args, ledger, decode, tmp / f"{name}.log")
    out: dict[str, list[Level]] = defaultdict(list)
    try:
        warm = run_level(url, 1, len(MIX), tuple(k for k in MIX if "pass-through" != k
                                                 or args.vllm_url), examples, args.tokens,
                         args.model_name)
        for row, clients, kinds in plans:
            level = run_level(url, clients, args.per_client, kinds, examples, args.tokens,
                              args.model_name)
            print(level.row(row), flush=True)
            out[row].append(level)
    finally:
        proc.terminate()
        proc.wait(60)
    levels = [warm] + [lv for rows in out.values() for lv in rows]
    print(f"# {name}: " + check_ledger(ledger, levels, sorted({str(e.id) for e in examples})),
          flush=True)
    return out


def served_name(url: str) -> str:
    """The only model the server at ``url`` serves (``/v1/models``)."""
    names = [m["id"] for m in httpx.get(url.rstrip("/") + "/v1/models", timeout=30)
             .json()["data"]]
    if len(names) != 1:
        raise SystemExit(f"{url} serves {names}: name one with --served-model")
    return str(names[0])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--vllm-url", help="a vLLM server (with ctxleak's plugin for CID through "
                    "it): vLLM directly, the pass-through and CID through the upstream")
    ap.add_argument("--served-model", help="the model's name on that server (default: its only "
                    "one)")
    ap.add_argument("--in-process-only", action="store_true",
                    help="only the in-process proxy (its mix without pass-through unless "
                    "--vllm-url is given)")
    ap.add_argument("--model", default="default", help="the model the in-process proxy loads "
                    "(and whose tokenizer the upstream proxy uses)")
    ap.add_argument("--upstream-only", action="store_true",
                    help="with --vllm-url: vLLM directly and the proxy before it, no in-process "
                         "proxy")
    ap.add_argument("--clients", default="8,32")
    ap.add_argument("--per-client", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=32)
    args = ap.parse_args()
    if not args.vllm_url and not args.in_process_only:
        raise SystemExit("give --vllm-url, or --in-process-only")
    args.model_name = args.served_model or (served_name(args.vllm_url) if args.vllm_url
                                            else "default")
    levels = [int(c) for c in args.clients.split(",")]
    examples = [e for e in load_examples("demo") if e.query]
    print(f"# bench_proxy_load: {len(examples)} demo examples, {args.tokens} tokens per answer, "
          f"{args.per_client} requests per client, T = {TEMPERATURE}, λ = {LAMBDA}, "
          f"ε = {EPSILON} per token; {os.cpu_count()} CPUs")
    print("| target | clients | requests | tokens | wall (s) | tokens/s | requests/s | "
          "p50 latency (ms) | p99 latency (ms) |")
    print("|---|---|---|---|---|---|---|---|---|")
    mix = MIX if args.vllm_url else MIX[1:]
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        if args.vllm_url and not args.in_process_only:
            # warm-up: the server's prefix cache holds the prompts then, as for each proxy
            run_level(args.vllm_url.rstrip("/"), 1, len(examples), ("pass-through",), examples,
                      args.tokens, args.model_name)
            direct = {c: run_level(args.vllm_url.rstrip("/"), c, args.per_client,
                                   ("pass-through",), examples, args.tokens, args.model_name)
                      for c in levels}
            for c in levels:
                print(direct[c].row("vLLM directly"), flush=True)
            upstream = proxy_target(
                args, "upstream", "upstream",
                [(f"proxy, {what}", c, kinds) for what, kinds in
                 [("pass-through", ("pass-through",)),
                  ("CID through the upstream (mix)", MIX),
                  ("CID through the upstream (λ only)", ("lambda",)),
                  ("CID through the upstream (bounded ε only)", ("epsilon",))]
                 for c in levels], examples, tmp)
            for what in ("λ only", "bounded ε only"):
                for lv in upstream[f"proxy, CID through the upstream ({what})"]:
                    plain = direct[lv.clients]
                    print(f"# {what}, {lv.clients} clients: {lv.tokens / lv.wall:.3g} tokens/s "
                          f"through the proxy, {plain.tokens / plain.wall:.3g} from vLLM "
                          f"directly: {(lv.tokens / lv.wall) / (plain.tokens / plain.wall):.2f}x "
                          f"(two forward passes per token: about 0.5 where vLLM's plain steps "
                          f"are bound by compute, more where they are not)", flush=True)
        if args.upstream_only:
            return
        inproc = proxy_target(args, "in-process", "in-process",
                              [("proxy, in-process, batched (mix)", c, mix)
                               for c in sorted({1, 8, *levels})], examples, tmp)
    by_clients = {lv.clients: lv for lv in inproc["proxy, in-process, batched (mix)"]}
    one, eight = by_clients[1], by_clients[8]
    ratio = (eight.tokens / eight.wall) / (one.tokens / one.wall)
    print(f"in-process proxy: 1 client {one.tokens / one.wall:.3g} tokens/s, 8 clients "
          f"{eight.tokens / eight.wall:.3g} tokens/s: {ratio:.2f}x (aim: >= 3x)")


if __name__ == "__main__":
    main()
