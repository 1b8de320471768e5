"""CSV files as spreadsheets write them read into the same rows as the plain file, and ids are
compared as they print (Unicode NFC)."""

from __future__ import annotations

import unicodedata

import pytest

from ctxleak.errors import InputError
from ctxleak.methods.influence.data import load_examples
from ctxleak.run.records import read_rows, reject_duplicate_ids

PLAIN = "id,context,query\nx1,some text,q?\nx2,more,q2\n"


def _rows(path):
    return [(dict(r.fields), r.line) for r in read_rows(path)]


def test_excel_csv_reads_like_the_plain_file(tmp_path):
    """A UTF-8 byte-order mark, CRLF line ends, quoted values and trailing columns without a
    name (as Excel writes them) give the plain file's rows, ids included."""
    plain, excel = tmp_path / "plain.csv", tmp_path / "excel.csv"
    plain.write_text(PLAIN)
    excel.write_bytes(b"\xef\xbb\xbf" + b'"id","context","query",,\r\n'
                      b'"x1","some text","q?",,\r\n"x2",more,"q2",,\r\n')
    assert _rows(excel) == _rows(plain)
    assert [ex.id for ex in load_examples(str(excel))] == ["x1", "x2"]


def test_bom_before_a_first_context_column(tmp_path):
    path = tmp_path / "bom.csv"
    path.write_bytes(b"\xef\xbb\xbfcontext,query\r\nsome text,q\r\n")
    assert [ex.context for ex in load_examples(str(path))] == ["some text"]


def test_bom_in_jsonl(tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"id": "k", "context": "c", "query": "q"}\n')
    assert [ex.id for ex in load_examples(str(path))] == ["k"]


def test_a_value_over_several_lines_keeps_the_line_numbers(tmp_path):
    """A quoted value with line breaks: the next row is named by its own first line."""
    path = tmp_path / "multi.csv"
    path.write_text('id,context,query\na,"line one\nline two\nline three",q\nb,,q\n')
    rows = read_rows(path)
    assert rows[0].fields["context"] == "line one\nline two\nline three"
    assert [r.line for r in rows] == [2, 5]
    with pytest.raises(InputError, match=r"multi.csv:5, field 'context': is empty"):
        load_examples(str(path))


def test_a_value_under_a_column_without_a_name(tmp_path):
    path = tmp_path / "noname.csv"
    path.write_text("id,context,,query\na,x,stray,q\n")
    with pytest.raises(InputError, match=r"noname.csv:2: a value \('stray'\) under a column"):
        read_rows(path)


def test_nfc_equal_ids_are_one_id():
    nfc, nfd = (unicodedata.normalize(f, "café") for f in ("NFC", "NFD"))
    assert nfc != nfd
    with pytest.raises(InputError, match=r"f:2, field 'id': duplicate id .* \(first on line 1, "
                                         r"written 'café' there\)"):
        reject_duplicate_ids([(nfc, "f", 1), (nfd, "f", 2)])
    reject_duplicate_ids([(nfc, "f", 1), ("cafe", "f", 2)])  # different ids stay different

