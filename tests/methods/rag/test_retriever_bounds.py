"""A user's retriever cannot end ctxleak quietly or without bound: one that calls ``sys.exit(0)``
(when asked, or when its file is run) is an error naming the query or the file, so a CI gate on
``--exposure-budget`` fails instead of passing with exit 0; a generator that never ends is read
up to :data:`MAX_DOCUMENTS` and refused; a leak budget on data without documents is refused
before any model runs, not silently kept on nothing."""

from __future__ import annotations

import itertools
import json
import sys

import pytest
from conftest import run_cli

import ctxleak
from ctxleak.errors import ConfigError, InputError
from ctxleak.methods.rag.retrieval import MAX_DOCUMENTS, retrieve


def test_a_retriever_that_exits_is_an_error_naming_the_query():
    def quits(query):
        sys.exit(0)

    with pytest.raises(InputError, match=r"query 'q \?': the function exited \(sys.exit\(0\)\)"):
        retrieve(quits, ["q ?"])

    def quits_while_listed(query):
        yield "a document ."
        sys.exit(0)

    with pytest.raises(InputError, match="exited"):
        retrieve(quits_while_listed, ["q ?"])


def test_an_endless_generator_is_read_up_to_the_bound_and_refused():
    read = itertools.count()

    def endless(query):
        while True:
            yield f"document {next(read)} ."

    with pytest.raises(InputError, match=f"more than {MAX_DOCUMENTS:,} documents"):
        retrieve(endless, ["q ?"])
    assert next(read) == MAX_DOCUMENTS + 1  # one past the bound, no more


def test_the_cli_does_not_exit_0_when_the_retriever_exits(tiny_dir, tmp_path, capsys):
    queries = tmp_path / "queries.jsonl"
    queries.write_text(json.dumps({"query": "who is it ?"}) + "\n")
    asked = tmp_path / "asked.py"
    asked.write_text("import sys\n\ndef retrieve(query):\n    sys.exit(0)\n")
    loaded = tmp_path / "loaded.py"
    loaded.write_text("import sys\nsys.exit(0)\n\ndef retrieve(query):\n    return ['x']\n")
    for spec, says in ((f"{asked}:retrieve", "exited (sys.exit(0))"),
                       (f"{loaded}:retrieve", "failed: SystemExit")):
        code, _, err = run_cli(["influence", "--model", tiny_dir, "--data", str(queries),
                                "--retriever", spec, "--exposure-budget", "1"], capsys)
        assert code not in (0, None) and says in err, (code, err)


def test_a_budget_on_data_without_documents_is_refused(llama_lm, tmp_path):
    rows = [{"id": "a", "context": "rome is the capital of italy .", "query": "who ?"}]
    with pytest.raises(ConfigError, match="none of the 1 example") as err:
        ctxleak.influence(llama_lm, rows, exposure_budget=1.0, max_new_tokens=2,
                          output=str(tmp_path / "run"), progress=False)
    assert err.value.param == "exposure_budget"
    assert not (tmp_path / "run" / "samples.jsonl").exists()


def test_a_retrieved_item_of_the_wrong_type_names_the_field_once():
    with pytest.raises(InputError) as err:
        retrieve(lambda query: [3.5], ["q ?"])
    assert err.value.field == "documents" and "documents.documents" not in str(err.value)
