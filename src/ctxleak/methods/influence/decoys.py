"""Controls for retrieved documents: control contexts that share no document with the example,
decoy documents in a passage's place, and the per-document control ("Estimating Privacy Leakage
of Augmented Contextual Knowledge in Language Models", Def. 3.1-3.2).

Example control. In a RAG log one record is often retrieved for most questions, so the nearest
other example's context holds it too, and an answer that copies it would be compared with a
control that carries the same facts. For runs with retrieved documents, an example's control is
the nearest earlier (then later) example whose context shares no document with its own
(:class:`ctxleak.methods.rag.overlap.Corpus`: no id in common, no passage overlapping
by a run of :data:`~ctxleak.methods.rag.overlap.OVERLAP_WORDS` words); where the log has too few,
the rest are synthetic: decoy documents of the run's corpus (every document seen in its rows)
that share nothing with the example, drawn near the example's context length (characters) with
the run seed (:func:`~ctxleak.methods.rag.overlap.decoy_set`).

Per-document control. Passage j's leave-one-out influence ``Σ_t |log p̄_λ(y_t | D) − log
p̄_λ(y_t | D∖j)|`` (nats) is judged against a decoy's: a corpus document d sharing nothing with
the example, near passage j's length, put in j's place, D' = D with j replaced by d; its
leave-one-out influence on the same answer is ``Σ_t |log p̄_λ(y_t | D') − log p̄_λ(y_t | D'∖d)|``,
and D'∖d is D∖j token for token, so one forward pass per passage (the prompt with the decoy)
adds it. Pooled over a setting, a document leaked in an answer when its influence exceeds the
decoys' 95th percentile (with at least 20 decoys, else their largest: the examples' flag rule),
or when the answer copied it (:mod:`ctxleak.methods.rag.copying`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import chain, islice
from typing import Any

import numpy as np

from ctxleak.engine.lm import LanguageModel
from ctxleak.methods.ids import user_id
from ctxleak.methods.influence.control import (
    MIN_FOR_PERCENTILE,
    PERCENTILE,
    context_key,
    false_flag_rate,
)
from ctxleak.methods.influence.data import InfluenceExample, prompt_parts
from ctxleak.methods.influence.ngrams import PromptParts
from ctxleak.methods.influence.setting import InfluenceOptions
from ctxleak.methods.rag.app_prompt import app_messages
from ctxleak.methods.rag.budgets import CLASS_FIELD, PUBLIC, document_class
from ctxleak.methods.rag.documents import RetrievedDocument
from ctxleak.methods.rag.exposure import short_name
from ctxleak.methods.rag.judged import leaked_passages
from ctxleak.methods.rag.overlap import Corpus, decoy_rng, decoy_set, pick_near
from ctxleak.methods.rag.passages import LIST_SEPARATOR, list_pieces
from ctxleak.mitigations.influence import response_influence, token_influence

#: How many other examples are checked for a control that shares no document before the rest
#: of an example's controls are drawn from the corpus.
SEARCH_LIMIT = 1000
#: The decoy generator's streams: passage decoys (then the passage's index) and synthetic
#: control contexts (then the control's number).
PASSAGE_STREAM, CONTROL_STREAM = 1, 2
#: Leaks listed in a setting's summary (every one is in the records).
LISTED = 200


def uses_documents(examples: Sequence[InfluenceExample]) -> bool:
    """Whether these examples' contexts are retrieved documents (the controls of this module
    apply)."""
    return any(ex.documents is not None for ex in examples)


def _corpus(examples: Sequence[InfluenceExample]) -> tuple[Corpus, list[frozenset[int]]]:
    """The run's corpus and each example's documents in it (its passages, or its context)."""
    corpus = Corpus()
    own = [corpus.add(ex.passage_texts if ex.passages else [ex.context], ex.documents)
           for ex in examples]
    return corpus, own


def decoy_example(ex: InfluenceExample, decoys: Sequence[RetrievedDocument]
                  ) -> InfluenceExample:
    """A synthetic control context: ``decoys`` as the retrieved documents of ``ex``'s query,
    named ``decoys(id+id)``."""
    pieces = list_pieces([d.text for d in decoys])
    names = "+".join(d.id if d.id is not None else short_name(d.text, 3) for d in decoys)
    return replace(ex, id=f"decoys({names})", context="".join(pieces), passages=tuple(pieces),
                   documents=tuple(replace(d, rank=i + 1) for i, d in enumerate(decoys)),
                   reference=None, references=(), response=None, response_ids=None)


def document_control_sets(examples: Sequence[InfluenceExample], per_example: int, seed: int
                          ) -> list[list[InfluenceExample]]:
    """Up to ``per_example`` control contexts of each example, sharing no document with it:
    the nearest earlier examples' contexts (one per distinct context), then the nearest later
    ones (:data:`SEARCH_LIMIT` checked at most), then synthetic ones drawn from the corpus
    (:func:`decoy_example`)."""
    corpus, own = _corpus(examples)
    keys = [context_key(ex.context) for ex in examples]
    out: list[list[InfluenceExample]] = []
    for k, ex in enumerate(examples):
        chosen: list[InfluenceExample] = []
        taken = {keys[k]}
        shut = corpus.forbidden(own[k])
        nearest = chain(range(k - 1, -1, -1), range(k + 1, len(examples)))
        for j in islice(nearest, SEARCH_LIMIT):
            if len(chosen) == per_example:
                break
            if keys[j] not in taken and shut.isdisjoint(own[j]):
                chosen.append(examples[j])
                taken.add(keys[j])
        most = max(2, 2 * len(ex.passages or ()))
        for c in range(per_example - len(chosen)):
            drawn = decoy_set(corpus, own[k], len(ex.context),
                              decoy_rng(seed, ex.id, CONTROL_STREAM, c), most)
            if not drawn:
                break
            chosen.append(decoy_example(ex, drawn))
        out.append(chosen)
    return out


def passage_decoys(examples: Sequence[InfluenceExample], seed: int
                   ) -> list[list[RetrievedDocument | None]]:
    """Each example's decoy per passage: a corpus document sharing nothing with the example,
    among the three nearest to the passage's length (characters), drawn with the run seed; []
    for an example without retrieved documents, None where the corpus has no such document."""
    corpus, own = _corpus(examples)
    out: list[list[RetrievedDocument | None]] = []
    for ex, mine in zip(examples, own):
        if ex.documents is None or not ex.passages:
            out.append([])
            continue
        eligible = corpus.eligible_set(mine)
        picks = [pick_near(corpus, eligible, len(text),
                           decoy_rng(seed, ex.id, PASSAGE_STREAM, j))
                 for j, text in enumerate(ex.passage_texts)]
        out.append([None if p is None else corpus.documents[p] for p in picks])
    return out


def decoy_parts(lm: LanguageModel, parts: PromptParts, span: tuple[int, int], first: bool,
                decoy: RetrievedDocument, reserve: int) -> PromptParts | None:
    """``parts`` with the context tokens ``span`` (a passage) replaced by ``decoy``'s, tokenised
    as that passage was (the list separator first unless it is the ``first``): without the
    decoy the context is the example's without the passage, token for token. None where the
    prompt would not fit the model's window with ``reserve`` new tokens."""
    a, b = span
    piece = lm.encode(decoy.text if first else LIST_SEPARATOR + decoy.text)
    context = parts.context[:a] + tuple(piece) + parts.context[b:]
    window = lm.max_length
    if window is not None and len(parts.before) + len(context) + len(parts.after) + reserve \
            > window:
        return None
    return PromptParts(parts.before, context, parts.after)


def app_decoy_parts(lm: LanguageModel, example: InfluenceExample, j: int,
                    decoy: RetrievedDocument, reserve: int) -> PromptParts | None:
    """Under the app's own messages, the prompt with ``decoy`` in passage ``j``'s place (the
    app's separator kept), tokenised whole as the app's prompts are: its counterpart without
    the decoy is then the passage's own leave-one-out prompt, also tokenised whole. None where
    it would not fit the model's window with ``reserve`` new tokens."""
    pieces = list(example.passages or (example.context,))
    own = example.passage_texts[j]
    pieces[j] = pieces[j][:len(pieces[j]) - len(own)] + decoy.text if pieces[j].endswith(own) \
        else decoy.text
    documents = example.documents
    if documents is not None:
        documents = tuple(replace(decoy, rank=d.rank) if i == j else d
                          for i, d in enumerate(documents))
    placed = replace(example, passages=tuple(pieces), context="".join(pieces),
                     documents=documents)
    parts, dropped = prompt_parts(lm, placed, reserve=reserve)
    return None if dropped else PromptParts(parts.before, parts.context, parts.after)


#: The decoy document of each passage of each job ([] or None: none).
Decoys = Sequence[Sequence[RetrievedDocument | None]]
#: Each job's leave-one-out rows, log p̄_λ(y_t | D∖j), by passage j (its decoy's other half).
Ablated = dict[int, dict[int, np.ndarray]]


@dataclass(frozen=True)
class DecoyJob:
    """One decoy put in passage ``passage``'s place of job ``job``: the prompt with it, and the
    leave-one-out row of that passage (the same prompt without the decoy)."""

    job: int
    passage: int
    parts: PromptParts
    ablated: np.ndarray


def decoy_jobs(lm: LanguageModel, records: list[dict[str, Any]],
                examples: Sequence[InfluenceExample], parts: Sequence[tuple[PromptParts, int]],
                spans_of: Sequence[Sequence[tuple[int, int] | None]], ablated: Ablated,
                decoys: Decoys | None, options: InfluenceOptions) -> list[DecoyJob]:
    """The prompts with a decoy in each scored passage's place (:func:`.decoys.decoy_parts`);
    each record gets ``passage_decoy_ids`` (the decoys' names) and, None until scored,
    ``passage_decoy_influence``."""
    out: list[DecoyJob] = []
    if decoys is None or not options.control:
        return out
    for k, rows in ablated.items():
        if not decoys[k]:
            continue
        names: list[str | None] = [None] * len(spans_of[k])
        for j, row in rows.items():
            decoy, span = decoys[k][j] if j < len(decoys[k]) else None, spans_of[k][j]
            if decoy is None or span is None:
                continue
            if app_messages(lm, examples[k]) is not None:  # the app's prompt: tokenised whole
                p = app_decoy_parts(lm, examples[k], j, decoy, options.max_new_tokens)
            else:
                p = decoy_parts(lm, parts[k][0], span, j == 0, decoy, options.max_new_tokens)
            if p is not None:
                names[j] = decoy.id if decoy.id is not None else short_name(decoy.text)
                out.append(DecoyJob(k, j, p, row))
        records[k]["passage_decoy_ids"] = names
        records[k]["passage_decoy_influence"] = [None] * len(names)
    return out


def decoy_influence(logp_decoy: Any, logp_ablated: Any) -> float:
    """A decoy's leave-one-out influence on an answer (nats): ``Σ_t |log p̄(y_t | D') −
    log p̄(y_t | D∖j)|`` over the tokens the passage's own influence sums (the ablated row's)."""
    ablated = np.asarray(logp_ablated, dtype=np.float64)
    decoy = np.asarray(logp_decoy, dtype=np.float64)[:len(ablated)]
    return float(response_influence(token_influence(decoy, ablated[:len(decoy)])))


def document_rule(influences: Sequence[float]) -> tuple[float | None, str]:
    """The per-document threshold (nats) and its rule in words: the decoys' 95th percentile
    with at least 20, else their largest."""
    c = np.asarray([x for x in influences if x is not None], dtype=np.float64)
    if c.size == 0:
        return None, ("no decoy influences: documents are judged leaked only where the answer "
                      "copied them")
    what = ("decoy documents' leave-one-out influences (a corpus document sharing nothing "
            "with the answer's context, put in the passage's place)")
    if c.size >= MIN_FOR_PERCENTILE:
        return (float(np.percentile(c, PERCENTILE)),
                f"its leave-one-out influence is above the {PERCENTILE:g}th percentile of the "
                f"{c.size} {what}, or the answer copied it")
    return (float(c.max()), f"its leave-one-out influence is above the largest of the {c.size} "
            f"{what}; fewer than {MIN_FOR_PERCENTILE}, too few for a {PERCENTILE:g}th "
            f"percentile), or the answer copied it")


def document_control(records: Sequence[dict[str, Any]], class_field: str = CLASS_FIELD
                     ) -> dict[str, Any]:
    """A setting's per-document control: the pooled decoy influences, the threshold (nats),
    its rule and false-flag rate, and the documents judged leaked, answer by answer (with their
    class, the metadata's ``class_field``): documents not public first, then copies, then most
    nats above the threshold."""
    pooled = [float(v) for r in records for v in r.get("passage_decoy_influence") or ()
              if v is not None]
    threshold, rule = document_rule(pooled)
    leaks: list[dict[str, Any]] = []
    for r in records:
        names = r.get("passage_ids") or []
        meta = r.get("passage_metadata") or []
        for j, above in leaked_passages(r, threshold).items():
            copies = [c for c in r.get("copied") or () if c.get("passage") == j]
            leaks.append({"id": user_id(r), "document": names[j] if j < len(names)
                          else str(j + 1), "passage": j + 1,
                          "class": document_class(meta[j] if j < len(meta) else None,
                                                  class_field),
                          "influence": r["passage_influence"][j], "above": above,
                          "copied": [c.get("shown", c["text"]) for c in copies],
                          "kinds": sorted({c["kind"] for c in copies})})
    leaks.sort(key=lambda x: (x["class"] == PUBLIC, not x["copied"], -(x["above"] or 0.0)))
    return {"decoys": len(pooled), "threshold": threshold, "rule": rule,
            "false_flag_rate": false_flag_rate(len(pooled)), "answers": len({x["id"] for x in
                                                                             leaks}),
            "copying_answers": sorted({x["id"] for x in leaks if x["copied"]}, key=str),
            "n_leaks": len(leaks), "leaks": leaks[:LISTED],
            "leaks_by_class": dict(Counter(str(x["class"]) for x in leaks).most_common())}


__all__ = ["CONTROL_STREAM", "LISTED", "PASSAGE_STREAM", "SEARCH_LIMIT", "Ablated", "DecoyJob",
           "Decoys", "decoy_example", "decoy_influence", "decoy_jobs", "decoy_parts",
           "document_control", "document_control_sets", "document_rule", "passage_decoys",
           "uses_documents"]
