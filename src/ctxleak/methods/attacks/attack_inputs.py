"""The attacks' inputs: the documents attacked (:func:`attack_documents`), the anchors given
(:func:`anchor_list`) and the operator's classes of the documents (:func:`attack_classes`)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ctxleak.errors import ConfigError
from ctxleak.methods.attacks.extract import AttackDocument, as_documents
from ctxleak.run.classes import classes_of
from ctxleak.run.datastore_file import bundled_datastore
from ctxleak.run.inputs import is_named, is_path
from ctxleak.run.records import read_rows, read_text_file
from ctxleak.targets.rag import demo_corpus


def attack_documents(documents: Any, param: str = "documents") -> list[AttackDocument]:
    """The documents attacked, checked: ``demo-rag`` (the bundled Northwind corpus, 15
    documents), ``demo-datastore`` (the bundled datastore, 288 documents: enough for a
    membership audit that holds half out to show ε above 2 nats at 95 %), a JSONL or CSV file of
    rows with ``text`` (or ``context``) and ``id``, or a list of strings or dicts."""
    rows: Sequence[Any]
    if is_named(documents, "demo-rag"):
        rows = [{"id": d.id, "text": d.text} for d in demo_corpus()]
    elif is_named(documents, "demo-datastore"):
        rows = [{"id": i, "text": t} for i, t in bundled_datastore("demo-datastore").documents]
    elif is_path(documents):
        rows = [{"id": r.get("id", k + 1), "text": r.get("text", r.get("context"))}
                for k, r in enumerate(read_rows(documents))]
    elif documents is None or isinstance(documents, Mapping) or \
            not isinstance(documents, Iterable):
        raise ConfigError(f"{param}: give 'demo-rag', 'demo-datastore', a JSONL or CSV file, "
                          f"or a list of strings or of dicts with 'text', not "
                          f"{type(documents).__name__}",
                          param=param)
    else:
        rows = list(documents)
    return as_documents(rows, param=param)


def anchor_list(anchors: str | Sequence[str] | None) -> tuple[str, ...] | None:
    """``anchors``: a list as given, a text file's lines, or comma separated anchors."""
    if anchors is None or not isinstance(anchors, str):
        return None if anchors is None else tuple(str(a) for a in anchors)
    parts = read_text_file(anchors).splitlines() if os.path.isfile(anchors) else \
        anchors.split(",")
    return tuple(a.strip() for a in parts if a.strip())


def attack_classes(classes: Any) -> dict[str, str] | None:
    """The operator's class of each document: a mapping of id to class, a JSONL or CSV file of
    rows with ``id`` and ``class`` (the privacy proxy's ``--classes``), or a bundled set's name
    (``demo-datastore``); None: no classes."""
    if classes is None:
        return None
    if isinstance(classes, Mapping):
        return {str(k): str(v) for k, v in classes.items()}
    if isinstance(classes, (str, os.PathLike)):
        return classes_of(os.fspath(classes))
    raise ConfigError(f"classes: give a file of rows with id and class, a bundled set's name or "
                      f"a mapping of id to class, not {type(classes).__name__}", param="classes")


__all__ = ["anchor_list", "attack_classes", "attack_documents"]
