"""The papers by title: the citation data is complete and consistent, every method has its
papers, and no internal reference (a spec section, an issue number, a paper's file number) is
left in the source that users read (help, docstrings, reports)."""

from __future__ import annotations

import re
from pathlib import Path

from ctxleak.citations import CTXLEAK_BIBTEX, METHOD_PAPERS, PAPERS, bibtex, cite_block
from ctxleak.results import RESULT_CLASSES

SRC = Path(__file__).resolve().parents[1] / "src" / "ctxleak"


def test_every_paper_has_a_title_authors_venue_and_a_bibtex_entry_under_its_key():
    for key, paper in PAPERS.items():
        assert paper.key == key and paper.title and paper.authors and paper.venue
        assert paper.bibtex.startswith("@") and paper.bibtex.split("{", 1)[1].startswith(f"{key},\n")
        assert paper.bibtex.count("{") == paper.bibtex.count("}"), key
        assert 2000 < paper.year < 2100
        if paper.arxiv:
            assert re.fullmatch(r"\d{4}\.\d{4,5}", paper.arxiv)
            assert paper.arxiv in paper.bibtex
        # the title is in the entry (BibTeX may brace a word and break the line)
        flat = re.sub(r"\s+", " ", paper.bibtex.replace("{", "").replace("}", ""))
        assert paper.title in flat, key


def test_every_method_cites_papers_that_exist():
    for name in RESULT_CLASSES:
        if name == "result":
            continue
        assert METHOD_PAPERS.get(name), f"method {name!r} cites no paper"
    for name, keys in METHOD_PAPERS.items():
        assert keys and all(k in PAPERS for k in keys), name
        block = cite_block(name)
        assert list(block["papers"]) == list(keys) and block["ctxleak"] == CTXLEAK_BIBTEX
        assert bibtex(name).count("\n@") == len(keys)


def test_an_unknown_method_cites_ctxleak_only():
    assert cite_block("no-such-method") == {"papers": {}, "ctxleak": CTXLEAK_BIBTEX}


def test_no_spec_section_issue_number_or_paper_number_in_the_source():
    """Help, docstrings, reports and the bundled data's README cite the papers by title: no
    internal spec section ("SPEC §"), tracker issue ("issue N") or paper file number
    ("paper 000") anywhere under src/ (comments included: what they mean is said in words)."""
    pattern = re.compile(r"SPEC §|issue [0-9]|paper 0\d\d", re.IGNORECASE)
    hits = []
    for path in sorted(SRC.rglob("*")):
        if not path.is_file() or path.suffix in (".pyc", ".parquet", ".gguf"):
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if pattern.search(line):
                hits.append(f"{path.relative_to(SRC.parent)}:{n}: {line.strip()}")
    assert not hits, "\n".join(hits)


def test_the_method_docs_and_help_name_the_papers_by_title():
    from typer.testing import CliRunner

    from ctxleak.cli.app import app

    runner = CliRunner()
    for command, key in (("influence", "flemings2025estimating"), ("icl", "li2025evaluating"),
                         ("audit", "li2025evaluating"),
                         ("susceptibility", "liu2024efficiently")):
        out = runner.invoke(app, [command, "--help"], env={"COLUMNS": "400"}).output
        assert PAPERS[key].title in " ".join(out.split()), command


def test_no_command_help_names_a_spec_section_an_issue_or_a_paper_number():
    """The rendered help of every command, its lines joined (a help string split over source
    lines, "paper " then "002", is caught here)."""
    import typer
    from typer.testing import CliRunner

    from ctxleak.cli.app import app

    pattern = re.compile(r"SPEC §|issue [0-9]|paper 0\d\d", re.IGNORECASE)
    runner = CliRunner()
    names = list(typer.main.get_command(app).commands)  # type: ignore[attr-defined]
    assert len(names) >= 8
    for name in names:
        out = runner.invoke(app, [name, "--help"], env={"COLUMNS": "400"}).output
        flat = " ".join(out.split())
        assert "Usage" in flat and not pattern.search(flat), (name, pattern.search(flat))


#: A quoted title followed by where in the paper (a section, definition, equation, appendix,
#: algorithm, theorem, table or figure), or alone in a parenthesis of prose (not a call's
#: argument): a citation by title.
_TITLE = r"[\"'“]([A-Z][\w:,-]*(?: [\w:,-]+){3,20})[\"'”]"
CITED = re.compile(_TITLE + r"(?=\s*(?:,\s*)?(?:§|Def\.|Eq\.|App\.|Algorithm|Theorem|Table|Fig\.))"
                   r"|(?<![\w.])\(" + _TITLE + r"\)")


def test_every_paper_cited_by_title_in_the_source_is_one_ctxleak_implements():
    """A title quoted in a docstring, a help text or a report (``"Estimating Privacy Leakage of
    Augmented Contextual Knowledge in Language Models", Def. 3.2``) is exactly the title of
    one of the papers in ``ctxleak.citations`` (a paper's title misremembered, or another
    paper's, would send a reader to the wrong place). Line breaks inside a title count as
    spaces."""
    titles = {p.title for p in PAPERS.values()}
    titles.add("ProPILE: Probing Privacy Leakage in Large Language Models")
    wrong, seen = [], set()
    for path in sorted(SRC.rglob("*.py")):
        text = re.sub(r"\s*\n\s*", " ", path.read_text(encoding="utf-8"))
        for match in CITED.finditer(text):
            title = match[1] or match[2]
            if re.search(r"Privacy|Context|Language Model|In-Context|Susceptib", title):
                seen.add(title)
                if title not in titles:
                    wrong.append(f"{path.relative_to(SRC)}: {title!r}")
    assert not wrong, "\n".join(wrong)
    assert len(seen) >= 3  # the pattern finds the citations it checks
