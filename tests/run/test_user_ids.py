"""The user's ``id`` comes back untouched: in ``samples.jsonl``, in ``records`` and in
``to_pandas()``, with the setting in columns of its own, so results merge back onto the user's
table; the run folder names each (example, setting) by its ``key``, which resume goes by; run
folders written when ``id`` was that key still load and resume."""

from __future__ import annotations

import json

import pytest
from helpers.run_folders import without_manifest

import ctxleak

ROWS = [{"id": "hr-memo|2024", "context": "the capital of france is paris .", "query": "what ?",
         "owner": "ann"},
        {"id": 7, "context": "rome is the capital of italy .", "query": "what ?",
         "owner": "bob"},
        {"id": "news-04", "context": "madrid is in spain .", "query": "what ?", "owner": "cy"}]
KW = dict(lambda_=[1.0, 0.5], max_new_tokens=3, seed=3, progress=False)


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_ids_come_back_untouched_with_the_setting_in_columns(llama_lm, tmp_path):
    result = ctxleak.influence(llama_lm, ROWS, output=str(tmp_path / "run"), **KW)
    ids = [r["id"] for r in ROWS]
    # each example's settings side by side; an integer id stays an integer
    assert [r["id"] for r in result.records] == [i for i in ids for _ in range(2)]
    assert [r["lambda"] for r in result.records] == [1.0, 0.5] * 3
    assert all(r["temperature"] == 0.8 and r["context_limit"] is None for r in result.records)
    assert [r["key"] for r in result.records][:2] == ["hr-memo|2024|lambda=1,T=0.8,context=all",
                                                      "hr-memo|2024|lambda=0.5,T=0.8,context=all"]
    stored = _lines(result.path / "samples.jsonl")
    assert [(r["id"], r["key"]) for r in stored] == [(r["id"], r["key"]) for r in result.records]
    assert list(stored[0])[:2] == ["id", "key"]
    back = ctxleak.load_result(result.path)
    assert back.records == result.records


def test_a_merge_with_the_users_table(llama_lm, tmp_path):
    pd = pytest.importorskip("pandas")
    table = pd.DataFrame(ROWS)
    result = ctxleak.influence(llama_lm, table.astype({"id": str}),
                               output=str(tmp_path / "run"), **KW)
    frame = result.to_pandas()
    merged = table.astype({"id": str}).merge(frame[["id", "lambda", "influence"]], on="id",
                                             validate="one_to_many")
    assert len(merged) == 6 and set(merged["owner"]) == {"ann", "bob", "cy"}
    one = merged[merged["lambda"] == 1.0].set_index("id")
    assert one.loc["news-04", "influence"] == next(
        r["influence"] for r in result.records if r["id"] == "news-04" and r["lambda"] == 1.0)


def test_resume_goes_by_key(llama_lm, tmp_path):
    out = str(tmp_path / "run")
    first = ctxleak.influence(llama_lm, ROWS, output=out, limit=2, **KW)
    assert len(first.records) == 4
    whole = ctxleak.influence(llama_lm, ROWS, output=out, resume=True, **KW)
    assert [r["id"] for r in whole.records] == [r["id"] for r in ROWS for _ in range(2)]
    kept = {r["key"]: r for r in first.records}
    assert all(kept[r["key"]] == r for r in whole.records if r["key"] in kept)
    # nothing measured twice: the folder holds one row per (example, setting)
    assert len(_lines(whole.path / "samples.jsonl")) == 6


def _as_older_folder(path):
    """Rewrite a run folder as ctxleak wrote it when a row's id was its key (before it kept a
    manifest)."""
    without_manifest(path)
    rows = _lines(path / "samples.jsonl")
    old = [{"id": r["key"], **{k: v for k, v in r.items() if k not in ("id", "key")}}
           for r in rows]
    (path / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in old))
    body = json.loads((path / "results.json").read_text())
    assert body["sample_ids"] == [r["key"] for r in rows]
    return old


def test_older_run_folders_load_and_resume_with_the_users_ids(llama_lm, tmp_path):
    out = tmp_path / "run"
    first = ctxleak.influence(llama_lm, ROWS, output=str(out), limit=2, **KW)
    old = _as_older_folder(out)
    back = ctxleak.load_result(out)
    assert [r["id"] for r in back.records] == ["hr-memo|2024"] * 2 + ["7"] * 2  # as it had it
    assert [r["key"] for r in back.records] == [r["id"] for r in old]
    whole = ctxleak.influence(llama_lm, ROWS, output=str(out), resume=True, **KW)
    assert [r["id"] for r in whole.records] == [r["id"] for r in ROWS for _ in range(2)]
    assert [r["response_ids"] for r in whole.records if r["key"] in {o["id"] for o in old}] \
        == [r["response_ids"] for r in first.records]
    assert len(_lines(out / "samples.jsonl")) == 6
