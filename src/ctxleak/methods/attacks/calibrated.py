"""The calibrated membership attack: a document's masked words asked for with the document's own
words around them, and again with those words perturbed; the score is the difference.

The idea is DCMI's ("DCMI: A Differential Calibration Membership Inference Attack Against
Retrieval-Augmented Generation", Gao et al. 2025): an answer is shaped by every document the
query retrieves, and the documents that are merely similar to the target (members or not) shape
it whether or not the target is there; a perturbed query keeps their share and loses the
target's, so the difference between the answers to the original and the perturbed queries
isolates what only the target itself could have given. ctxleak's reading of it, without log
probabilities or a language model of its own (every choice below is ctxleak's, not the paper's
procedure):

- the original query is the mask-based attack's ("Mask-based Membership Inference Attacks for
  Retrieval-Augmented Generation"): the document's ``masks`` rarest words
  (:func:`.membership_words.mask_words`) hidden as ``[MASK_i]`` in its text, with a request to
  fill them in (:data:`TEMPLATE`);
- each of the ``perturbations`` perturbed queries is the same masked text with the document's
  *distinctive* words, every word of it (as :func:`ctxleak.methods.text_match.words` splits
  it, short ones too) that at most half of the audit's documents hold, swapped for distinctive
  words of the other documents (those that may be asked for,
  :data:`.membership_words.CANDIDATE`; shuffled with a seed per document, the next ones for
  each perturbation, one substitute per word at each of its places): the words that point a
  retriever at this document are gone, the common words around the masks stay. A rare word
  near a mask may have helped a model guess it too: the calibration subtracts what the common
  words and the other documents give, not every guess;
- each answer scores the share of the hidden words it gives (:func:`.membership.given`), and the
  document's score is the original query's share less the mean share of the perturbed ones
  (:func:`.membership.document_scores`), from −1 to 1. A member's hidden words come back when
  its own words retrieve it and not once they are swapped (about 1); a non-member's come back,
  if at all, from what the model guesses or from similar documents, about as often either way
  (about 0).

A document with no word to hide, no distinctive word outside the masked ones, or no other
document to draw substitutes from gets no question (it is listed as ``unasked``). The attack
asks 1 + ``perturbations`` queries per document.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence

from ctxleak.methods.attacks.extract import AttackDocument
from ctxleak.methods.attacks.membership_words import (
    CANDIDATE,
    MembershipQuestion,
    mask_words,
    masked_text,
)
from ctxleak.methods.text_match import words

#: The calibrated queries' request: the masked (and, but for the first, perturbed) text.
TEMPLATE = ("{masked}\n\nSome words of the passage above are hidden as [MASK_i]. From your "
            "documents, give each hidden word, one per line, as [MASK_i]: word.")
#: A word as :func:`ctxleak.methods.text_match.words` splits a text (there: case folded).
_WORD = re.compile(r"\w+(?:[.,:'’\-]\w+)*")
#: Perturbed queries per document by default (the attack then asks 4 queries per document).
PERTURBATIONS = 3


def distinctive(keys: Sequence[str], df: Mapping[str, int], documents: int) -> bool:
    """Whether a word (its ``keys``, :func:`ctxleak.methods.text_match.words`) is distinctive:
    one of its parts held by at most half of the ``documents``."""
    return bool(keys) and 2 * min(df.get(k, 0) for k in keys) <= documents


def substitute_pool(documents: Sequence[AttackDocument], df: Mapping[str, int]
                    ) -> list[tuple[str, str]]:
    """(word as folded, as written) of every distinctive one-part word of ``documents``, its
    first spelling, sorted: what a perturbed query draws its substitutes from."""
    pool: dict[str, str] = {}
    for doc in documents:
        for match in CANDIDATE.finditer(doc.text):
            keys = words(match.group(0))
            if len(keys) == 1 and distinctive(keys, df, len(documents)):
                pool.setdefault(keys[0], match.group(0))
    return sorted(pool.items())


def calibrated_questions(doc: AttackDocument, member: bool, df: Mapping[str, int],
                         documents: int, pool: Sequence[tuple[str, str]], masks: int,
                         perturbations: int) -> list[MembershipQuestion]:
    """The original query (part 0) and ``perturbations`` perturbed ones (parts 1 …) about
    ``doc`` (module docstring), each expecting the hidden words; ``documents``: how many the
    audit has (members and non-members), ``pool``: :func:`substitute_pool` of them all."""
    chosen = mask_words(doc.text, df, masks)
    spans = [(start, start + len(word)) for start, word in chosen]
    targets = [m for m in _WORD.finditer(doc.text)
               if all(m.end() <= a or m.start() >= b for a, b in spans)
               and distinctive(words(m.group(0)), df, documents)]
    own = set(words(doc.text))
    draws = [surface for key, surface in pool if key not in own]
    if not chosen or not targets or not draws:
        return []
    expected = tuple(w for _, w in chosen)
    keys = list(dict.fromkeys(tuple(words(m.group(0))) for m in targets))
    out = [MembershipQuestion("calibrated", doc.id, member, 0,
                              TEMPLATE.format(masked=masked_text(doc.text, chosen)), expected)]
    random.Random(f"calibrated:{doc.id}").shuffle(draws)  # seeded by the document alone
    for part in range(1, perturbations + 1):
        # the next len(keys) substitutes, round the shuffled draws: perturbations differ
        first = (part - 1) * len(keys)
        swap = {key: draws[(first + i) % len(draws)] for i, key in enumerate(keys)}
        swaps = [(m.start(), m.end(), swap[tuple(words(m.group(0)))]) for m in targets]
        out.append(MembershipQuestion("calibrated", doc.id, member, part, TEMPLATE.format(
            masked=masked_text(doc.text, chosen, swaps)), expected))
    return out


__all__ = ["PERTURBATIONS", "TEMPLATE", "calibrated_questions", "distinctive",
           "substitute_pool"]
