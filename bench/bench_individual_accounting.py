"""How many answers a deployment over the bundled ``demo-datastore`` serves before the first
restricted document is left out for its budget, with every private document charged the
answer's claim (the rule before individual accounting) against each document charged its own
loss (individual accounting, a privacy filter: "Individual Privacy Accounting via a Rényi
Filter", Feldman and Zrnic), and whether each document's recorded spend equals an independent
recomputation.

The proxy's own reservation path runs (``parse_request`` → ``Charging.reserve`` → the SQLite
ledger → ``settle``) for the 178 questions asked in a loop as one stream, each with its own
seed; nothing is decoded (what a document is charged is fixed before its answer, so the model
does not change it). Documents whose ``fact`` is ``common`` are class ``public`` (never
charged), the 48 ``private`` ones class ``restricted`` with a budget of ``--budget`` ε each.
The recomputation replays the same stream with its own code: the shard of a document by a
hash of its id, the content-word cosine, each shard's best document; DP-RAG's word similarity
and the threshold drawn from the same seed.

    python bench/bench_individual_accounting.py [--budget 10] [--most 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import re
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import torch

from ctxleak.mitigations.datastore import STOP_WORDS, Datastore
from ctxleak.mitigations.dp_retrieval import threshold_grid, threshold_logprobs
from ctxleak.mitigations.dp_vote import noise_generator
from ctxleak.mitigations.mechanisms import Decoding
from ctxleak.mitigations.named import parse_mechanism
from ctxleak.proxy.budget import open_ledger
from ctxleak.proxy.budgets import Budgets
from ctxleak.proxy.charging import Charging
from ctxleak.proxy.config import ProxyConfig
from ctxleak.proxy.metrics import ProxyMetrics
from ctxleak.proxy.request import parse_request
from ctxleak.run.records import demo_path

MAX_TOKENS = 16
WORD = re.compile(r"[^\W_]+")


def demo() -> tuple[Datastore, dict[str, str], list[str]]:
    """The bundled datastore, each document's class (``common`` → public, ``private`` →
    restricted) and the 178 questions."""
    rows = [json.loads(line) for line in open(demo_path("datastore/documents.jsonl"))]
    questions = [json.loads(line)["query"]
                 for line in open(demo_path("datastore/questions.jsonl"))]
    classes = {r["id"]: "public" if r["fact"] == "common" else "restricted" for r in rows}
    return Datastore.of((r["id"], r["text"]) for r in rows), classes, questions


def cosine(a: Counter[str], b: Counter[str]) -> float:
    dot = sum(a[w] * b[w] for w in a)
    norm = math.sqrt(sum(v * v for v in a.values()) * sum(v * v for v in b.values()))
    return dot / norm if norm else 0.0


def recompute(spec: str, store: list[tuple[str, str]], question: str, seed: int,
              decoding: Decoding, left_out: set[str]) -> dict[str, float]:
    """One answer's charge of each private document, by this file's own code: the filter
    leaves out a document whose charge would pass its budget (``left_out`` is where the
    replay found that), so the documents read are those of ``store`` less ``left_out``."""
    mech: Any = parse_mechanism(spec)  # DP-RAG's or a vote's own fields are read below
    docs = [(i, t) for i, t in store if i not in left_out]
    claim = float(mech.claim(decoding).eps)
    if mech.name == "dp-rag":
        words = Counter(WORD.findall(question.lower()))
        scores = [cosine(words, Counter(WORD.findall(t.lower()))) for _, t in docs]
        grid = threshold_grid(0.0, 0.6, mech.grid)
        logp = threshold_logprobs(scores, grid, mech.top_k, mech.retrieval_eps)
        j = int(torch.multinomial(torch.exp(logp), 1, generator=noise_generator(seed, 2, 0)))
        tau = float(grid[j])
        return {i: claim if s >= tau else mech.retrieval_eps for (i, _), s in zip(docs, scores)}
    asked = Counter(w for w in WORD.findall(question.lower()) if w not in STOP_WORDS)
    best: dict[int, tuple[float, int, str]] = {}
    for n, (i, t) in enumerate(docs):
        shard = int.from_bytes(hashlib.blake2b(i.encode(), digest_size=8).digest(),
                               "big") % mech.shards
        score = cosine(asked, Counter(w for w in WORD.findall(t.lower())
                                      if w not in STOP_WORDS))
        if score > 0 and (shard not in best or (-score, n) < (-best[shard][0], best[shard][1])):
            best[shard] = (score, n, i)
    return {i: claim for _, _, i in best.values()}


async def stream(spec: str, budget: float, most: int, individual: bool, folder: Path,
                 accounting: str = "basic") -> tuple[int, dict[str, float], dict[str, float]]:
    """Answers served before the first restricted document is left out, each document's
    recorded spend, and the recomputed one."""
    store, classes, questions = demo()
    mechanism: Any = parse_mechanism(spec)
    if not individual:  # the rule before: the claim to every private document
        mechanism = _Whole(mechanism)
    config = ProxyConfig(datastore=store, mechanism=mechanism, classes=classes,
                         budgets=Budgets(classes={"restricted": budget}), max_tokens=MAX_TOKENS,
                         accounting=accounting, **_audit())
    ledger = open_ledger(str(folder / f"{mechanism.key()}-{individual}-{accounting}.db"))
    charging = Charging(ledger, config, ProxyMetrics(ledger, 0))
    private = [(i, t) for i, t in store.documents if classes[i] != "public"]
    expected: Any = Counter()  # ε spent per document: floats, summed by update
    decoding = Decoding(temperature=1.0, max_new_tokens=MAX_TOKENS, min_new_tokens=0)
    served = 0
    for n in range(most):
        body = {"messages": [{"role": "user", "content": questions[n % len(questions)]}],
                "max_tokens": MAX_TOKENS, "seed": 1000 + n}
        request = parse_request(body, config)
        held = await charging.reserve(f"r{n}", request)
        if held.dropped:  # this answer is not counted: give its reservation back
            ledger.settle(f"r{n}", 0.0)
            break
        ledger.settle(f"r{n}", dict(held.held) if held.individual else
                      max(held.held.values(), default=0.0))
        served += 1
        if individual:
            losses = recompute(spec, private, request.question, 1000 + n, decoding, set())
            if accounting == "renyi":  # the same losses as Rényi divergences at the order
                order = config.composition.order
                assert order is not None  # Rényi composition keeps one order
                losses = {d: _renyi(mechanism, decoding, e, order) for d, e in losses.items()}
            expected.update(losses)
        else:
            expected.update(dict.fromkeys([i for i, _ in private],
                                          float(mechanism.claim(decoding).eps)))
    recorded = {i: ledger.document(i).spent for i, _ in private}
    return served, recorded, dict(expected)


def _renyi(mechanism: Any, decoding: Decoding, eps: float, order: float) -> float:
    """DP-RAG's loss ``eps`` (its threshold's ε, or its whole claim) as a Rényi divergence at
    ``order``, by hand: each ε-bounded-range step's sinh bound (Bun and Steinke)."""
    def step(e: float) -> float:
        a = order
        sinh = math.log((math.sinh(a * e) - math.sinh((a - 1) * e)) / math.sinh(e)) / (a - 1)
        return min(sinh, a * e * e / 2, e)

    out = step(mechanism.retrieval_eps)
    if eps > mechanism.retrieval_eps:
        out += decoding.max_new_tokens * step(mechanism.token_eps(decoding))
    return out


def _audit() -> dict[str, Any]:
    """The proxy flag that lets a client's seed fix an answer's noise (an audit such as this
    one), where this version has it."""
    return {"audit_seeds": True} if "audit_seeds" in ProxyConfig.__dataclass_fields__ else {}


class _Whole:
    """A mechanism as charged before individual accounting: no individual charges."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def document_charges(self, request: Any, decoding: Decoding) -> None:
        return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--budget", type=float, default=10.0, help="ε per restricted document")
    ap.add_argument("--most", type=int, default=2000, help="answers at most")
    ap.add_argument("--mechanisms", nargs="+", default=[
        "dp-rag:eps=1,eps_retrieval=0.05,top_k=1", "dp-rag:eps=0.5,eps_retrieval=0.02,top_k=1",
        "dp-sparse-vote:eps=1,shards=8,delta=1e-6",
        "dp-sparse-vote:eps=0.5,shards=8,delta=1e-6"])
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for spec in args.mechanisms:
            before, _, _ = asyncio.run(stream(spec, args.budget, args.most, False, Path(tmp)))
            after, recorded, expected = asyncio.run(
                stream(spec, args.budget, args.most, True, Path(tmp)))
            gap = max(abs(recorded[i] - expected.get(i, 0.0)) for i in recorded)
            top = max(recorded.values())
            print(f"{spec}: answers before the first restricted document is left out: "
                  f"{before} (every private document charged the claim) -> {after} "
                  f"(individual charges, ε adding up), ×{after / max(before, 1):.1f}; most "
                  f"spent by one document {top:.3f} ε of {args.budget:g}; recorded vs "
                  f"recomputed spend: largest gap {gap:.2e} ε over {len(recorded)} documents")
            if spec.startswith("dp-rag"):
                renyi, recorded, expected = asyncio.run(
                    stream(spec, args.budget, args.most, True, Path(tmp), "renyi"))
                gap = max(abs(recorded[i] - expected.get(i, 0.0)) for i in recorded)
                print(f"{spec}: with Rényi composition (each budget {args.budget:g} ε at δ = "
                      f"1e-6): {renyi} answers, ×{renyi / max(before, 1):.1f} the rule before; "
                      f"recorded vs recomputed: largest gap {gap:.2e} (Rényi divergence)")


if __name__ == "__main__":
    main()
