"""Do the DP mechanisms keep a person's record within their claim, in their own terms? For the
first private-fact questions of the bundled ``demo-datastore`` on the default model (the
``short-answer`` chat prompt), each DP mechanism answers from the datastore, and
:func:`ctxleak.mitigations.document_loss.document_loss` computes the ex-post privacy loss the
answer spent on the question's own document (the record that states the fact): DP-RAG
("RAG with Differential Privacy", Grislain) and DPVoteRAG / DPSparseVoteRAG
("Privacy-Preserving Retrieval-Augmented Generation with Differential Privacy", Koga, Wu and
Chaudhuri). Beside it, how many answers' prompts held the document, whether the answer
states the fact (the normalised reference appears in it) and the recomputation's check (0: the
recorded steps recomputed exactly).

    python bench/bench_document_loss.py [--private 16] [--tokens 24] [--temperature 0.3]
"""

from __future__ import annotations

import argparse
import statistics
import time

from _common import datastore_questions

from ctxleak.methods.influence.mechanism_mode import answer_request
from ctxleak.methods.influence.pipeline import Job
from ctxleak.methods.influence.setting import InfluenceOptions, Setting
from ctxleak.methods.tradeoff.utility import answer_match
from ctxleak.mitigations.document_loss import document_loss
from ctxleak.mitigations.dp_rag import DPRAG
from ctxleak.mitigations.dp_vote import DPSparseVote, DPVote
from ctxleak.mitigations.mechanisms import Decoding


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--private", type=int, default=16, help="private-fact questions")
    parser.add_argument("--tokens", type=int, default=24, help="new tokens per answer")
    parser.add_argument("--temperature", type=float, default=0.3)
    parser.add_argument("--shards", type=int, default=32, help="the votes' voters")
    args = parser.parse_args()
    lm, private, store = datastore_questions("private", args.private)
    decoding = Decoding(temperature=args.temperature, max_new_tokens=args.tokens,
                        min_new_tokens=1)
    options = InfluenceOptions(max_new_tokens=args.tokens, min_new_tokens=1)
    mechanisms = [DPRAG(eps=5), DPSparseVote(eps=10, shards=args.shards),
                  DPVote(eps=10, shards=args.shards)]
    print(f"{lm.describe()}; {len(store)} documents; {len(private)} private-fact questions; "
          f"{args.tokens} new tokens at T = {args.temperature}")
    print("| mechanism | claim ε per response | answers whose prompts held the document | "
          "its loss, nats: median / largest | within the claim | answers stating the fact | "
          "recomputation check, worst | seconds |")
    print("|---|---|---|---|---|---|---|---|")
    for mech in mechanisms:
        start = time.perf_counter()
        losses, stated, read, worst = [], 0, 0, 0.0
        for k, ex in enumerate(private):
            request = answer_request(lm, Job(ex, Setting(1.0, args.temperature, mechanism=mech),
                                          2000 + k), options, store)
            answer = mech.answer(lm, [request], decoding)[0]
            gold = str(ex.documents[0].id) if ex.documents else ""
            loss = document_loss(mech, lm, request, answer, gold, decoding)
            losses.append(loss)
            stated += int(answer_match(lm.decode(list(answer.response_ids)), ex.reference or ""))
            read += gold in answer.datastore_used
            worst = max(worst, loss.check)
            print(f"  {ex.id} {gold}: {loss.total:+.3f} nats ({loss.changed})", flush=True)
        totals = [abs(x.total) for x in losses]
        claim = losses[0].claim.eps
        print(f"| {mech.key()} | {claim:.3g} | {read} of {len(losses)} | "
              f"{statistics.median(totals):.3f} / "
              f"{max(totals):.3f} | {sum(x.within for x in losses)} of {len(losses)} | "
              f"{stated} of {len(losses)} | {worst:.2g} | "
              f"{time.perf_counter() - start:.0f} |", flush=True)


if __name__ == "__main__":
    main()
