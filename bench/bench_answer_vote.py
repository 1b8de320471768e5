"""How many common-fact questions of the bundled datastore does the answer vote answer right on
the default model? The answer vote (``dp-answer-vote``, :mod:`ctxleak.mitigations.dp_answer_vote`)
votes once per response on the voters' normalised short answers, where the per-token votes of
"Privacy-Preserving Retrieval-Augmented Generation with Differential Privacy" (Koga, Wu and
Chaudhuri) vote at every token.

The rule, fixed before the run: ``demo-datastore``'s questions whose fact is ``common`` (all
30 by default), in file order; the default model; the ``short-answer`` chat prompt (as
``bench_vote_agreement.py``); ``DPAnswerVote(eps=10, shards=32, delta=1e-4, per_voter=1,
answer_tokens=16)``: ε = 10 per response, 32 voters each reading its shard's best document
for the question, each answer cut at its first line break; the seed of question k is
``derive_seed(0, k)``. An answer is right when the SQuAD-normalised reference appears in it as
whole words (:func:`ctxleak.methods.tradeoff.utility.answer_match`, any of the references).
Reported: right answers of the mechanism, of them how many the vote released and how many came
from the question alone after ⊥; the question-alone answer's own right count (what the model
knows without documents); per question the votes of the leading answer and how many voters
were right.

    python bench/bench_answer_vote.py [--common 30] [--shards 32] [--eps 10] [--batch 4]
"""

from __future__ import annotations

import argparse
import statistics
import time

from _common import datastore_questions

from ctxleak.engine.generation import derive_seed
from ctxleak.methods.influence.mechanism_mode import answer_request
from ctxleak.methods.influence.pipeline import Job
from ctxleak.methods.influence.setting import InfluenceOptions, Setting
from ctxleak.methods.tradeoff.utility import answer_match
from ctxleak.mitigations.dp_answer_vote import DPAnswerVote
from ctxleak.mitigations.mechanisms import Decoding


def right(text: str, references: tuple[str, ...]) -> bool:
    return any(answer_match(text, ref) for ref in references)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--common", type=int, default=30, help="common-fact questions")
    parser.add_argument("--shards", type=int, default=32, help="voters")
    parser.add_argument("--eps", type=float, default=10.0, help="ε per response")
    parser.add_argument("--tokens", type=int, default=16, help="tokens per voter's answer")
    parser.add_argument("--batch", type=int, default=4, help="questions answered together")
    args = parser.parse_args()
    lm, common, store = datastore_questions("common", args.common)
    mech = DPAnswerVote(eps=args.eps, shards=args.shards, answer_tokens=args.tokens)
    scale, gap = mech.noise()
    options = InfluenceOptions(max_new_tokens=args.tokens, min_new_tokens=1)
    decoding = Decoding(temperature=1.0, max_new_tokens=args.tokens, min_new_tokens=1)
    print(f"{lm.describe()}; {mech.key()}; {len(store)} documents in {args.shards} shards; "
          f"{len(common)} common-fact questions; Gumbel scale {scale:.3f}, threshold gap "
          f"{gap:.2f} votes above the second answer", flush=True)
    start = time.perf_counter()
    rows = []
    for at in range(0, len(common), args.batch):
        chunk = list(enumerate(common))[at:at + args.batch]
        requests = [answer_request(lm, Job(ex, Setting.cid(1.0, 1.0), derive_seed(0, k)), options,
                                   store) for k, ex in chunk]
        for (_, ex), answer in zip(chunk, mech.answer(lm, requests, decoding)):
            step = answer.steps[0]
            refs = ex.all_references
            response = lm.decode(list(answer.response_ids))
            voters_right = sum(right(a, refs) for a in step["answers"])
            row = {"right": right(response, refs), "source": step["source"],
                   "alone_right": right(step["no_retrieval_answer"], refs),
                   "top": step["top_votes"], "voters_right": voters_right}
            rows.append(row)
            print(f"{ex.id}: {'RIGHT' if row['right'] else 'wrong'} ({step['source']}; top "
                  f"answer {step['top_votes']} votes, {voters_right} of {args.shards} voters "
                  f"right) {response!r} <- {ex.query!r} (reference {ex.reference!r})",
                  flush=True)
    n = len(rows)
    voted = [r for r in rows if r["source"] == "vote"]
    print(f"answer vote at ε = {args.eps:g} per response: {sum(r['right'] for r in rows)} of "
          f"{n} common-fact questions right ({sum(r['right'] for r in voted)} released by the "
          f"vote, {len(voted)} votes released in all; "
          f"{sum(r['right'] for r in rows if r['source'] != 'vote')} right from the question "
          f"alone after ⊥); the question alone answers {sum(r['alone_right'] for r in rows)} "
          f"right; mean votes of the leading answer "
          f"{statistics.mean(r['top'] for r in rows):.1f}, mean voters right "
          f"{statistics.mean(r['voters_right'] for r in rows):.1f} of {args.shards}; "
          f"{time.perf_counter() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
