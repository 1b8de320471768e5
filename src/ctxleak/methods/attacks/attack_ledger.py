"""One line per document, from the attacks' side: what an attacker who can only ask questions
demonstrably got of it.

The RAG audit's ledger (:mod:`ctxleak.methods.rag.exposure`) says how much each document moved
the answers (influence, "Estimating Privacy Leakage of Augmented Contextual Knowledge in
Language Models"); this one says what came out of the black box:

- ``verbatim`` / ``near_verbatim``: the extraction answers that copied it
  (:mod:`.extract`: a span of 20 words or the whole document / ROUGE-L ≥ 0.5), with its
  longest span (words) and largest ROUGE-L;
- ``values``: its secrets and personal data that some answer carried out (distinct values);
- ``membership``: each membership attack's score of it (:mod:`.membership`, 0 to 1: the
  fraction of its queries answered as only a system holding it would; the calibrated attack's
  a difference of two such fractions, −1 to 1) and whether it is a ``member``.

Where an influence run of the same corpus has a per-document ledger, its rows are joined by
document id (their ``document`` field) under ``influence``. Documents are ranked by harm, what
an attacker demonstrably got that hurts most, and ``harm`` names the tier (:data:`HARMS`):
secrets and credentials carried out (passwords, keys, PINs), then personal data, then verbatim
copies, then near-verbatim copies, then membership (a member's largest score), then nothing;
within a tier by the counts of each, in that order, then the id. With the operator's classes
(``classes``, the privacy proxy's ``--classes`` file), a document of class ``public`` is ranked
last, its tier ``public`` whatever was copied of it: what it holds is public, so a date on a
holiday page is no one's personal data. A measure no attack of the
run took (no extraction records: no copies were looked for) is None, shown as not measured,
never 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ctxleak.methods.attacks.extract import AttackDocument
from ctxleak.methods.attacks.membership import document_scores
from ctxleak.mitigations.ledger import PUBLIC

#: The tiers of harm, most harmful first (the ledger's ``harm`` column).
HARMS = ("secrets", "personal data", "verbatim", "near-verbatim", "membership", "none",
         "public")
#: The value types that are secrets and credentials (:data:`ctxleak.sensitive.SENSITIVE_TYPES`);
#: every other type carried out is personal data.
SECRET_TYPES = frozenset({"password", "secret", "pin"})
#: The fields only an extraction attack measures.
EXTRACTION_FIELDS = ("verbatim", "near_verbatim", "longest_span", "values")

#: The influence ledger's fields carried into a joined row.
INFLUENCE_FIELDS = ("retrieved", "leaked", "leak_max", "copied", "influence_sum",
                    "influence_max", "influence_per_token", "pii_carried")


def _empty(doc_id: str) -> dict[str, Any]:
    return {"document": doc_id, "class": None, "verbatim": 0, "near_verbatim": 0, "longest_span": 0,
            "best_rouge_l": None, "values": [], "membership": {}, "member": None,
            "influence": None}


def _add_extraction(rows: dict[str, dict[str, Any]],
                    records: Sequence[Mapping[str, Any]]) -> None:
    for record in records:
        for m in record.get("matches") or ():
            row = rows.setdefault(m["document_id"], _empty(m["document_id"]))
            row["verbatim"] += int(m["verbatim"])
            row["near_verbatim"] += int(m["near_verbatim"])
            row["longest_span"] = max(row["longest_span"], int(m["span"]))
            if m["rouge_l"] is not None:
                row["best_rouge_l"] = max(row["best_rouge_l"] or 0.0, float(m["rouge_l"]))
            for value in m["values"]:
                if value not in row["values"]:
                    row["values"].append(dict(value))


def _counts(row: Mapping[str, Any]) -> tuple[int, int, int, int, float]:
    """Secrets, personal values, verbatim and near-verbatim copies, and a member's best
    membership score (0 for what was not measured)."""
    values = row["values"] or []
    secrets = sum(1 for v in values if v.get("type") in SECRET_TYPES)
    best = max(row["membership"].values(), default=0.0) if row["member"] else 0.0
    return (secrets, len(values) - secrets, row["verbatim"] or 0, row["near_verbatim"] or 0,
            best)


def harm(row: Mapping[str, Any]) -> str:
    """The row's tier of harm (:data:`HARMS`): the most harmful thing an attack got
    (``public`` for a document of that class)."""
    if row.get("class") == PUBLIC:
        return "public"
    counts = _counts(row)
    first = next((k for k, c in enumerate(counts) if c > 0), len(counts))
    return HARMS[first]


def _rank_key(row: Mapping[str, Any]) -> tuple[Any, ...]:
    return (HARMS.index(row["harm"]), *(-c for c in _counts(row)), row["document"])


def attack_ledger(documents: Sequence[AttackDocument | str] = (), *,
                  extraction: Sequence[Mapping[str, Any]] = (),
                  membership: Sequence[Mapping[str, Any]] = (),
                  influence: Sequence[Mapping[str, Any]] | None = None,
                  classes: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """The ledger's rows, most harmful first (module docstring), each with its ``harm`` and
    ``rank`` (1 is the most harmful). ``documents``: every document to list (ids or documents), also those
    no attack touched; ``extraction``/``membership``: the attacks' records; ``influence``: an
    influence run's per-document ledger rows (joined on their ``document`` field);
    ``classes``: the operator's class of each document id (``class`` of each row)."""
    rows: dict[str, dict[str, Any]] = {}
    for doc in documents:
        doc_id = doc.id if isinstance(doc, AttackDocument) else str(doc)
        rows.setdefault(doc_id, _empty(doc_id))
    _add_extraction(rows, extraction)
    for attack, per in document_scores(membership).items():
        for doc_id, (score, member) in per.items():
            row = rows.setdefault(doc_id, _empty(doc_id))
            row["membership"][attack] = score
            row["member"] = member
    if influence is not None:
        joined = {str(r.get("document")): r for r in influence}
        for doc_id, row in rows.items():
            found = joined.get(doc_id)
            row["influence"] = None if found is None else {
                k: found.get(k) for k in INFLUENCE_FIELDS if k in found}
    if not extraction:  # nothing looked for copies: not measured, never 0
        for row in rows.values():
            row.update(dict.fromkeys(EXTRACTION_FIELDS))
    for row in rows.values():
        row["class"] = (classes or {}).get(row["document"])
        row["harm"] = harm(row)
    ranked = sorted(rows.values(), key=_rank_key)
    for k, row in enumerate(ranked):
        row["rank"] = k + 1
    return ranked


__all__ = ["EXTRACTION_FIELDS", "HARMS", "INFLUENCE_FIELDS", "SECRET_TYPES", "attack_ledger",
           "harm"]
