"""PIIRecord round trip, JSONL errors naming file/line/field, mode 0600 atomic writes."""

from __future__ import annotations

import dataclasses
import json
import os
import stat

import pytest

from ctxleak.errors import CtxleakError, InputError, OutputError
from ctxleak.methods.pii.records import PIIRecord, load_records, save_records

REC = PIIRecord(subject_id="s1", name="Jane Roe", email="jane.roe@example.com",
                phone="(212) 555-0123", address="100 Main Street, Boston, MA 02110",
                relations={"father": "John Roe"}, university="Roe College",
                documents=["Jane Roe can be reached at jane.roe@example.com."])


def _write(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_dict_round_trip():
    assert PIIRecord.from_dict(REC.to_dict()) == REC
    assert json.loads(json.dumps(REC.to_dict())) == REC.to_dict()


def test_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        REC.name = "x"  # type: ignore[misc]


def test_save_and_load_round_trip_mode_0600(tmp_path):
    path = tmp_path / "sub" / "pii.jsonl"
    other = PIIRecord(subject_id="s2", name="Max Doe")
    save_records([REC, other], path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert load_records(path) == [REC, other]
    # no temporary files left behind
    assert sorted(p.name for p in path.parent.iterdir()) == ["pii.jsonl"]


def test_save_replaces_existing_file_with_private_one_only_when_asked(tmp_path):
    path = tmp_path / "pii.jsonl"
    path.write_text("old\n")
    os.chmod(path, 0o644)
    with pytest.raises(OutputError, match="already exists"):
        save_records([REC], path)
    assert path.read_text() == "old\n"
    save_records([REC], path, overwrite=True)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert load_records(path) == [REC]


def test_save_failure_keeps_old_file(tmp_path):
    path = tmp_path / "pii.jsonl"
    save_records([REC], path)

    def rows():
        yield REC
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        save_records(rows(), path, overwrite=True)
    assert load_records(path) == [REC]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pii.jsonl"]


def test_minimal_record_defaults(tmp_path):
    path = _write(tmp_path / "r.jsonl", ['{"name": "Jane Roe"}', "", ('{"name": "Max Doe", '
                                         '"subject_id": 7}')])
    a, b = load_records(path)
    assert a.subject_id == "Jane Roe" and a.email is None and a.relations == {}
    assert b.subject_id == "7" and b.documents == []


def test_malformed_json_names_file_and_line(tmp_path):
    path = _write(tmp_path / "r.jsonl", ['{"name": "Jane Roe"}', '{"name": "Max', '{}'])
    with pytest.raises(InputError) as info:
        load_records(path)
    err = info.value
    assert isinstance(err, CtxleakError)
    assert err.file == str(path) and err.line == 2
    assert f"{path}:2" in str(err) and "not valid JSON" in str(err)


def test_missing_name(tmp_path):
    path = _write(tmp_path / "r.jsonl", ['{"name": "Jane Roe"}', '{"email": "a@example.com"}'])
    with pytest.raises(InputError) as info:
        load_records(path)
    assert (info.value.line, info.value.field) == (2, "name")
    assert "field 'name'" in str(info.value)


@pytest.mark.parametrize("line, field", [
    ('{"name": 5}', "name"),
    ('{"name": "  "}', "name"),
    ('{"name": "A B", "email": 3}', "email"),
    ('{"name": "A B", "phone": ["1"]}', "phone"),
    ('{"name": "A B", "relations": ["x"]}', "relations"),
    ('{"name": "A B", "relations": {"father": 1}}', "relations.father"),
    ('{"name": "A B", "documents": "text"}', "documents"),
    ('{"name": "A B", "documents": ["ok", 2]}', "documents[1]"),
    ('{"name": "A B", "subject_id": {"a": 1}}', "subject_id"),
])
def test_wrong_types(tmp_path, line, field):
    path = _write(tmp_path / "r.jsonl", [line])
    with pytest.raises(InputError) as info:
        load_records(path)
    assert (info.value.file, info.value.line, info.value.field) == (str(path), 1, field)


def test_not_an_object(tmp_path):
    path = _write(tmp_path / "r.jsonl", ['["Jane"]'])
    with pytest.raises(InputError) as info:
        load_records(path)
    assert info.value.line == 1


def test_duplicate_subject(tmp_path):
    path = _write(tmp_path / "r.jsonl", ['{"name": "Jane Roe"}', '{"name": "Jane Roe"}'])
    with pytest.raises(InputError) as info:
        load_records(path)
    assert (info.value.line, info.value.field) == (2, "subject_id")


def test_missing_file(tmp_path):
    with pytest.raises(InputError) as info:
        load_records(tmp_path / "nope.jsonl")
    assert "not found" in str(info.value)


def test_not_utf8(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_bytes(b'{"name": "\xff\xfe"}\n')
    with pytest.raises(InputError):
        load_records(path)
