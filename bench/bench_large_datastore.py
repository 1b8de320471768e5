"""One answer of the privacy proxy over a datastore of 1,000 / 10,000 / 100,000 documents: its
time (s, and the ratio to 1,000 documents), the response body and header bytes, the request-log
line's characters and the ledger rows written for it.

DP-RAG (``dp-rag:eps=5``) charges its private retrieval's ε to every private document and the
documents it keeps the whole claim: the ledger keeps the common part in one row
(:mod:`ctxleak.proxy.ledger_common`), so the rows written per answer do not grow with the
datastore; what still does is the retrieval itself (every document's similarity to the
question, once per answer). The first answer of a process also attaches the datastore's
documents to the common row (one write each, once): it is timed apart (``attach``).

The proxy runs in this process (uvicorn in a thread, a SQLite ledger in a temporary folder) on
the tests' tiny random model, so the time is the proxy's and the mechanism's, not a real model's
decoding; each size is answered ``--repeat`` times after the first, best taken.

    python bench/bench_large_datastore.py [--sizes 1000 10000 100000] [--repeat 3]
        [--caller-share 0.5]

``--caller-share`` serves with a share of each budget per caller (the one caller here is
``anonymous``): the caller's part of the common charge is one row too
(``ctxleak_caller_common``), so the rows written per answer still do not grow.
"""

from __future__ import annotations

import argparse
import io
import logging
import sys
import tempfile
import time
from pathlib import Path

import httpx

from ctxleak.mitigations.datastore import Datastore
from ctxleak.proxy import Budgets

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from helpers.proxy_server import serving_sqlite  # noqa: E402
from helpers.tiny_models import tiny_llama  # noqa: E402

QUESTION = "what is the capital of italy ?"
RELEVANT = ["the capital of italy is rome", "rome is the capital of italy",
            "the capital of france is paris", "italy has a long coast"]


def store(n: int) -> Datastore:
    return Datastore.of([(f"doc-{k}", RELEVANT[k] if k < len(RELEVANT)
                          else f"note {k} on topic {k % 101} of the archive") for k in range(n)])


def one(url: str) -> tuple[float, httpx.Response]:
    start = time.perf_counter()
    r = httpx.post(url + "/v1/chat/completions", timeout=900, json={
        "model": "tiny", "messages": [{"role": "user", "content": QUESTION}],
        "max_tokens": 4, "temperature": 0.8})
    r.raise_for_status()
    return time.perf_counter() - start, r


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--caller-share", type=float, default=1.0,
                    help="the fraction of each budget one caller may spend (1: no share)")
    args = ap.parse_args()
    lm = tiny_llama()
    logs = io.StringIO()
    handler = logging.StreamHandler(logs)
    logger = logging.getLogger("ctxleak.proxy")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    base = None
    print(f"caller share {args.caller_share:g}")
    print("documents  attach_s  answer_s  ratio  body_B  headers_B  log_chars  rows_written")
    for n in args.sizes:
        with tempfile.TemporaryDirectory() as tmp, serving_sqlite(
                lm, Path(tmp) / "ledger.db", mechanism="dp-rag:eps=5", datastore=store(n),
                budgets=Budgets(default=1000.0), caller_share=args.caller_share
        ) as (url, ledger, _):
            attach, _ = one(url)
            best, rows, body, headers, line = float("inf"), 0, 0, 0, 0
            for _ in range(args.repeat):
                logs.truncate(0)
                logs.seek(0)
                before = ledger._db.total_changes
                took, r = one(url)
                if took < best:
                    best, rows = took, ledger._db.total_changes - before
                    body = len(r.content)
                    headers = sum(len(a) + len(b) for a, b in r.headers.raw)
                    line = max((len(x) for x in logs.getvalue().splitlines()
                                if '"event": "mechanism"' in x), default=0)
        base = base or best
        print(f"{n:9d}  {attach:8.2f}  {best:8.3f}  {best / base:5.1f}  {body:6d}  "
              f"{headers:9d}  {line:9d}  {rows:12d}")


if __name__ == "__main__":
    main()
