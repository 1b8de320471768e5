"""Can the bundled setup choose a defence? The default model on ``demo-datastore`` under the
built-in ``short-answer`` chat prompt: utility at λ = 1 on the questions one document answers,
and, on the questions many documents answer (the organisation's common knowledge), what the DP
votes release from their own voters (not the no-retrieval fallback) and how often DP-RAG's
private retrieval keeps a document, each mechanism retrieving from the whole datastore (288
documents) as its paper defines it.

An answer is right when the SQuAD-normalised reference appears in it as whole words
(:func:`ctxleak.methods.tradeoff.utility.answer_match`).

    python bench/bench_defences.py [--private 32] [--common 30] [--shards 32] [--tokens 32]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

from ctxleak.engine.models import load_model
from ctxleak.methods.influence.data import load_log
from ctxleak.methods.influence.mechanism_mode import answer_request, resolve_datastore
from ctxleak.methods.influence.pipeline import Job
from ctxleak.methods.influence.setting import InfluenceOptions, Setting
from ctxleak.methods.rag.app_prompt import AppPromptChoice, load_prompt_messages
from ctxleak.methods.tradeoff.utility import answer_match
from ctxleak.mitigations.cid import CID
from ctxleak.mitigations.dp_rag import DPRAG
from ctxleak.mitigations.dp_vote import DPSparseVote, DPVote
from ctxleak.mitigations.mechanisms import Decoding, Mechanism


def run(lm, mechanism: Mechanism, examples: Sequence, decoding: Decoding, store) -> dict:
    """The mechanism's answers to ``examples``: match rate, and for the DP mechanisms the share
    of released tokens a vote released and of answers that kept a retrieved document."""
    options = InfluenceOptions(max_new_tokens=decoding.max_new_tokens,
                               min_new_tokens=decoding.min_new_tokens)
    requests = [answer_request(lm, Job(ex, Setting.cid(1.0, decoding.temperature), 1000 + k), options,
                                store) for k, ex in enumerate(examples)]
    start = time.perf_counter()
    answers = mechanism.answer(lm, requests, decoding)
    seconds = time.perf_counter() - start
    texts = [lm.decode(list(a.response_ids)) for a in answers]
    right = [answer_match(t, ex.reference or "") for t, ex in zip(texts, examples)]
    steps = [s for a in answers for s in a.steps]
    voted = sum(1 for s in steps if s.get("source") == "vote")
    kept = sum(1 for a in answers if a.datastore_used)
    return {"n": len(examples), "match": sum(right) / max(len(right), 1),
            "voted": voted / max(len(steps), 1) if steps else None,
            "kept": kept / len(answers), "eps": answers[0].claim.eps if answers else None,
            "relation": answers[0].claim.relation if answers else None, "seconds": seconds,
            "example": texts[0] if texts else ""}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--private", type=int, default=32, help="private-fact questions")
    parser.add_argument("--common", type=int, default=30, help="common-fact questions")
    parser.add_argument("--shards", type=int, default=32, help="voters of the DP votes")
    parser.add_argument("--tokens", type=int, default=32, help="new tokens per answer")
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--model", default="default")
    args = parser.parse_args()
    lm = load_model(args.model)
    app = AppPromptChoice(load_prompt_messages("short-answer"))
    examples, _ = load_log("demo-datastore", app=app)
    private = [ex for ex in examples if ex.fact == "private"][:args.private]
    common = [ex for ex in examples if ex.fact == "common"][:args.common]
    store = resolve_datastore(None, "demo-datastore", examples)
    sampled = Decoding(temperature=args.temperature, max_new_tokens=args.tokens,
                       min_new_tokens=1)
    greedy = Decoding(temperature=1.0, max_new_tokens=args.tokens, min_new_tokens=1,
                      greedy=True)
    rows = [("λ = 1, greedy", CID(1.0), private, greedy, None),
            (f"λ = 1, T = {args.temperature:g}", CID(1.0), private, sampled, None),
            ("λ = 0, greedy (no documents)", CID(0.0), private, greedy, None),
            ("λ = 1, greedy, common", CID(1.0), common, greedy, None),
            (f"dp-vote ε = 10, {args.shards} shards, common",
             DPVote(eps=10, shards=args.shards), common, sampled, store),
            (f"dp-sparse-vote ε = 10, {args.shards} shards, common",
             DPSparseVote(eps=10, shards=args.shards), common, sampled, store),
            ("dp-rag ε = 5, common", DPRAG(eps=5), common, sampled, store),
            ("dp-rag ε = 5, top_k = 8, similarities 0 to 0.6, common",
             DPRAG(eps=5, top_k=8, score_range=(0.0, 0.6)), common, sampled, store),
            (f"dp-sparse-vote ε = 10, {args.shards} shards, private",
             DPSparseVote(eps=10, shards=args.shards), private, sampled, store)]
    print(f"{lm.describe()}; datastore of {len(store or ())} documents; {len(private)} private "
          f"and {len(common)} common questions; {args.tokens} new tokens")
    for label, mechanism, group, decoding, datastore in rows:
        got = run(lm, mechanism, group, decoding, datastore)
        extra = "" if got["voted"] is None else f"; {got['voted']:.0%} of tokens voted"
        if datastore is not None:
            extra += f"; a document kept in {got['kept']:.0%} of answers; claim ε = " \
                     f"{got['eps']:.3g} per response ({got['relation']})"
        print(f"{label}: answer match {got['match']:.2f} over {got['n']}{extra} "
              f"[{got['seconds']:.0f} s; e.g. {got['example'][:70]!r}]", flush=True)


if __name__ == "__main__":
    main()
