"""The summary of one influence setting: expected context influence (Def. 3.3) with its
intervals, per position and per window, quality, the control and the top passages ("Estimating
Privacy Leakage of Augmented Contextual Knowledge in Language Models")."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ctxleak.methods.ids import user_id
from ctxleak.methods.influence.control import TOKEN_RULE, control_summary
from ctxleak.methods.influence.decoys import document_control
from ctxleak.methods.influence.metrics import (
    mean_curve,
    mean_with_ci,
)
from ctxleak.methods.influence.quantities import expected_influence
from ctxleak.methods.influence.units import UNITS, dp_scale, likelihood_ratio
from ctxleak.methods.rag.budgets import CLASS_FIELD
from ctxleak.methods.tradeoff.facts import fact_groups
from ctxleak.run.stored import without_fields

#: Per-token and per-context fields of a record, which the control's summary and the frontier
#: (which keep the rows they read) do not read: left out of the rows handed to them.
HEAVY_FIELDS = frozenset({
    "context_token_strings", "response_token_strings", "logp_context", "logp_empty",
    "token_influence", "control_token_influence", "passages", "passage_metadata",
    "passage_spans", "passage_sources", "passage_scores", "passage_ranks", "known_tokens",
    "copied_tokens", "response_ids", "window_influence", "lambdas", "response", "query",
    "context", "reference", "references"})


def summarize_setting(records: Sequence[dict[str, Any]], seed: int = 0,
                      control_cost: dict[str, Any] | None = None,
                      class_field: str = CLASS_FIELD) -> dict[str, Any]:
    """The summary of one setting: expected influence (nats per response, with a bootstrap
    interval) and per token, its reading as a likelihood ratio and as an ex-post ε
    (:mod:`.units`), the control (:func:`~.control.control_summary`, with ``control_cost``),
    regurgitation counts, utility (ROUGE-L, exact match and token F1 against the
    references; answer match, ``match``, where the records have it), per fact group where
    the records hold both (``fact_groups``, :func:`fact_groups`), the per-position curve
    and, for n-gram runs, the per-window curve; for runs with passages the most influential
    passages; for runs with retrieved documents the per-document control
    (:func:`~.decoys.document_control`, classes read from the metadata's ``class_field``).

    Records that do not know their context (a ledger's, :meth:`RowLedger.to_record
    <ctxleak.mitigations.ledger.RowLedger.to_record>`) give ``None`` for the
    regurgitation counts and the mean context size."""
    infl = [r["influence"] for r in records]
    scored = {k: [r[k] for r in records if r.get(k) is not None]
              for k in ("rouge_l", "exact_match", "f1")}
    matched = [r["match"] for r in records if r.get("match") is not None]
    first = records[0] if records else {}
    knows_context = all("context_tokens" in r for r in records)
    out: dict[str, Any] = {
        "setting": first.get("setting"), "lambda": first.get("lambda"),
        "temperature": first.get("temperature"), "n": len(records),
        "influence": expected_influence(infl, seed=seed),
        "mean_tokens": float(np.mean([len(r["response_ids"]) for r in records])) if records
        else None,
        "repeat_prompts": int(sum(r["repeat"] for r in records)) if knows_context else None,
        "rouge_prompts": int(sum(r["rouge_repeat"] for r in records)) if knows_context
        else None,
        # utility against the references (:mod:`ctxleak.methods.tradeoff.utility`): None where no
        # record has one
        **{k: mean_with_ci(v, seed=seed) if v else None for k, v in scored.items()},
        "per_position_influence": mean_curve(r["token_influence"] for r in records),
        "mean_context_tokens": float(np.mean([r["context_tokens"] for r in records]))
        if records and knows_context else None,
        # contexts cut to the model's window, and n-grams clipped to the context
        "truncated_contexts": sum(1 for r in records if r.get("context_truncated_by")),
        "context_tokens_cut": int(sum(r.get("context_truncated_by") or 0 for r in records)),
        "ngram_clipped": sum(1 for r in records if r.get("ngram_clipped_from")),
        "units": UNITS,
    }
    if matched:  # answer match (:func:`ctxleak.methods.tradeoff.utility.reference_scores`)
        out["match"] = mean_with_ci(matched, seed=seed)
    groups = fact_groups(records, seed=seed)
    if groups is not None:  # both fact groups: the frontier reads each where it belongs
        out["fact_groups"] = groups
    eps = first.get("eps", first.get("bounded_eps"))  # samples' key, a ledger record's
    if eps is not None:  # bounded CID: ε-DP per token of this setting
        out["bounded_eps"] = eps
    per_token = [r["influence"] / len(r["response_ids"]) for r in records if r["response_ids"]]
    out["influence_per_token"] = mean_with_ci(per_token, seed=seed)
    mean = out["influence"].get("mean")
    out["likelihood_ratio"] = likelihood_ratio(mean) if mean is not None else None
    if any("copied" in r or "passage_decoy_influence" in r for r in records):
        out["document_control"] = document_control(records, class_field)
    out["dp_reading"] = copying_reading(out.get("document_control")) or (
        dp_scale(mean) if mean is not None else None)
    # the control's summary keeps the rows it reads: handed them without their per-token and
    # per-context arrays, which it does not read
    out["control"] = control_summary(without_fields(records, HEAVY_FIELDS), control_cost)
    if knows_context and any("known_tokens" in r for r in records):
        out["context_tokens_known"] = int(sum(len(r.get("known_tokens") or [])
                                              for r in records))
        out["context_tokens_copied"] = int(sum(len(r.get("copied_tokens") or [])
                                               for r in records))
        out["token_rule"] = TOKEN_RULE
    if any(r.get("passage_influence") for r in records):
        out["top_passages"] = top_passage_rows(records)
    if any("window_influence" in r for r in records):
        curve = mean_curve(r["window_influence"] for r in records if "window_influence" in r)
        out["per_window_influence"] = curve
        out["max_window_influence"] = mean_with_ci(
            [r["max_window_influence"] for r in records
             if r.get("max_window_influence") is not None], seed=seed)
    if any("composed_eps" in r for r in records):
        for key in ("composed_eps", "composed_eps_ex_post"):
            out[key] = mean_with_ci([r[key] for r in records if r.get(key) is not None],
                                    seed=seed)
        out["mean_lambda"] = float(np.mean([np.mean(r["lambdas"]) for r in records
                                            if r.get("lambdas")]))
    return out


def copying_reading(documents: dict[str, Any] | None) -> str | None:
    """In place of a DP reading where answers copied a document: which, and that it leaked
    (no ε describes a verbatim copy); None where none copied."""
    copies = _copies(documents)
    if copies is None:
        return None
    return (f"not within any DP budget: {copies}, so that document leaked whatever ε the "
            "influence gives")


def _copies(documents: dict[str, Any] | None) -> str | None:
    """``N answer(s) copy a document verbatim or repeat its secret or PII value (e.g. q copies
    d)``; None where none copied."""
    copying = (documents or {}).get("copying_answers") or []
    if not copying or documents is None:
        return None
    first = next(x for x in documents["leaks"] if x["copied"])
    return (f"{len(copying)} answer(s) copy a document verbatim or repeat its secret or PII "
            f"value (e.g. {first['id']} copies {first['document']})")


def mechanism_reading(summary: dict[str, Any]) -> str:
    """How to read the influence of another mechanism than CID: its answers are scored as plain
    decoding would score them, so the nats are the model's likelihood ratio with and without
    the documents, not the mechanism's own privacy loss, which is what its claim bounds (read
    as ex-post DP only for answers drawn from the distribution that scores them, as CID's).
    A copied document is named first."""
    mechanism, claim = summary["mechanism"], summary.get("claim") or {}
    claimed = claim.get("eps_max") is not None and claim.get("relation") not in (None, "none")
    if not claimed:
        own = f"{mechanism} claims no DP guarantee"
    else:
        own = (f"{mechanism}'s own privacy loss is what its claim bounds, ε = "
               f"{claim['eps_max']:.3g} per response ({claim['relation']}){_spent(summary)}; "
               "the canary audit tests that claim")
    reading = ("not an ε: its answers are scored as plain decoding would score them (the "
               f"documents' influence on the model); {own}")
    documents = summary.get("document_control")
    copies = _copies(documents)
    if copies is None:
        return reading
    if not claimed:  # nothing bounds what the copied document did
        return f"{copying_reading(documents)}; {reading}"
    return (f"{copies}: the claim still bounds how much more likely that document made the "
            f"answer; {reading}")


def _spent(summary: dict[str, Any]) -> str:
    """The clause on what the mechanism's recorded steps spent on the examples' own documents
    (its ex-post loss), where the run computed it."""
    spent = summary.get("document_loss")
    if not spent:
        return ""
    power = "" if spent.get("beyond_at_most") is None else (
        f" ({spent['answers']} answers show a loss beyond it happens in at most "
        f"{100 * spent['beyond_at_most']:.2g} % of answers, at 95 % confidence; the rarer "
        "losses its δ allows need more)")
    return (f"; recomputed from its recorded steps, it spent {spent['median']:.3g} nats (median; "
            f"largest {spent['max']:.3g}) on each example's own document, "
            f"{spent['within_claim']} of {spent['documents']} within the claim{power}")


def top_passage_rows(records: Sequence[dict[str, Any]], k: int = 20) -> list[dict[str, Any]]:
    """The ``k`` passages with the most influence over the setting's records, most first:
    example id, passage number (from 1), for a retrieved document with an id that id
    (``document``), its text and influence (nats)."""
    rows = [(float(v), i, j) for i, r in enumerate(records)
            for j, v in enumerate(r.get("passage_influence") or []) if v is not None]
    rows.sort(key=lambda p: (-p[0], p[1], p[2]))
    out = []
    for v, i, j in rows[:k]:
        document = document_id(records[i], j)
        out.append({"id": user_id(records[i]), "passage": j + 1,
                    **({"document": document} if document is not None else {}),
                    "text": records[i]["passages"][j], "influence": v})
    return out


def document_id(record: dict[str, Any], j: int) -> str | None:
    """The id of passage ``j`` (0-based) where the passages are retrieved documents that carry
    one (a document without an id is named by its rank, ``j + 1``: None here)."""
    if record.get("passage_sources") is None:
        return None
    ids = record.get("passage_ids") or []
    name = ids[j] if j < len(ids) else None
    return None if name in (None, str(j + 1)) else str(name)

