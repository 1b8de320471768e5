"""A lexical retriever over the bundled Northwind corpus (``corpus.jsonl`` next to this file),
for ``ctxleak influence --retriever PATH/retriever.py:retriever --data queries.jsonl``.

BM25 (k1 = 1.2, b = 0.75) over lower-cased words of each document's text and source path, top 3,
ties broken by document id: deterministic, standard library only, runs from any directory. It is
a stand-in for the app's own retriever: its top 3 need not be the documents ``log.jsonl`` logged.
"""

from __future__ import annotations

import json
import math
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

CORPUS = Path(__file__).resolve().with_name("corpus.jsonl")
TOP_K = 3
K1, B = 1.2, 0.75
STOPWORDS = frozenset(
    "a an and are as at be by can do does for from have how i in is it my of on or our s the "
    "there this to was we what whats when where which who why will with you your".split())


def words(text: str) -> list[str]:
    """The lower-cased words of ``text`` without stop words."""
    return [w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in STOPWORDS]


@lru_cache(maxsize=1)
def corpus() -> tuple[dict[str, Any], ...]:
    """The documents of ``corpus.jsonl``, read once."""
    with open(CORPUS, encoding="utf-8") as handle:
        return tuple(json.loads(line) for line in handle if line.strip())


def retriever(query: str) -> list[dict[str, Any]]:
    """The 3 documents of the corpus with the highest BM25 score for ``query``, best first, each
    a dict with ``id``, ``text``, ``source``, ``metadata`` and ``score`` (BM25, 4 decimals)."""
    docs = corpus()
    bags = [words(d["text"] + " " + d["source"]) for d in docs]
    mean = sum(len(b) for b in bags) / len(bags)
    terms = set(words(query))
    df = {t: sum(t in b for b in bags) for t in terms}
    scored = []
    for doc, bag in zip(docs, bags):
        score = 0.0
        for t in sorted(terms):
            tf = bag.count(t)
            if tf:
                idf = math.log(1 + (len(docs) - df[t] + 0.5) / (df[t] + 0.5))
                score += idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * len(bag) / mean))
        scored.append((-round(score, 4), doc["id"], doc))
    scored.sort(key=lambda item: (item[0], item[1]))
    return [{"id": d["id"], "text": d["text"], "source": d["source"],
             "metadata": dict(d["metadata"]), "score": -s} for s, _, d in scored[:TOP_K]]
