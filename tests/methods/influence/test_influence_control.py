"""The control of context influence, passages as the unit, the units and the verdict: the
control's value and each passage's influence against independent recomputations (every prompt
forwarded alone from scratch, float64), the rules by hand, bad passages input."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from helpers.run_folders import without_manifest
from scipy import stats

import ctxleak
from ctxleak.errors import ConfigError, InputError
from ctxleak.methods.influence import control
from ctxleak.methods.influence.control import (
    COPIED_ABOVE,
    KNOWN_BELOW,
    context_token_kinds,
    control_indices,
    control_sets,
    control_summary,
    default_controls,
    flag_rule,
    min_n_for,
    paired_test,
)
from ctxleak.methods.influence.data import InfluenceExample, load_examples, prompt_parts
from ctxleak.methods.influence.units import dp_scale, format_ratio, likelihood_ratio
from ctxleak.methods.influence.verdict import setting_verdict
from ctxleak.methods.rag.passages import list_pieces, split_context

WORDS = ("the capital of france is paris . rome is the capital of italy and a city . the doctor "
         "said the news report was one page . berlin is in germany .").split()
QUERY = "what is the capital ?"


def _docs(n: int) -> list[dict]:
    return [{"id": f"d{i}", "context": " ".join(WORDS[i:i + 5 + 2 * i]), "query": QUERY}
            for i in range(n)]


def _hand_logp(lm, before, context, after, response, lam, temperature):
    """log p̄_λ(y_t | context) of each response token, every prefix forwarded from scratch."""
    out = []
    for t, token in enumerate(response):
        prefix = list(after) + list(response[:t])
        with torch.no_grad():
            z = lm.model(torch.tensor([list(before) + list(context) + prefix])).logits[0, -1]
            z0 = lm.model(torch.tensor([list(before) + prefix])).logits[0, -1]
        mixed = lam * z.double() + (1 - lam) * z0.double()
        out.append(float(torch.log_softmax(mixed / temperature, -1)[token]))
    return np.array(out)


@pytest.mark.parametrize("lam", [1.0, 0.5])
def test_control_influence_equals_an_independent_recomputation(llama_lm, tmp_path, lam):
    """With 3 distinct documents each example gets 2 controls by default (fewer than 20
    examples): the nearest earlier other documents, then the nearest later ones; the first is
    the control of a one-control run. Each control's influence
    Σ_t |log p̄_λ(y_t | C) − log p(y_t | ∅)| matches a from-scratch forward of each prefix, the
    example's influence above the control is the difference with the nearest one, and
    ``control_p`` is its rank among its controls."""
    docs = _docs(3)
    res = ctxleak.influence(llama_lm, docs, max_new_tokens=5, min_new_tokens=0, lambda_=lam,
                            seed=3, output=str(tmp_path / "run"), progress=False)
    assert [r["control_id"] for r in res.records] == ["d1", "d0", "d1"]
    assert [r["control_ids"] for r in res.records] == [["d1", "d2"], ["d0", "d2"], ["d1", "d0"]]
    by_id = {d["id"]: d for d in docs}
    for r in res.records:
        response = r["response_ids"]
        hand = []
        for other in r["control_ids"]:
            example = InfluenceExample("c", by_id[other]["context"], QUERY, None, "qa")
            parts, _ = prompt_parts(llama_lm, example, reserve=5)
            logp_c = _hand_logp(llama_lm, parts.before, parts.context, parts.after, response,
                                lam, 0.8)
            logp_e = _hand_logp(llama_lm, parts.before, (), parts.after, response, 1.0, 0.8)
            hand.append(np.abs(logp_c - logp_e))
        tau = hand[0]
        assert r["control_token_influence"] == pytest.approx(tau.tolist(), abs=2e-5)
        assert r["control_influence"] == pytest.approx(float(tau.sum()), abs=1e-4)
        assert r["control_influences"] == pytest.approx([float(t.sum()) for t in hand], abs=1e-4)
        assert r["influence_above_control"] == pytest.approx(r["influence"] - tau.sum(),
                                                             abs=1e-4)
        at_or_above = sum(c >= r["influence"] for c in r["control_influences"])
        assert r["control_p"] == (1 + at_or_above) / 3
        assert r["influence_per_token"] == pytest.approx(r["influence"] / len(response))
    control = res.summary["settings"][0]["control"]
    assert control["enabled"] and control["n"] == 3
    assert control["controls"] == 6 and control["controls_per_example"] == 2
    assert control["false_flag_rate"] == pytest.approx(1 / 7)  # above the largest of 6
    # one pass per control context, and at λ < 1 one no-context pass per response
    assert control["cost"]["forward_passes"] == 6 + (0 if lam == 1 else 3)
    assert control["cost"]["examples"] == 3
    assert control["cost"]["seconds"] > 0
    one = ctxleak.influence(llama_lm, docs, max_new_tokens=5, min_new_tokens=0, lambda_=lam,
                            seed=3, controls=1, output=str(tmp_path / "one"), progress=False)
    assert [r["control_ids"] for r in one.records] == [["d1"], ["d0"], ["d1"]]
    assert [r["control_influence"] for r in one.records] == pytest.approx(
        [r["control_influence"] for r in res.records], abs=1e-9)


def test_passage_influence_equals_leaving_the_passage_out_by_hand(llama_lm, tmp_path):
    """Passages given as a list: each passage's influence is Def. 3.1-3.2 with S = the passage
    (left out, the response scored), equal to a from-scratch recomputation; the context is the
    passages joined, each tokenised on its own; with n-gram windows too the values agree."""
    passages = ["the capital of france is paris .", "rome is in italy .",
                "berlin is in germany ."]
    data = [{"id": "p", "passages": passages, "query": QUERY}, *_docs(2)]
    runs = {}
    for ngram in ("full", 3):
        runs[ngram] = ctxleak.influence(llama_lm, data, max_new_tokens=5, min_new_tokens=0,
                                        ngram=ngram, seed=2, progress=False,
                                        output=str(tmp_path / f"run-{ngram}"))
    r = runs["full"].records[0]
    assert r["passages"] == passages
    ids = [llama_lm.encode(p) for p in list_pieces(passages)]
    spans, start = [], 0
    for piece in ids:
        spans.append([start, start + len(piece)])
        start += len(piece)
    assert r["passage_spans"] == spans
    example = InfluenceExample("p", "".join(list_pieces(passages)), QUERY, None, "qa",
                               tuple(list_pieces(passages)))
    parts, _ = prompt_parts(llama_lm, example, reserve=5)
    context = list(parts.context)
    assert context == [t for piece in ids for t in piece]
    full = _hand_logp(llama_lm, parts.before, context, parts.after, r["response_ids"], 1.0, 0.8)
    hand = [float(np.abs(full - _hand_logp(llama_lm, parts.before, context[:a] + context[b:],
                                           parts.after, r["response_ids"], 1.0, 0.8)).sum())
            for a, b in spans]
    assert r["passage_influence"] == pytest.approx(hand, abs=1e-4)
    assert r["max_passage"] == int(np.argmax(hand)) + 1  # numbered from 1
    assert runs[3].records[0]["passage_influence"] == pytest.approx(hand, abs=1e-4)
    assert "passage_influence" not in runs["full"].records[1]  # no passages: no fields
    top = runs["full"].summary["settings"][0]["top_passages"]
    assert [t["influence"] for t in top] == sorted((t["influence"] for t in top), reverse=True)
    frame = runs["full"].passages()
    assert list(frame["passage"]) == [1, 2, 3] and set(frame["id"]) == {"p"}
    assert frame.loc[frame["rank"] == 1, "passage"].item() == r["max_passage"]


def test_split_context_keeps_the_text_and_cuts_after_sentences_and_blank_lines():
    text = "One fact. Two facts! Three?  Four.\n\nA new paragraph. Its end."
    sentences = split_context(text, "sentence")
    assert "".join(sentences) == text
    assert [s.strip() for s in sentences] == ["One fact.", "Two facts!", "Three?", "Four.",
                                             "A new paragraph.", "Its end."]
    paragraphs = split_context(text, "paragraph")
    assert "".join(paragraphs) == text and len(paragraphs) == 2
    with pytest.raises(ValueError, match="sentence or paragraph"):
        split_context(text, "word")


def test_passages_split_option_and_bad_value(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"id": "a", "context": "One. Two. Three.", "query": "q?"}) + "\n")
    (ex,) = load_examples(str(path), passages="sentence")
    assert ex.passage_texts == ["One.", "Two.", "Three."] and ex.context == "One. Two. Three."
    with pytest.raises(ConfigError) as info:
        ctxleak.influence("default", str(path), passages="word")
    assert info.value.param == "passages"


@pytest.mark.parametrize("value, message", [
    ([], "is an empty list"),
    ("one passage", "must be a list of strings"),
    (["fine", 3], "item 1 must be a string"),
    (["fine", "  "], "item 1 is empty"),
])
def test_bad_passages_name_the_file_line_and_field(tmp_path, value, message):
    path = tmp_path / "bad.jsonl"
    good = {"id": "a", "context": "x y", "query": "q?"}
    path.write_text(json.dumps(good) + "\n" + json.dumps({"id": "b", "passages": value,
                                                          "query": "q?"}) + "\n")
    with pytest.raises(InputError) as info:
        load_examples(str(path))
    err = info.value
    assert message in str(err)
    assert err.file == str(path) and err.line == 2 and err.field == "passages"


def test_control_indices_rotate_and_one_example_has_none():
    assert control_indices(["a"]) == [None]
    assert control_indices(["a", "b", "c"]) == [1, 0, 1]
    # the first examples keep theirs as n grows
    assert control_indices(["a", "b", "c", "d", "e"])[:3] == [1, 0, 1]


def test_several_controls_are_other_documents_nearest_first_and_extend_the_first():
    contexts = ["a", "b", "B ", "c", "a b", "d"]  # "B " is b; "a b" contains a and b
    sets = control_sets(contexts, 3)
    assert sets[0] == [1, 3, 5]  # nothing earlier; b (once: "B " is the same document), c, d
    assert sets[2] == [0, 3, 5]  # a; not b (its own document), c, d
    assert sets[4] == [3, 5]  # only c and d are other documents than "a b"
    assert sets[5] == [4, 3, 2]  # nearest earlier first, one index per document
    assert [s[0] if s else None for s in sets] == control_indices(contexts)
    assert control_sets(["a", "a"], 4) == [[], []]
    assert control_sets(contexts, 1) == [[c] for c in control_indices(contexts)]
    with pytest.raises(ValueError):
        control_sets(contexts, 0)


def test_the_first_of_several_controls_is_found_past_a_long_run_of_one_document(monkeypatch):
    """A run of the example's own document longer than the limit, then other documents: the
    first of several controls is still control_indices's (which counts documents, not
    examples); the others are looked for within the limit's examples, as before."""
    monkeypatch.setattr(control, "CONTROL_SEARCH_LIMIT", 3)
    contexts = ["a"] * 6 + ["b", "c"]
    assert control_indices(contexts)[0] == 6
    sets = control_sets(contexts, 2)
    assert [s[0] if s else None for s in sets] == control_indices(contexts)
    assert sets[0] == [6]  # "c" lies beyond the limit's examples
    assert sets[5] == [6, 7]
    # within the limit: four other documents later, only the first three examples are looked at
    assert control_sets(["a", "b", "c", "d", "e"], 4)[0] == [1, 2, 3]


def test_default_controls_give_20_control_influences_when_there_are_few_examples():
    assert [default_controls(n) for n in (1, 2, 3, 5, 6, 10, 19, 20, 500)] == \
        [1, 1, 2, 4, 4, 2, 2, 1, 1]
    for n in range(5, 20):  # from 5 examples, enough controls for a 95th percentile
        assert n * default_controls(n) >= 20


def _judged(influences, controls):
    return [{"id": f"e{k}", "influence": own, "control_id": "x", "control_influence": cs[0],
             "control_influences": cs, "influence_above_control": own - cs[0],
             "influence_above_control_per_token": None}
            for k, (own, cs) in enumerate(zip(influences, controls))]


def test_several_controls_per_example_pool_into_a_percentile_with_a_5_percent_false_flag_rate():
    """6 examples with 4 controls each: 24 control influences, so the flag rule is their 95th
    percentile (a false-flag rate of about 5 %), not the largest of 6 (1 in 7)."""
    controls = [[1.0 + 0.1 * (4 * k + j) for j in range(4)] for k in range(6)]  # 1.0 .. 3.3
    influences = [9.0, 1.5, 1.2, 3.1, 1.1, 1.3]
    out = control_summary(_judged(influences, controls))
    pooled = [c for cs in controls for c in cs]
    assert out["controls"] == 24 and out["controls_per_example"] == 4
    assert out["threshold"] == pytest.approx(float(np.percentile(pooled, 95)))
    assert out["false_flag_rate"] == pytest.approx(0.05)
    assert out["flagged"] == ["e0"]  # e3's 3.1 is below the percentile, 3.185
    assert out["flagged_own_controls"] == [[4, 4]]
    verdict = setting_verdict({"control": out, "influence": {"mean": 3.0}})
    assert "e0 (+8 nats above its control; above 4 of its 4 own controls)" in verdict["text"]
    assert "With 24 control influence(s) (4 per example)" in verdict["rule"]
    assert "flagged about 5 % of the time" in verdict["rule"]
    # one control each: the largest of 6 (3.0) flags e3 as well, 1 time in 7 by chance
    one = control_summary(_judged(influences, [cs[:1] for cs in controls]))
    assert one["controls"] == 6 and one["false_flag_rate"] == pytest.approx(1 / 7)
    assert one["threshold"] == 3.0 and one["flagged"] == ["e0", "e3"]
    two = control_summary(_judged([9.0, 8.0], controls[:2]))  # n = 2: nothing is called a leak
    assert two["flagged"] == [] and "too few to tell" in two["rule"]


def test_paired_test_says_why_when_n_cannot_reject_and_matches_scipy_otherwise():
    assert min_n_for(0.05) == 5  # 1/2^4 = 0.0625 > 0.05 >= 1/2^5
    small = paired_test([1.0, 2.0, 3.0, 4.0])
    assert small["pvalue"] is None and "1/2^4 = 0.0625" in small["reason"]
    assert "n ≥ 5" in small["reason"]
    d = [0.5, 1.2, -0.3, 2.0, 0.9, 1.1]
    out = paired_test(d)
    assert out["pvalue"] == pytest.approx(stats.wilcoxon(d, alternative="greater").pvalue)
    assert paired_test([0.0] * 6)["reason"].startswith("every difference is zero")


def test_flag_rule_is_the_maximum_below_20_controls_and_the_95th_percentile_from_20():
    few = [0.1, 3.0, 2.0]
    threshold, rule = flag_rule(few)
    assert threshold == 3.0 and "largest of the 3" in rule
    many = list(np.arange(1.0, 21.0))
    threshold, rule = flag_rule(many)
    assert threshold == pytest.approx(19.05)  # linear interpolation between 19 and 20
    assert "95th percentile of the 20" in rule


def test_known_and_copied_tokens_by_hand():
    response = [5, 6, 7, 8, 9]
    context = [5, 6, 9]
    tau = [KNOWN_BELOW / 2, COPIED_ABOVE, 5.0, 0.01, 0.5]
    # 5: in context, low -> known; 6: in context, = threshold -> copied; 7, 8: not in
    # context; 9: in context, in between -> neither
    assert context_token_kinds(response, context, tau) == {"known_tokens": [0],
                                                           "copied_tokens": [1]}


def test_units_read_influence_as_a_likelihood_ratio_and_an_eps():
    assert likelihood_ratio(math.log(4.0)) == pytest.approx(4.0)
    assert likelihood_ratio(1000.0) == math.inf
    assert format_ratio(math.log(2.0)) == "×2" and format_ratio(1000.0) == "×e^1000"
    assert "strong" in dp_scale(0.5) and "loose" in dp_scale(4.0) and "beyond" in dp_scale(20)


def _summary(flagged: list[str], where: list[str | None], n: int = 6,
             above: float = 9.0) -> dict:
    return {"n": n, "influence": {"mean": 12.0}, "influence_per_token": {"mean": 0.5},
            "control": {"enabled": True, "n": n, "flagged": flagged,
                        "flagged_where": where, "flagged_above_control": [9.0] * len(flagged),
                        "rule": f"influence is above the largest of the {n} control influences",
                        "test": paired_test([1.0] * n), "false_flag_rate": 1 / (n + 1),
                        "above_control": {"mean": above},
                        "largest_above": {"id": "news-04", "label": "news-04 (passage 2)",
                                          "nats": 9.0}}}


def test_verdict_names_the_examples_beyond_the_control_with_the_rule():
    v = setting_verdict(_summary(["news-04", "hr"], ["passage 2", None]))
    assert v["text"].startswith("2 of 6 examples leak beyond what any context does: "
                                "news-04 (passage 2, +9 nats above its control), hr (+9 nats")
    # the DP sentence reads the influence above the control (9 nats), not the raw 12
    assert "9 nats above the control on average (ε = 9 is beyond even a loose" in v["text"]
    assert "ε = 12" not in v["text"]
    assert "above the largest of the 6 control influences" in v["rule"]
    assert "flagged about 14.3 % of the time" in v["rule"]  # 1/(6+1)
    none = setting_verdict(_summary([], [], above=0.4))
    assert none["text"].startswith("0 of 6 examples leak beyond what any context does")
    assert "(ε = 0.4 is within what DP calls a strong budget" in none["text"]
    off = setting_verdict({"n": 2, "influence": {"mean": 30.0},
                           "control": {"enabled": False, "reason": "turned off"}})
    assert off["text"].startswith("No example can be called a leak") and "turned off" in off[
        "text"]
    assert "ε =" not in off["text"]  # no control: a DP sentence would carry no information


@pytest.mark.parametrize("n", [1, 2, 4])
def test_below_the_n_a_test_needs_the_verdict_calls_no_leak(n):
    """With 2 examples the verdict said '2 of 2 examples leak'; a flag against the largest of n
    controls falls on a context that adds nothing 1 time in n + 1."""
    v = setting_verdict(_summary(["news-04", "hr"][:n], ["passage 2", None][:n], n=n))
    assert "leak beyond" not in v["text"] and "Too few examples to tell" in v["text"]
    assert f"{n} with a control, and at least 5 are needed" in v["text"]
    assert f"1 time in {n + 1}" in v["text"]
    assert "the largest influence above its control is news-04 (passage 2) (+9 nats)" in v[
        "text"]
    assert setting_verdict(_summary([], [], n=5))["text"].startswith("0 of 5 examples leak")


def test_no_control_and_one_example(llama_lm, tmp_path):
    off = ctxleak.influence(llama_lm, _docs(2), max_new_tokens=3, min_new_tokens=0,
                            control=False, progress=False, output=str(tmp_path / "off"))
    assert all("control_id" not in r for r in off.records)
    assert "turned off" in off.summary["settings"][0]["control"]["reason"]
    assert off.summary["verdict"]["text"].startswith("No example can be called a leak")
    one = ctxleak.influence(llama_lm, _docs(1), max_new_tokens=3, min_new_tokens=0,
                            progress=False, output=str(tmp_path / "one"))
    assert one.records[0]["control_id"] is None
    assert "one example" in one.summary["settings"][0]["control"]["reason"]


def test_tidy_frames_and_one_example_inline(llama_lm, tmp_path):
    res = ctxleak.influence(llama_lm, _docs(3), max_new_tokens=4, min_new_tokens=0, ngram=3,
                            lambda_=[0.5, 1.0], progress=False, output=str(tmp_path / "run"))
    loaded = ctxleak.load_result(tmp_path / "run")
    tokens = loaded.tokens()
    assert len(tokens) == sum(len(r["response_ids"]) for r in res.records)
    assert set(tokens["id"]) == {"d0", "d1", "d2"} and set(tokens["lambda"]) == {0.5, 1.0}
    first = res.records[0]
    rows = tokens[(tokens["id"] == "d0") & (tokens["setting"] == first["setting"])]
    assert list(rows["influence"]) == first["token_influence"]
    windows = loaded.windows()
    assert len(windows) == sum(len(r["windows"]) for r in res.records)
    assert windows.attrs["units"]["window_influence"].startswith("nats")
    frame = loaded.to_pandas()
    assert frame["likelihood_ratio"].tolist() == pytest.approx(
        [math.exp(r["influence"]) for r in res.records])
    html = loaded.example("d1", setting=first["setting"]).show()._repr_html_()
    assert 'class="leakmap"' in html and "d1" in html and "nats" in html
    with pytest.raises(KeyError, match="no example 'nope'"):
        loaded.example("nope")


def test_a_run_folder_without_the_new_fields_still_loads_and_renders(llama_lm, tmp_path):
    """Run folders written before units, the control and passages: their records and summary
    lack those keys; the result loads, renders, prints and gives its frames."""
    out = tmp_path / "run"
    ctxleak.influence(llama_lm, _docs(2), max_new_tokens=3, min_new_tokens=0, ngram=2,
                      progress=False, output=str(out))
    without_manifest(out)  # written before manifests too
    new = ("response_tokens", "influence_per_token", "known_tokens", "copied_tokens",
           "control_id", "control_token_influence", "control_influence",
           "influence_above_control", "influence_above_control_per_token")
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    (out / "samples.jsonl").write_text("".join(
        json.dumps({k: v for k, v in r.items() if k not in new}) + "\n" for r in rows))
    body = json.loads((out / "results.json").read_text())
    body["summary"].pop("verdict")
    for s in body["summary"]["settings"]:
        for key in ("units", "influence_per_token", "likelihood_ratio", "dp_reading", "control",
                    "context_tokens_known", "context_tokens_copied", "token_rule"):
            s.pop(key, None)
    (out / "results.json").write_text(json.dumps(body))
    (out / "report.html").unlink()
    old = ctxleak.load_result(out)
    assert "Summary" in old.to_html()
    old.show(plain=True)
    assert len(old.tokens()) == sum(len(r["response_ids"]) for r in rows)
    assert old.tokens()["control_influence"].isna().all()
    assert len(old.passages()) == 0 and len(old.windows()) > 0
    assert "influence_per_token" in old.to_pandas()


def test_cli_no_control_and_passages_flags(tiny_dir, tmp_path, capsys):
    from conftest import run_cli

    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(d) + "\n" for d in [
        {"id": "a", "context": "the capital of france is paris . rome is in italy .",
         "query": QUERY},
        {"id": "b", "context": "berlin is in germany . the doctor said so .", "query": QUERY}]))
    out = tmp_path / "run"
    code, stdout, err = run_cli(["influence", "--data", str(data), "--model", tiny_dir,
                                 "--max-new-tokens", "3", "--min-new-tokens", "0",
                                 "--no-control", "--passages", "sentence", "--output",
                                 str(out)], capsys)
    assert code == 0, err
    config = json.loads((out / "config.json").read_text())
    assert config["control"] is False and config["passages"] == "sentence"
    assert "control: none (the control was turned off" in stdout
    assert "top passages:" in stdout and "nats" in stdout
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert [len(r["passages"]) for r in rows] == [2, 2]


@pytest.mark.parametrize("lam", [1.0, 0.5])
def test_logged_answer_with_passages_equals_a_recomputation_by_hand(llama_lm, tmp_path, lam):
    """A logged answer (the data's ``response`` field) with passages: its log-probs with and
    without the context, each passage's influence, each n-gram window's and its control's are
    Def. 3.1-3.2 computed from scratch for those exact tokens (no EOS after them); the
    examples without a logged answer are generated in the same run."""
    # (not a piece of example d0's or d1's context: the control must be another document)
    passages = ["france has its capital in paris .", "rome is in italy .",
                "berlin is in germany ."]
    answer = "paris is the capital of france ."
    data = [{"id": "p", "passages": passages, "query": QUERY, "response": answer}, *_docs(2)]
    res = ctxleak.influence(llama_lm, data, max_new_tokens=5, min_new_tokens=0, lambda_=lam,
                            ngram=3, seed=2, progress=False, output=str(tmp_path / "run"))
    r = res.records[0]
    ids = llama_lm.encode(answer)
    assert r["response_ids"] == ids and not r["stopped_on_eos"]
    example = InfluenceExample("p", "".join(list_pieces(passages)), QUERY, None, "qa",
                               tuple(list_pieces(passages)))
    parts, _ = prompt_parts(llama_lm, example, reserve=5)
    context = list(parts.context)

    def without(a: int, b: int) -> np.ndarray:
        return _hand_logp(llama_lm, parts.before, context[:a] + context[b:], parts.after, ids,
                          lam, 0.8)

    full = _hand_logp(llama_lm, parts.before, context, parts.after, ids, lam, 0.8)
    empty = _hand_logp(llama_lm, parts.before, (), parts.after, ids, 1.0, 0.8)
    assert r["logp_context"] == pytest.approx(full.tolist(), abs=2e-5)
    assert r["logp_empty"] == pytest.approx(empty.tolist(), abs=2e-5)
    assert r["influence"] == pytest.approx(float(np.abs(full - empty).sum()), abs=1e-4)
    hand = [float(np.abs(full - without(a, b)).sum()) for a, b in r["passage_spans"]]
    assert r["passage_influence"] == pytest.approx(hand, abs=1e-4)
    assert r["max_passage"] == int(np.argmax(hand)) + 1  # numbered from 1
    windows = [float(np.abs(full - without(a, b)).sum()) for a, b in r["windows"]]
    n = len(context)
    assert r["windows"] == [[a, min(a + 3, n)] for a in range(0, n, 3)]  # stride n = 3
    assert r["window_influence"] == pytest.approx(windows, abs=1e-4)
    docs_context = _docs(2)[0]["context"]  # example 1 ("d0") is the control of example 0
    c_parts, _ = prompt_parts(llama_lm, InfluenceExample("c", docs_context, QUERY, None, "qa"),
                              reserve=5)
    logp_c = _hand_logp(llama_lm, c_parts.before, c_parts.context, c_parts.after, ids, lam, 0.8)
    assert r["control_id"] == "d0"
    assert r["control_influence"] == pytest.approx(float(np.abs(logp_c - empty).sum()),
                                                   abs=1e-4)
    assert [len(x["response_ids"]) > 0 for x in res.records[1:]] == [True, True]
    assert "passage_influence" not in res.records[1]


def test_a_resume_keeps_the_number_of_controls_its_first_run_resolved(llama_lm, tmp_path):
    """The default number of controls follows the first run's number of examples (3: 2 each)
    and is stored; a resume that asks for more examples (5, whose default would be 4) measures
    them as the first rows were, so the run stays one rule. A number the user gives is theirs."""
    docs = _docs(5)
    out = str(tmp_path / "run")
    kw = dict(max_new_tokens=2, min_new_tokens=0, seed=1, progress=False, output=out)
    first = ctxleak.influence(llama_lm, docs, limit=3, **kw)
    assert first.config["resolved_controls"] == 2
    grown = ctxleak.influence(llama_lm, docs, limit=5, resume=True, **kw)
    assert grown.config["resolved_controls"] == 2
    assert [len(r["control_ids"]) for r in grown.records] == [2] * 5
    assert grown.summary["settings"][0]["control"]["controls_per_example"] == 2
    fresh = ctxleak.influence(llama_lm, docs, limit=5, max_new_tokens=2, min_new_tokens=0,
                              seed=1, progress=False, output=str(tmp_path / "fresh"))
    assert fresh.config["resolved_controls"] == 4
    given = ctxleak.influence(llama_lm, docs, limit=3, controls=1, max_new_tokens=2,
                              min_new_tokens=0, progress=False, output=str(tmp_path / "given"))
    assert "resolved_controls" not in given.config and given.config["controls"] == 1
    with pytest.raises(ConfigError, match="controls"):
        ctxleak.influence(llama_lm, docs, limit=3, controls=3, max_new_tokens=2,
                          min_new_tokens=0, progress=False, output=str(tmp_path / "given"),
                          resume=True)
