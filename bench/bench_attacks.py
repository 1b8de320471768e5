"""Black-box attack benchmark, one run: the extraction attack's questions (the composite prompts
of "The Good and The Bad: Exploring Privacy Issues in Retrieval-Augmented Generation" over the
bundled Northwind corpus) sent to one OpenAI-compatible chat server three ways, with the same
concurrency and the same ``max_tokens``:

1. plain: the same number of chat requests in plain httpx, one thread per request in flight
   (the bare cost of asking);
2. target: :class:`ctxleak.targets.endpoint.ChatEndpointTarget` answering the questions (its
   client, rate limit and retries);
3. audit: the whole ``ctxleak.attack_extract`` run through that target (plan, journal, every
   answer matched against every document, summary, report).

Prints queries/s of each and the audit's own overhead: (audit − plain) / audit, in % of the
audit's wall time (the issue's target: ≤ 10 %). Each timing is the best of ``--repeat``
interleaved rounds; the audit runs in a fresh folder each round, so its journal answers none.

    python bench/bench_attacks.py [--server-url URL --served-model NAME] [--queries 20]
        [--concurrency 4] [--max-tokens 64] [--repeat 2]
    python bench/bench_attacks.py --fake      # a scripted fake chat server (no model, no vLLM)

Without ``--server-url`` (and without ``--fake``) a vLLM server is started on the default
model's folder (``<repo>/.venv-vllm`` or ``$CTXLEAK_VLLM_PYTHON``; tests/helpers/vllm_server.py)
and stopped at the end.

``--table`` measures instead what docs/attacks.md reports: both attacks against the bundled
Northwind app answered by the default model in process, under no mitigation (λ = 1), λ = 0.5
and bounded CID at ε = 2 and 8 (T = 0.5 by default, seed 0), one markdown row per setting:

    python bench/bench_attacks.py --table [--max-new-tokens 48] [--temperature 0.5] [--device cuda]

``--datastore`` measures the membership attacks on the bundled datastore instead
(``demo-datastore``, 288 documents, half held out as non-members: enough for a perfect attack to
show ε above 2 nats at 95 %), against the same app answered by the default model in process,
without a mitigation and under bounded CID at ε = 2: one row per setting and attack with its AUC
and 95 % interval, TPR at 1 % FPR, the ε lower bound, the most this many documents could show,
and the claim:

    python bench/bench_attacks.py --datastore [--attacks direct,mask] [--max-new-tokens 16]
        [--unmitigated-only] [--temperature 0.5] [--seed 0]

``--extract-datastore QUERIES`` measures extraction on the same datastore (all 288 documents in
the index): the fixed untargeted anchors against the adaptive crawl at QUERIES each, the
documents extracted after a quarter, half and all of them, and both coverage curves in
``coverage.png``; ``--simulated`` asks a simulated app that copies the first 40 words of its
best document instead of the model (seconds, no model):

    python bench/bench_attacks.py --extract-datastore 288 [--max-new-tokens 48] [--simulated]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
from _common import load_default, timed_rounds, vllm_server_for

import ctxleak
from ctxleak.api.attacks import extract_questions
from ctxleak.targets.endpoint import ChatEndpointTarget

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def plain_requests(base: str, model: str, questions: list[str], max_tokens: int,
                   concurrency: int) -> list[str]:
    """The questions as bare chat requests to ``base`` (the ``/v1`` address), ``concurrency``
    in flight."""
    with httpx.Client(base_url=base, timeout=600) as client:
        def ask(q: str) -> str:
            r = client.post("/chat/completions", json={
                "model": model, "messages": [{"role": "user", "content": q}],
                "max_tokens": max_tokens, "temperature": 0.0})
            r.raise_for_status()
            return str(r.json()["choices"][0]["message"]["content"])

        with ThreadPoolExecutor(concurrency) as pool:
            return list(pool.map(ask, questions))


def fake_server(stack: ExitStack) -> tuple[str, str]:
    """A scripted OpenAI-compatible chat server (tests/helpers/fake_chat.py: no model, each
    answer "answer: " + the question), its ``/v1`` address: what it measures is the cost of
    asking and of the audit, not of a model."""
    from helpers.fake_chat import fake_chat

    server = stack.enter_context(fake_chat())
    return server.url, "fake"


SETTINGS = {"λ = 1 (no mitigation)": {}, "λ = 0.5": {"lambda_": 0.5},
            "bounded ε = 2": {"bounded_eps": 2.0}, "bounded ε = 8": {"bounded_eps": 8.0}}


def table(max_new_tokens: int, device: str, out: Path, temperature: float) -> None:
    """The docs' table: extraction and membership on the default model, per setting, every
    answer sampled at ``temperature`` (bounded CID's guarantee holds for sampled tokens)."""
    lm = ctxleak.load_model("default", device=device)
    print("| setting | documents extracted verbatim (of 15) | near-verbatim (of 15) | values "
          "carried out | best membership AUC [95 % CI] | ε lower bound (nats, 95 %) | ε "
          "claimed per document |")
    print("|---|---|---|---|---|---|---|")
    for k, (label, setting) in enumerate(SETTINGS.items()):
        target = ctxleak.attack_target(rag_demo=True, model=lm, max_new_tokens=max_new_tokens,
                                       temperature=temperature, **setting)
        ex = ctxleak.attack_extract(target, "demo-rag", output=str(out / f"extract-{k}"),
                                    progress=False)
        mem = ctxleak.attack_membership(target, "demo-rag", output=str(out / f"member-{k}"),
                                        progress=False)
        attacks = {a: v for a, v in mem.summary["attacks"].items() if "auc" in v}
        best = mem.summary.get("best")
        auc = attacks[best] if best else None
        eps = max((v["eps"]["eps_lower"] for v in attacks.values()), default=None)
        e = ex.summary
        print(f"| {label} | {e['documents_verbatim']} | {e['documents_near_verbatim']} | "
              f"{e['values_carried']} | "
              + (f"{best} {auc['auc']:.2f} [{auc['auc_ci']['low']:.2f}, "
                 f"{auc['auc_ci']['high']:.2f}]" if auc else "—")
              + f" | {eps} | {mem.summary.get('eps_claimed') or 'none'} |", flush=True)
    print(f"# run folders in {out}")


DATASTORE_SETTINGS = {"λ = 1 (no mitigation)": {}, "bounded ε = 2": {"bounded_eps": 2.0}}


def datastore_table(attacks: list[str], max_new_tokens: int, device: str, out: Path,
                    temperature: float, settings: list[str] | None = None, seed: int = 0
                    ) -> None:
    """Membership on ``demo-datastore`` (module docstring): a row per setting and attack;
    ``settings``: the labels of :data:`DATASTORE_SETTINGS` to run (None: all); ``seed``: the
    run seed, which draws the held-out half and the sampled tokens."""
    lm = ctxleak.load_model("default", device=device)
    chosen = {k: v for k, v in DATASTORE_SETTINGS.items() if settings is None or k in settings}
    print("| setting | attack | AUC [95 % CI] | TPR at 1 % FPR | ε lower bound (nats) | most "
          "ε these documents could show | ε claimed per document | queries | minutes |")
    print("|---|---|---|---|---|---|---|---|---|")
    for label, setting in chosen.items():
        k = list(DATASTORE_SETTINGS).index(label)
        target = ctxleak.attack_target(rag_demo=True, model=lm, max_new_tokens=max_new_tokens,
                                       temperature=temperature, run={"seed": seed}, **setting)
        start = time.perf_counter()
        mem = ctxleak.attack_membership(target, "demo-datastore", attacks=attacks,
                                        output=str(out / f"datastore-{k}-{'-'.join(attacks)}"),
                                        progress=False, seed=seed)
        minutes = (time.perf_counter() - start) / 60
        summary = mem.summary
        for name, v in summary["attacks"].items():
            if "auc" not in v:
                print(f"| {label} | {name} | {v.get('skipped', '—')} | | | | | | |")
                continue
            tpr = v["tpr_at_fpr"][0]  # the first target FPR: 1 %
            tpr_text = (f"{tpr['tpr']:.2f} [{tpr['tpr_ci'][0]:.2f}, {tpr['tpr_ci'][1]:.2f}] "
                        f"({tpr['tp']}/{tpr['n_in']}, {tpr['fp']}/{tpr['n_out']} FP)")
            print(f"| {label} | {name} | {v['auc']:.2f} [{v['auc_ci']['low']:.2f}, "
                  f"{v['auc_ci']['high']:.2f}] | {tpr_text} | {v['eps']['eps_lower']:.2f} | "
                  f"{v['eps']['eps_max_showable']:.2f} | {summary.get('eps_claimed') or 'none'} "
                  f"| {summary.get('queries_sent', '?')} | {minutes:.1f} |", flush=True)
        print(f"# {label}: {summary['verdict']['text']}", flush=True)
    print(f"# run folders in {out}")


def copying_app(words: int = 40) -> Any:
    """A simulated app over ``demo-datastore``, no model: the bundled BM25 retriever, and an
    answer that copies the first ``words`` words of the best document."""
    from ctxleak.methods.attacks.attack_method import attack_documents
    from ctxleak.targets.base import FunctionTarget
    from ctxleak.targets.rag import RAGApp

    docs = attack_documents("demo-datastore")
    app = RAGApp([{"id": d.id, "text": d.text} for d in docs], answerer=None,  # type: ignore[arg-type]
                 top_k=3)  # retrieval only: the target answers from the best document itself
    return FunctionTarget(lambda q: " ".join(app.retrieve(q)[0].text.split()[:words]),
                          f"copies the first {words} words of its best document")


def extraction_curves(queries: int, max_new_tokens: int, device: str, out: Path,
                      temperature: float, seed: int = 0, simulated: bool = False) -> None:
    """Extraction on ``demo-datastore`` (all 288 documents in the app's index), the default
    model in process without a mitigation (``simulated``: :func:`copying_app` instead): the
    fixed untargeted anchors against the adaptive crawl at the same ``queries``; a row per mode
    with the coverage at a quarter, half and all of the queries, and both curves on one figure
    (``out/coverage.png``)."""
    from ctxleak.methods.attacks.attack_method import attack_documents
    from ctxleak.report.attacks import coverage_plot

    total = len(attack_documents("demo-datastore"))
    if simulated:
        target = copying_app()
    else:
        lm = ctxleak.load_model("default", device=device)
        target = ctxleak.attack_target(rag_demo=True, model=lm, max_new_tokens=max_new_tokens,
                                       temperature=temperature, run={"seed": seed})
    marks = sorted({max(1, queries // 4), max(1, queries // 2), queries})
    print("| mode | " + " | ".join(f"documents extracted after {m} queries" for m in marks)
          + " | values carried out | queries to 50 % | minutes |")
    print("|---|" + "---|" * (len(marks) + 3))
    curves = {}
    for mode, adaptive in (("fixed untargeted anchors", False), ("adaptive crawl", True)):
        start = time.perf_counter()
        folder = out / ("extract-adaptive" if adaptive else "extract-fixed")
        run = ctxleak.attack_extract(target, "demo-datastore", kind="untargeted",
                                     queries=queries, adaptive=adaptive, seed=seed,
                                     output=str(folder), progress=False)
        minutes = (time.perf_counter() - start) / 60
        coverage = run.summary["coverage"]
        curves[mode] = coverage
        at = {int(q): share for q, share in coverage}
        shares = [at.get(m, coverage[-1][1]) for m in marks]
        cells = [f"{round(x * total)} ({100 * x:.1f} %)" for x in shares]
        print(f"| {mode} | " + " | ".join(cells) + f" | {run.summary['values_carried']} | "
              f"{run.summary['queries_to_50'] or 'not reached'} | {minutes:.1f} |", flush=True)
    (out / "coverage.png").write_bytes(coverage_plot(curves))
    print(f"# run folders and coverage.png in {out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server-url", default=None)
    ap.add_argument("--served-model", default=None)
    ap.add_argument("--fake", action="store_true", help="a scripted fake chat server")
    ap.add_argument("--queries", type=int, default=20, help="composite prompts of each kind")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=2, help="best of N interleaved rounds")
    ap.add_argument("--table", action="store_true", help="the docs' table (module docstring)")
    ap.add_argument("--max-new-tokens", type=int, default=48, help="--table: tokens per answer")
    ap.add_argument("--device", default="auto", help="--table: the model's device")
    ap.add_argument("--temperature", type=float, default=0.5,
                    help="--table: the sampling temperature of every answer")
    ap.add_argument("--out", default=None, help="--table: keep the run folders here")
    ap.add_argument("--datastore", action="store_true",
                    help="membership on demo-datastore (module docstring)")
    ap.add_argument("--attacks", default="direct,mask", help="--datastore: the attacks")
    ap.add_argument("--unmitigated-only", action="store_true",
                    help="--datastore: the setting without a mitigation only")
    ap.add_argument("--extract-datastore", type=int, default=None, metavar="QUERIES",
                    help="extraction on demo-datastore, fixed against adaptive, at QUERIES")
    ap.add_argument("--simulated", action="store_true",
                    help="--extract-datastore: a simulated app that copies its best document")
    ap.add_argument("--seed", type=int, default=0,
                    help="--datastore: the run seed (the held-out half, the sampled tokens)")
    args = ap.parse_args()
    if args.extract_datastore:
        out = Path(args.out or tempfile.mkdtemp(prefix="attack-crawl-"))
        extraction_curves(args.extract_datastore, args.max_new_tokens, args.device, out,
                          args.temperature, args.seed, args.simulated)
        return
    if args.datastore:
        out = Path(args.out or tempfile.mkdtemp(prefix="attack-datastore-"))
        datastore_table(args.attacks.split(","), args.max_new_tokens, args.device, out,
                        args.temperature,
                        [next(iter(DATASTORE_SETTINGS))] if args.unmitigated_only else None,
                        args.seed)
        return
    if args.table:
        out = Path(args.out or tempfile.mkdtemp(prefix="attack-table-"))
        table(args.max_new_tokens, args.device, out, args.temperature)
        return
    with ExitStack() as stack:
        if args.fake:
            url, name = fake_server(stack)
        else:
            server, url, name = vllm_server_for(load_default(), args.server_url,
                                                args.served_model)
            if server is not None:
                stack.callback(server.stop)
            url, name = url.rstrip("/") + "/v1", name or "smollm2-135m"
        questions = extract_questions("demo-rag", queries=args.queries)
        target = ChatEndpointTarget(url, name, max_tokens=args.max_tokens,
                                    concurrency=args.concurrency)
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        rounds = iter(range(10**6))
        times = timed_rounds({
            "plain": lambda: plain_requests(url, name, questions, args.max_tokens,
                                            args.concurrency),
            "target": lambda: target.answer(questions),
            "audit": lambda: ctxleak.attack_extract(target, "demo-rag", queries=args.queries,
                                                    output=str(tmp / f"run{next(rounds)}"),
                                                    progress=False)}, repeat=args.repeat)
        n = len(questions)
        print(f"# bench_attacks: {n} questions, {args.concurrency} in flight, max_tokens "
              f"{args.max_tokens}, server {url} ({'scripted fake' if args.fake else name}); "
              f"best of {args.repeat}")
        for key, (seconds, _) in times.items():
            print(f"{key:7s} {seconds:8.2f} s  {n / seconds:8.2f} queries/s")
        audit, plain = times["audit"][0], times["plain"][0]
        print(f"audit overhead: {100 * (audit - plain) / audit:.1f} % of the audit's wall time "
              f"(target ≤ 10 %)")


if __name__ == "__main__":
    main()
