"""The leak ledger per document (methods/rag/exposure.py): sums, maxima, counts and the
DP composition computed by hand on tiny records."""

from __future__ import annotations

import math

import pytest

from ctxleak.methods.rag.exposure import (
    COMPOSITION_DELTA,
    DocumentLedger,
    composed_guarantees,
    document_key,
    document_ledger,
    over_budget,
)


def rec(rid: str, docs: list[tuple[str | None, str]], influence: list[float | None],
        tokens: int = 4, response: str = "an answer", **extra: object) -> dict[str, object]:
    """A record of a run with retrieved documents: (id, text) per document."""
    return {"id": rid, "setting": "lambda=1,T=1", "passages": [t for _, t in docs],
            "passage_ids": [i if i is not None else str(j + 1) for j, (i, _) in enumerate(docs)],
            "passage_sources": [f"src/{i}" if i else None for i, _ in docs],
            "passage_influence": influence, "response_ids": list(range(tokens)),
            "response": response, **extra}


A, B, C = ("a", "Doc A text."), ("b", "Doc B text."), ("c", "Doc C text.")


def test_sums_maxima_and_counts_by_hand() -> None:
    rows = document_ledger(
        [rec("q1", [A, B], [3.0, 1.0], tokens=2), rec("q2", [A, C], [5.0, 0.5], tokens=8),
         rec("q3", [B], [None], tokens=3)],
        queries={"q1": "who?", "q2": "what?", "q3": "when?"}, flagged=["q2"], threshold=2.0)
    by = {r["document"]: r for r in rows}
    assert [r["document"] for r in rows] == ["a", "b", "c"]  # leaked twice; then 1 > 0.5 nats
    a = by["a"]
    # above the per-document threshold of 2 nats in both answers (by 1 and 3 nats); "flagged"
    # counts only the flagged answer (q2) in which it leaked
    assert (a["retrieved"], a["scored"], a["leaked"], a["flagged"]) == (2, 2, 2, 1)
    assert a["leak_max"] == pytest.approx(3.0) and a["leak_sum"] == pytest.approx(4.0)
    assert a["worst_answer"] == {"id": "q2", "above": pytest.approx(3.0)}
    assert a["influence_sum"] == pytest.approx(8.0)
    assert a["influence_max"] == pytest.approx(5.0)
    assert a["influence_per_token"] == pytest.approx(8.0 / (2 + 8))
    assert a["influence_per_token_max"] == pytest.approx(max(3 / 2, 5 / 8))
    assert [q["query"] for q in a["top_queries"]] == ["what?", "who?"]
    assert a["source"] == "src/a"
    b = by["b"]  # retrieved twice, scored once (cut out of the context the second time)
    assert (b["retrieved"], b["scored"], b["leaked"], b["flagged"]) == (2, 1, 0, 0)
    assert b["influence_sum"] == pytest.approx(1.0)
    assert "eps_basic" not in a  # plain CID: no guarantee


def test_documents_without_ids_are_one_by_their_text() -> None:
    same = (None, "The  spare key is under the blue pot.")
    respaced = (None, "The spare key is under the blue pot.")
    other = (None, "Something else entirely.")
    rows = document_ledger([rec("1", [same, other], [2.0, 1.0]), rec("2", [respaced], [4.0])],
                           queries={})
    assert len(rows) == 2
    assert rows[0]["retrieved"] == 2 and rows[0]["influence_sum"] == pytest.approx(6.0)
    assert rows[0]["document"].startswith("The spare key is under")
    assert document_key("a  b") == document_key("a b") != document_key("a c")


def test_top_queries_keep_the_largest_only() -> None:
    ledger = DocumentLedger(top_queries=3)
    for k in range(1000):  # streaming: the ledger keeps 3 entries, not 1000
        ledger.add(rec(str(k), [A], [float(k % 97)]), query=f"q{k}")
    doc = ledger.documents[document_key(A[1])]
    assert len(doc.top) == 3
    row = ledger.rows()[0]
    assert [q["influence"] for q in row["top_queries"]] == [96.0, 96.0, 96.0]
    assert [q["query"] for q in row["top_queries"]] == ["q96", "q193", "q290"]  # earliest first
    assert row["retrieved"] == 1000


def test_pii_the_document_carries_and_an_answer_repeated() -> None:
    doc = ("hr-7", "Employee: Marta Velikova. Contact marta.v@example.com, salary EUR 84,500.")
    rows = document_ledger([rec("1", [doc], [9.0],
                                response="You can write to marta.v@example.com about it.")],
                           queries={})
    found = {p["text"]: p["type"] for p in rows[0]["pii_in_answers"]}
    assert found == {"marta.v@example.com": "email"}
    assert rows[0]["pii_carried"] == 3  # the name, the e-mail and the amount
    named = document_ledger([rec("1", [doc], [9.0], response="That is Marta Velikova.")], {})
    assert named[0]["pii_in_answers"] == [{"text": "Marta Velikova", "type": "person"}]


def test_a_bare_number_counts_only_as_a_whole_number() -> None:
    doc = ("fin", "Payroll: he was underpaid by 312 pounds.")
    miss = document_ledger([rec("1", [doc], [1.0], response="Order 23120 shipped.")], {})
    hit = document_ledger([rec("1", [doc], [1.0], response="Underpaid by 312 pounds.")], {})
    assert miss[0]["pii_in_answers"] == []
    assert [p["type"] for p in hit[0]["pii_in_answers"]] == ["money"]


def _tight_by_hand(eps: float, k: int, delta: float) -> float:
    best = math.inf
    for a in range(2, 100):
        rdp = k * min(a * eps * eps / 2, eps)
        best = min(best, rdp + math.log((a - 1) / a) - (math.log(delta) + math.log(a)) / (a - 1))
    return max(best, 0.0)


@pytest.mark.parametrize(("eps", "k"), [(0.05, 400), (0.5, 20), (2.0, 30), (0.01, 5)])
def test_composition_by_hand(eps: float, k: int) -> None:
    got = composed_guarantees(eps, k)
    assert got["eps_basic"] == pytest.approx(eps * k)
    assert got["eps_tight"] == pytest.approx(min(eps * k, _tight_by_hand(eps, k, COMPOSITION_DELTA)))
    assert got["eps_tight"] <= got["eps_basic"]
    assert ("Rényi" in got["composition"]) == (got["eps_tight"] < got["eps_basic"])


def test_many_small_epsilons_compose_tighter_than_basic() -> None:
    got = composed_guarantees(0.05, 400)  # 20 by basic composition
    assert got["eps_tight"] < 0.75 * got["eps_basic"]


def test_bounded_runs_compose_each_documents_released_tokens() -> None:
    r1 = rec("1", [A, B], [1.0, 2.0], eps=0.5, lambdas=[0.1] * 5, composed_eps=2.5)
    r2 = rec("2", [A], [1.0], eps=0.5, lambdas=[0.2] * 3, composed_eps=1.5)
    by = {r["document"]: r for r in document_ledger([r1, r2], {})}
    assert by["a"]["released_tokens"] == 8 and by["b"]["released_tokens"] == 5
    assert by["a"]["eps_basic"] == pytest.approx(4.0)
    assert by["b"]["eps_basic"] == pytest.approx(2.5)
    assert by["a"]["eps_per_token"] == 0.5


def test_over_budget_lists_documents_above_it() -> None:
    rows = document_ledger([rec("1", [A, B], [3.0, 1.0]), rec("2", [A], [5.0])], {})
    assert over_budget(rows, 7.5) == ["a"]
    assert over_budget(rows, 0.5) == ["a", "b"]
    assert over_budget(rows, None) == [] and over_budget(rows, 100.0) == []


def test_records_without_passages_add_nothing() -> None:
    assert document_ledger([{"id": "x", "response_ids": [1], "influence": 2.0}], {}) == []
    assert composed_guarantees(1.0, 0) | {"composition": ""} == {
        "eps_basic": 0.0, "eps_tight": 0.0, "delta": COMPOSITION_DELTA, "composition": ""}
