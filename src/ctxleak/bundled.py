"""The bundled demo sets, one registry keyed by name (:data:`BUNDLED_SETS`): each set's file
under the package's ``data/demo`` folder, the datastore it comes with (the documents its RAG app
retrieves from, where the mechanisms retrieve for themselves) and the app prompt it is asked
under by default. Every part of ctxleak that resolves a bundled name reads it here: the data
loader, the influence run's default prompt and datastore, the privacy proxy's ``--datastore``,
the catalogue of datasets. It imports nothing of ctxleak."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True)
class BundledSet:
    """One bundled set: ``file`` (its examples, under ``data/demo``), ``datastore`` (a JSONL of
    ``{id, text}`` under ``data/demo`` its app retrieves from, or None), ``prompt`` (the name
    of the built-in app prompt it is asked under where a run gives none, or None: ctxleak's
    template) and ``classes`` (a JSONL of ``{id, class}`` for its datastore's documents, the
    privacy proxy's ``--classes``, or None)."""

    file: str
    datastore: str | None = None
    prompt: str | None = None
    classes: str | None = None


#: ``demo`` (news and facts), ``demo-qa`` (private facts only in the document),
#: ``demo-qa-large`` (four documents per question), ``demo-rag-log``/``-spans`` (RAG turns,
#: ``data/demo/rag_audit``), ``demo-datastore`` (questions on common and private facts, each over
#: its top 2 documents of its datastore, asked through the model's chat template for the short
#: answer).
BUNDLED_SETS: Mapping[str, BundledSet] = MappingProxyType({
    "demo": BundledSet("influence.jsonl"),
    "demo-qa": BundledSet("rag_qa.jsonl"),
    "demo-qa-large": BundledSet("rag_qa_large.jsonl"),
    "demo-rag-log": BundledSet("rag_audit/log.jsonl"),
    "demo-rag-spans": BundledSet("rag_audit/spans.jsonl"),
    "demo-datastore": BundledSet("datastore/questions.jsonl",
                                 datastore="datastore/documents.jsonl", prompt="short-answer",
                                 classes="datastore/classes.jsonl"),
})


def with_datastore() -> dict[str, str]:
    """The bundled sets that come with a datastore: name -> its file under ``data/demo``."""
    return {name: s.datastore for name, s in BUNDLED_SETS.items() if s.datastore is not None}


def with_classes() -> dict[str, str]:
    """The bundled sets whose datastore comes with document classes: name -> its file under
    ``data/demo``."""
    return {name: s.classes for name, s in BUNDLED_SETS.items() if s.classes is not None}


def with_prompt() -> dict[str, str]:
    """The bundled sets asked under an app prompt of their own: name -> the prompt's name."""
    return {name: s.prompt for name, s in BUNDLED_SETS.items() if s.prompt is not None}


__all__ = ["BUNDLED_SETS", "BundledSet", "with_classes", "with_datastore", "with_prompt"]
