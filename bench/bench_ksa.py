"""Does DP-KSA answer the bundled datastore's common-fact questions on the default model?

DP-KSA ("Differentially Private Retrieval-Augmented Generation", Tang, Flemings, Wang and
Annavaram; :class:`ctxleak.mitigations.dp_ksa.DPKSA`) releases the most frequent keyword of its
voters' responses by propose-test-release and answers from the question and that keyword.

Two rules, each fixed before a run. Both: ε = 10 per response, δ = 1e-4, 32 voters (shards of
``demo-datastore``), each reading its shard's best document and answering greedily in at most
24 tokens, 1 keyword released, the final answer greedy in at most 24 tokens (EOS allowed from
the first), the ``short-answer`` chat prompt; every common-fact question (30), then the first
``--private`` private-fact questions, where each answer's own privacy loss of the gold
document is recomputed from its steps (:func:`ctxleak.mitigations.document_loss.document_loss`)
and read against the claim.

- ``rule 1`` (fixed 2026-11-29, before the first run): content words as the keywords of a
  response without a name or number; the final answer decoded from the question and
  "Keywords: …" (``content_words=true,keyword_first=false``, then the defaults).
- ``rule 2`` (fixed 2026-11-29, after the first run and before the second, from what the
  first run's misses showed on these same 30 questions, so not a held-out result):
  ``content_words=false`` (a response without a name or number gives no keyword) and
  ``keyword_first=true`` (the final answer opens with the released keyword), the defaults
  since. The private questions are answered by rule 2.

Both read the same voters' responses (one generation per voter). The headline of the second
run is rule 2's count.

An answer is right when the SQuAD-normalised reference appears in it as whole words
(:func:`ctxleak.methods.tradeoff.utility.answer_match`).

    python bench/bench_ksa.py [--common 30] [--private 16]
"""

from __future__ import annotations

import argparse
import time

from _common import datastore_questions

from ctxleak.methods.influence.mechanism_mode import answer_request
from ctxleak.methods.influence.pipeline import Job
from ctxleak.methods.influence.setting import InfluenceOptions, Setting
from ctxleak.methods.tradeoff.utility import answer_match
from ctxleak.mitigations.document_loss import document_loss
from ctxleak.mitigations.dp_ksa import DPKSA, voter_responses
from ctxleak.mitigations.mechanisms import Decoding

EPS, DELTA, SHARDS, KEYWORDS, TOKENS = 10.0, 1e-4, 32, 1, 24


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--common", type=int, default=30, help="common-fact questions")
    parser.add_argument("--private", type=int, default=16, help="private-fact questions")
    args = parser.parse_args()
    rules = {"rule 1": DPKSA(eps=EPS, shards=SHARDS, delta=DELTA, keywords=KEYWORDS,
                             voter_tokens=TOKENS, content_words=True, keyword_first=False),
             "rule 2": DPKSA(eps=EPS, shards=SHARDS, delta=DELTA, keywords=KEYWORDS,
                             voter_tokens=TOKENS, content_words=False, keyword_first=True)}
    mech = rules["rule 1"]
    decoding = Decoding(temperature=1.0, max_new_tokens=TOKENS, min_new_tokens=1, greedy=True)
    options = InfluenceOptions(max_new_tokens=TOKENS, min_new_tokens=1)
    lm, common, store = datastore_questions("common", args.common)
    private = datastore_questions("private", args.private)[1] if args.private else []
    print(f"{mech.describe()}; {lm.describe()}; {len(store)} documents; claim "
          f"(ε = {EPS:g}, δ = {DELTA:g}) per response over the datastore's documents; "
          f"threshold {mech.threshold():.3f} (distance)")
    start = time.perf_counter()
    right = dict.fromkeys(rules, 0)
    released = dict.fromkeys(rules, 0)
    for k, ex in enumerate(common):
        request = answer_request(lm, Job(ex, Setting(1.0, 1.0, mechanism=mech), 1000 + k), options,
                                 store)
        voters, _ = mech.voter_documents(request)
        texts = voter_responses(mech, lm, [(request, docs) for docs in voters])
        for name, m in rules.items():
            answer = m.answer_from(lm, [request], texts, decoding)[0]
            text = lm.decode(list(answer.response_ids))
            ok = answer_match(text, ex.reference or "")
            rec = answer.steps[0]
            right[name] += int(ok)
            released[name] += int(rec["released"] is not None)
            counts: dict[str, int] = {}
            for voter in rec["voter_keywords"]:
                for word in voter:
                    counts[word] = counts.get(word, 0) + 1
            top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
            print(f"{ex.id} [{name}]: {'right' if ok else 'wrong'}; top keywords {top}, "
                  f"released {rec['released']}; {ex.query!r} -> {text!r} "
                  f"(ref {ex.reference!r})", flush=True)
    n = max(len(common), 1)
    for name in right:
        print(f"COMMON [{name}]: {right[name]} of {len(common)} right ({right[name] / n:.0%}), "
              f"keywords released for {released[name]}; {time.perf_counter() - start:.0f} s",
              flush=True)
    mech = rules["rule 2"]
    within = beyond = skipped = 0
    worst = 0.0
    for k, ex in enumerate(private):
        request = answer_request(lm, Job(ex, Setting(1.0, 1.0, mechanism=mech), 2000 + k), options, store)
        answer = mech.answer(lm, [request], decoding)[0]
        gold = ex.documents[0].id if ex.documents else None
        if gold is None or gold not in {d for d, _ in store.documents}:
            skipped += 1
            continue
        loss = document_loss(mech, lm, request, answer, str(gold), decoding)
        within += int(loss.within)
        beyond += int(not loss.within)
        worst = max(worst, loss.total)
        print(f"{ex.id}: {loss.describe()}; released {answer.steps[0]['released']}", flush=True)
    print(f"PRIVATE: the gold document's own loss within the claim ε = {EPS:g} in {within} of "
          f"{within + beyond} answers (largest {worst:.3g} nats; {skipped} without a gold "
          f"document in the datastore); {time.perf_counter() - start:.0f} s in all")


if __name__ == "__main__":
    main()
