"""Result objects (SPEC §11): what every method returns, and what :func:`load_result` reads back
from any run directory, CLI runs included.

A :class:`Result` holds ``records`` (one dict per sample, as in ``samples.jsonl``), ``summary``
(as in ``results.json``), ``config`` and ``provenance``; ``to_pandas()`` gives one row per sample,
``to_html()`` the self-contained report, ``show()`` prints the console table, ``save(dir)`` writes
a run directory, and ``_repr_html_`` renders a compact summary in Jupyter.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from ctxleak.errors import InputError


@dataclass
class Result:
    """The outcome of one method run."""

    records: list[dict[str, Any]]
    summary: dict[str, Any]
    config: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None
    n_effective: int | None = None
    wall_time_s: float | None = None
    html: str | None = None
    images: dict[str, bytes] = field(default_factory=dict, repr=False)

    method: ClassVar[str] = "result"
    title: ClassVar[str] = "ctxleak result"

    def __repr__(self) -> str:
        where = f", path={str(self.path)!r}" if self.path else ""
        return f"{type(self).__name__}({len(self.records)} records{where})"

    # ---- tables -----------------------------------------------------------------------------
    def table(self) -> list[dict[str, Any]]:
        """The summary as rows (the console table); one subclass per method says which."""
        return [{"key": k, "value": v} for k, v in self.summary.items()
                if not isinstance(v, (dict, list))]

    def to_pandas(self) -> Any:
        """One row per sample (``records``); nested fields stay Python objects in their cells."""
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("to_pandas() needs pandas: pip install pandas") from None
        return pd.DataFrame.from_records(self.records)

    def show(self) -> None:
        """Print the console table of this result (what the CLI prints)."""
        from ctxleak.report.console import print_rows

        print_rows(self.table(), title=self.title)

    # ---- HTML -------------------------------------------------------------------------------
    def to_html(self) -> str:
        """The self-contained HTML report (the run's ``report.html``)."""
        if self.html is None and self.path is not None and (self.path / "report.html").is_file():
            self.html = (self.path / "report.html").read_text(encoding="utf-8")
        if self.html is None:
            raise ValueError("this result has no report (its run directory has no report.html)")
        return self.html

    def _repr_html_(self) -> str:
        from ctxleak.report.html import Report

        report = Report(self.title, f"{len(self.records)} samples"
                        + (f" · {self.path}" if self.path else ""))
        rows = self.table()
        if rows:
            report.add_table(rows)
        return report.fragment()

    # ---- files ------------------------------------------------------------------------------
    def save(self, directory: str | Path) -> Path:
        """Write ``config.json``, ``samples.jsonl``, ``results.json``, ``report.html`` and the
        plots into ``directory`` (created; files that may hold PII get mode 0600)."""
        from ctxleak.run.rundir import CONFIG_FILE, RESULTS_FILE, SAMPLES_FILE, to_jsonable, write_atomic

        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        mode = 0o600
        write_atomic(out / CONFIG_FILE, json.dumps(to_jsonable(self.config), indent=2,
                                                   sort_keys=True) + "\n", mode)
        write_atomic(out / SAMPLES_FILE, "".join(json.dumps(to_jsonable(r), ensure_ascii=False)
                                                 + "\n" for r in self.records), mode)
        body = {"summary": self.summary, "config": self.config, "provenance": self.provenance,
                "n_effective": self.n_effective if self.n_effective is not None
                else len(self.records), "wall_time_s": self.wall_time_s}
        write_atomic(out / RESULTS_FILE, json.dumps(to_jsonable(body), indent=2,
                                                    ensure_ascii=False) + "\n", mode)
        try:
            write_atomic(out / "report.html", self.to_html(), mode)
        except ValueError:
            pass
        for name, png in self.images.items():
            write_atomic(out / name, png, mode)
        return out


class InfluenceResult(Result):
    """``ctxleak.influence``: per-example CID responses and their context influence
    (paper 000, Def. 3.1-3.3); ``summary["settings"]`` has one entry per λ/T/context size."""

    method = "influence"
    title = "Expected context influence (paper 000, Def. 3.3)"

    def table(self) -> list[dict[str, Any]]:
        from ctxleak.report.influence import table_rows

        return table_rows(self.summary.get("settings", []))


class ICLInfResult(Result):
    """``ctxleak.iclinf``: one record per (shots, query); ICLInf mean ± std (paper 001, Eq. 4)."""

    method = "icl"
    title = "ICLInf (paper 001, Eq. 4)"

    def table(self) -> list[dict[str, Any]]:
        from ctxleak.report.icl import summary_rows

        return summary_rows(self.summary.get("iclinf", {}))


class AuditResult(Result):
    """``ctxleak.audit``: one record per synthetic sequence; ε_empirical against the target
    (paper 001, Tables 4-6)."""

    method = "audit"
    title = "Privacy audit of DP synthetic text (paper 001 §5)"

    def table(self) -> list[dict[str, Any]]:
        from ctxleak.report.audit import table_rows

        rows = self.summary.get("rows", [])
        headers, cells = table_rows(rows, self.summary.get("search", "temperature"),
                                    compact=True)
        return [dict(zip(headers, row)) for row in cells]


class SusceptibilityResult(Result):
    """``ctxleak.susceptibility``: one record per query, χ_MC and χ_F (paper 002)."""

    method = "susceptibility"
    title = "Susceptibility to context (paper 002)"

    def table(self) -> list[dict[str, Any]]:
        from ctxleak.report.susceptibility import group_rows

        return group_rows(self.summary, self.config.get("reference", "marginal"))


class ProbeResult(Result):
    """``ctxleak.probe``: one record per probe prompt; per-group exact match, likelihoods and
    Wilcoxon tests (paper 004, ProPILE)."""

    method = "probe"
    title = "PII probing (ProPILE, paper 004)"

    def table(self) -> list[dict[str, Any]]:
        from ctxleak.report.probe import table_rows

        return table_rows(self.summary.get("groups", []))


class ExplainResult(Result):
    """``ctxleak.influence_explain``: one prompt's response, the uni-gram influence of each
    context token on its first token (paper 000, Table 1) and the top n-grams."""

    method = "influence-explain"
    title = "Most influential context n-grams"

    def table(self) -> list[dict[str, Any]]:
        return list(self.summary.get("top_ngrams", []))


RESULT_CLASSES: dict[str, type[Result]] = {
    cls.method: cls for cls in (InfluenceResult, ICLInfResult, AuditResult,
                                SusceptibilityResult, ProbeResult, ExplainResult)}


def load_result(directory: str | Path) -> Result:
    """Read back any run directory (written by the CLI or the API) as its typed Result."""
    from ctxleak.run.rundir import CONFIG_FILE, RESULTS_FILE, SAMPLES_FILE

    path = Path(directory)
    results_path = path / RESULTS_FILE
    if not results_path.is_file():
        raise InputError("not a finished run directory (no results.json)", file=str(path))
    try:
        body = json.loads(results_path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise InputError(f"not valid JSON ({exc})", file=str(results_path)) from None
    config = body.get("config") or {}
    if not config and (path / CONFIG_FILE).is_file():
        config = json.loads((path / CONFIG_FILE).read_text(encoding="utf-8"))
    records: list[dict[str, Any]] = []
    samples = path / SAMPLES_FILE
    if samples.is_file():
        from ctxleak.run.records import read_jsonl

        records = [row for _, row in read_jsonl(samples)]
    cls = RESULT_CLASSES.get(str(config.get("command")), Result)
    images = {p.name: p.read_bytes() for p in sorted(path.glob("*.png"))}
    return cls(records=records, summary=body.get("summary") or {}, config=config,
               provenance=body.get("provenance") or {}, path=path,
               n_effective=body.get("n_effective"), wall_time_s=body.get("wall_time_s"),
               images=images)
