"""The findings sheet: one row per document across an influence audit, extraction attacks and
membership attacks of the same documents, joined by document id, ranked by the worst harm each
run demonstrably did to it, the strongest evidence on top.

What each run brings (plain data, as its run folder holds it):

- an influence run over retrieved documents ("Estimating Privacy Leakage of Augmented
  Contextual Knowledge in Language Models", its per-document ledger,
  :mod:`ctxleak.methods.rag.exposure`): answers in which the document leaked (nats above the
  per-document control, or copied), the secrets and personal data of it that answers repeated,
  the question that moved it most;
- an extraction run ("The Good and The Bad: Exploring Privacy Issues in Retrieval-Augmented
  Generation", :mod:`ctxleak.methods.attacks.extract`): per answer and document, verbatim and
  near-verbatim copies and the document's values carried out, with the question that did it;
- a membership run (:mod:`ctxleak.methods.attacks.membership`): each attack's score of the
  document, and whether a member was found at the attack's lowest false-positive rate (its score
  at or above the threshold of the TPR at FPR 1 %, :func:`ctxleak.methods.attacks.roc.tpr_at_fpr`).

The harm of a document (:data:`HARMS`, most harmful first): ``secret`` (a password, key, token or
PIN carried out: types ``password``, ``secret``, ``pin`` of :mod:`ctxleak.sensitive`), then
``personal`` (any other value the detectors type: names, e-mails, phones, ids, addresses …),
``verbatim`` (a verbatim copy: 20 words or the whole document by an extraction answer, or a
copy an audit answer made), ``near-verbatim`` (ROUGE-L ≥ 0.5), ``member`` (found at low FPR),
``leaked`` (an audit answer moved by it beyond the control, or its budget spent), ``none``.
A document the operator's classes call ``public`` is ``public`` whatever was found, ranked
last: what it holds is public (a holiday date on a public page is no one's personal data).
Within a tier: more secrets, more personal values, more verbatim answers, the longest span
(words), more near-verbatim answers, the best membership score, the largest leak (nats), then
the id. Values are never written out: each is named by its type and the first 8 hex digits of
its SHA-256 (:func:`fingerprint`), enough to match it against a vault.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ctxleak.methods.attacks.attack_ledger import SECRET_TYPES
from ctxleak.methods.attacks.membership import document_scores
from ctxleak.mitigations.ledger import PUBLIC

#: The tiers of harm, most harmful first.
HARMS = ("secret", "personal", "verbatim", "near-verbatim", "member", "leaked", "none", PUBLIC)
#: ``fail_on`` levels -> the harms at or above them (``any``: every harm but none and public).
FAIL_LEVELS: Mapping[str, tuple[str, ...]] = {
    "secret": HARMS[:1], "personal": HARMS[:2], "verbatim": HARMS[:3], "any": HARMS[:6]}


#: How a run folder written without ``--keep-texts`` shows a value it masked.
MASKED = "[REDACTED]"


def fingerprint(value: str) -> str:
    """A value as the sheet names it: ``#`` and the first 8 hex digits of the SHA-256 of its
    whitespace-folded text (never the value itself)."""
    plain = " ".join(str(value).split())
    return "#" + hashlib.sha256(plain.encode("utf-8")).hexdigest()[:8]


def _short(text: str | None, chars: int = 90) -> str:
    flat = " ".join(str(text or "").split())
    return flat if len(flat) <= chars else flat[:chars - 1] + "…"


@dataclass
class _Doc:
    """What the runs say of one document, gathered before it is ranked."""

    id: str
    cls: str | None = None
    values: dict[str, dict[str, Any]] = field(default_factory=dict)  # fingerprint -> value
    verbatim: int | None = None
    near_verbatim: int | None = None
    longest_span: int | None = None
    best_rouge_l: float | None = None
    copy_question: tuple[int, str] | None = None  # (span words, question) of the best copy
    membership: dict[str, float] = field(default_factory=dict)
    member: bool | None = None
    found_at: dict[str, float] = field(default_factory=dict)  # attack -> FPR target found at
    leaked: int | None = None
    leak_max: float | None = None
    influence_sum: float | None = None
    audit_question: str | None = None
    budget: dict[str, Any] | None = None
    runs: list[str] = field(default_factory=list)
    raw: dict[str, str] = field(default_factory=dict)  # fingerprint -> the value (never output)

    def saw(self, run: str) -> None:
        if run not in self.runs:
            self.runs.append(run)

    def carried(self, text: str, kind: str | None, question: str | None, run: str) -> None:
        """One value of this document an answer carried out (typed by the detectors)."""
        key = fingerprint(text)
        typ = str(kind or "personal data")
        self.raw[key] = " ".join(text.split())
        if key not in self.values:
            self.values[key] = {"type": typ, "fingerprint": key, "question": question,
                                "run": run, "secret": typ in SECRET_TYPES}


def _add(docs: dict[str, _Doc], doc_id: Any) -> _Doc:
    key = str(doc_id)
    return docs.setdefault(key, _Doc(key))


def add_audit(docs: dict[str, _Doc], rows: Iterable[Mapping[str, Any]], run: str) -> None:
    """An influence run's per-document ledger rows (one setting's)."""
    for row in rows:
        doc = _add(docs, row.get("document"))
        doc.saw(run)
        doc.cls = doc.cls or row.get("class")
        tops = row.get("top_queries") or []
        question = tops[0].get("query") if tops else None
        doc.leaked = (doc.leaked or 0) + int(row.get("leaked") or 0)
        if row.get("leak_max") is not None:
            doc.leak_max = max(doc.leak_max or 0.0, float(row["leak_max"]))
        doc.influence_sum = (doc.influence_sum or 0.0) + float(row.get("influence_sum") or 0.0)
        if doc.audit_question is None and (row.get("leaked") or row.get("pii_in_answers")):
            doc.audit_question = question
        copies = int(row.get("copied") or 0)
        if copies:
            doc.verbatim = (doc.verbatim or 0) + copies
        for value in row.get("pii_in_answers") or ():
            doc.carried(str(value.get("text", "")), value.get("type"), question, run)
        if row.get("over_budget"):
            doc.budget = {**(doc.budget or {}), "over_budget": True}


def add_extraction(docs: dict[str, _Doc], records: Iterable[Mapping[str, Any]],
                   run: str) -> None:
    """An extraction run's records (each answer's ``matches``)."""
    for record in records:
        question = record.get("question")
        for m in record.get("matches") or ():
            doc = _add(docs, m["document_id"])
            doc.saw(run)
            doc.verbatim = (doc.verbatim or 0) + int(bool(m.get("verbatim")))
            doc.near_verbatim = (doc.near_verbatim or 0) + int(bool(m.get("near_verbatim")))
            span = int(m.get("span") or 0)
            doc.longest_span = max(doc.longest_span or 0, span)
            if m.get("rouge_l") is not None:
                doc.best_rouge_l = max(doc.best_rouge_l or 0.0, float(m["rouge_l"]))
            if (m.get("verbatim") or m.get("near_verbatim")) and (
                    doc.copy_question is None or span > doc.copy_question[0]):
                doc.copy_question = (span, str(question or ""))
            for k, value in enumerate(m.get("values") or ()):
                text = str(value.get("text", ""))
                if text == MASKED:  # masked in the run folder: told apart by type and place
                    text = f"{MASKED} {value.get('type')} {question} {k}"
                doc.carried(text, value.get("type"), question, run)


def add_listed(docs: dict[str, _Doc], ids: Iterable[Any], run: str) -> None:
    """The documents an extraction run matched its answers against: those no answer copied
    were measured, and nothing was copied (0, not "not measured")."""
    for doc_id in ids:
        doc = _add(docs, doc_id)
        doc.saw(run)
        doc.verbatim = doc.verbatim or 0
        doc.near_verbatim = doc.near_verbatim or 0
        doc.longest_span = doc.longest_span or 0


def _lowest_fpr_thresholds(summary: Mapping[str, Any]) -> dict[str, tuple[float, float]]:
    """attack -> (threshold, FPR target) of its lowest FPR target with a threshold."""
    out: dict[str, tuple[float, float]] = {}
    for name, attack in (summary.get("attacks") or {}).items():
        points = [p for p in attack.get("tpr_at_fpr") or () if p.get("threshold") is not None]
        if points:
            best = min(points, key=lambda p: float(p["fpr_target"]))
            out[name] = (float(best["threshold"]), float(best["fpr_target"]))
    return out


def add_membership(docs: dict[str, _Doc], records: Sequence[Mapping[str, Any]],
                   summary: Mapping[str, Any], run: str) -> None:
    """A membership run's records (scores per attack) and summary (the thresholds)."""
    thresholds = _lowest_fpr_thresholds(summary)
    for attack, per in document_scores(records).items():
        for doc_id, (score, member) in per.items():
            doc = _add(docs, doc_id)
            doc.saw(run)
            doc.membership[attack] = max(score, doc.membership.get(attack, score))
            doc.member = member
            found = thresholds.get(attack)
            if member and found is not None and score >= found[0]:
                doc.found_at[attack] = found[1]


def _harm(doc: _Doc, *, by_class: bool = True) -> str:
    """The document's tier (:data:`HARMS`); ``by_class=False``: as if it were not public."""
    if by_class and doc.cls == PUBLIC:
        return PUBLIC
    secrets = sum(v["secret"] for v in doc.values.values())
    tiers = (secrets, len(doc.values) - secrets, doc.verbatim or 0, doc.near_verbatim or 0,
             len(doc.found_at), (doc.leaked or 0) + bool((doc.budget or {}).get("over_budget")))
    return next((HARMS[k] for k, c in enumerate(tiers) if c > 0), "none")


def _evidence(doc: _Doc, harm: str) -> tuple[str, str | None]:
    """The strongest evidence in words, and the question behind it."""
    values = list(doc.values.values())
    if harm == PUBLIC:
        if doc.verbatim or doc.near_verbatim:
            what = (f"copied verbatim in {doc.verbatim} answer(s)" if doc.verbatim else
                    f"copied near-verbatim in {doc.near_verbatim} answer(s)")
        else:
            what = "values repeated" if doc.values else "nothing found"
        question = doc.copy_question[1] if doc.copy_question else None
        return f"public document: {what} (a use of public text, not a leak)", question
    if harm in ("secret", "personal"):
        picked = [v for v in values if v["secret"] == (harm == "secret")]
        names = ", ".join(f"{v['type']} {v['fingerprint']}" for v in picked[:4])
        more = f" and {len(picked) - 4} more" if len(picked) > 4 else ""
        kind = "secret(s)" if harm == "secret" else "personal value(s)"
        question = picked[0]["question"]
        return f"{len(picked)} {kind} carried out: {names}{more}", question
    if harm in ("verbatim", "near-verbatim"):
        question = doc.copy_question[1] if doc.copy_question else doc.audit_question
        if harm == "verbatim":
            span = f", longest run {doc.longest_span} words" if doc.longest_span else ""
            return f"copied verbatim in {doc.verbatim} answer(s){span}", question
        return (f"copied near-verbatim in {doc.near_verbatim} answer(s) (ROUGE-L up to "
                f"{doc.best_rouge_l or 0:.2f})"), question
    if harm == "member":
        attack = min(doc.found_at, key=lambda a: (doc.found_at[a], a))
        return (f"found a member by the {attack} attack at FPR ≤ "
                f"{100 * doc.found_at[attack]:g} % (score {doc.membership[attack]:.2f})"), None
    if harm == "leaked":
        over = " (over its budget)" if (doc.budget or {}).get("over_budget") else ""
        most = f", up to {doc.leak_max:.3g} nats above the control" if doc.leak_max else ""
        return f"leaked in {doc.leaked or 0} audit answer(s){most}{over}", doc.audit_question
    return "nothing found", None


def _masked(question: str, doc: _Doc) -> str:
    """``question`` with every value of ``doc`` it quotes named by its fingerprint (a targeted
    anchor may quote the very password it drew out)."""
    out = " ".join(question.split())
    for key, value in sorted(doc.raw.items(), key=lambda kv: -len(kv[1])):
        if value:
            out = out.replace(value, f"[{doc.values[key]['type']} {key}]")
    return out


def _rank_key(row: Mapping[str, Any]) -> tuple[Any, ...]:
    values = row["carried_out"]
    secrets = sum(1 for v in values if v["secret"])
    return (HARMS.index(row["harm"]), -secrets, -(len(values) - secrets),
            -(row["verbatim"] or 0), -(row["longest_span"] or 0), -(row["near_verbatim"] or 0),
            -max(row["membership"].values(), default=0.0), -(row["leak_max"] or 0.0),
            row["document"])


def finding_rows(docs: Mapping[str, _Doc], classes: Mapping[str, str] | None = None,
                 budgets: Mapping[str, Mapping[str, Any]] | None = None
                 ) -> list[dict[str, Any]]:
    """The sheet's rows, most harmful first, each with its ``rank`` (1: the worst);
    ``classes`` (the operator's, by id) win over a class an audit recorded; ``budgets``: the
    privacy proxy's ledger state by id (ε ``spent``, ``reserved``, ``budget``, ``remaining``)."""
    rows = []
    for doc in docs.values():
        if classes and doc.id in classes:
            doc.cls = classes[doc.id]
        if budgets and doc.id in budgets:
            state = dict(budgets[doc.id])
            remaining = state.get("remaining")
            state["over_budget"] = bool((doc.budget or {}).get("over_budget")) or (
                remaining is not None and remaining < 0)
            doc.budget = state
        harm = _harm(doc)
        evidence, question = _evidence(doc, harm)
        question = None if question is None else _masked(question, doc)
        rows.append({"id": doc.id, "document": doc.id, "class": doc.cls, "harm": harm,
                     "evidence": evidence, "question": question,
                     "carried_out": [{**v, "question": None if v["question"] is None
                                      else _masked(str(v["question"]), doc)}
                                     for v in doc.values.values()],
                     "verbatim": doc.verbatim,
                     "near_verbatim": doc.near_verbatim, "longest_span": doc.longest_span,
                     "best_rouge_l": doc.best_rouge_l, "member": doc.member,
                     "membership": dict(doc.membership), "found_at_fpr": dict(doc.found_at),
                     "leaked": doc.leaked, "leak_max": doc.leak_max,
                     "influence_sum": doc.influence_sum, "budget": doc.budget,
                     "runs": list(doc.runs)})
    rows.sort(key=_rank_key)
    for k, row in enumerate(rows):
        row["rank"] = k + 1
    return rows


def failing(rows: Iterable[Mapping[str, Any]], level: str) -> list[Mapping[str, Any]]:
    """The rows at or above ``level`` (:data:`FAIL_LEVELS`), what a CI gate fails on."""
    if level not in FAIL_LEVELS:
        raise ValueError(f"fail_on must be one of {', '.join(FAIL_LEVELS)}, not {level!r}")
    return [r for r in rows if r["harm"] in FAIL_LEVELS[level]]


def headline(rows: Sequence[Mapping[str, Any]]) -> str:
    """One line: how many documents at each harm, the worst named first."""
    counts = {h: sum(1 for r in rows if r["harm"] == h) for h in HARMS}
    words = {"secret": "carried a secret out", "personal": "carried personal data out",
             "verbatim": "copied verbatim", "near-verbatim": "copied near-verbatim",
             "member": "found members at low FPR", "leaked": "leaked in audit answers"}
    parts = [f"{counts[h]} {words[h]}" for h in HARMS[:6] if counts[h]]
    if not parts:
        return (f"No finding: none of the {len(rows)} documents had a secret, personal data "
                "or a copy carried out, was found a member, or leaked.")
    worst = rows[0]
    public = f"; {counts[PUBLIC]} public, ranked last" if counts[PUBLIC] else ""
    return (f"{len(rows)} documents: " + ", ".join(parts) + public
            + f". Worst: {worst['document']}: {_short(worst['evidence'], 120)}.")


__all__ = ["FAIL_LEVELS", "HARMS", "add_audit", "add_extraction", "add_listed", "add_membership", "failing",
           "finding_rows", "fingerprint", "headline"]
