"""A leak ledger per document across many answers: which retrieved documents leak, how often,
how much and through which questions ("Estimating Privacy Leakage of Augmented Contextual
Knowledge in Language Models", Def. 3.1-3.2 with the subset S = one document).

Each answer of a RAG run is scored once per document in its context with that document left
out (``passage_influence`` of the record, nats): the document's leave-one-out influence on that
answer. A document leaked in an answer when that influence is above the per-document threshold
(decoy documents left out the same way, :mod:`ctxleak.methods.influence.decoys`) or when the
answer copied it (:mod:`.copying`). The ledger ranks documents by leak: in how many answers
they leaked, then their largest influence above the threshold (nats); the volume, the sum of
their influence over every answer whose context held them, is a separate column
(``influence_sum``). It also keeps how often each was retrieved, its class and budget
(:mod:`.budgets`), the questions it moved most, and the PII it carries that an answer repeated
(secrets and personal data, found by Presidio and detect-secrets:
:mod:`ctxleak.sensitive`).

Under bounded Context Influence Decoding every released token is ε-DP for any part of the
context (App. B, Thm B.1), so for any one document: a document answered in answers of
K released tokens in all has the guarantee ``K·ε`` by basic composition (pure ε-DP), and, since
an ε-DP mechanism is ε²/2-zCDP (Bun and Steinke 2016, Prop. 3.3), the tighter
``(ε', δ)``-DP of K such tokens by Rényi-DP composition converted at δ (Balle et al. 2020),
through :class:`~ctxleak.mitigations.accounting.RDPAccountant`. These are guarantees; the
influence sums are measured on the answers actually given.

The ledger is built in one streaming pass (:meth:`DocumentLedger.add` per record): its memory
grows with the number of distinct documents, not with the number of answers.
"""

from __future__ import annotations

import hashlib
import heapq
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ctxleak.methods.ids import user_id
from ctxleak.methods.rag.budgets import (
    CLASS_FIELD,
    PUBLIC,
    Budgets,
    breach_text,
    document_class,
    exposure_text,
    over,
)
from ctxleak.methods.rag.judged import leaked_passages
from ctxleak.mitigations.accounting import DEFAULT_ORDERS, PrivacyEvent, RDPAccountant
from ctxleak.sensitive import carried_values, value_in

#: δ of the tighter (ε', δ)-DP composition of a document's bounded-CID tokens.
COMPOSITION_DELTA = 1e-6
#: How many of a document's answers with the most influence the ledger keeps.
TOP_QUERIES = 3
BASIC = "basic composition: ε per released token × tokens (pure ε-DP, δ = 0)"
ZCDP = ("Rényi-DP composition of ε-DP tokens, each ε²/2-zCDP (Bun and Steinke 2016), as "
        f"(ε, δ)-DP at δ = {COMPOSITION_DELTA:g}")


@dataclass(frozen=True)
class PureDPEvent(PrivacyEvent):
    """An ε-DP mechanism as Rényi-DP: ``min(α ε²/2, ε)`` at order α (ε²/2-zCDP, Bun and
    Steinke 2016, Prop. 3.3, and never more than ε)."""

    epsilon: float

    def rdp(self, orders: np.ndarray) -> np.ndarray:
        a = np.asarray(orders, dtype=np.float64)
        eps = float(self.epsilon)
        return np.minimum(a * eps * eps / 2.0, eps)


def composed_guarantees(eps_per_token: float, tokens: int) -> dict[str, Any]:
    """The DP guarantee of ``tokens`` released tokens each ε-DP for the document: basic
    composition ``tokens × ε`` (δ = 0), and the tighter Rényi-DP one at
    :data:`COMPOSITION_DELTA` (never above the basic one, which holds at δ = 0 too)."""
    basic = float(eps_per_token) * tokens
    tight = basic
    if tokens > 0 and eps_per_token > 0:
        accountant = RDPAccountant(DEFAULT_ORDERS).compose(PureDPEvent(eps_per_token), tokens)
        tight = min(basic, accountant.get_epsilon(COMPOSITION_DELTA))
    return {"eps_basic": basic, "eps_tight": tight, "delta": COMPOSITION_DELTA,
            "composition": ZCDP if tight < basic else BASIC}


def document_key(text: str) -> str:
    """What makes two retrieved documents one: their text with its whitespace collapsed (its
    SHA-256, shortened). The loader refuses one id with two texts, so a document's id names
    one text; chunks re-cut with new ids but the same text stay one document."""
    plain = " ".join(text.split())
    return hashlib.sha256(plain.encode("utf-8")).hexdigest()[:16]


def short_name(text: str, words: int = 6) -> str:
    """A document without an id, as a table shows it: its first words."""
    parts = text.split()
    return " ".join(parts[:words]) + (" …" if len(parts) > words else "")


@dataclass
class DocumentExposure:
    """One document's line of the ledger (see the module); influence in nats."""

    key: str
    name: str
    source: str | None
    text: str
    retrieved: int = 0
    scored: int = 0
    flagged: int = 0
    influence_sum: float = 0.0
    influence_max: float = 0.0
    tokens: int = 0
    influence_per_token_max: float = 0.0
    eps_per_token: float | None = None
    released_tokens: int = 0
    pii: dict[str, str] = field(default_factory=dict)
    pii_in_answers: dict[str, str] = field(default_factory=dict)
    # (influence, order of arrival, example id, setting, query) of the answers it moved most
    top: list[tuple[float, int, str, str, str]] = field(default_factory=list)
    cls: str | None = None
    leaked: int = 0  # answers in which it was judged leaked
    leak_sum: float = 0.0  # nats above the per-document threshold, summed over those answers
    leak_max: float | None = None
    copied: int = 0  # answers that copied it
    worst: tuple[float, str] | None = None  # (nats above the threshold, answer id), largest
    first_copy: tuple[str, str] | None = None  # (answer id, what it copied), the first

    def judge(self, answer: str, above: float | None, copies: Sequence[Mapping[str, Any]],
              flagged: bool) -> None:
        """Count one answer in which this document was judged leaked: ``above`` nats over the
        threshold (None: judged by a copy alone), ``copies`` what the answer copied of it."""
        self.leaked += 1
        self.flagged += int(flagged)
        if above is not None and above > 0:
            self.leak_sum += above
            self.leak_max = above if self.leak_max is None else max(self.leak_max, above)
            if self.worst is None or above > self.worst[0]:
                self.worst = (above, answer)
        if copies:
            self.copied += 1
            if self.first_copy is None:
                self.first_copy = (answer, str(copies[0].get("shown", copies[0]["text"])))

    def to_row(self) -> dict[str, Any]:
        """The line as plain data (results.json, pandas)."""
        row: dict[str, Any] = {
            "document": self.name, "source": self.source, "class": self.cls,
            "retrieved": self.retrieved, "scored": self.scored, "leaked": self.leaked,
            "leak_max": self.leak_max, "leak_sum": self.leak_sum, "copied": self.copied,
            "worst_answer": None if self.worst is None
            else {"id": self.worst[1], "above": self.worst[0]},
            "first_copy": None if self.first_copy is None
            else {"id": self.first_copy[0], "text": self.first_copy[1]},
            "flagged": self.flagged,
            "influence_sum": self.influence_sum, "influence_max": self.influence_max,
            "influence_per_token": self.influence_sum / self.tokens if self.tokens else None,
            "influence_per_token_max": self.influence_per_token_max,
            "top_queries": [{"id": i, "setting": s, "query": q, "influence": v}
                            for v, _, i, s, q in sorted(self.top, key=lambda t: (-t[0], -t[1]))],
            "pii_in_answers": [{"text": k, "type": v} for k, v in self.pii_in_answers.items()],
            "pii_carried": len(self.pii), "text": self.text}
        if self.eps_per_token is not None:
            row.update(eps_per_token=self.eps_per_token, released_tokens=self.released_tokens,
                       **composed_guarantees(self.eps_per_token, self.released_tokens))
        return row


class DocumentLedger:
    """The ledger of one setting, built record by record (:meth:`add`), then :meth:`rows`."""

    def __init__(self, top_queries: int = TOP_QUERIES, threshold: float | None = None,
                 class_field: str = CLASS_FIELD) -> None:
        self.documents: dict[str, DocumentExposure] = {}
        self.top_queries = top_queries
        self.threshold = threshold  # the per-document control's (nats); None: copies only
        self.class_field = class_field
        self._arrived = 0

    def add(self, record: Mapping[str, Any], query: str = "", flagged: bool = False) -> None:
        """Count one answer: each document of its context (``passages`` with their
        ``passage_ids``, ``passage_sources``, ``passage_metadata`` and ``passage_influence``),
        and those judged leaked in it (:func:`.judged.leaked_passages`; ``flagged``: the answer
        is flagged beyond the example control)."""
        texts: Sequence[str] = record.get("passages") or ()
        if not texts:
            return
        ids = record.get("passage_ids") or [None] * len(texts)
        meta = record.get("passage_metadata") or [None] * len(texts)
        leaks = leaked_passages(record, self.threshold)
        sources = record.get("passage_sources") or [None] * len(texts)
        influence = record.get("passage_influence") or [None] * len(texts)
        n_tokens = len(record.get("response_ids") or ())
        answer = str(record.get("response") or "")
        eps = record.get("eps")
        released = len(record.get("lambdas") or ()) if eps is not None else 0
        self._arrived += 1
        for j, text in enumerate(texts):
            # a passage without an id is numbered by its rank: named by its words
            doc_id = ids[j] if ids[j] not in (None, str(j + 1)) else None
            key = document_key(text)
            doc = self.documents.get(key)
            if doc is None:
                doc = DocumentExposure(key=key, source=sources[j], text=text,
                                       name=str(doc_id) if doc_id is not None
                                       else short_name(text), pii=carried_values(text),
                                       cls=document_class(meta[j] if j < len(meta) else None,
                                                          self.class_field))
                self.documents[key] = doc
            doc.retrieved += 1
            if j in leaks:
                doc.judge(str(user_id(dict(record))), leaks[j],
                          [c for c in record.get("copied") or () if c.get("passage") == j],
                          flagged)
            if eps is not None:
                doc.eps_per_token = float(eps)
                doc.released_tokens += released
            value = influence[j] if j < len(influence) else None
            if value is None:  # cut out of the context: not scored
                continue
            value = float(value)
            doc.scored += 1
            doc.influence_sum += value
            doc.influence_max = max(doc.influence_max, value)
            doc.tokens += n_tokens
            if n_tokens:
                doc.influence_per_token_max = max(doc.influence_per_token_max, value / n_tokens)
            entry = (value, -self._arrived, str(record.get("id", "")),
                     str(record.get("setting", "")), query)
            if len(doc.top) < self.top_queries:
                heapq.heappush(doc.top, entry)
            else:
                heapq.heappushpop(doc.top, entry)
            for pii, kind in doc.pii.items():
                if pii not in doc.pii_in_answers and value_in(pii, kind, answer):
                    doc.pii_in_answers[pii] = kind

    def rows(self, budgets: Budgets | None = None) -> list[dict[str, Any]]:
        """Every document, most leaked first: by the answers in which it leaked, then its
        largest influence above the per-document threshold, then the sum of its influence
        (volume), its largest, how often it was retrieved; documents of class ``public`` after
        all others (what they hold is public: a copy of it is a use, reported, not a leak to
        rank above a private one). Each with its ``budget`` (nats, :class:`.budgets.Budgets`)
        and whether it is ``over_budget``."""
        docs = sorted(self.documents.values(),
                      key=lambda d: (d.cls == PUBLIC, -d.leaked, -(d.leak_max or 0.0),
                                     -d.influence_sum, -d.influence_max, -d.retrieved, d.name))
        rows = [d.to_row() for d in docs]
        for row in rows:
            row["budget"] = None if budgets is None else budgets.of(row["document"],
                                                                    row["class"])
            row["over_budget"] = over(row)
        return rows


def document_ledger(records: Iterable[dict[str, Any]], queries: Mapping[str, str],
                    flagged: Iterable[str] = (), threshold: float | None = None,
                    budgets: Budgets | None = None) -> list[dict[str, Any]]:
    """The ledger of one setting's ``records`` (:class:`DocumentLedger`): ``queries`` maps an
    example's id to its question, ``flagged`` holds the ids of the examples flagged beyond
    the control, ``threshold`` is the per-document control's (nats; None: documents are
    judged leaked only where copied), ``budgets`` give each document its budget."""
    flagged_ids = set(flagged)
    ledger = DocumentLedger(threshold=threshold,
                            class_field=budgets.class_field if budgets else CLASS_FIELD)
    for record in records:
        rid = user_id(record)
        ledger.add(record, queries.get(rid, ""), rid in flagged_ids)
    return ledger.rows(budgets)


def over_budget(rows: Sequence[Mapping[str, Any]], budget: float | None) -> list[str]:
    """The documents whose total influence over all answers (``influence_sum``, nats) exceeds
    ``budget``; none without a budget."""
    if budget is None:
        return []
    return [str(r["document"]) for r in rows
            if math.isfinite(float(r["influence_sum"])) and float(r["influence_sum"]) > budget]


def documents_summary(records: Iterable[dict[str, Any]], queries: Mapping[str, str],
                      flagged: Iterable[str], budget: float | None,
                      budgets: Budgets | None = None, threshold: float | None = None
                      ) -> dict[str, Any]:
    """A setting's summary keys for its documents: ``documents`` (the ledger, most leaked
    first); with a ``budget`` (nats), ``exposure_budget`` and the documents whose summed
    influence exceeds it; with ``budgets`` per class or document, those whose leak exceeds
    theirs. ``over_budget`` names both; ``budget_breaches`` says of each which answer and by
    how much (the CI gate's lines)."""
    rows = document_ledger(records, queries, flagged, threshold, budgets)
    out: dict[str, Any] = {"documents": rows}
    names: list[str] = []
    breaches: list[str] = []
    if budget is not None:
        out["exposure_budget"] = float(budget)
        names = over_budget(rows, budget)
        breaches = [exposure_text(r, float(budget)) for r in rows if r["document"] in names]
    if budgets is not None and budgets.any:
        out["class_field"] = budgets.class_field
        out["class_budgets"] = dict(budgets.classes)
        out["document_budgets"] = dict(budgets.documents)
        for row in rows:
            if row["over_budget"]:
                breaches.append(breach_text(row))
                if row["document"] not in names:
                    names.append(row["document"])
    if budget is not None or (budgets is not None and budgets.any):
        out.update(over_budget=names, budget_breaches=breaches)
    return out


__all__ = ["BASIC", "COMPOSITION_DELTA", "DocumentExposure", "DocumentLedger", "PureDPEvent",
           "ZCDP", "composed_guarantees", "document_key", "document_ledger",
           "documents_summary", "over_budget", "short_name"]
