"""The attacks' per-document ledger: counts summed by hand from records, the ranking by what an
attacker gets, and the join with an influence run's ledger by document id."""

from __future__ import annotations

from typing import Any

from ctxleak.methods.attacks.attack_ledger import attack_ledger
from ctxleak.methods.attacks.extract import AttackDocument


def match(doc: str, span: int, rouge: float | None,
          values: tuple[dict[str, str], ...] = ()) -> dict[str, Any]:
    return {"document_id": doc, "span": span, "rouge_l": rouge, "verbatim": span >= 20,
            "near_verbatim": (rouge or 0) >= 0.5, "values": list(values)}


EMAIL = {"text": "a@b.example", "type": "email"}
EXTRACTION = [
    {"matches": [match("hr", 25, 0.9, (EMAIL,)), match("pay", 6, 0.55)]},
    {"matches": [match("hr", 30, 0.95, (EMAIL,))]},
    {"matches": [match("pay", 4, 0.3, ({"text": "$142,000", "type": "money"},))]},
]
MEMBERSHIP = [
    {"attack": "mask", "document_id": "hr", "member": True, "score": 0.8},
    {"attack": "mask", "document_id": "pay", "member": True, "score": 0.2},
    {"attack": "mask", "document_id": "out", "member": False, "score": 1.0},
    {"attack": "mask", "document_id": "quiet", "member": True, "score": 0.6},
]


def test_counts_and_rank_by_hand() -> None:
    rows = attack_ledger([AttackDocument("never", "x"), "quiet"], extraction=EXTRACTION,
                         membership=MEMBERSHIP)
    by = {r["document"]: r for r in rows}
    assert (by["hr"]["verbatim"], by["hr"]["near_verbatim"], by["hr"]["longest_span"]) == \
        (2, 2, 30)
    assert by["hr"]["values"] == [EMAIL] and by["hr"]["best_rouge_l"] == 0.95
    assert (by["pay"]["verbatim"], by["pay"]["near_verbatim"], len(by["pay"]["values"])) == \
        (0, 1, 1)
    assert by["pay"]["best_rouge_l"] == 0.55 and by["pay"]["membership"] == {"mask": 0.2}
    assert by["never"]["verbatim"] == 0 and by["never"]["member"] is None
    # by harm: hr and pay carried personal data (hr's e-mail, pay's money; hr's copies break
    # the tie) > quiet (a member scoring 0.6) > never > out (a non-member gets an attacker
    # nothing, whatever its score)
    assert [r["document"] for r in rows] == ["hr", "pay", "quiet", "never", "out"]
    assert [r["harm"] for r in rows] == ["personal data", "personal data", "membership",
                                         "none", "none"]
    assert [r["rank"] for r in rows] == [1, 2, 3, 4, 5]


def test_a_secret_carried_out_ranks_above_a_public_note_copied_whole() -> None:
    """A runbook whose answer carried a database password and an API key ranks first, above a
    note copied verbatim many times: the ledger ranks harm, not volume."""
    secrets = ({"text": "Tr0ub4dor&3", "type": "password"},
               {"text": "sk-live-4f9a8b7c6d5e", "type": "secret"})
    extraction = [{"matches": [match("quarterly-note", 40, 1.0)]} for _ in range(5)]
    extraction += [{"matches": [match("runbook", 3, None, secrets)]},
                   {"matches": [match("hr-file", 2, None, (EMAIL,))]},
                   {"matches": [match("draft", 5, 0.6)]}]
    rows = attack_ledger(["quiet"], extraction=extraction)
    assert [(r["document"], r["harm"]) for r in rows] == [
        ("runbook", "secrets"), ("hr-file", "personal data"), ("quarterly-note", "verbatim"),
        ("draft", "near-verbatim"), ("quiet", "none")]


def test_a_measure_no_attack_took_is_not_measured_not_zero() -> None:
    """A run of membership alone looked for no copies: its ledger says so, never 0 copies."""
    from ctxleak.report.attacks import ledger_rows

    rows = attack_ledger(["quiet"], membership=MEMBERSHIP)
    assert all(r["verbatim"] is None and r["values"] is None for r in rows)
    shown = ledger_rows(rows)
    assert shown[0]["verbatim copies (answers)"] == "not measured"
    assert shown[0]["harm (worst thing got out)"] == "membership"
    assert attack_ledger(["hr"], extraction=EXTRACTION)[0]["verbatim"] == 2


def test_join_with_influence_by_document_id() -> None:
    influence = [{"document": "hr", "retrieved": 4, "leaked": 2, "influence_sum": 3.5,
                  "text": "not carried"}]
    rows = attack_ledger(["hr", "pay"], extraction=EXTRACTION, influence=influence)
    by = {r["document"]: r for r in rows}
    assert by["hr"]["influence"] == {"retrieved": 4, "leaked": 2, "influence_sum": 3.5}
    assert by["pay"]["influence"] is None
    assert attack_ledger(["hr"])[0]["influence"] is None  # no run given: nothing joined
