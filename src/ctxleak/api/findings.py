"""``ctxleak.findings``: one sheet a security lead acts on, one row per document across the
influence, extraction and membership runs of the same documents (:mod:`ctxleak.methods.findings`
joins and ranks them), with the operator's classes and, optionally, the privacy proxy's budget
state read from its ledger."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from ctxleak.errors import ConfigError
from ctxleak.methods.attacks.attack_inputs import attack_classes
from ctxleak.results import Findings, findings_of, load_result

PathLike = str | os.PathLike[str]


def _check_ledger_exists(url: str) -> None:
    """A SQLite ledger must exist: reading it must not create an empty one."""
    if url.startswith(("postgresql://", "postgres://")):
        return
    path = unquote(url[len("sqlite:///"):]) if url.startswith("sqlite:///") else url
    if not Path(path).is_file():
        raise ConfigError(f"no proxy ledger at {path} (ctxleak serve --ledger writes one)",
                          param="ledger")


def ledger_state(url: str) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """The proxy ledger's state by document id (ε ``spent`` with open reservations,
    ``reserved``, ``ex_post``, ``budget`` (None: no limit), ``remaining``) and the classes it
    recorded."""
    from ctxleak.proxy.budget import open_ledger

    _check_ledger_exists(url)
    ledger = open_ledger(url)
    try:
        rows = ledger.documents(0, max(ledger.count(), 1))
    finally:
        ledger.close()
    state = {r.doc_id: {"spent": r.spent, "reserved": r.reserved, "ex_post": r.ex_post,
                        "budget": r.budget, "remaining": r.remaining} for r in rows}
    return state, {r.doc_id: r.doc_class for r in rows if r.doc_class is not None}


def findings(runs: PathLike | Sequence[PathLike | Any], *, classes: Any = None,
             ledger: str | None = None, output: PathLike | None = None,
             overwrite: bool = False) -> Findings:
    """One row per document across ``runs`` (run folders or loaded Results of
    ``ctxleak influence`` over retrieved documents, ``ctxleak attack extract`` and ``ctxleak
    attack membership`` of the same documents), the worst harm first: secrets and credentials
    carried out, then personal data, then verbatim and near-verbatim copies, members found at
    low FPR, audit leaks; documents of class ``public`` last.

    ``classes``: the operator's class of each document (a JSONL or CSV file of rows with id and
    class, as ``ctxleak serve --classes`` takes; ``demo-datastore``; a dict); default: the
    classes an attack run recorded, else the ledger's. ``ledger``: the privacy proxy's ledger
    (``sqlite:///file.db``, a path, or ``postgresql://…``): each document's ε spent, budget and
    remaining. ``output``: a folder for ``report.html``, ``findings.csv``, ``findings.sarif``
    and the run files (nothing is written without it)."""
    items = [runs] if isinstance(runs, (str, os.PathLike)) else list(runs)
    results = [load_result(r) if isinstance(r, (str, os.PathLike)) else r for r in items]
    mapping = attack_classes(classes)
    budgets = None
    config: dict[str, Any] = {"classes": None if classes is None or isinstance(classes, Mapping)
                              else os.fspath(classes), "ledger": ledger}
    if ledger is not None:
        budgets, recorded = ledger_state(ledger)
        if mapping is None and not any(isinstance((r.config or {}).get("classes"), Mapping)
                                       for r in results):
            mapping = recorded or None
    result = findings_of(results, classes=mapping, budgets=budgets, config=config)
    if output is not None:
        result.path = result.save(Path(output), overwrite=overwrite)
    return result


__all__ = ["findings", "ledger_state"]
