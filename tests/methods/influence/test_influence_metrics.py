"""Regurgitation and summary metrics on hand-made cases; example loading errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ctxleak.errors import ConfigError, InputError
from ctxleak.methods.influence.data import load_examples
from ctxleak.methods.influence.metrics import (
    context_token_fraction,
    is_repeat,
    is_rouge_repeat,
    mean_curve,
    mean_with_ci,
    rouge_l_f1,
)


def test_repeat_prompts_by_token_ids():
    context = [5, 6, 7, 8]
    assert context_token_fraction([5, 6, 9, 10], context) == 0.5
    assert is_repeat([5, 6, 9, 10], context)          # exactly half counts
    assert not is_repeat([5, 9, 10], context)          # a third does not
    assert not is_repeat([], context)
    assert is_repeat([5, 9, 10], context, threshold=0.3)


def test_rouge_prompts_by_hand():
    context = "the mayor opened the new bridge on monday"
    assert rouge_l_f1("the mayor opened the new bridge", context) == pytest.approx(
        2 * 1.0 * (6 / 8) / (1.0 + 6 / 8))
    assert is_rouge_repeat("the mayor opened the new bridge", context)
    assert not is_rouge_repeat("a cat sat", context)
    assert rouge_l_f1("", context) == 0.0


def test_mean_with_ci_and_curves():
    s = mean_with_ci([1.0, 2.0, 3.0, 4.0])
    assert s["mean"] == 2.5 and s["median"] == 2.5 and s["n"] == 4
    assert s["std"] == pytest.approx(np.std([1, 2, 3, 4], ddof=1))
    # 4 values cannot carry a bootstrap interval: none, and the reason
    assert s["ci_low"] is None and s["ci_high"] is None and "10" in s["ci_reason"]
    assert mean_with_ci([])["mean"] is None
    assert mean_with_ci([7.0])["ci_low"] is None
    # 12 values: the BCa interval of scipy.stats.bootstrap, around the mean
    twelve = [0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 7.0, 9.0, 12.0, 20.0]
    big = mean_with_ci(twelve)
    assert big["ci_method"] == "BCa bootstrap" and big["ci_reason"] is None
    assert big["ci_low"] < np.mean(twelve) < big["ci_high"]
    assert mean_curve([[1, 2, 3], [3]]) == [2.0, 2.0, 3.0]


def write(tmp_path, rows, name="d.jsonl"):
    p = tmp_path / name
    p.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return p


def test_demo_loads():
    exs = load_examples("demo")
    assert len(exs) == 20 and {e.task for e in exs} == {"qa", "summarization"}


def test_prompts_use_the_papers_wording():
    """Paper 000, Fig. 5-6: "News article: …" / "Document: …", and without context the same
    template with an empty slot."""
    from ctxleak.methods.influence.data import InfluenceExample, template_for

    news = InfluenceExample("n", "Storm hits town", "", None, "summarization")
    qa = InfluenceExample("q", "Cells die", "Do cells die?", None, "qa")
    fill = template_for(news, None).format
    assert fill(context="Storm hits town", query="") == \
        "News article: Storm hits town. Summary of the above news article:"
    assert fill(context="", query="") == "News article: . Summary of the above news article:"
    assert template_for(qa, None).format(context="", query=qa.query) == \
        "Document: . Do cells die?"


def test_bad_input_names_file_line_field(tmp_path):
    p = write(tmp_path, [{"context": "a", "query": "q?"}, "{not json"])
    with pytest.raises(InputError, match=r"d.jsonl:2.*not valid JSON"):
        load_examples(str(p))
    p = write(tmp_path, [{"context": "a", "query": "q?"}, {"query": "b"}])
    with pytest.raises(InputError, match=r"d.jsonl:2.*field 'context'.*missing"):
        load_examples(str(p))
    p = write(tmp_path, [{"context": "   ", "query": "q?"}])
    with pytest.raises(InputError, match=r"d.jsonl:1.*field 'context'.*empty"):
        load_examples(str(p))
    p = write(tmp_path, [{"context": "a", "query": ""}])
    with pytest.raises(InputError, match=r"field 'query'"):
        load_examples(str(p), task="qa")
    p = write(tmp_path, [{"context": "a", "query": "q", "id": 1}, {"context": "b", "query": "q",
                                                                    "id": 1}])
    with pytest.raises(InputError, match="duplicate id"):
        load_examples(str(p))
    with pytest.raises(InputError, match="file not found"):
        load_examples(str(tmp_path / "missing.jsonl"))
    with pytest.raises(ConfigError, match="template=..."):
        load_examples("demo", task="custom")
    with pytest.raises(ConfigError, match="unknown task"):
        load_examples("demo", task="poetry")


def test_csv_and_field_mapping(tmp_path):
    p = tmp_path / "d.csv"
    p.write_text("article,question,answer\nSome text here,What?,Yes\n")
    exs = load_examples(str(p), rename={"article": "context", "question": "query",
                                        "answer": "reference"})
    assert exs[0].context == "Some text here" and exs[0].reference == "Yes"
