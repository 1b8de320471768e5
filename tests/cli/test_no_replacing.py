"""Commands and library calls that write a file the user names never replace a file ctxleak
was not asked to replace (nor the input), unless the user passes ``--overwrite``
(``overwrite=True``)."""

from __future__ import annotations

import json

import pytest
from conftest import run_cli

from ctxleak.errors import OutputError
from ctxleak.methods.pii.records import PIIRecord, save_records, write_private_jsonl
from ctxleak.report import Report
from ctxleak.results import InfluenceResult

DOC = {"name": "Jane Roe", "text": "Jane Roe, jane@example.com, +1 202-555-0143, "
                                   "1600 Pennsylvania Ave NW, Washington, DC 20500"}


def _docs(path):
    path.write_text(json.dumps(DOC) + "\n")
    return path


def test_extract_onto_its_input_keeps_the_users_documents(tmp_path, capsys):
    """The reported case: --input docs.jsonl --output docs.jsonl replaced the documents."""
    docs = _docs(tmp_path / "docs.jsonl")
    before = docs.read_bytes()
    for extra in ([], ["--overwrite"]):  # the input is never replaced
        code, _, err = run_cli(["pii", "extract", "--input", str(docs), "--output", str(docs),
                                *extra], capsys)
        assert code == 2 and "is the input" in err and err.count("\n") == 1
        assert docs.read_bytes() == before
    # the same file by another name (a hard link) is the input too
    alias = tmp_path / "alias.jsonl"
    alias.hardlink_to(docs)
    code, _, err = run_cli(["pii", "extract", "--input", str(docs), "--output", str(alias)],
                           capsys)
    assert code == 2 and "is the input" in err and docs.read_bytes() == before


def test_extract_refuses_an_existing_output_even_with_zero_records(tmp_path, capsys):
    docs = tmp_path / "empty.jsonl"
    docs.write_text(json.dumps({"name": "Nobody", "text": "no contact details"}) + "\n")
    mine = tmp_path / "mine.jsonl"
    mine.write_text("the user's own notes\n")
    code, _, err = run_cli(["pii", "extract", "--input", str(docs), "--output", str(mine)],
                           capsys)
    assert code == 2 and "already exists" in err and "--overwrite" in err
    assert mine.read_text() == "the user's own notes\n"
    code, out, _ = run_cli(["pii", "extract", "--input", str(docs), "--output", str(mine),
                            "--overwrite"], capsys)
    assert code == 0 and "records written: 0" in out and mine.read_text() == ""
    # a symbolic link (to nothing) in the way is refused as well
    link = tmp_path / "link.jsonl"
    link.symlink_to(tmp_path / "nowhere.jsonl")
    code, _, err = run_cli(["pii", "extract", "--input", str(docs), "--output", str(link)],
                           capsys)
    assert code == 2 and "already exists" in err and not (tmp_path / "nowhere.jsonl").exists()


def test_synth_keeps_files_the_user_keeps_in_the_folder(tmp_path, capsys):
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "documents.jsonl").write_text("precious\n")
    code, _, err = run_cli(["pii", "synth", "--n", "2", "--output", str(folder)], capsys)
    assert code == 2 and "documents.jsonl already exists" in err
    assert (folder / "documents.jsonl").read_text() == "precious\n"
    assert not (folder / "records.jsonl").exists()  # refused before anything was written
    code, _, _ = run_cli(["pii", "synth", "--n", "2", "--output", str(folder), "--overwrite"],
                         capsys)
    assert code == 0 and (folder / "documents.jsonl").read_text() != "precious\n"


def test_library_writers_refuse_an_existing_file_unless_asked(tmp_path):
    target = tmp_path / "out.jsonl"
    target.write_text("keep\n")
    rec = PIIRecord(subject_id="s1", name="Jane Roe")
    for write in (lambda **kw: save_records([rec], target, **kw),
                  lambda **kw: write_private_jsonl([{"a": 1}], target, **kw),
                  lambda **kw: Report("t").save(target, **kw)):
        with pytest.raises(OutputError, match="already exists"):
            write()
        assert target.read_text() == "keep\n"
    save_records([rec], target, overwrite=True)
    assert "Jane Roe" in target.read_text()


def test_a_result_is_saved_only_into_a_new_empty_or_its_own_folder(tmp_path):
    result = InfluenceResult(records=[{"id": "a"}], summary={"settings": []},
                             config={"command": "influence"})
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "config.json").write_text('{"mine": true}\n')
    with pytest.raises(OutputError, match="not empty"):
        result.save(folder)
    assert (folder / "config.json").read_text() == '{"mine": true}\n'
    saved = result.save(tmp_path / "new")
    with pytest.raises(OutputError, match="not empty"):
        result.save(saved)  # another result's folder: this result was not loaded from it
    result.save(folder, overwrite=True)
    assert json.loads((folder / "config.json").read_text()) == {"command": "influence"}
