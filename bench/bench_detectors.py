"""Detectors of secrets and personal data: recall per type before and after, precision, time.

BEFORE: what ``--redact`` used until now (:func:`ctxleak.sensitive.detect.redaction_spans`:
find_pii, find_amounts, find_names). AFTER: :func:`ctxleak.sensitive.find_sensitive`
(Presidio with spaCy, detect-secrets, and the same phone/address/e-mail/amount finders).

A labelled value counts as found when the detected spans (any type) cover every character of
it that is not a space: what redaction needs. Precision: the share of detected spans that
overlap a labelled value (on the held-out set, where every value is labelled; dates without a
year and bare years are not labelled there, so they count against it).

Data: bench/data/detectors_heldout.jsonl (texts written for this benchmark, never used to write
the detectors), the bundled RAG example's documents with their ground truth
(src/ctxleak/data/rag_audit/, or ``--rag-dir``), and the demo sets (no labels: spans counted).
Time: milliseconds per text, every text detected once on a cold cache, after the engines have
loaded (their load is timed apart), against the RAG audit's time per turn on the default model
(docs/benchmarks.md: 0.28 turns/s on a 2-core CPU; a turn scores one answer over 5 documents, so
its detectors read 6 texts).

    python bench/bench_detectors.py [--rag-dir DIR] [--audit-turns-per-s 0.28]

ADVERSARIAL (``--adversarial``): processor seconds to detect each adversarial shape (digits, digits and
spaces, a long run of spaces, dates, names, "salary" or "password" repeated, a document holding a
PDF table's spaces) at 2,000, 8,000 and 32,000 characters (``--sizes``), one text at a time on a
cold cache after the engines have loaded, and the ratio time(32k) / time(8k): about 4 when
detection is linear in the text's length, 16 when it is quadratic.

    python bench/bench_detectors.py --adversarial [--sizes 2000 8000 32000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

from ctxleak import sensitive
from ctxleak.run.records import demo_path
from ctxleak.sensitive import detect

ROOT = Path(__file__).resolve().parents[1]
HELDOUT = ROOT / "bench" / "data" / "detectors_heldout.jsonl"
RAG_DIRS = (ROOT / "src/ctxleak/data/demo/rag_audit", ROOT / "src/ctxleak/data/rag_audit")


def _covered(spans: list[tuple[int, int]], start: int, end: int, text: str) -> bool:
    return all(text[i].isspace() or any(a <= i < b for a, b in spans) for i in range(start, end))


def _labelled(rows: list[dict[str, Any]]) -> list[tuple[str, str, list[tuple[str, int, int]]]]:
    out = []
    for row in rows:
        text, labels = row["text"], []
        for lab in row["spans"]:
            start = text.find(lab["value"])
            if start < 0:
                raise SystemExit(f"{row['id']}: {lab['value']!r} is not in its text")
            labels.append((lab["type"], start, start + len(lab["value"])))
        out.append((row["id"], text, labels))
    return out


def score(name: str, items: list[tuple[str, str, list[tuple[str, int, int]]]]) -> None:
    """Print recall per type and precision, before and after."""
    finders = {"before": lambda t: [(s.start, s.end) for s in detect.redaction_spans(t)],
               "after": lambda t: [(s.start, s.end) for s in sensitive.find_sensitive(t)]}
    print(f"\n{name}: {len(items)} texts, {sum(len(x[2]) for x in items)} labelled values")
    found: dict[str, Counter[str]] = {k: Counter() for k in finders}
    total: Counter[str] = Counter()
    hits: dict[str, list[int]] = {k: [0, 0] for k in finders}
    for _, text, labels in items:
        for key, finder in finders.items():
            spans = finder(text)
            for kind, a, b in labels:
                found[key][kind] += _covered(spans, a, b, text)
            hits[key][0] += sum(any(a < e and s < b for _, s, e in labels) for a, b in spans)
            hits[key][1] += len(spans)
        total.update(kind for kind, _, _ in labels)
    print(f"  {'type':<12} {'n':>4} {'recall before':>14} {'recall after':>13}")
    for kind in sorted(total):
        n = total[kind]
        print(f"  {kind:<12} {n:>4} {found['before'][kind] / n:>14.2f} "
              f"{found['after'][kind] / n:>13.2f}")
    n = sum(total.values())
    print(f"  {'all':<12} {n:>4} {sum(found['before'].values()) / n:>14.2f} "
          f"{sum(found['after'].values()) / n:>13.2f}")
    for key in finders:
        good, all_ = hits[key]
        print(f"  precision {key}: {good}/{all_} detected spans overlap a labelled value "
              f"({good / max(all_, 1):.2f})")


def rag_items(rag_dir: Path) -> list[tuple[str, str, list[tuple[str, int, int]]]]:
    """The RAG example's documents, labelled with its ground truth's values."""
    docs = {json.loads(line)["id"]: json.loads(line)["text"]
            for line in (rag_dir / "corpus.jsonl").read_text().splitlines() if line.strip()}
    truth = json.loads((rag_dir / "truth.json").read_text())
    labels: dict[str, list[tuple[str, int, int]]] = {d: [] for d in docs}
    for v in truth["values"]:
        text = docs[v["document"]]
        start = text.find(v["value"])
        if start >= 0 and v["type"] != "text":
            labels[v["document"]].append((v["type"], start, start + len(v["value"])))
    return [(d, docs[d], labs) for d, labs in labels.items()]


def counts(texts: list[str]) -> None:
    """Spans found in unlabelled texts, by type, before and after."""
    before = Counter(s.type for t in texts for s in detect.redaction_spans(t))
    after = Counter(s.type for t in texts for s in sensitive.find_sensitive(t))
    print(f"  before: {dict(sorted(before.items()))}\n  after:  {dict(sorted(after.items()))}")


def turn_timing(rag_dir: Path, turns_per_s: float) -> None:
    """Milliseconds of detectors per turn of the RAG example's log (its answer and its
    documents, the cache emptied before each turn: no document found before), against the
    audit's time per turn."""
    turns = [json.loads(line) for line in (rag_dir / "log.jsonl").read_text().splitlines()
             if line.strip()]
    spent = []
    for turn in turns:
        sensitive._find.cache_clear()
        t0 = time.perf_counter()
        for text in [turn["response"], *(d["text"] for d in turn["documents"])]:
            sensitive.find_sensitive(text)
        spent.append(time.perf_counter() - t0)
    mean = 1000 * sum(spent) / len(spent)
    turn_ms = 1000 / turns_per_s
    print(f"  the RAG example's log: {mean:.0f} ms of detectors per turn (answer and "
          f"{sum(len(t['documents']) for t in turns) / len(turns):.1f} documents, mean of "
          f"{len(turns)} turns, max {1000 * max(spent):.0f} ms) = {100 * mean / turn_ms:.1f} % "
          f"of an audited turn ({turn_ms:.0f} ms at {turns_per_s} turns/s)")


def timing(texts: list[str], turns_per_s: float, load: float) -> None:
    """Milliseconds per text on a cold cache (the engines loaded), against an audited turn."""
    sensitive._find.cache_clear()
    t0 = time.perf_counter()
    for t in texts:
        sensitive.find_sensitive(t)
    per_text = (time.perf_counter() - t0) / len(texts) * 1000
    t0 = time.perf_counter()
    for t in texts:
        detect.redaction_spans(t)
    before = (time.perf_counter() - t0) / len(texts) * 1000
    turn_ms = 1000 / turns_per_s
    print(f"\ntime: engines load once per process {load:.2f} s (first call)")
    print(f"  after  {per_text:.1f} ms per text ({len(texts)} texts, mean "
          f"{sum(map(len, texts)) / len(texts):.0f} characters); before {before:.1f} ms")
    print(f"  one audited turn (answer + 5 documents = 6 texts): {6 * per_text:.0f} ms of "
          f"detectors against {turn_ms:.0f} ms of audit at {turns_per_s} turns/s = "
          f"{100 * 6 * per_text / turn_ms:.1f} %")


#: texts built to make a detector's time grow faster than their length (the reliability issue's
#: shapes): a prefix, a unit repeated, a suffix (tests/sensitive/test_linear.py reads them too)
SHAPES = ROOT / "bench" / "data" / "adversarial_shapes.json"


def shape_text(shape: dict[str, str], n: int) -> str:
    """``shape``'s text of about ``n`` characters."""
    repeat = max(0, n - len(shape["prefix"]) - len(shape["suffix"])) // len(shape["unit"])
    return shape["prefix"] + shape["unit"] * repeat + shape["suffix"]


def adversarial(sizes: list[int], repeat: int = 1) -> None:
    """Seconds per text for each adversarial shape and size (the least of ``repeat`` runs), and
    time(largest) / time(the size before it). Processor time of this process
    (:func:`time.process_time`): on a CPU shared with other jobs, wall time says as much about
    them as about the detectors."""
    print(f"\nadversarial texts: processor seconds for one text (cold cache, engines loaded; "
          f"least of {repeat} run(s)); ratio = time({sizes[-1]:,}) / time({sizes[-2]:,}) "
          f"(linear: {sizes[-1] / sizes[-2]:.0f})")
    print(f"  {'shape':<24}" + "".join(f"{n:>10,}" for n in sizes) + f"{'ratio':>8}")
    for shape in json.loads(SHAPES.read_text()):
        name = shape["name"]
        spent = []
        for n in sizes:
            text = shape_text(shape, n)
            runs = []
            for _ in range(repeat):
                sensitive._find.cache_clear()
                t0 = time.process_time()
                sensitive.find_sensitive(text)
                runs.append(time.process_time() - t0)
            spent.append(min(runs))
        print(f"  {name:<24}" + "".join(f"{t:>10.2f}" for t in spent)
              + f"{spent[-1] / max(spent[-2], 1e-9):>8.1f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rag-dir", type=Path, default=next(
        (p for p in RAG_DIRS if (p / "truth.json").exists()), RAG_DIRS[0]))
    parser.add_argument("--audit-turns-per-s", type=float, default=0.28)
    parser.add_argument("--adversarial", action="store_true",
                        help="time the adversarial shapes only (see the module's docstring)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[2000, 8000, 32000],
                        help="characters per adversarial text (two sizes or more)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs per adversarial text; the least time is shown")
    args = parser.parse_args()
    t0 = time.perf_counter()
    sensitive.find_sensitive("Warm-up: Ada Lovelace, password: x9!Lk2pQ.")
    load = time.perf_counter() - t0
    if args.adversarial:
        if len(args.sizes) < 2:
            parser.error("--sizes takes two sizes or more")
        adversarial(args.sizes, max(1, args.repeat))
        return
    rows = [json.loads(line) for line in HELDOUT.read_text().splitlines() if line.strip()]
    held = _labelled(rows)
    score("held-out set (bench/data/detectors_heldout.jsonl)", held)
    texts = [t for _, t, _ in held]
    if (args.rag_dir / "truth.json").exists():
        rag = rag_items(args.rag_dir)
        score(f"RAG example documents ({args.rag_dir})", rag)
        texts += [t for _, t, _ in rag]
    else:
        print(f"\n(no RAG example at {args.rag_dir}: pass --rag-dir)")
    for name in ("rag_qa.jsonl", "influence.jsonl"):
        demo = [json.loads(line)["context"] for line in open(demo_path(name)) if line.strip()]
        print(f"\ndemo set {name}: {len(demo)} contexts (unlabelled), spans found by type")
        counts(demo)
    timing(texts, args.audit_turns_per_s, load)
    if (args.rag_dir / "log.jsonl").exists():
        turn_timing(args.rag_dir, args.audit_turns_per_s)


if __name__ == "__main__":
    main()
