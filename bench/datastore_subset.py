"""The questions of ``demo-datastore`` a CPU can sweep every mechanism over: all 30 on common
facts (utility) and the first ``--private`` on private facts (leak), in file order, written as
a JSONL the influence run reads (``--data``) with the bundled datastore's documents
(``--datastore``) and classes (``--classes``), both under ``ctxleak/data/demo/datastore``.

    python bench/datastore_subset.py OUT.jsonl [--private 64]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import ctxleak

QUESTIONS = Path(ctxleak.__file__).parent / "data" / "demo" / "datastore" / "questions.jsonl"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--private", type=int, default=64, help="private-fact questions")
    args = parser.parse_args()
    if args.out.exists():
        raise SystemExit(f"{args.out} exists: give a new file")
    rows = [json.loads(line) for line in QUESTIONS.read_text(encoding="utf-8").splitlines()]
    private = [r for r in rows if r["fact"] == "private"][:args.private]
    kept = {id(r) for r in private} | {id(r) for r in rows if r["fact"] == "common"}
    chosen = [r for r in rows if id(r) in kept]
    args.out.write_text("".join(json.dumps(r) + "\n" for r in chosen), encoding="utf-8")
    print(f"{args.out}: {len(chosen)} questions ({len(chosen) - len(private)} common, "
          f"{len(private)} private)")


if __name__ == "__main__":
    main()
