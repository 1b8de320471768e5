"""Texts prepared in one batch (spaCy's ``nlp.pipe``) give what each text read alone gives, and
the prepared analyses are the ones the detectors then use."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from ctxleak import sensitive
from ctxleak.sensitive import presidio

FOLDER = Path(str(resources.files("ctxleak") / "data" / "demo" / "rag_audit"))


def _texts() -> list[str]:
    out: list[str] = []

    def walk(value: object) -> None:
        if isinstance(value, str) and len(value) >= 16:
            out.append(value)
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    for line in (FOLDER / "log.jsonl").read_text().splitlines()[:2]:
        walk(json.loads(line))
    # an invisible character and a long text (several windows) too
    return [*dict.fromkeys(out), "Call Ada\u200b Quill on +44 20 7946 0958.",
            " ".join(out)[:3000]]


def test_prepared_texts_give_what_each_text_alone_gives() -> None:
    texts = _texts()
    sensitive._find.cache_clear()
    sensitive._read.clear()
    alone = [sensitive.find_sensitive(t) for t in texts]
    assert any(alone)
    sensitive._find.cache_clear()
    sensitive._read.clear()
    sensitive.prepare_sensitive(texts)
    prepared = len(presidio._prepared)
    assert prepared > len(texts)  # the long text's windows each prepared
    together = [sensitive.find_sensitive(t) for t in texts]
    assert together == alone
    assert not presidio._prepared  # each prepared analysis was taken by its text
    # texts already read are not prepared again
    sensitive.prepare_sensitive(texts)
    assert not presidio._prepared
