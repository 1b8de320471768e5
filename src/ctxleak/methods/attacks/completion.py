"""The completion membership attack: half of a document sent as the query, the answer searched
for the words of the other half that no other document holds.

The idea is S²MIA's ("Generating Is Believing: Membership Inference Attacks against
Retrieval-Augmented Generation", Li et al. 2024): a query made of part of the target document
retrieves the document itself when it is in the datastore, and the answer then tends to
reproduce the part that was not sent; the paper queries with the document's first part and
scores the answer's similarity to the rest (BLEU, with the model's perplexity where it has
log probabilities). ctxleak's reading of it, from the answers alone (its choices, not the
paper's procedure):

- the query is the document's *second* half (its words, whitespace joined), sent as it is
  (:data:`TEMPLATE`). A RAG answer that copies a retrieved document copies it from its
  beginning: on the bundled datastore the default model restarts the retrieved document instead
  of continuing a sent first half, so the first half is what a member's answer gives back;
- the expected words are those of the first half that no other document of the audit holds
  (document frequency 1: :func:`.membership_words.candidates`, rarest and longest first, at most
  :data:`MAX_WORDS`), and not in the half that was sent: names, numbers and places that an
  answer can give only from this document, or by a guess;
- the score is the share of them the answer gives (:func:`.membership.given`), 0 to 1. A member
  whose answer copies it scores about 1; a non-member's answer may copy similar documents, whose
  words are not counted, so it scores about 0.

A document whose first half holds no such word gets no question (it is listed as ``unasked``).
The attack asks one query per document.
"""

from __future__ import annotations

from collections.abc import Mapping

from ctxleak.methods.attacks.extract import AttackDocument
from ctxleak.methods.attacks.membership_words import MembershipQuestion, candidates
from ctxleak.methods.text_match import words

#: The query: the second half of the document, as it is.
TEMPLATE = "{half}"
#: The most words of the first half an answer is searched for.
MAX_WORDS = 10


def halves(text: str) -> tuple[str, str]:
    """(first half, second half) of ``text``'s words, whitespace joined; the second half is the
    longer by one word when their number is odd."""
    split = text.split()
    cut = len(split) // 2
    return " ".join(split[:cut]), " ".join(split[cut:])


def completion_question(doc: AttackDocument, member: bool, df: Mapping[str, int]
                        ) -> MembershipQuestion | None:
    """The query about ``doc`` (its second half) and the words of its first half a right answer
    gives (module docstring); None when there is none."""
    first, second = halves(doc.text)
    sent = set(words(second))
    expected = [word for freq, _, word, _ in candidates(first, df)
                if freq == 1 and words(word)[0] not in sent][:MAX_WORDS]
    if not expected or not second:
        return None
    return MembershipQuestion("completion", doc.id, member, 0, TEMPLATE.format(half=second),
                              tuple(expected))


__all__ = ["MAX_WORDS", "TEMPLATE", "completion_question", "halves"]
