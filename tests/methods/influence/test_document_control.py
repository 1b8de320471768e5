"""The per-document control and the copy rule on real (tiny-model) runs of a RAG log: a decoy's
leave-one-out influence recomputed by hand, decoys independent of the batch size, a restricted
record retrieved in every turn and copied (named in the verdict, never "within a DP budget"),
and the CI gate's lines."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from conftest import run_cli
from helpers.tiny_models import WORDS

import ctxleak
from ctxleak.engine.scoring import continuation_logprobs
from ctxleak.errors import ConfigError
from ctxleak.methods.influence.data import load_examples, prompt_parts
from ctxleak.report.documents import document_lines

SALARY = ("Employee Marta Velikova earns $142,000 a year and her database password is "
          "Tr0ub4dor-88.")
DOCS = {
    "hr-salary": (SALARY, "restricted"),
    "travel": ("Travel policy: book economy class for flights under six hours.", "public"),
    "canteen": ("The canteen opens at eight and serves lunch from noon until two.", "public"),
    "holiday": ("Staff receive twenty five days of paid holiday plus public holidays.", "public"),
    "parking": ("Parking permits are issued by facilities; the garage closes at ten.",
                "internal"),
}


def turn(rid: str, other: str, response: str) -> dict[str, object]:
    return {"id": rid, "query": f"question {rid}?", "response": response,
            "documents": [{"id": i, "text": DOCS[i][0], "metadata": {"classification": DOCS[i][1]}}
                          for i in ("hr-salary", other)]}


LOG = [turn("t1", "travel", "Marta Velikova earns $142,000 a year."),
       turn("t2", "canteen", "Her database password is Tr0ub4dor-88."),
       turn("t3", "holiday", "I don't know."), turn("t4", "parking", "Ask facilities."),
       turn("t5", "travel", "Book economy."), turn("t6", "canteen", "At eight.")]
KW = dict(lambda_=1.0, temperature=1.0, min_new_tokens=0, max_new_tokens=8, progress=False)


@pytest.fixture(scope="module")
def run(llama_lm, tmp_path_factory):
    return ctxleak.influence(llama_lm, LOG, output=tmp_path_factory.mktemp("run") / "r", **KW)


def test_a_decoys_leave_one_out_influence_by_hand(run, llama_lm) -> None:
    """Passage 2's decoy d in its place: Σ_t |log p(y_t | D with d) − log p(y_t | D without
    passage 2)| at λ = 1, T = 1 (the last passage, so both prompts are rows of the log)."""
    record = run.records[0]
    decoy = record["passage_decoy_ids"][1]
    assert decoy not in ("hr-salary", "travel") and decoy in DOCS
    with_decoy = {**LOG[0], "documents": [LOG[0]["documents"][0], {"id": decoy, "text":
                                                                     DOCS[decoy][0]}]}
    without = {**LOG[0], "documents": [LOG[0]["documents"][0]]}
    answer = record["response_ids"]
    rows = []
    for data in (with_decoy, without):
        parts, _ = prompt_parts(llama_lm, load_examples([data])[0])
        rows.append(continuation_logprobs(llama_lm, [parts.full], [answer])[0])
    by_hand = float(np.abs(rows[0].astype(np.float64) - rows[1].astype(np.float64)).sum())
    assert record["passage_decoy_influence"][1] == pytest.approx(by_hand, abs=1e-5)
    cost = run.summary["settings"][0]["control"]["cost"]
    assert cost["decoy_forward_passes"] == sum(len(r["passages"]) for r in run.records)


def test_every_control_shares_no_document(run) -> None:
    for record in run.records:  # hr-salary is in every turn: each control is drawn decoys
        for control in record["control_ids"]:
            assert control.startswith("decoys(") and "hr-salary" not in control
        assert set(record["passage_decoy_ids"]).isdisjoint(record["passage_ids"])


def test_a_copied_restricted_record_is_named_and_never_within_a_dp_budget(run) -> None:
    setting = run.summary["settings"][0]
    copies = {r["id"]: {c["document"] for c in r["copied"]} for r in run.records}
    assert copies["t1"] == {"hr-salary"} and copies["t2"] == {"hr-salary"}
    assert copies["t3"] == copies["t4"] == set()
    verdict = run.summary["verdict"]["text"]
    assert "t1 leaked hr-salary (copied" in verdict and "t2 leaked hr-salary (copied" in verdict
    assert "within what DP calls a strong budget" not in verdict
    assert "not within any DP budget" in setting["dp_reading"]
    assert "+-" not in verdict
    top = setting["documents"][0]
    assert top["document"] == "hr-salary" and top["copied"] == 2 and top["leaked"] >= 2
    leaked_in = {x["id"] for x in setting["document_control"]["leaks"]
                 if x["document"] == "hr-salary"}
    assert {"t1", "t2"} <= leaked_in
    # 12 passages, 12 decoys: the largest is the threshold, 1 time in 13 for a document that
    # adds nothing beyond any other
    control = setting["document_control"]
    assert control["decoys"] == 12 and control["false_flag_rate"] == pytest.approx(1 / 13)
    assert control["threshold"] == pytest.approx(max(
        v for r in run.records for v in r["passage_decoy_influence"]))
    line = f"Per-document control: a document leaked in an answer when {control['rule']}"
    assert any(x.startswith(line) for x in document_lines(run.summary["settings"]))
    assert "Per-document control: a document leaked" in run.to_html()


def test_decoys_do_not_depend_on_the_batch_size(run, llama_lm, tmp_path) -> None:
    one = ctxleak.influence(llama_lm, LOG, batch_size=1, output=tmp_path / "one", **KW)
    assert one.records == run.records  # every float, the controls' and decoys' included


def _close(a, b, path=""):
    """Where two records differ beyond float rounding (1e-5 on each number)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [f"{path}/{k}" for k in set(a) ^ set(b)] + [
            d for k in set(a) & set(b) for d in _close(a[k], b[k], f"{path}/{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _close(x, y, f"{path}[{i}]")]
    if isinstance(a, float) and isinstance(b, float):
        return [] if abs(a - b) <= 1e-5 else [path]
    return [] if a == b else [path]


def _text(seed: int, words: int = 20) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(words))


#: Four turns of three documents of 20 words each, none shared: a decoy's prompt shares the
#: template and the documents before the one it replaces with the turn's own prompt.
LONG_LOG = [{"id": f"q{k}", "query": "what is the capital ?", "response": "paris is the capital .",
             "documents": [{"id": f"d{k}{j}", "text": _text(10 * k + j)} for j in range(3)]}
            for k in range(4)]


@pytest.fixture
def positions(monkeypatch) -> list[int]:
    """The token positions of each in-process forward pass from now on (rows x columns,
    padding included)."""
    from ctxleak.engine.local import scoring as local_scoring

    counted: list[int] = []
    real_hidden = local_scoring.hidden_states

    def counting(lm, ids, *args, **kwargs):
        counted.append(int(ids.shape[0]) * int(ids.shape[1]))
        return real_hidden(lm, ids, *args, **kwargs)

    monkeypatch.setattr(local_scoring, "hidden_states", counting)
    return counted


def test_controls_and_decoys_start_from_the_examples_own_prompt(llama_lm, tmp_path, positions,
                                                                monkeypatch) -> None:
    """A control's prompt shares the template before the context with the example's own, a
    decoy's the documents before the one it replaces as well: those positions come from the
    KV cache of the example's prompt. The records equal those of each prompt computed whole,
    to float rounding, for fewer positions computed."""
    from ctxleak.methods.influence import pipeline

    built = ctxleak.influence(llama_lm, LONG_LOG, output=tmp_path / "built", **KW)
    assert all(len(r["passage_decoy_influence"]) == 3 for r in built.records)
    on_the_prompt = sum(positions)
    positions.clear()
    real_score_under = pipeline._score_under
    monkeypatch.setattr(pipeline, "_score_under",  # without the bases: each prompt whole
                        lambda *args: real_score_under(*args[:7]))
    whole = ctxleak.influence(llama_lm, LONG_LOG, output=tmp_path / "whole", **KW)
    assert on_the_prompt < 0.9 * sum(positions)
    for a, b in zip(built.records, whole.records):
        assert not _close(a, b), (a["id"], _close(a, b))


def test_an_unknown_class_budget_is_refused_before_measuring(llama_lm) -> None:
    with pytest.raises(ConfigError, match="no document has classification 'secret' "
                       r"\(classes seen: internal, public, restricted\)"):
        ctxleak.influence(llama_lm, LOG, class_budgets={"secret": 0}, **KW)


def test_the_gate_names_document_answer_and_amount(tiny_dir, tmp_path, capsys) -> None:
    data = tmp_path / "log.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in LOG))
    argv = ["influence", "--model", tiny_dir, "--data", str(data), "--lambda", "1",
            "--temperature", "1", "--min-new-tokens", "0", "--max-new-tokens", "4"]
    code, out, err = run_cli([*argv, "--class-budget", "restricted=0,public=0",
                              "--output", str(tmp_path / "a")], capsys)
    assert code == 3, err
    line = next(x for x in out.splitlines() if x.startswith("over budget: hr-salary"))
    assert "(restricted, budget 0 nats)" in line and "first into t1" in line
    assert "nats above its control in all" in line
    assert "over budget: travel" not in out  # public: reported, never failing
    # each breach is printed once (the console's line), the gate's stderr says how many
    assert sum(x.startswith("over budget: hr-salary") for x in (out + err).splitlines()) == 1
    assert "over budget (listed above): exit status 3" in err
    code, _, err = run_cli([*argv, "--class-budget", "public=0", "--output",
                            str(tmp_path / "b")], capsys)
    assert code == 0, err


@pytest.mark.parametrize("ngram", [None, 4])
def test_generated_answers_get_decoys_on_every_road(llama_lm, ngram, tmp_path) -> None:
    """Answers generated under CID at λ = 0.5 (the in-process road, with and without n-gram
    windows) get a decoy per passage too, scored with the same mixture."""
    rows = [{k: v for k, v in r.items() if k != "response"} for r in LOG[:3]]
    res = ctxleak.influence(llama_lm, rows, lambda_=0.5, temperature=1.0, max_new_tokens=3,
                            min_new_tokens=1, ngram=ngram, progress=False,
                            output=tmp_path / "run")
    for record in res.records:
        values = record["passage_decoy_influence"]
        assert len(values) == len(record["passages"]) == 2
        assert all(v is not None and np.isfinite(v) and v >= 0 for v in values)
    cost = res.summary["settings"][0]["control"]["cost"]
    assert cost["decoy_forward_passes"] == 6


def test_a_sweep_computes_each_prompt_with_a_document_left_out_once(llama_lm, tmp_path,
                                                                    positions) -> None:
    """A prompt with one document left out keeps its own KV cache (built on the full prompt's):
    the settings of a sweep each compute only their answer after it, so two settings cost far
    less than twice one; and each setting's records are bitwise those of its own run."""
    kw = {**KW, "control": False}
    one = ctxleak.influence(llama_lm, LONG_LOG, output=tmp_path / "one", **kw)
    alone = sum(positions)
    positions.clear()
    both = ctxleak.influence(llama_lm, LONG_LOG, lambda_=[1.0, 0.9], output=tmp_path / "both",
                             **{k: v for k, v in kw.items() if k != "lambda_"})
    assert sum(positions) < 1.5 * alone
    assert [r for r in both.records if r["lambda"] == 1.0] == one.records
