"""Can a DP vote over the bundled datastore answer its common-fact questions on the default
model? A vote releases a token only when its count leads the next by the limited domain's gap
("Privacy-Preserving Retrieval-Augmented Generation with Differential Privacy", Koga, Wu and
Chaudhuri), so it answers right only where enough voters, each reading the documents it
retrieved from its own shard, answer right on their own. This measures that: each voter's own
greedy answer (plain decoding, λ = 1, the ``short-answer`` chat prompt, its shard's top BM25
document), how many of the ``shards`` voters contain the reference, against the gap DPVoteRAG
and DPSparseVoteRAG need at ε = 10 per response.

An answer is right when the SQuAD-normalised reference appears in it as whole words
(:func:`ctxleak.methods.tradeoff.utility.answer_match`).

    python bench/bench_vote_agreement.py [--common 10] [--shards 32] [--tokens 24]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

from _common import datastore_questions

from ctxleak.kernels.vote import limited_domain_gap, vote_scale
from ctxleak.methods.influence.mechanism_mode import answer_request
from ctxleak.methods.influence.pipeline import Job
from ctxleak.methods.influence.setting import InfluenceOptions, Setting
from ctxleak.methods.tradeoff.utility import answer_match
from ctxleak.mitigations.cid import CID
from ctxleak.mitigations.dp_vote import DPSparseVote, DPVote
from ctxleak.mitigations.mechanisms import Decoding


def gap(mechanism: DPVote | DPSparseVote, decoding: Decoding) -> float:
    """The votes a released token must lead the next by, at the mechanism's per-vote budget."""
    budget = mechanism.budget(decoding)
    return limited_domain_gap(vote_scale(budget.eps_token, budget.delta_step),
                              budget.delta_step, mechanism.domain)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--common", type=int, default=10, help="common-fact questions")
    parser.add_argument("--shards", type=int, default=32, help="voters")
    parser.add_argument("--tokens", type=int, default=24, help="new tokens per answer")
    args = parser.parse_args()
    lm, common, store = datastore_questions("common", args.common)
    greedy = Decoding(temperature=1.0, max_new_tokens=args.tokens, min_new_tokens=1,
                      greedy=True)
    options = InfluenceOptions(max_new_tokens=args.tokens, min_new_tokens=1)
    sampled = Decoding(temperature=0.8, max_new_tokens=args.tokens, min_new_tokens=1)
    gaps = {"dp-vote": gap(DPVote(eps=10, shards=args.shards), sampled),
            "dp-sparse-vote": gap(DPSparseVote(eps=10, shards=args.shards), sampled)}
    print(f"{lm.describe()}; {len(store)} documents in {args.shards} shards; {len(common)} "
          f"common-fact questions; gap at ε = 10 per response: "
          + ", ".join(f"{k} {v:.1f} votes" for k, v in gaps.items()))
    right_counts, has_fact = [], []
    start = time.perf_counter()
    for k, ex in enumerate(common):
        request = answer_request(lm, Job(ex, Setting.cid(1.0, 1.0), 1000 + k), options, store)
        shards = store.shard_search(ex.query, args.shards, 1)
        voters = [dataclasses.replace(request, documents=tuple(h.text for h in shard),
                                      datastore=None) for shard in shards]
        answers = CID(1.0).answer(lm, voters, greedy)
        right = sum(answer_match(lm.decode(list(a.response_ids)), ex.reference or "")
                    for a in answers)
        holding = sum(any((ex.reference or "").lower() in h.text.lower() for h in shard)
                      for shard in shards)
        right_counts.append(right)
        has_fact.append(holding)
        print(f"{ex.id}: {right} of {args.shards} voters right ({holding} read a document "
              f"stating it): {ex.query!r} -> {ex.reference!r}", flush=True)
    print(f"mean {statistics.mean(right_counts):.1f} of {args.shards} voters right "
          f"({statistics.mean(has_fact):.1f} read the fact); questions where the right voters "
          f"alone reach the dp-vote gap: {sum(r >= gaps['dp-vote'] for r in right_counts)} of "
          f"{len(common)}, the dp-sparse-vote gap: "
          f"{sum(r >= gaps['dp-sparse-vote'] for r in right_counts)}; "
          f"{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
