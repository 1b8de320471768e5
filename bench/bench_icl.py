"""ICLInf benchmark (SPEC §4, §8): leave-one-out scoring of in-context exemplars on the default
model and the demo task, with shared-prefix KV reuse (ctxleak) against scoring every prompt in
full (``reuse_prefix=False``), in the same run, for 4 and 8 shots. Also prints the ratio to the
floor: the token positions that must be computed (the full prompt, and each leave-one-out prompt
from its removed exemplar on) at the speed of one large batch.

    python bench/bench_icl.py [--shots 4,8] [--queries 8] [--repeat 2] [--calibrate] [--threads N]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from _common import device_line, load_default, throughput

from ctxleak.engine.forward import common_prefix_length
from ctxleak.methods.icl import (
    ICLConfig,
    LabelScorer,
    PromptBuilder,
    draw_exemplars,
    load_task,
    query_prompts,
    query_record,
    score_prompts,
)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shots", default="4,8")
    ap.add_argument("--queries", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=2, help="passes over the queries; best kept")
    ap.add_argument("--calibrate", action="store_true", help="add the content-free prompts")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch threads (default: torch's choice; 1 steadies a shared machine)")
    args = ap.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    lm = load_default()
    lm.use_chat_template = False  # the CLI's default for icl
    task = load_task("demo")
    config = ICLConfig(calibration=(True,) if args.calibrate else (False,))
    builder = PromptBuilder(lm, task.fmt, task.labels)
    scorer = LabelScorer(lm, task.labels)
    rows = []
    for n in [int(s) for s in args.shots.split(",")]:
        sets = []
        for j in range(args.queries):
            picked = draw_exemplars(len(task.train), n, 0, j)
            ex = [(i, task.train[i].text, task.train[i].label) for i in picked]
            sets.append((j, query_prompts(builder, ex, task.test[j].text,
                                          calibrate=config.calibrated)))
        score_prompts(scorer, sets[0][1], config, reuse_prefix=False)  # warm-up
        best = {True: float("inf"), False: float("inf")}
        err = 0.0
        for _ in range(args.repeat):
            total = {True: 0.0, False: 0.0}
            for j, qp in sets:  # alternate the two ways query by query: same machine load
                out = {}
                for reuse in ((True, False) if j % 2 == 0 else (False, True)):
                    t0 = time.perf_counter()
                    scores = score_prompts(scorer, qp, config, reuse_prefix=reuse)
                    total[reuse] += time.perf_counter() - t0
                    out[reuse] = query_record(scores, config, task.labels,
                                              task.test[j].label_index)
                for key in out[True]:
                    err = max(err, float(np.max(np.abs(
                        np.subtract(out[True][key]["loss_by_position"],
                                    out[False][key]["loss_by_position"])))))
            for reuse in total:
                best[reuse] = min(best[reuse], total[reuse])
        prompts = [qp.ordered() for _, qp in sets]
        tokens = sum(len(p) for ps in prompts for p in ps)
        needed = sum(len(ps[0]) + sum(len(p) - min(common_prefix_length(p, ps[0]), len(p) - 1)
                                      for p in ps[1:]) for ps in prompts)
        length = int(np.mean([len(ps[0]) for ps in prompts]))
        tps = throughput(lm, length=length, batch=max(1, 4096 // length))
        floor = needed / tps
        m = len(sets)
        rows.append((n, best[True] / m, best[False] / m, tokens / needed, floor / m, err, length,
                     tps))
    print(f"# bench_icl on {device_line(lm)}; demo task, {args.queries} queries, "
          f"{'with' if args.calibrate else 'without'} calibration; floor = needed positions at "
          "the speed of one large batch of prompts of the same length")
    print("| ICLInf leave-one-out | prompt tokens | ctxleak (prefix reuse) s/query | "
          "full scoring s/query | speed-up | token saving | floor s/query (tok/s) | ctxleak / floor | "
          "max |Δ loss| |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n, t_reuse, t_full, saving, floor, err, length, tps in rows:
        print(f"| {n} shots | {length} | {t_reuse:.3f} | {t_full:.3f} | "
              f"{t_full / t_reuse:.2f}x | {saving:.2f}x | {floor:.3f} ({tps:.0f}) | "
              f"{t_reuse / floor:.2f}x | {err:.1e} |")


if __name__ == "__main__":
    main()
