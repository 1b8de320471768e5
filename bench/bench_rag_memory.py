"""Whole-run peak memory of a query-log audit as the log grows: 1,000 and 10,000 logged turns ×
5 retrieved documents, passages scored one by one (leave-one-out), the control on.

For each log size it prints, per phase of the run, the peak Python memory (tracemalloc, MiB)
and the peak resident set size (RSS high-water mark, MiB; reset at each phase's start through
``/proc/self/clear_refs``, so each figure is that phase's own), and the whole run's. The phases:
``measure`` (scoring every turn, rows appended to ``samples.jsonl``), ``summarize`` (the
method's summary and the ledger per document), ``result`` (the Result, its figures and
``results.json``) and ``report`` (``report.html``).

The model is the tiny in-process Llama of ``tests/helpers/tiny_models.py`` (random weights, a
word-level vocabulary): what it scores is meaningless, but the records have the shape and the
sizes of a real run's (about 24 response tokens, 5 passages, the control's token influences).

Times on this machine (2 shared cores, tracemalloc on, which slows scoring about twice): 1,000
turns scored take 2 to 3 minutes, 10,000 about 20. To stay near 10 minutes, score the large
log once and measure it with ``--reuse``: ``--reuse FOLDER`` resumes a copy of a run folder
this benchmark wrote (``run-N`` under ``--keep DIR``) with ``limit=N``, so nothing is scored
again and ``measure`` is reading the stored rows back (the phases after it are the run's own);
resuming 10,000 turns takes 2 to 4 minutes. ``--default`` scores with the default model
instead (give ``--turns 1000``: about 1 s a turn on this CPU).

``--served`` scores the logged answers through the served backend (``ctxleak.serve``): the
benchmark starts the fast tier's fake OpenAI-compatible server (vLLM's dialect,
``tests/helpers/fake_server.py``) on the tiny model in a process of its own, so the figures are
the auditing process's alone: the HTTP client, the records and the summary, without the model.
The model's own memory is a constant of the server, whatever the log's length. Give it
``--min-new-tokens 0``: the fake server has no prefix cache (vLLM has one), so each answer
position where EOS is masked (the first 10 by default) costs it one more forward pass over the
whole prompt (40 turns: 34.6 s against 7.2 s); the records keep the same shape and sizes.

    python bench/bench_rag_memory.py [--turns 1000,10000] [--default] [--keep DIR]
    python bench/bench_rag_memory.py --turns 10000 --keep DIR     # once: about 20 minutes
    python bench/bench_rag_memory.py --reuse DIR/run-10000 --turns 1000,10000
    python bench/bench_rag_memory.py --parse --turns 1000,10000   # the log alone: seconds
    python bench/bench_rag_memory.py --served --min-new-tokens 0 --turns 1000,10000

Run it on another checkout's source with ``PYTHONPATH=/path/to/src`` (main's figures were
measured that way).
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections import deque
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import ctxleak  # noqa: E402
from ctxleak.methods.influence.method import InfluenceMethod  # noqa: E402
from ctxleak.results.base import Result  # noqa: E402

PHASES = ("measure", "summarize", "result", "report")
NAMES = ("the doctor", "the patient", "the report", "the news", "the city", "the country")
FACTS = ("is in paris", "is in rome", "was in berlin", "was for madrid", "is on the phone",
         "said yes to the question", "is the capital of italy", "was on the email")


def log_rows(n: int, per_turn: int = 5, n_docs: int = 200, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` logged turns in the tiny model's vocabulary: a query, ``per_turn`` retrieved
    documents (ids, texts) from a corpus of ``n_docs``, and a logged answer that repeats one of
    them (about 20 tokens)."""
    rng = random.Random(seed)
    corpus = []
    for k in range(n_docs):
        words = " ".join(f"{rng.choice(NAMES)} {rng.choice(FACTS)} ." for _ in range(2))
        corpus.append({"id": f"doc-{k}", "text": words, "source": f"kb/{k % 7}.md"})
    rows = []
    for t in range(n):
        docs = rng.sample(corpus, per_turn)
        target = docs[rng.randrange(per_turn)]["text"]
        rows.append({"id": f"turn-{t}", "query": "what is the news of the doctor ?",
                     "documents": docs, "response": f"yes , {target} and {target}"})
    return rows


class Phases:
    """Peak tracemalloc and RSS per phase: :meth:`enter` closes the phase running and opens
    the next (``reset_peak`` and a reset of the kernel's RSS high-water mark)."""

    def __init__(self) -> None:
        self.python: dict[str, float] = {}
        self.rss: dict[str, float] = {}
        self.seconds: dict[str, float] = {}
        self.current: str | None = None
        self.t0 = 0.0

    def enter(self, phase: str | None) -> None:
        if self.current is not None:
            self.python[self.current] = max(self.python.get(self.current, 0.0),
                                            tracemalloc.get_traced_memory()[1] / 2**20)
            self.rss[self.current] = max(self.rss.get(self.current, 0.0), rss_peak())
            self.seconds[self.current] = (self.seconds.get(self.current, 0.0)
                                          + time.perf_counter() - self.t0)
        self.current = phase
        if phase is not None:
            tracemalloc.reset_peak()
            reset_rss_peak()
            self.t0 = time.perf_counter()


def rss_peak() -> float:
    """This process's RSS high-water mark since the last reset, MiB (VmHWM)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def reset_rss_peak() -> None:
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def patched(phases: Phases) -> list[tuple[Any, str, Any]]:
    """Wrap the functions at the phases' starts (``summarize`` opens the summary, its return
    the Result, its figures and ``results.json``; ``Result.render`` the report); returns what to
    restore."""
    saved = []

    def wrap(owner: Any, name: str, before: str, after: str | None) -> None:
        original = getattr(owner, name)
        saved.append((owner, name, original))

        def inner(*args: Any, **kwargs: Any) -> Any:
            phases.enter(before)
            out = original(*args, **kwargs)
            if after is not None:
                phases.enter(after)
            return out

        setattr(owner, name, inner)

    wrap(InfluenceMethod, "summarize", "summarize", "result")
    wrap(Result, "render", "report", None)
    return saved


def one_run(lm: Any, n: int, folder: Path, reuse: Path | None = None,
            log_turns: int = 10000, min_new_tokens: int | None = None) -> Phases:
    """One run over ``n`` turns in a new folder; with ``reuse``, a copy of that run folder
    (scored over the first turns of a ``log_turns`` log) resumed with ``limit=n``: nothing is
    scored again, so ``measure`` is reading the stored rows back."""
    output = folder / f"run-{n}"
    if reuse is not None:
        shutil.copytree(reuse, output)
    rows = log_rows(log_turns if reuse is not None else n)
    gc.collect()
    phases = Phases()
    saved = patched(phases)
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0] / 2**20
    try:
        phases.enter("measure")
        result = ctxleak.influence(lm, rows, max_new_tokens=24, temperature=1.0,
                                   min_new_tokens=min_new_tokens,
                                   progress=False, output=str(output),
                                   **({"resume": True, "limit": n} if reuse else {}))
        phases.enter(None)
    finally:
        tracemalloc.stop()
        for owner, name, original in saved:
            setattr(owner, name, original)
    assert result is not None and len(result.records) == n
    phases.python = {k: v - base for k, v in phases.python.items()}
    return phases


def fake_server(tok_dir: str) -> None:
    """Run the fake vLLM server on the tiny model until stdin closes (``--fake-server``): print
    its URL once it listens. The model is fitted to the served backend's probe text, as the
    served tests' is, so that the check before a run accepts it."""
    from helpers.fake_server import FakeVLLM, plausible
    from helpers.tiny_models import tiny_llama

    from ctxleak.engine.served import PROBE_TEXT

    torch.set_num_threads(1)
    tiny = plausible(tiny_llama(seed=3, vocab_extra=0), PROBE_TEXT)
    tiny.tokenizer.save_pretrained(tok_dir)
    server = FakeVLLM(tiny, never=(0, 1, 3))  # <pad>, <bos>, <unk>: never sampled
    server.requests = deque(maxlen=0)  # keeps no request body
    with server:
        print(server.url, flush=True)
        sys.stdin.read()


def served_tiny(scratch: Path) -> tuple[Any, subprocess.Popen[str]]:
    """The tiny model served by :func:`fake_server` in a process of its own, as ``serve``'s LM,
    and that process (stop it by closing its stdin)."""
    from ctxleak.engine.served import serve

    tok_dir = scratch / "served-tokenizer"
    proc = subprocess.Popen([sys.executable, __file__, "--fake-server", str(tok_dir)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    if not url:
        raise SystemExit(f"the fake server did not start (exit code {proc.wait()})")
    return serve("tiny", url, tokenizer=str(tok_dir)), proc


def traced(make: Any) -> tuple[Any, float, float, float]:
    """(what ``make()`` returns, MiB it still holds, its peak MiB, seconds), by tracemalloc."""
    gc.collect()
    tracemalloc.start()
    t0 = time.perf_counter()
    out = make()
    seconds = time.perf_counter() - t0
    kept, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return out, kept / 2**20, peak / 2**20, seconds


def parse_only(sizes: list[int]) -> None:
    """The log as a JSONL file, read into the run's examples: what ctxleak holds of it until the
    run ends and its peak while reading, against the log's lines kept as parsed JSON (the naive
    way to hold a log). The corpus is 200 documents, each retrieved again and again."""
    from ctxleak.methods.influence.data import load_examples

    print("turns | held as parsed JSON (MiB) | ctxleak's examples: held (MiB, bytes a turn), "
          "peak while reading (MiB), s | held / parsed JSON")
    with tempfile.TemporaryDirectory() as scratch:
        for n in sizes:
            path = Path(scratch) / f"log-{n}.jsonl"
            path.write_text("".join(json.dumps(row) + "\n" for row in log_rows(n)))
            naive, naive_kept, _, _ = traced(
                lambda p=path: [json.loads(line) for line in p.open(encoding="utf-8")])
            del naive
            examples, kept, peak, seconds = traced(lambda p=path: load_examples(str(p)))
            assert len(examples) == n
            del examples
            print(f"{n} | {naive_kept:.1f} | {kept:.1f} ({kept * 2**20 / n:.0f} B), "
                  f"{peak:.1f}, {seconds:.1f} | {kept / naive_kept:.2f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", default="1000,10000")
    ap.add_argument("--default", action="store_true", help="the default model (slow)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: fastest for the "
                    "tiny model on a shared CPU)")
    ap.add_argument("--reuse", type=Path, help="resume a copy of this run folder (a run of this "
                    "benchmark over --log-turns turns, scored once) with limit=N instead of "
                    "scoring N turns: the phases after measuring at sizes too slow to score")
    ap.add_argument("--keep", help="write the run folders here (kept), not in a temporary one")
    ap.add_argument("--log-turns", type=int, default=10000, help="the log the --reuse folder "
                    "was scored over")
    ap.add_argument("--served", action="store_true", help="score through the served backend: "
                    "the tiny model in a fake vLLM server, in a process of its own")
    ap.add_argument("--min-new-tokens", type=int, help="EOS masked at the answers' first N "
                    "positions (default: the run's, 10)")
    ap.add_argument("--fake-server", metavar="TOKENIZER_DIR", help=argparse.SUPPRESS)
    ap.add_argument("--parse", action="store_true", help="only the log read from a JSONL file: "
                    "what the run holds of it, against the lines as parsed JSON (seconds)")
    args = ap.parse_args()
    if args.fake_server:
        fake_server(args.fake_server)
        return
    if args.parse:
        parse_only([int(x) for x in args.turns.split(",")])
        return
    torch.set_num_threads(args.threads)
    server = None
    with tempfile.TemporaryDirectory() as scratch:
        if args.served:
            lm, server = served_tiny(Path(scratch))
        elif args.default:
            from _common import load_default

            lm = load_default()
        else:
            from helpers.tiny_models import tiny_llama

            lm = tiny_llama()
        print(f"# ctxleak from {Path(ctxleak.__file__).parent}; model {lm.describe()}"
              + (f"; resuming copies of {args.reuse}" if args.reuse else ""))
        print("turns | phase | peak Python (tracemalloc, MiB, above the start) | peak RSS (MiB) "
              "| s")
        try:
            measure_all(lm, args, Path(scratch))
        finally:
            if server is not None:
                assert server.stdin is not None
                server.stdin.close()
                server.wait(timeout=60)


def measure_all(lm: Any, args: argparse.Namespace, scratch: Path) -> None:
    """Every size of ``--turns``, after a warm-up run of 20 turns, printed as measured."""
    tmp = Path(args.keep) if args.keep else scratch
    one_run(lm, 20, scratch, min_new_tokens=args.min_new_tokens)  # warm-up: imports, figures
    for n in (int(x) for x in args.turns.split(",")):
        got = one_run(lm, n, tmp, args.reuse, args.log_turns, args.min_new_tokens)
        for phase in PHASES:
            print(f"{n} | {phase} | {got.python.get(phase, 0.0):.1f} | "
                  f"{got.rss.get(phase, 0.0):.0f} | {got.seconds.get(phase, 0.0):.1f}")
        print(f"{n} | whole run | {max(got.python.values()):.1f} | "
              f"{max(got.rss.values()):.0f} | {sum(got.seconds.values()):.1f}", flush=True)

if __name__ == "__main__":
    main()
