"""Every key of a result that the docs name exists in a real result: ``summary["key"]`` paths
(``summary["settings"][0]["units"]`` walked step by step), ``record["key"]`` fields of a
method's records, and the keys of a ``"summary": {...}`` sketch in a json block. Each mention
belongs to the method whose result it reads: the variable it is read from when the page assigns
that variable from ``ctxleak.<method>(``, else the method of its section's heading or of its
page, else every method. The results come from the tiny models, one small run per method."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers.tiny_data import TEMPLATES, TEST, TINY_RELATIONS, TRAIN

import ctxleak
from ctxleak.targets.base import FunctionTarget

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
METHODS = ("influence", "icl", "susceptibility", "probe", "audit")
#: Results a mention names only explicitly (its variable, its section's command): the canary
#: audit of influence's mitigation, which the pages about every method do not mean.
NAMED_ONLY = ("canary", "extract")
#: How the docs name each method: its API function, its command, its page.
NAMES = {"influence": "influence", "iclinf": "icl", "icl": "icl",
         "susceptibility": "susceptibility", "probe": "probe", "pii": "probe", "audit": "audit",
         "canary_audit": "canary", "canary": "canary", "attack_extract": "extract"}
#: Pages about one method outside docs/methods: CID in your own generate() is influence.
PAGE_METHOD = {"integration.md": ("influence",)}
#: Sections about one method on a page about several: (page, heading) -> method.
SECTION_METHOD = {("attacks.md", "Adaptive extraction and the coverage curve"): "extract"}
STEP = r'\[(?:"\w+"|\'\w+\'|\d+)\]'
ACCESS = re.compile(rf"(?:(?P<var>\w+)\.)?(?P<what>summary|records\[\d+\]|record)"
                    rf"(?P<path>(?:{STEP})+)")
HEADING = re.compile(r"^#+ .*$", re.M)
JSON_SUMMARY = re.compile(r'```json\n\s*"summary": \{\n(?P<body>.*?)^```', re.S | re.M)


def _statement(text: str, start: int) -> str:
    """The code from ``start`` to the end of its statement (brackets closed at a line end)."""
    depth = 0
    for i in range(start, len(text)):
        depth += (text[i] in "([{") - (text[i] in ")]}")
        if text[i] == "\n" and depth <= 0:
            return text[start:i]
    return text[start:]


def _method_of(page: Path, text: str, at: int, var: str | None) -> tuple[str, ...]:
    if var:  # the method named where the page assigns the variable (a call, a run's folder)
        made = re.search(rf"^\s*{var}\s*=\s*", text, re.M)
        named = made and re.search(r"(?<![a-z])(iclinf|icl|influence|susceptibility|probe|"
                                   r"canary_audit|audit)", _statement(text, made.end()).lower())
        if named:
            return (NAMES[named[1]],)
    headings = [m[0] for m in HEADING.finditer(text[:at])]
    if headings:
        section = SECTION_METHOD.get((page.name, headings[-1].lstrip("#").strip()))
        if section:
            return (section,)
        named = re.search(r"`ctxleak (\w+)", headings[-1])
        if named and named[1] in NAMES:
            return (NAMES[named[1]],)
    if page.parent.name == "methods" and page.stem in NAMES:
        return (NAMES[page.stem],)
    return PAGE_METHOD.get(page.name, METHODS)


def mentions(pages: dict[Path, str] | None = None) -> list[tuple[str, str, str, tuple]]:
    """(where, method, "summary" or "record", path) of every key the docs (or ``pages``, path
    -> text) name."""
    out = []
    for page, text in (pages or {p: p.read_text(encoding="utf-8") for p in PAGES}).items():
        name = page.relative_to(ROOT).as_posix()
        for m in ACCESS.finditer(text):
            path = tuple(int(s) if s.isdigit() else s.strip("\"'")
                         for s in re.findall(r"\[([^]]+)\]", m["path"]))
            what = "summary" if m["what"] == "summary" else "record"
            line = text.count("\n", 0, m.start()) + 1
            var = m["var"] or ("record" if m["what"] == "record" else None)
            for method in _method_of(page, text, m.start(), var):
                out.append((f"{name}:{line}", method, what, path))
        for m in JSON_SUMMARY.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            for key in re.findall(r'^  "(\w+)":', m["body"], re.M):
                for method in _method_of(page, text, m.start(), None):
                    out.append((f"{name}:{line}", method, "summary", (key,)))
    return out


@pytest.fixture(scope="module")
def results(tmp_path_factory, llama_lm):
    root = tmp_path_factory.mktemp("docs-keys")
    for name, pairs in (("train", TRAIN), ("test", TEST)):
        (root / f"{name}.jsonl").write_text(
            "".join(json.dumps({"text": t, "label": lab}) + "\n" for t, lab in pairs))
    (root / "relations.json").write_text(json.dumps(TINY_RELATIONS))
    flags = dict(zip(TEMPLATES[::2], TEMPLATES[1::2]))
    quiet = {"progress": False}
    return {
        # a sweep of two λ (its summary has the frontier) over a retrieved document as the
        # context (the records have the passage fields too)
        "influence": ctxleak.influence(llama_lm, [{"id": "a", "query": "the capital ?",
                                                   "reference": "paris",
                                                   "documents": [{"text": "the capital of "
                                                                  "france is paris",
                                                                  "id": "d1", "source": "s"}]}],
                                       lambda_=[0.5, 1], max_new_tokens=2,
                                       output=str(root / "i"), **quiet),
        "icl": ctxleak.iclinf(llama_lm, str(root / "train.jsonl"),
                              test_data=str(root / "test.jsonl"), shots=[1, 2], queries=1,
                              format=flags["--format"], instruction=flags["--instruction"],
                              exemplar_template=flags["--exemplar-template"],
                              query_template=flags["--query-template"],
                              output=str(root / "c"), **quiet),
        "susceptibility": ctxleak.susceptibility(llama_lm, str(root / "relations.json"),
                                                 limit=1, contexts=2, output=str(root / "s"),
                                                 **quiet),
        "probe": ctxleak.probe(llama_lm, "demo", subjects=2, pii="email", generate=False,
                               max_new_tokens=2, leak_maps=False, output=str(root / "p"),
                               **quiet),
        "audit": ctxleak.audit(llama_lm, "demo", subset_size=2, sequences=1, max_new_tokens=2,
                               target_eps=[10], output=str(root / "a"), **quiet),
        "canary": ctxleak.canary_audit(llama_lm, [{"id": "d", "context": "a note ."}],
                                       bounded_eps=0.5, trials=4, max_new_tokens=2,
                                       output=str(root / "k"), **quiet),
        # the adaptive crawl of a bot that repeats what it was given (no model)
        "extract": ctxleak.attack_extract(FunctionTarget(_repeating_bot, "repeating-bot"),
                                          BOT_DOCUMENTS, anchors=["Monday"], queries=3,
                                          adaptive=True, output=str(root / "e"), **quiet),
    }


BOT_DOCUMENTS = [{"id": "mon", "text": "On Monday the depot opens at six."},
                 {"id": "six", "text": "Six vans leave the depot before noon."}]


def _repeating_bot(question: str) -> str:
    """Every document sharing a word with the question, repeated whole."""
    words = {w.strip(".?").lower() for w in question.split()}
    return " ".join(d["text"] for d in BOT_DOCUMENTS
                    if words & {w.strip(".").lower() for w in d["text"].split()}) or "Nothing."


def _walk(value, path):
    for step in path:
        if isinstance(step, int):
            if not isinstance(value, list) or step >= len(value):
                return False, step
        elif not isinstance(value, dict) or step not in value:
            return False, step
        value = value[step]
    return True, None


def test_the_docs_name_keys():
    found = mentions()
    assert any(m[3] == ("verdict", "text") for m in found)  # the scan sees the pages' mentions
    assert {m[1] for m in found} == set(METHODS) | set(NAMED_ONLY)


def _missing(results, found):
    missing = []
    for where, method, what, path in found:
        result = results[method]
        value = result.summary if what == "summary" else result.records[0]
        ok, step = _walk(value, path)
        if not ok:
            missing.append(f"{where}: {method} {what}{''.join(f'[{s!r}]' for s in path)} "
                           f"has no {step!r}")
    return missing


def test_every_key_the_docs_name_is_in_a_real_result(results):
    missing = _missing(results, mentions())
    assert not missing, "\n".join(missing)


def test_a_key_a_result_lacks_is_caught(results):
    page = ROOT / "docs" / "example.md"
    text = ('```json\n"summary": {\n  "verdict": {},\n  "units": {}\n}\n```\n\n'
            "## Influence (`ctxleak influence`)\n\n```python\n"
            'res = ctxleak.influence(lm, "demo")\n'
            'res.summary["settings"][0]["influence"]["mean"]\n'
            'res.summary["settings"][0]["leak_score"]\n'
            'print(record["token_influence"], record["passage_rank"])\n```\n')
    missing = _missing(results, mentions({page: text}))
    assert {m.split(": ", 1)[1] for m in missing} == {
        "influence summary['units'] has no 'units'",  # the sketch names it for every method
        "influence summary['settings'][0]['leak_score'] has no 'leak_score'",
        "influence record['passage_rank'] has no 'passage_rank'"}
