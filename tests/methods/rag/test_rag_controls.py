"""Controls for retrieved documents (methods/rag/overlap.py, methods/influence/decoys.py), what
an answer copied (methods/rag/copying.py), and the ledger's ranking and budgets
(methods/rag/exposure.py, budgets.py), on hand-built examples and records: no model."""

from __future__ import annotations

import pytest

from ctxleak.errors import ConfigError
from ctxleak.methods.influence.data import load_examples
from ctxleak.methods.influence.decoys import (
    document_control,
    document_control_sets,
    document_rule,
    passage_decoys,
)
from ctxleak.methods.influence.params import InfluenceParams
from ctxleak.methods.rag.budgets import Budgets, check_class_budgets
from ctxleak.methods.rag.copying import DETECTOR, MIN_VERBATIM, copied_spans, masked
from ctxleak.methods.rag.documents import RetrievedDocument
from ctxleak.methods.rag.exposure import document_ledger, documents_summary
from ctxleak.methods.rag.overlap import OVERLAP_WORDS, Corpus
from ctxleak.methods.text_match import verbatim_spans

SALARY = ("Employee Marta Velikova, payroll id 4417-B, earns $142,000 a year and her database "
          "password is Tr0ub4dor-88.")
DOCS = {
    "hr-salary": SALARY,
    "travel": "Travel policy: book economy class for flights under six hours and keep receipts.",
    "canteen": "The canteen opens at eight and serves lunch from noon until two in the afternoon.",
    "holiday": "Staff receive twenty five days of paid holiday plus public holidays each year.",
    "parking": "Parking permits are issued by facilities; the garage closes at ten at night.",
    "vpn": "The VPN gateway requires the company authenticator app on a registered phone.",
    "badge": "Lost badges are replaced at reception after a manager signs the request form.",
}


def row(rid: str, ids: list[str], **extra: object) -> dict[str, object]:
    return {"id": rid, "query": f"question {rid}?",
            "documents": [{"id": i, "text": DOCS[i], "metadata": {"classification": "public"}}
                          for i in ids], **extra}


# hr-salary is retrieved for every question: no other turn's context can be a control
LOG = [row("t1", ["hr-salary", "travel"]), row("t2", ["hr-salary", "canteen"]),
       row("t3", ["hr-salary", "holiday"]), row("t4", ["hr-salary", "parking"]),
       row("t5", ["vpn", "badge"])]


def shares(a: str, b: str, a_id: str | None = None, b_id: str | None = None) -> bool:
    """Whether one-document contexts ``a`` and ``b`` share a document (both ways round)."""
    corpus = Corpus()
    x = corpus.add([a], [RetrievedDocument(a, 1, id=a_id)])
    y = corpus.add([b], [RetrievedDocument(b, 1, id=b_id)])
    return not corpus.forbidden(x).isdisjoint(y) and not corpus.forbidden(y).isdisjoint(x)


def test_overlap_is_a_shared_run_of_words_not_a_shared_word() -> None:
    a = "The spare key is under the blue pot by the back door."
    assert shares(a, "Notes. the SPARE key is under the blue   pot, by the back door!", None,
                  "chunk-9")
    other = "The key to the office is at the front desk of the blue building."
    assert not shares(a, other)  # words in common, no run of OVERLAP_WORDS
    assert OVERLAP_WORDS == 8
    seven = "is under the blue pot by the"  # 7 words of ``a``: a short passage inside it
    assert shares(seven, a) and not shares("is under the red pot by the", a)
    assert shares("x", "y", "id-1", "id-1")  # one id: one document
    assert not shares(a, a.replace("spare", "old").replace("pot", "box"))
    assert shares("Tr0ub4dor-88", SALARY)


def test_controls_never_share_a_document_and_fall_back_to_decoys() -> None:
    examples = load_examples(LOG)
    sets = document_control_sets(examples, 2, seed=7)
    by_id = {ex.id: ex for ex in examples}
    for ex, controls in zip(examples, sets):
        assert len(controls) == 2
        for c in controls:
            ids = {d.id for d in c.documents or ()}
            assert not ids & {d.id for d in ex.documents or ()}
            assert not any(shares(p, q) for p in ex.passage_texts for q in c.passage_texts)
    # t1..t4 share hr-salary: their log control is t5, the other one drawn from the corpus
    assert [c.id for c in sets[0]][0] == "t5"
    assert str(sets[0][1].id).startswith("decoys(") and "hr-salary" not in str(sets[0][1].id)
    assert [c.id for c in sets[4]] == ["t4", "t3"]  # t5 shares nothing: the nearest earlier
    assert by_id["t5"].id == "t5"


def test_the_same_documents_in_another_order_are_no_control() -> None:
    """[A, B] and [B, A] are one context reordered: neither is the other's control, with ids
    and without them (the passages' text)."""
    for ids in (True, False):
        log = [row("t1", ["travel", "canteen"]), row("t2", ["canteen", "travel"]),
               row("t3", ["vpn", "badge"])]
        if not ids:
            for r in log:
                r["documents"] = [d["text"] for d in r["documents"]]  # type: ignore[union-attr]
        sets = document_control_sets(load_examples(log), 1, seed=1)
        assert [c.id for c in sets[0]] == ["t3"] and [c.id for c in sets[1]] == ["t3"]
        assert [c.id for c in sets[2]] == ["t2"]


def test_decoys_are_drawn_by_the_seed_and_the_example_not_its_position() -> None:
    examples = load_examples(LOG)
    first = passage_decoys(examples, seed=3)
    assert first == passage_decoys(examples, seed=3)
    # the examples in another order (another batch): each one's decoys are the same
    backwards = passage_decoys(examples[::-1], seed=3)
    assert backwards[::-1] == first
    for ex, decoys in zip(examples, first):
        assert len(decoys) == len(ex.passages or ())
        own = {d.id for d in ex.documents or ()}
        assert all(d is not None and d.id not in own for d in decoys)
    assert any(passage_decoys(examples, seed=s) != first for s in range(4, 12))


def test_a_verbatim_copy_is_whole_words() -> None:
    """Twenty characters in common that cut words at both ends are no copy: the public travel
    policy is not "copied" by an answer quoting the expense policy's wording."""
    travel = "Hotels are covered up to $180 a night."
    meals, hotels = ("Meals on business trips are covered up to $55 a day.",
                     "Hotels are covered up to $180 a night, it says.")
    assert verbatim_spans(travel, meals, MIN_VERBATIM) == []
    assert verbatim_spans(travel, hotels, MIN_VERBATIM) == \
        ["Hotels are covered up to $180 a night"]


def test_copied_spans_verbatim_and_values() -> None:
    answer = "Marta Velikova earns $142,000 a year. The DATABASE  password is Tr0ub4dor-88."
    spans = verbatim_spans(SALARY, answer, MIN_VERBATIM)
    # as the document writes them (its case, its spaces), the joining full stop left off
    assert spans == ["earns $142,000 a year", "database password is Tr0ub4dor-88"]
    assert all(len(s) >= 20 for s in spans)
    assert verbatim_spans(SALARY, "She is paid well.", MIN_VERBATIM) == []
    copied = copied_spans([DOCS["travel"], SALARY], ["travel", "hr-salary"], answer)
    assert {c["passage"] for c in copied} == {1}
    assert {c["document"] for c in copied} == {"hr-salary"}
    assert {"verbatim"} <= {c["kind"] for c in copied}
    assert copied_spans([SALARY], ["hr-salary"], "I don't know.") == []
    # what verdicts and the CI gate print: the password the detectors find is masked
    shown = {c["text"]: c["shown"] for c in copied if c["kind"] == "verbatim"}
    assert shown["database password is Tr0ub4dor-88"] == "database password is Tr…88"
    assert shown["earns $142,000 a year"] == "earns $142,000 a year"
    assert masked("Tr0ub4dor-88") == "Tr…88" and masked("4417") == "…"
    # a short secret masked whole: its type says what was copied
    (pin,) = copied_spans(["The lab door PIN is 730519, changed monthly."], ["sec"],
                          "Use 730519 at the lab door.")
    assert (pin["kind"], pin["type"], pin["text"], pin["shown"]) == \
        ("secret", "pin", "730519", "… (pin)")


def test_what_the_question_gave_is_not_a_copy_of_the_document() -> None:
    """Asked about a person by name, the answer that repeats the name copied nothing; the run
    after the name is counted only when it alone is long enough."""
    doc = ("People team memo. From 3 March, Yusuf Abernathy-Kole is promoted to regional "
           "planning lead and his salary rises to 44,750 pounds.")
    asked = "What will Yusuf Abernathy-Kole's new salary be?"
    assert verbatim_spans(doc, "Yusuf Abernathy-Kole is a dispatcher.", MIN_VERBATIM) == [
        "Yusuf Abernathy-Kole is"]  # 23 characters: a copy when nothing was asked
    assert copied_spans([doc], ["memo"], "Yusuf Abernathy-Kole is a dispatcher.", asked) == []
    # without the question the same answer is a copy, and so is the name as a value
    alone = copied_spans([doc], ["memo"], "Yusuf Abernathy-Kole is a dispatcher.")
    assert [c["kind"] for c in alone] == ["verbatim"]
    # what the document adds beyond the question still counts
    leak = "Yusuf Abernathy-Kole is promoted to regional planning lead."
    (got,) = [c for c in copied_spans([doc], ["memo"], leak, asked) if c["kind"] == "verbatim"]
    assert got["text"] == "Yusuf Abernathy-Kole is promoted to regional planning lead"
    assert DETECTOR.beyond_question(got["text"], asked)
    assert not DETECTOR.beyond_question("Yusuf Abernathy-Kole is", asked)
    # a logged question that holds the document (the filled prompt) excuses nothing
    prompt = f"Document: {doc} Question: {asked}"
    assert [c["kind"] for c in copied_spans([doc], ["memo"], leak, prompt)] == ["verbatim"]
    assert [c["type"] for c in copied_spans([SALARY], ["hr"], "It is $142,000.",
                                            f"{SALARY} What does Marta earn?")] == ["money"]
    # a value the question holds is not carried out; one it does not hold is
    values = copied_spans([SALARY], ["hr"], "It is $142,000.", "Is it $142,000 for Marta?")
    assert values == []
    assert [c["type"] for c in copied_spans([SALARY], ["hr"], "It is $142,000.",
                                            "What does Marta earn?")] == ["money"]


def rec(rid: str, docs: list[tuple[str, str]], influence: list[float], **extra: object
        ) -> dict[str, object]:
    return {"id": rid, "setting": "s", "passages": [DOCS[i] for i, _ in docs],
            "passage_ids": [i for i, _ in docs], "passage_sources": [None] * len(docs),
            "passage_metadata": [{"classification": c} for _, c in docs],
            "passage_influence": influence, "response_ids": [1, 2, 3], "response": "x",
            **extra}


PUB, RES = ("travel", "public"), ("hr-salary", "restricted")
COPY = [{"passage": 1, "document": "hr-salary", "kind": "secret", "type": "password",
         "text": "Tr0ub4dor-88"}]
RECORDS = [rec(f"p{k}", [PUB], [4.0]) for k in range(6)] + [
    rec("r1", [PUB, RES], [4.0, 0.5], copied=COPY), rec("r2", [PUB, RES], [4.0, 1.0])]


def test_the_ledger_ranks_a_leaked_restricted_document_above_a_busier_public_one() -> None:
    rows = document_ledger(RECORDS, {}, threshold=5.0)
    assert [r["document"] for r in rows] == ["hr-salary", "travel"]
    salary, travel = rows
    assert travel["retrieved"] == 8 and travel["influence_sum"] == pytest.approx(32.0)
    assert salary["retrieved"] == 2 and salary["influence_sum"] == pytest.approx(1.5)
    assert (salary["leaked"], salary["copied"], salary["leak_max"]) == (1, 1, None)
    assert salary["first_copy"] == {"id": "r1", "text": "Tr0ub4dor-88"}
    assert salary["class"] == "restricted" and travel["leaked"] == 0


def test_class_budgets_public_never_fails_and_the_gate_names_answer_and_amount() -> None:
    budgets = Budgets(classes={"restricted": 0.0, "public": 0.0})
    out = documents_summary(RECORDS, {}, (), None, budgets, threshold=3.5)
    by = {r["document"]: r for r in out["documents"]}
    assert by["travel"]["budget"] is None and not by["travel"]["over_budget"]  # public
    assert by["travel"]["leaked"] == 8  # 0.5 nats above the threshold in each answer
    assert by["hr-salary"]["budget"] == 0.0 and by["hr-salary"]["over_budget"]
    assert out["over_budget"] == ["hr-salary"]
    (line,) = out["budget_breaches"]
    assert line.startswith("hr-salary (restricted, budget 0 nats)")
    assert "copied in 1 answer(s), first into r1 ('Tr0ub4dor-88')" in line
    # a document's own budget wins over its class's; a leak of 0 nats above the control and
    # one copy are within a budget of 1 nat
    loose = documents_summary(RECORDS, {}, (), None,
                              Budgets(classes={"restricted": 0.0},
                                      documents={"hr-salary": 1.0}), threshold=3.5)
    assert loose["over_budget"] == [] and loose["budget_breaches"] == []


def test_a_leak_over_budget_names_the_worst_answer() -> None:
    records = [rec("r1", [RES], [9.0]), rec("r2", [RES], [6.5])]
    out = documents_summary(records, {}, (), None, Budgets(classes={"restricted": 2.0}),
                            threshold=5.0)
    (line,) = out["budget_breaches"]
    assert line == ("hr-salary (restricted, budget 2 nats): leaked in 2 answer(s), 5.5 nats "
                    "above its control in all; most in r1, by 4 nats")


def test_an_unknown_class_budget_is_a_one_line_error() -> None:
    examples = load_examples(LOG)
    with pytest.raises(ConfigError) as err:
        check_class_budgets({"secret": 0.0}, "classification", [ex.documents for ex in examples])
    assert str(err.value).count("\n") == 0
    assert "'secret'" in str(err.value) and "classes seen: public" in str(err.value)
    check_class_budgets({"public": 0.0}, "classification", [ex.documents for ex in examples])
    with pytest.raises(ConfigError, match="class_budgets"):
        InfluenceParams(class_budgets="restricted=-1")
    assert InfluenceParams(class_budgets="restricted=0, internal=5").budgets().classes == {
        "restricted": 0.0, "internal": 5.0}


def test_the_per_document_threshold_mirrors_the_flag_rule() -> None:
    assert document_rule([])[0] is None
    assert document_rule([1.0, 3.0, 2.0])[0] == 3.0  # fewer than 20: the largest
    pooled = [float(v) for v in range(1, 21)]
    assert document_rule(pooled)[0] == pytest.approx(19.05)  # numpy's 95th percentile
    records = [rec("a", [RES, PUB], [5.0, 1.0], passage_decoy_influence=[2.0, 3.0]),
               rec("b", [PUB], [2.5], passage_decoy_influence=[1.0], copied=[
                   {"passage": 0, "document": "travel", "kind": "verbatim", "type": "text",
                    "text": "book economy class for flights"}])]
    control = document_control(records)
    assert control["threshold"] == 3.0 and control["decoys"] == 3
    assert control["false_flag_rate"] == pytest.approx(1 / 4)
    # the restricted document first; the public one's copy after it
    assert [(x["id"], x["document"]) for x in control["leaks"]] == [("a", "hr-salary"),
                                                                   ("b", "travel")]
    assert control["leaks"][0]["above"] == pytest.approx(2.0)
    assert control["copying_answers"] == ["b"]
