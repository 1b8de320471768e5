"""Span logs are read as strictly as rows (tests/run/test_inputs.py): every bad input is one
InputError naming the file and the line, never a traceback or a message about another format,
with and without ``log_format="openinference"``: nesting too deep for the parser or for the
attributes, a byte that is not UTF-8, NaN, a key given twice, a line over the size limit, a
document id that is an object, trace ids ``1`` and ``"1"``. The app's prompt file and a model
folder's config.json are read with the same care."""

from __future__ import annotations

import json

import pytest

from ctxleak.errors import ConfigError, InputError
from ctxleak.methods.influence.data import load_examples
from ctxleak.methods.rag.app_prompt import load_prompt_messages
from ctxleak.methods.rag.spans import MAX_ATTRIBUTE_DEPTH
from ctxleak.run.records import MAX_LINE_BYTES_ENV


def _span(trace, kind="LLM", **attributes):
    """One span that is a whole trace: the query, one retrieved document, the answer."""
    return {"context": {"trace_id": trace, "span_id": "s"}, "parent_id": None,
            "attributes": {"openinference.span.kind": kind, "input.value": "q ?",
                           "output.value": "a .", "retrieval.documents.0.document.id": "d",
                           "retrieval.documents.0.document.content": "doc .", **attributes}}


def _line(span) -> bytes:
    return json.dumps(span).encode() + b"\n"


GOOD = _line(_span("t0"))
DEEP_JSON = b'{"context": {"trace_id": "t"}, "attributes": ' + b"[" * 5000 + b"]" * 5000 + b"}\n"
deep_attrs: dict = {"x": 1}
for _ in range(MAX_ATTRIBUTE_DEPTH + 5):
    deep_attrs = {"a": deep_attrs}
CASES = {
    # (the file's bytes, the line named, words of the message)
    "json nested too deeply, first line": (DEEP_JSON, 1, "nested more deeply"),
    "json nested too deeply, later line": (GOOD + DEEP_JSON, 2, "nested more deeply"),
    "attributes nested too deeply": (GOOD + _line(_span("t1", deep=deep_attrs)), 2,
                                     "nested more than"),
    "not UTF-8, first line": (GOOD[:-3] + b"\xff" + GOOD[-3:], 1, "not UTF-8"),
    "not UTF-8, later line": (GOOD + GOOD[:-3] + b"\xff" + GOOD[-3:], 2, "not UTF-8"),
    "NaN": (GOOD + _line(_span("t1"))[:-2] + b', "score": NaN}\n', 2, "NaN"),
    "a key twice": (GOOD + b'{"trace_id": "t1", "trace_id": "t2", "attributes": {}}\n', 2,
                    "appears twice"),
    "an object document id": (GOOD + _line(_span("t1", **{
        "retrieval.documents.0.document.id": {"x": 1},
        "retrieval.documents.0.document.content": "doc"})), 2, "is a JSON object"),
    "trace ids 1 and '1'": (_line(_span(1)) + _line(_span("1", kind="CHAIN")), 2,
                            "is a str here and a int at line 1"),
}


@pytest.mark.parametrize("forced", [False, True], ids=["auto", "openinference"])
@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_span_log_is_one_error_naming_file_and_line(tmp_path, case, forced):
    content, line, says = CASES[case]
    path = tmp_path / "spans.jsonl"
    path.write_bytes(content)
    with pytest.raises(InputError) as err:
        load_examples(str(path), **({"log_format": "openinference"} if forced else {}))
    assert err.value.file == str(path) and err.value.line == line, str(err.value)
    assert says in str(err.value)


def test_a_span_line_over_the_size_limit_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv(MAX_LINE_BYTES_ENV, "2000")
    path = tmp_path / "spans.jsonl"
    path.write_bytes(GOOD + _line(_span("t1", big="x" * 3000)))
    with pytest.raises(InputError, match="over the input limit") as err:
        load_examples(str(path), log_format="openinference")
    assert err.value.line == 2


def test_the_app_prompt_file_and_a_model_config_refuse_deep_or_broken_json(tmp_path):
    deep = tmp_path / "prompt.json"
    deep.write_bytes(b"[" * 5000 + b"]" * 5000)
    with pytest.raises(InputError, match="nested more deeply") as err:
        load_prompt_messages(str(deep))
    assert err.value.file == str(deep)
    broken = tmp_path / "broken.json"
    broken.write_bytes(b'[{"role": "user", "content": "\xff {context}"}]')
    with pytest.raises(InputError, match="not UTF-8"):
        load_prompt_messages(str(broken))
    from ctxleak.engine.model_files import _read_config

    config = tmp_path / "config.json"
    config.write_bytes(b"[" * 100000 + b"]" * 100000)
    with pytest.raises(ConfigError, match="nested more deeply"):
        _read_config(config)


def test_document_ids_in_nfc_and_nfd_are_refused_not_kept_as_two(tmp_path):
    """'café' written NFC in one turn and NFD in another prints the same: refused, naming the
    line, rather than counted as two documents."""
    import unicodedata

    nfc, nfd = (unicodedata.normalize(form, "café") for form in ("NFC", "NFD"))
    assert nfc != nfd
    rows = [{"id": f"t{k}", "query": "q ?", "response": "a .",
             "documents": [{"id": ident, "text": f"doc {k} ."}]}
            for k, ident in enumerate((nfc, nfd))]
    path = tmp_path / "log.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(InputError, match="only in its Unicode normalisation") as err:
        load_examples(str(path))
    assert err.value.line == 2 and err.value.field == "documents.id"
