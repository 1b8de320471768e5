"""``ctxleak.run.stored`` on hand-written sample files, no model: the rows' list-like
behaviour (equality, ``+``, ``repr``), every way a :class:`Row` is changed staying in the rows
it was read from, light and selected rows staying read on demand, a rewritten file with lines
that are not rows, and the checks of the constructor."""

from __future__ import annotations

import json

import pytest

from ctxleak.errors import InputError
from ctxleak.run.stored import Column, Row, StoredRows, row_key, select_rows, without_fields

ROWS = [{"id": f"r{i}", "x": i, "tags": ["a"] * i} for i in range(4)]


def _stored(path, rows=ROWS, write=True, **kwargs):
    """The rows of ``path`` as their writer would have written them there (``write``)."""
    data = [(json.dumps(r) + "\n").encode() for r in rows]
    if write:
        path.write_bytes(b"".join(data))
    offsets = [sum(len(d) for d in data[:i]) for i in range(len(rows))]
    return StoredRows([path], [row_key(r) for r in rows], [0] * len(rows), offsets,
                      [len(d) for d in data], **kwargs)


def test_equality_and_concatenation_are_a_lists_and_refuse_strings(tmp_path):
    stored = _stored(tmp_path / "s.jsonl")
    assert stored == ROWS and stored != ROWS[:3] and stored != [*ROWS[:3], {"id": "r3"}]
    assert stored != "r0r1r2r3" and stored != b"rows"  # a string is no sequence of rows
    assert stored.__eq__(42) is NotImplemented
    assert stored.__add__("more") is NotImplemented and stored.__radd__(b"more") is NotImplemented
    with pytest.raises(TypeError):
        stored + "more"  # noqa: B018
    with pytest.raises(TypeError):
        7 + stored  # noqa: B018
    assert stored + () == ROWS and () + stored == ROWS
    assert repr(stored) == f"StoredRows(4 rows of {tmp_path / 's.jsonl'})"
    assert repr(StoredRows([], [], [], [], [])) == "StoredRows(0 rows of no file)"


def test_the_constructor_wants_one_of_each_per_row(tmp_path):
    path = tmp_path / "s.jsonl"
    with pytest.raises(ValueError, match="one name, file number, offset and size per row"):
        StoredRows([path], ["a", "b"], [0], [0], [1])
    with pytest.raises(ValueError, match="one tag per row"):
        StoredRows([path], ["a"], [0], [0], [1], tags=["t", "u"])


@pytest.mark.parametrize("change, expected", [
    (lambda row: row.__delitem__("tags"), {"id": "r2", "x": 2}),
    (lambda row: row.update(x=20, y=1), {"id": "r2", "x": 20, "tags": ["a", "a"], "y": 1}),
    (lambda row: row.setdefault("y", 5), {"id": "r2", "x": 2, "tags": ["a", "a"], "y": 5}),
    (lambda row: row.pop("x"), {"id": "r2", "tags": ["a", "a"]}),
    (lambda row: row.pop("nothing", None), {"id": "r2", "x": 2, "tags": ["a", "a"]}),
    (lambda row: row.popitem(), {"id": "r2", "x": 2}),
    (lambda row: row.clear(), {}),
    (lambda row: row.__ior__({"x": -1}), {"id": "r2", "x": -1, "tags": ["a", "a"]}),
])
def test_every_change_of_a_row_stays_in_the_rows_read_again(tmp_path, change, expected):
    stored = _stored(tmp_path / "s.jsonl")
    before = (tmp_path / "s.jsonl").read_bytes()
    row = stored[2]
    assert isinstance(row, Row)
    change(row)
    assert row == expected
    assert stored[2] == expected and list(stored)[2] == expected and stored[1:3][1] == expected
    assert stored[1] == ROWS[1] and (tmp_path / "s.jsonl").read_bytes() == before


def test_a_row_not_read_from_stored_rows_is_a_plain_dict():
    row = Row({"id": "a"})
    row["x"] = 1
    row |= {"y": 2}
    assert row == {"id": "a", "x": 1, "y": 2}


def test_light_rows_compose_and_are_copies(tmp_path):
    stored = _stored(tmp_path / "s.jsonl")
    light = without_fields(stored, frozenset({"tags"}))
    lighter = without_fields(light, frozenset({"x"}))  # two functions, composed
    assert isinstance(lighter, StoredRows)
    assert light == [{"id": r["id"], "x": r["x"]} for r in ROWS]
    assert lighter == [{"id": r["id"]} for r in ROWS]
    light[1]["x"] = 99  # a copy: the row itself is not changed
    assert stored[1] == ROWS[1] and light[1]["x"] == 1
    assert without_fields(ROWS, frozenset({"tags", "x"})) == [{"id": r["id"]} for r in ROWS]


def test_selected_rows_and_columns_read_on_demand(tmp_path):
    tags = [f"t{i}" for i in range(4)]
    stored = _stored(tmp_path / "s.jsonl", tags=tags,
                     convert=lambda tag, row: {**row, "tag": tag})
    odd = select_rows(stored, lambda row: row["x"] % 2 == 1)
    assert isinstance(odd, StoredRows)
    assert odd == [{**ROWS[i], "tag": f"t{i}"} for i in (1, 3)]
    assert select_rows(ROWS, lambda row: row["x"] > 2) == [ROWS[3]]
    plain = stored.pick([3, 0], convert=lambda tag, row: {**row, "tag": None})
    assert [r["tag"] for r in plain] == [None, None] and [r["x"] for r in plain] == [3, 0]
    column = Column(stored, "x")
    assert len(column) == 4 and list(column) == [0, 1, 2, 3] and column[-1] == 3
    assert isinstance(column[1:3], Column) and list(column[1:3]) == [1, 2]


def test_a_rewritten_file_with_lines_that_are_no_rows_is_searched_by_name(tmp_path):
    path = tmp_path / "s.jsonl"
    stored = _stored(path)
    path.write_text("not json\n" + json.dumps(["a list"]) + "\n\n"
                    + "".join(json.dumps(r) + "\n" for r in reversed(ROWS))
                    + json.dumps({"id": "r0", "x": "a later copy"}) + "\n"
                    + '{"id": "cut off"')  # a last line without its newline
    assert stored == ROWS  # the first line named r0 is r0's
    path.write_bytes(b"\xff\xfe\n" + path.read_bytes())  # and a line that is not UTF-8
    assert stored[2] == ROWS[2]
    # r0's span now holds a line of the same length that is not JSON: found again further on
    first = (json.dumps(ROWS[0]) + "\n").encode()
    path.write_bytes(b"x" * (len(first) - 1) + b"\n" + first)
    fresh = _stored(path, write=False)
    assert fresh[0] == ROWS[0]
    with pytest.raises(InputError, match="has no row named 'r1'") as error:
        fresh[1]  # noqa: B018
    assert str(path) in str(error.value)
