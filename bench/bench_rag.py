"""RAG audit benchmark: logged turns with 5 retrieved documents each, on the default model.

1. Turns per second of the audit (each answer scored with, without its context, without each
   of its 5 documents, and under a control) against the plain influence command on the same
   turns (the 5 documents joined into one context: no per-document scores), in one run.
2. The per-document ledger's streaming pass alone (the records already scored): milliseconds per
   1,000 turns, and its peak memory (tracemalloc) at 1,000 and 10,000 turns, to show it stays
   flat as the log grows.

    python bench/bench_rag.py [--turns 20] [--ledger-turns 1000,10000] [--progress]
    python bench/bench_rag.py --turns 1000 --progress   # 88 minutes on a 2-core CPU
"""

from __future__ import annotations

import argparse
import random
import time
import tracemalloc
from collections.abc import Iterator
from typing import Any

from _common import device_line, load_default

import ctxleak
from ctxleak.methods.rag.exposure import DocumentLedger

FIRST = ["Marta", "Idris", "Lena", "Jonas", "Noor", "Aurelio", "Saoirse", "Benedikt"]
LAST = ["Velikova", "Okafor", "Wirth", "Ekdahl", "Haddad", "Skeffington", "Calloway", "Orrow"]
FACTS = ["salary is {n} euros a year", "account ending {n} holds the savings",
         "room {n} is booked for the review", "claim number {n} was approved",
         "badge {n} opens the east door"]


def corpus(n_docs: int, rng: random.Random) -> list[dict[str, str]]:
    """``n_docs`` short internal documents, each one private fact about a person."""
    docs = []
    for k in range(n_docs):
        who = f"{rng.choice(FIRST)} {rng.choice(LAST)}"
        fact = rng.choice(FACTS).format(n=rng.randint(1000, 99999))
        docs.append({"id": f"doc-{k}", "text": f"Internal note {k}: {who}'s {fact}.",
                     "who": who, "fact": fact})
    return docs


def turns(n: int, docs: list[dict[str, str]], per_turn: int, seed: int = 0
          ) -> list[dict[str, Any]]:
    """``n`` logged turns: a question about one document, ``per_turn`` retrieved documents (that
    one among them) and a logged answer that repeats its fact."""
    rng = random.Random(seed)
    out = []
    for t in range(n):
        picked = rng.sample(docs, per_turn)
        target = picked[rng.randrange(per_turn)]
        out.append({"id": f"t{t}", "query": f"What do the notes say about {target['who']}?",
                    "passages": [d["text"] for d in picked],
                    "response": f"{target['who']}'s {target['fact']}."})
    return out


def plain(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same turns with their documents joined into one context (no passages)."""
    return [{"id": r["id"], "query": r["query"], "context": "\n\n".join(r["passages"]),
             "response": r["response"]} for r in rows]


def fake_records(n: int, per_turn: int, n_docs: int) -> Iterator[dict[str, Any]]:
    """Scored records of ``n`` turns, made one at a time (never all in memory)."""
    rng = random.Random(1)
    for t in range(n):
        picked = rng.sample(range(n_docs), per_turn)
        yield {"id": f"t{t}", "setting": "s", "passages": [f"Document {d} text." for d in picked],
               "passage_influence": [rng.random() * 10 for _ in picked],
               "response_ids": list(range(20)), "response": "an answer"}


def ledger_pass(n: int, per_turn: int, n_docs: int) -> tuple[float, float]:
    """(seconds, peak MiB) of the ledger's streaming pass over ``n`` turns."""
    tracemalloc.start()
    t0 = time.perf_counter()
    ledger = DocumentLedger()
    for record in fake_records(n, per_turn, n_docs):
        ledger.add(record, "q", False)
    ledger.rows()
    seconds = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return seconds, peak


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--documents", type=int, default=5, help="retrieved per turn")
    ap.add_argument("--corpus", type=int, default=40, help="documents in the corpus")
    ap.add_argument("--ledger-turns", default="1000,10000")
    ap.add_argument("--progress", action="store_true", help="the runs' progress lines (stderr)")
    args = ap.parse_args()
    lm = load_default()
    print(device_line(lm))
    rows = turns(args.turns, corpus(args.corpus, random.Random(0)), args.documents)
    ctxleak.influence(lm, rows[:1], temperature=1.0, progress=False)  # warm-up
    timings = {}
    for name, data in (("plain influence (documents joined)", plain(rows)),
                       ("RAG audit (each document left out)", rows)):
        t0 = time.perf_counter()
        res = ctxleak.influence(lm, data, temperature=1.0, progress=args.progress)
        timings[name] = time.perf_counter() - t0
        ledger = res.summary["settings"][0].get("documents") or []
        print(f"{name}: {args.turns} turns in {timings[name]:.1f} s = "
              f"{args.turns / timings[name]:.2f} turns/s; {len(ledger)} documents in the ledger")
    (_, base), (_, audit) = timings.items()
    print(f"ratio: the audit takes {audit / base:.2f}x the plain command's time "
          f"(scoring passes per turn: plain 2 + control 1, audit 2 + {args.documents} "
          "documents + control 1)")
    for n in (int(x) for x in args.ledger_turns.split(",")):
        seconds, peak = ledger_pass(n, args.documents, args.corpus)
        print(f"ledger pass over {n} turns: {1000 * seconds / n * 1000:.1f} ms per 1,000 turns, "
              f"peak {peak:.2f} MiB (tracemalloc)")


if __name__ == "__main__":
    main()
