"""DP-KSA, keyword-space aggregation ("Differentially Private Retrieval-Augmented Generation",
Tang, Flemings, Wang and Annavaram), as a :class:`~ctxleak.mitigations.mechanisms.Mechanism`.

1. Voters: ``shards`` voters each read their shard (:mod:`~ctxleak.mitigations.sharded`, with
   the relation each claim covers) and answer once, greedily, in at most ``voter_tokens``
   tokens, from the question and its documents.
2. Keywords: each voter's response gives a set of keywords
   (:func:`~ctxleak.mitigations.keywords.response_keywords`), and the histogram counts the
   voters holding each; one voter's change moves every count by at most 1.
3. Propose-test-release (:mod:`ctxleak.mitigations.keywords`): the ``keywords`` most frequent
   keywords are released, in alphabetical order, when a noisy distance to instability clears
   ``ln(1/(2δ))/ε``; otherwise nothing is (the answer is then the question's alone). The one
   noisy step is (ε, δ)-DP, so the claim per response is (ε, δ).
4. The final answer is decoded from the question and the released keywords only (the
   keywords in the prompt's document slot, no document), with the request's decoding
   (greedy honoured: it post-processes what was released). With ``keyword_first`` (the
   default) the answer opens with the released keywords, joined by ", ", and the model
   continues from them: a small model given "Keywords: Orrin Theatre." can still answer
   without the name, and the paper leaves the final step's form open. It reads only what was
   released and the question, so the claim is unchanged.

The steps: a first record of the release (every voter's keyword set ``voter_keywords``, the
top counts ``top_counts``, the gap, the distance, the threshold, whether the test passed and
the keywords ``released``, None on an abstention; ``paid`` with ``eps_step`` ε and
``delta_step`` δ), then one record per released token (``token_id``, nothing paid). Noise is
drawn from the request's seed, so the same request draws the same test.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from ctxleak.engine.generation import sample
from ctxleak.engine.lm import LanguageModel
from ctxleak.errors import ConfigError
from ctxleak.kernels.vote import laplace
from ctxleak.mitigations.document_loss import ksa_loss
from ctxleak.mitigations.dp_vote import check_delta, check_eps, noise_generator
from ctxleak.mitigations.keywords import (
    keyword_counts,
    keywords_context,
    ptr_threshold,
    response_keywords,
    stability_distance,
    top_keywords,
)
from ctxleak.mitigations.mechanisms import (
    AnswerRequest,
    Claim,
    Decoding,
    DocumentLoss,
    MechanismAnswer,
)
from ctxleak.mitigations.sharded import ShardedVoters

#: The noise site of the test (``noise_generator``'s tag): apart from the votes' 0 and 1.
_TEST_TAG = 3


def voter_responses(mech: Any, lm: LanguageModel,
                    asked: Sequence[tuple[AnswerRequest, Sequence[str]]]) -> list[str]:
    """Each (request, documents) pair's greedy response of at most ``mech.voter_tokens``
    tokens, decoded to text, all in one batch."""
    if not asked:
        return []
    prompts = [list(r.prompt(list(docs))) for r, docs in asked]
    gens = sample(lm, prompts, [r.seed for r, _ in asked], temperature=0.0,
                  max_new_tokens=mech.voter_tokens, min_new_tokens=1)
    return [lm.decode(list(g[0].token_ids)) for g in gens]


@dataclass(frozen=True)
class DPKSA(ShardedVoters):
    """DP-KSA (module docstring): ``shards`` voters, the ``keywords`` most frequent keywords of
    their responses released by propose-test-release at ``(eps, delta)`` per response, the
    final answer decoded from the question and those keywords; ``voter_tokens``: each voter's
    response length; ``per_voter``: the documents each voter retrieves from its shard;
    ``content_words``: whether a response without a name or number gives its content words
    (:func:`~ctxleak.mitigations.keywords.response_keywords`; default no keyword at all);
    ``keyword_first``: whether the final answer opens with the released keywords (module
    docstring, step 4; default yes). The two defaults answered 16 of the bundled datastore's
    30 common questions right on the default model at ε = 10, the other two 8."""

    name: ClassVar[str] = "dp-ksa"
    extra_streams: ClassVar[int] = 0  # the final answer is decoded after the voters

    eps: float
    shards: int
    delta: float = 1e-4
    keywords: int = 1
    voter_tokens: int = 24
    per_voter: int = 1
    content_words: bool = False
    keyword_first: bool = True

    def __post_init__(self) -> None:
        check_eps(self.eps)
        check_delta(self.delta)
        for name, least, why in (("shards", 3, "a released keyword leads the next by 3 voters"),
                                 ("keywords", 1, "the test releases at least one keyword"),
                                 ("voter_tokens", 1, "each voter answers in at least 1 token"),
                                 ("per_voter", 1, "each voter reads at least 1 document")):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ConfigError(f"{name}: {value!r} is not an integer >= {least} ({why})",
                                  param=name)
        for name in ("content_words", "keyword_first"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name}: {getattr(self, name)!r} is not true or false",
                                  param=name)

    def key(self) -> str:
        extras = "".join(f",{n}={getattr(self, n)}" for n, default in (
            ("keywords", 1), ("voter_tokens", 24), ("per_voter", 1))
            if getattr(self, n) != default)
        if self.content_words:
            extras += ",content_words=true"
        if not self.keyword_first:
            extras += ",keyword_first=false"
        return f"dp-ksa(eps={self.eps:g},shards={self.shards},delta={self.delta:g}{extras})"

    def describe(self) -> str:
        return (f"DP-KSA {self.key()}: {self.shards} voters' keywords, the top {self.keywords} "
                f"released by propose-test-release")

    def claim(self, decoding: Decoding) -> Claim:
        """(ε, δ) per response, whatever the decoding (one noisy test)."""
        return Claim(eps=float(self.eps), delta=float(self.delta), relation="shard")

    def threshold(self) -> float:
        """The test's threshold on the noisy distance
        (:func:`~ctxleak.mitigations.keywords.ptr_threshold`)."""
        return ptr_threshold(self.eps, self.delta)

    def test(self, distance: int, generator: torch.Generator) -> bool:
        """The noisy test: ``distance + Lap(1/ε) > threshold`` (a test's broken variant
        overrides it)."""
        return distance + float(laplace(1, 1.0 / self.eps, generator)[0]) > self.threshold()

    def release(self, request: AnswerRequest, sets: Sequence[frozenset[str]]
                ) -> dict[str, Any]:
        """The release's record (module docstring) from the voters' keyword sets."""
        counts = keyword_counts(sets)
        top, gap = top_keywords(counts, self.keywords)
        distance = stability_distance(gap)
        passed = bool(top) and self.test(distance,
                                         noise_generator(request.seed, _TEST_TAG, 0))
        ranked = sorted(counts.values(), reverse=True)[:self.keywords + 1]
        return {"step": "release", "token_id": None, "paid": True, "eps_step": float(self.eps),
                "delta_step": float(self.delta), "source": "propose-test-release",
                "voter_keywords": [sorted(s) for s in sets], "top_counts": ranked,
                "gap": gap, "distance": distance, "threshold": self.threshold(),
                "passed": passed, "released": sorted(top) if passed else None}

    def answer(self, lm: LanguageModel, requests: Sequence[AnswerRequest],
               decoding: Decoding) -> list[MechanismAnswer]:
        voters = [self.voter_documents(r) for r in requests]
        texts = voter_responses(self, lm, [(r, docs) for r, (vs, _) in zip(requests, voters)
                                           for docs in vs])
        return self.answer_from(lm, requests, texts, decoding)

    def answer_from(self, lm: LanguageModel, requests: Sequence[AnswerRequest],
                    texts: Sequence[str], decoding: Decoding) -> list[MechanismAnswer]:
        """:meth:`answer` from the voters' responses ``texts`` (``shards`` per request, in
        order), as :func:`voter_responses` gives them: the release and the final answer."""
        voters = [self.voter_documents(r) for r in requests]
        records, at = [], 0
        for r in requests:
            sets = [response_keywords(t, r.query, self.content_words)
                    for t in texts[at:at + self.shards]]
            at += self.shards
            records.append(self.release(r, sets))
        prompts = [list(r.prompt([keywords_context(rec["released"])] if rec["released"]
                                 else [])) for r, rec in zip(requests, records)]
        openings = [self.opening(lm, rec["released"], decoding.max_new_tokens)
                    for rec in records]
        gens = self._continued(lm, requests, prompts, openings, decoding)
        out = []
        for r, (_, read), rec, g in zip(requests, voters, records, gens):
            ids, stopped = g
            source = "keywords" if rec["released"] else "question only"
            steps = (rec, *({"step": t, "token_id": int(tok), "paid": False, "eps_step": 0.0,
                             "source": source} for t, tok in enumerate(ids)))
            claim = Claim(eps=float(self.eps), delta=float(self.delta),
                          relation="shard" if r.datastore is None else "document")
            out.append(MechanismAnswer(
                response_ids=tuple(int(t) for t in ids),
                stopped_on_eos=stopped, claim=claim, tokens_paid=0, steps=steps,
                documents_used=tuple(range(len(r.documents))) if r.datastore is None else (),
                datastore_used=tuple(dict.fromkeys(read))))
        return out

    def opening(self, lm: LanguageModel, released: Sequence[str] | None, most: int
                ) -> list[int]:
        """The tokens the final answer opens with: the released keywords joined by ", "
        under ``keyword_first`` (at most ``most`` tokens), else none."""
        if not (self.keyword_first and released):
            return []
        return lm.encode(", ".join(released))[:most]

    @staticmethod
    def _continued(lm: LanguageModel, requests: Sequence[AnswerRequest],
                   prompts: Sequence[list[int]], openings: Sequence[list[int]],
                   decoding: Decoding) -> list[tuple[list[int], bool]]:
        """Each final answer's token ids and whether it stopped on EOS: its opening, then the
        model's continuation of ``prompt + opening`` in the tokens the decoding leaves (EOS
        masked until the answer holds ``min_new_tokens``), answers of one opening length
        decoded together."""
        temperature = 0.0 if decoding.greedy else decoding.temperature
        out: list[tuple[list[int], bool]] = [([], False)] * len(requests)
        for length in sorted({len(o) for o in openings}):
            at = [i for i, o in enumerate(openings) if len(o) == length]
            left = decoding.max_new_tokens - length
            if left <= 0:
                for i in at:
                    out[i] = (list(openings[i]), False)
                continue
            gens = sample(lm, [prompts[i] + openings[i] for i in at],
                          [requests[i].seed for i in at], temperature=temperature,
                          max_new_tokens=left,
                          min_new_tokens=max(0, decoding.min_new_tokens - length))
            for i, g in zip(at, gens):
                out[i] = (list(openings[i]) + [int(t) for t in g[0].token_ids],
                          g[0].stopped_on_eos)
        return out

    def keyword_sets(self, lm: LanguageModel, request: AnswerRequest,
                     voters: Sequence[Sequence[str]]) -> list[frozenset[str]]:
        """The keyword set of a voter reading each of ``voters`` (document texts) for
        ``request``: its greedy response (:func:`voter_responses`) read by
        :func:`~ctxleak.mitigations.keywords.response_keywords`."""
        texts = voter_responses(self, lm, [(request, list(v)) for v in voters])
        return [response_keywords(t, request.query, self.content_words) for t in texts]

    def document_losses(self, lm: LanguageModel, request: AnswerRequest, answer: MechanismAnswer,
                        documents: Sequence[str], decoding: Decoding) -> list[DocumentLoss]:
        """Each document's loss through its voter's keyword set
        (:func:`~ctxleak.mitigations.document_loss.ksa_loss`)."""
        return [ksa_loss(self, lm, request, answer, d, decoding) for d in documents]


__all__ = ["DPKSA", "voter_responses"]
