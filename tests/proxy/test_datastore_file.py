"""``--datastore FILE`` is read as every other input is: each bad row is one line naming the
file, the line and the field, never a traceback (issue 84)."""

from __future__ import annotations

import json

import pytest

from ctxleak.errors import InputError
from ctxleak.proxy.config import ProxyConfig
from ctxleak.run.datastore_file import is_visible, read_datastore

GOOD = '{"id": "a", "text": "the code is 4471"}\n'
SPEC = "dp-rag:eps=5"


def _refused(tmp_path, body: bytes | str, line: int, field: str | None = None) -> InputError:
    path = tmp_path / "store.jsonl"
    path.write_bytes(body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body)
    with pytest.raises(InputError) as caught:
        read_datastore(path)
    err = caught.value
    assert err.file == str(path) and err.line == line and err.field == field
    assert "\n" not in str(err) and str(err).startswith(f"{path}:{line}")
    assert len(str(err)) < 400
    return err


@pytest.mark.parametrize("row, field, says", [
    ('{"id": true, "text": "x"}', "id", "got true/false"),
    ('{"id": 7, "text": "x"}', "id", "got a number"),
    ('{"id": 7.5, "text": "x"}', "id", "got a number"),
    ('{"id": null, "text": "x"}', "id", "got null"),
    ('{"id": ["a"], "text": "x"}', "id", "got list"),
    ('{"id": "", "text": "x"}', "id", "is empty"),
    ('{"id": " \\t ", "text": "x"}', "id", "is empty"),
    ('{"id": "a\\u0000b", "text": "x"}', "id", "NUL"),
    ('{"id": "a\\nb", "text": "x"}', "id", "control character"),
    ('{"id": "\\ud800", "text": "x"}', "id", "lone surrogate"),
    ('{"text": "x"}', "id", "missing field"),
    ('{"id": "b"}', "text", "missing field"),
    ('{"id": "b", "text": 12}', "text", "got a number"),
    ('{"id": "b", "text": "caf\\udc00e"}', "text", "lone surrogate"),
    ('{"id": "b", "text": "a\\u0000b"}', "text", "NUL"),
    ('{"id": "b", "text": ""}', "text", "no visible character"),
    ('{"id": "b", "text": "\\u200b\\u200d\\u2060\\ufeff "}', "text", "no visible character"),
    ('{"id": "b", "text": "\\u00ad\\u202a\\u202c\\u3164\\u2800"}', "text", "no visible"),
    ('{"id": "b", "text": "\\u0301\\u0308"}', "text", "no visible character"),
    ('{"id": "a", "text": "another text"}', "id", "duplicate id 'a' (first on line 1)"),
    ('{"id": " a ", "text": "another text"}', "id", "duplicate id"),
    ('{"id": "a\\u0301", "text": "y"}\n{"id": "\\u00e1", "text": "z"}', "id", "duplicate"),
])
def test_each_bad_row_is_one_line_naming_the_file_line_and_field(tmp_path, row, field, says):
    body = GOOD + row + "\n"
    err = _refused(tmp_path, body, body.count("\n"), field)
    assert says in str(err)


@pytest.mark.parametrize("body, line, says", [
    (GOOD + "[" * 200_000 + "]" * 200_000 + "\n", 2, "nested more deeply"),
    (GOOD + '{"id": "b", "text": ' + "[" * 200_000 + "]" * 200_000 + "}\n", 2, "nested"),
    (GOOD + '{"id": "b", "text": ' + '{"a": ' * 100_000 + "1" + "}" * 100_001 + "\n", 2,
     "nested"),
    (GOOD.encode() + b'{"id": "b", "text": "caf\xe9"}\n', 2, "not UTF-8"),
    (GOOD.encode() + b'{"id": "b", "text": "a\x00b"}\n', 2, "Invalid control character"),
    (GOOD.encode() + b'\x00\n', 2, "not valid JSON"),
    (GOOD + '["a", "x"]\n', 2, "must be a JSON object"),
    (GOOD + '{"id": "b", "text": "x", "id": "c"}\n', 2, "appears twice"),
    (GOOD + '{"id": "b", "text": NaN}\n', 2, "NaN is not a JSON value"),
    ("\ufeff\ufeff" + GOOD, 1, "not valid JSON"),
])
def test_bad_bytes_and_shapes_are_one_line_too(tmp_path, body, line, says):
    err = _refused(tmp_path, body, line, "id" if "twice" in says else None)
    assert says in str(err)


def test_a_bom_crlf_and_a_long_line_are_read(tmp_path):
    path = tmp_path / "store.jsonl"
    long = "word " * 400_000  # 2,000,000 bytes of text, under the 2 MiB line limit
    rows = [{"id": "a", "text": "first"}, {"id": "b", "text": long}, {"id": "c", "text": "ü"}]
    path.write_bytes(b"\xef\xbb\xbf" + b"\r\n".join(json.dumps(r).encode() for r in rows)
                     + b"\r\n\r\n")
    store = read_datastore(path)
    assert store.documents == (("a", "first"), ("b", long), ("c", "ü"))


def test_a_line_over_the_limit_is_refused_before_it_is_parsed(tmp_path, monkeypatch):
    monkeypatch.setenv("CTXLEAK_MAX_LINE_BYTES", "1000")
    body = GOOD + json.dumps({"id": "b", "text": "x" * 2000}) + "\n"
    assert "over the input limit of 1,000 bytes" in str(_refused(tmp_path, body, 2))


def test_an_empty_file_a_folder_and_a_csv_name_the_file(tmp_path):
    for body in ("", "\n  \n\r\n"):
        path = tmp_path / "store.jsonl"
        path.write_text(body)
        with pytest.raises(InputError, match=r"store.jsonl: no documents"):
            read_datastore(path)
    with pytest.raises(InputError, match="is a folder"):
        read_datastore(tmp_path)
    (tmp_path / "store.csv").write_text("id,text\na,b\n")
    with pytest.raises(InputError, match="is a CSV file"):
        read_datastore(tmp_path / "store.csv")


def test_visible_text_is_kept_whatever_its_script():
    assert all(is_visible(t) for t in ("a", "\u200b7", "日本", "\u0301e", "é", "🙂", "٣"))
    assert not any(is_visible(t) for t in ("", " \u00a0\u3000", "\u200e\u200f", "\ufe0f"))


def test_the_proxy_and_serve_refuse_a_bad_datastore_in_one_line(tmp_path, capsys):
    from ctxleak.cli.app import main

    path = tmp_path / "store.jsonl"
    path.write_text(GOOD + '{"id": true, "text": "x"}\n')
    with pytest.raises(InputError, match=r"store.jsonl:2, field 'id': must be a string"):
        ProxyConfig(datastore=str(path), mechanism=SPEC)
    path.write_bytes(GOOD.encode() + b"[" * 200_000 + b"\n")
    with pytest.raises(SystemExit) as bad:
        main(["serve", "--ledger", str(tmp_path / "l.db"), "--mechanism", SPEC,
              "--datastore", str(path)])
    err = capsys.readouterr().err
    assert bad.value.code != 0 and "Traceback" not in err
    assert f"{path}:2" in err and "nested" in err
