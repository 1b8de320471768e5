"""The findings sheet as a Result (:class:`Findings`) and its making from loaded runs
(:func:`findings_of`): one row per document across influence, extraction and membership runs of
the same documents (:mod:`ctxleak.methods.findings` says how they are joined and ranked)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ctxleak.errors import ConfigError
from ctxleak.methods.findings import (
    FAIL_LEVELS,
    HARMS,
    add_audit,
    add_extraction,
    add_listed,
    add_membership,
    failing,
    finding_rows,
    headline,
)
from ctxleak.report.findings import findings_csv, findings_sarif
from ctxleak.results.base import Result
from ctxleak.results.tables import DocumentTable
from ctxleak.run.manifest import write_recorded

#: The run commands the sheet joins.
JOINED = ("influence", "attack-extract", "attack-membership")
CSV_FILE, SARIF_FILE = "findings.csv", "findings.sarif"


class Findings(Result):
    """``ctxleak.findings``: one record per document (``document``, ``class``, ``harm``,
    ``rank``, ``evidence``, ``question``, ``carried_out`` (values by type and SHA-256 prefix),
    copies, membership, audit leak in nats, ``budget``: the proxy ledger's ε ``spent``,
    ``budget``, ``remaining``), most harmful first; the summary's ``headline`` in one line,
    ``counts`` per harm and the ``runs`` joined. :meth:`to_csv`, :meth:`to_sarif` and
    :meth:`failing` (what a CI gate fails on) besides every Result's views; :meth:`save` also
    writes ``findings.csv`` and ``findings.sarif``."""

    method = "findings"
    title = "Findings: one row per document, the worst first"
    numeric_fields = ("documents", "counts.*")

    def table_of_documents(self) -> DocumentTable:
        """The rows as a :class:`DocumentTable` (the ledgers' type)."""
        return DocumentTable(list(self.records))

    def to_csv(self, path: str | Path | None = None) -> str:
        """The sheet as CSV (written to ``path`` when given, mode 0600); returns the text."""
        text = findings_csv(list(self.records))
        if path is not None:
            target = Path(path)
            target.write_text(text, encoding="utf-8")
            target.chmod(0o600)
        return text

    def to_sarif(self, path: str | Path | None = None) -> dict[str, Any]:
        """The sheet as a SARIF 2.1.0 log (written to ``path`` when given, mode 0600)."""
        log = findings_sarif(list(self.records), str(self.summary.get("headline", "")))
        if path is not None:
            target = Path(path)
            target.write_text(json.dumps(log, indent=2, ensure_ascii=False) + "\n",
                              encoding="utf-8")
            target.chmod(0o600)
        return log

    def failing(self, level: str = "any") -> list[Mapping[str, Any]]:
        """The documents at or above ``level`` (``secret``, ``personal``, ``verbatim`` or
        ``any``: every harm but none and public), what ``--fail-on`` exits 1 on."""
        try:
            return failing(self.records, level)
        except ValueError as exc:
            raise ConfigError(str(exc), param="fail_on") from None

    def save(self, directory: str | Path, *, overwrite: bool = False) -> Path:
        """The run folder (:meth:`Result.save`) with ``findings.csv`` and ``findings.sarif``."""
        out = super().save(directory, overwrite=overwrite)
        write_recorded(out, CSV_FILE, self.to_csv(), 0o600)
        write_recorded(out, SARIF_FILE, json.dumps(self.to_sarif(), indent=2,
                                                   ensure_ascii=False) + "\n", 0o600)
        return out


def _first_ledger(result: Result) -> list[Mapping[str, Any]]:
    """The influence run's per-document ledger of its first setting that has one."""
    for setting in result.summary.get("settings") or []:
        if setting.get("documents"):
            return list(setting["documents"])
    raise ConfigError(f"{result.path}: this influence run has no ledger per document (run "
                      "ctxleak influence on retrieved documents)", param="runs")


def findings_of(results: Sequence[Result], *, classes: Mapping[str, str] | None = None,
                budgets: Mapping[str, Mapping[str, Any]] | None = None,
                config: Mapping[str, Any] | None = None) -> Findings:
    """The sheet of ``results`` (influence, extraction and membership runs of the same
    documents), ``classes`` (the operator's, by document id) and ``budgets`` (the proxy
    ledger's state by document id)."""
    if not results:
        raise ConfigError("give at least one run folder", param="runs")
    docs: dict[str, Any] = {}
    runs = []
    for k, result in enumerate(results):
        command = result.method_name()
        name = str(result.path) if result.path is not None else f"run {k + 1}"
        if command == "influence":
            add_audit(docs, _first_ledger(result), name)
        elif command == "attack-extract":
            add_extraction(docs, result.records, name)
            # the documents no answer matched: measured, nothing copied
            add_listed(docs, [r["document"] for r in result.summary.get("ledger") or ()], name)
        elif command == "attack-membership":
            add_membership(docs, list(result.records), result.summary, name)
        else:
            raise ConfigError(f"{name} is a run of {command!r}: findings join runs of "
                              f"{', '.join(JOINED)}", param="runs")
        recorded = (result.config or {}).get("classes")
        if classes is None and isinstance(recorded, Mapping):
            classes = {**recorded}
        runs.append({"path": name, "command": command})
    rows = finding_rows(docs, classes, budgets)
    summary = {"headline": headline(rows), "documents": len(rows),
               "counts": {h: sum(1 for r in rows if r["harm"] == h) for h in HARMS},
               "runs": runs, "fail_levels": {k: list(v) for k, v in FAIL_LEVELS.items()}}
    return Findings(records=rows, summary=summary,
                    config={"command": "findings", "runs": [r["path"] for r in runs],
                            **(config or {})})


__all__ = ["CSV_FILE", "JOINED", "SARIF_FILE", "Findings", "findings_of"]
