"""``ctxleak pii extract`` and ``ctxleak pii synth``: build PII records.

Files that hold PII (records, documents) are written with mode 0600, atomically. The console
shows counts only, never the PII itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ctxleak.errors import ConfigError, InputError
from ctxleak.run.atomic import refuse_replacing
from ctxleak.run.rundir import is_run_folder, os_errors


def _expand_inputs(values: list[str]) -> list[Path]:
    """Paths from ``--input`` values and extra arguments; comma lists (from ``--config``) and
    directories (their ``*.txt`` and ``*.jsonl`` files, sorted) are expanded."""
    paths: list[Path] = []
    for value in values:
        for part in str(value).split(","):
            part = part.strip()
            if not part:
                continue
            path = Path(part)
            if path.is_dir():
                found = sorted(p for p in path.iterdir()
                               if p.is_file() and p.suffix.lower() in (".txt", ".jsonl"))
                if not found:
                    raise InputError("directory holds no .txt or .jsonl files", file=str(path))
                paths.extend(found)
            elif not path.exists():
                raise InputError("input file not found", file=str(path))
            else:
                paths.append(path)
    if not paths:
        raise ConfigError("no input: give --input FILE.txt|FILE.jsonl (one or more)")
    return paths


def _read_documents(paths: list[Path]) -> list[dict]:
    """Documents from .txt files (one each; subject = file stem) and .jsonl files (one object per
    line with ``text`` and optional ``name``, ``subject``, ``relations``, ``university``)."""
    from ctxleak.run.records import read_jsonl, read_text_file

    docs: list[dict] = []
    for path in paths:
        suffix = path.suffix.lower()
        if suffix == ".txt":  # the checks of every data file: regular, UTF-8, line size
            docs.append({"text": read_text_file(path), "subject": path.stem})
        elif suffix == ".jsonl":
            for number, obj in read_jsonl(path):
                if not isinstance(obj, dict):
                    raise InputError("expected a JSON object with a 'text' field",
                                     file=str(path), line=number)
                if "text" not in obj:
                    raise InputError("missing required field", file=str(path), line=number,
                                     field="text")
                if not isinstance(obj["text"], str):
                    raise InputError("must be a string", file=str(path), line=number,
                                     field="text")
                for key in ("name", "university"):
                    if obj.get(key) is not None and not isinstance(obj[key], str):
                        raise InputError("must be a string", file=str(path), line=number,
                                         field=key)
                if obj.get("relations") is not None and not isinstance(obj["relations"], dict):
                    raise InputError("must be an object of relationship -> name",
                                     file=str(path), line=number, field="relations")
                subject = obj.get("subject", obj.get("subject_id"))
                if subject is not None and not isinstance(subject, (str, int)):
                    raise InputError("must be a string", file=str(path), line=number,
                                     field="subject")
                docs.append(obj)
        else:
            raise InputError("unsupported input type: use .txt (one document) or .jsonl "
                             "(objects with 'text' and 'name')", file=str(path))
    return docs


def _refuse_run_folder(folder: Path, output: Path) -> None:
    """PII files are never written into a ctxleak run's folder (its files are the run's)."""
    if folder.is_dir() and is_run_folder(folder):
        raise ConfigError(f"--output {output}: {folder} holds a ctxleak run; write the PII "
                          "files elsewhere")


def extract_cmd(
    output: Annotated[Path, typer.Option(
        "--output", "-o", help="Records file to write (JSONL, mode 0600).")],
    input: Annotated[str | None, typer.Option(
        "--input", "-i",
        help="Input .txt files (one document each) or .jsonl files with 'text' and 'name' "
             "fields, or directories of them: a comma list, and/or more files after the flag "
             "(--input a.txt b.jsonl).")] = None,
    files: Annotated[list[str] | None, typer.Argument(
        help="More input files.", show_default=False)] = None,
    relax: Annotated[bool, typer.Option(
        "--relax",
        help="Keep documents with a name and any of e-mail, phone, address (default: only "
             "documents with all three, as in ProPILE).")] = False,
    region: Annotated[str, typer.Option(
        "--region", help="Default region for phone numbers without a country code.")] = "US",
    overwrite: Annotated[bool, typer.Option(
        "--overwrite", help="Replace an existing output file (never the input).")] = False,
) -> None:
    """Find e-mails, phone numbers and addresses in documents and write one record per subject.

    Names come from the 'name' field of .jsonl input, or a 'Name: First Last' line in the text.
    """
    from ctxleak.methods.pii.extract import SPAN_TYPES, extract
    from ctxleak.methods.pii.records import save_records
    from ctxleak.sensitive.detect import check_region

    _refuse_run_folder(output.parent, output)
    if output.is_dir():
        raise ConfigError(f"--output {output} is a folder: name the records file to write "
                          "(e.g. extracted.jsonl)")
    region = check_region(region)
    paths = _expand_inputs(([input] if input else []) + list(files or []))
    refuse_replacing(output, overwrite=overwrite, inputs=paths)
    documents = _read_documents(paths)
    result = extract(documents, require_all=not relax, region=region)
    with os_errors(output, "write"):
        save_records(result.records, output, overwrite=overwrite)
    spans = ", ".join(f"{t} {result.span_counts[t]}" for t in SPAN_TYPES)
    typer.echo(f"read {result.documents_read} documents from {len(paths)} file(s)")
    typer.echo(f"PII spans found: {spans}")
    rule = "any of e-mail/phone/address" if relax else "e-mail, phone and address"
    typer.echo(f"documents kept: {result.documents_kept} (need a name and {rule}; "
               f"{result.documents_without_name} without a name, "
               f"{result.documents_incomplete} incomplete)")
    typer.echo(f"records written: {len(result.records)} -> {output} (mode 0600)")


def synth_cmd(
    output: Annotated[Path, typer.Option(
        "--output", "-o", help="Directory for records.jsonl and documents.jsonl.")],
    n: Annotated[int, typer.Option("--n", "-n", help="Number of synthetic subjects.")] = 200,
    seed: Annotated[int, typer.Option(
        "--seed", help="Random seed (same seed, same records).")] = 0,
    overwrite: Annotated[bool, typer.Option(
        "--overwrite",
        help="Replace records.jsonl and documents.jsonl where the folder has them.")] = False,
) -> None:
    """Make seeded synthetic PII records and documents that mention them (no real people)."""
    from ctxleak.methods.pii.records import save_records, write_private_jsonl
    from ctxleak.methods.pii.synth import AREA_CODES, synth_documents, synth_records

    capacity = len(AREA_CODES) * 100
    if n < 1 or n > capacity:
        raise ConfigError(f"--n must be between 1 and {capacity}, got {n}")
    if output.exists() and not output.is_dir():
        raise ConfigError(f"--output must be a directory, but {output} is a file")
    _refuse_run_folder(output, output)
    for name in ("records.jsonl", "documents.jsonl"):
        refuse_replacing(output / name, overwrite=overwrite)
    records = synth_records(n, seed)
    documents = synth_documents(records)
    with os_errors(output, "write in"):
        output.mkdir(parents=True, exist_ok=True)
        save_records(records, output / "records.jsonl", overwrite=overwrite)
        write_private_jsonl(documents, output / "documents.jsonl", overwrite=overwrite)
    n_spouse = sum(1 for r in records if "spouse" in r.relations)
    typer.echo(f"wrote {len(records)} synthetic records (seed {seed}) -> "
               f"{output / 'records.jsonl'} (mode 0600)")
    typer.echo(f"wrote {len(documents)} documents -> {output / 'documents.jsonl'} (mode 0600)")
    typer.echo(f"fields: name, e-mail (example.com/.org/.net), phone (555-01XX), address, "
               f"university, relations father/mother ({n_spouse} with spouse)")
    typer.echo(f"next: ctxleak pii extract --input {output / 'documents.jsonl'} "
               f"--output {output / 'extracted.jsonl'}")


def register(app: typer.Typer) -> None:
    """Add the ``pii`` command group to the ``ctxleak`` app."""
    pii_app = typer.Typer(
        name="pii",
        help=(
            "Build PII records for ProPILE-style probing: extract them from documents, or make "
            "seeded synthetic ones (fictional names, example.com e-mails, 555-01XX phones)."
        ),
        no_args_is_help=True,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    pii_app.command("extract")(extract_cmd)
    pii_app.command("synth")(synth_cmd)
    app.add_typer(pii_app, name="pii")
