"""Runs of one method side by side (``ctxleak compare``, ``ctxleak.compare``): the summary table
with a column per run and each headline figure with one line (or bar) per run, as in the papers'
comparisons across models: influence against model size (Estimating Privacy Leakage of Augmented
Contextual Knowledge in Language Models, Fig. 4), susceptibility across models (Efficiently
Computing Susceptibility to Context in Language Models), ICLInf against shots (Evaluating Privacy
Leakage From In-Context Learning, Fig. 3)."""

from __future__ import annotations

import errno
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxleak._version import __version__
from ctxleak.citations import bibtex, papers_for
from ctxleak.errors import ConfigError, OutputError
from ctxleak.registry import REPORTS
from ctxleak.results import Result, load_result
from ctxleak.run.inputs import to_jsonable
from ctxleak.run.rundir import is_run_folder, os_errors, write_atomic

COMPARE_FILE = "compare.json"

@dataclass
class Comparison:
    """Several runs of one method, side by side."""

    method: str
    labels: list[str]
    results: list[Result]
    rows: list[dict[str, Any]]
    images: dict[str, bytes] = field(default_factory=dict, repr=False)
    html: str = field(default="", repr=False)
    path: Path | None = None

    def table(self) -> list[dict[str, Any]]:
        """The summary table: one row per (row of the method's table, quantity), a column per
        run."""
        return self.rows

    def show(self, *, plain: bool = False) -> None:
        """Print the comparison table (what ``ctxleak compare`` prints; ``plain``: as
        tab-separated values)."""
        REPORTS.get("compare").show(self, plain=plain)

    def to_html(self) -> str:
        return self.html

    def _repr_html_(self) -> str:
        return str(REPORTS.get("compare").fragment(self))

    def save(self, directory: str | os.PathLike[str]) -> Path:
        """Write ``report.html``, ``compare.json`` (runs and table) and the figures into a new
        or empty folder, or over an earlier comparison (its figures replaced); a run's folder
        or any other non-empty folder is refused before anything is written."""
        out = Path(directory)
        check_output(out)
        with os_errors(out, "write the comparison in"):
            self._write(out)
        self.path = out
        return out

    def _write(self, out: Path) -> None:
        out.mkdir(parents=True, exist_ok=True)
        old = _old_figures(out)
        # each run's own provenance (model, revision or file hash, library versions, seeds) rides
        # along, so the comparison says what was compared even when the run folders are gone
        body = {"method": self.method, "ctxleak": __version__,
                "runs": [{"label": lab, "path": str(r.path or ""), "provenance": r.provenance,
                          "config": r.config}
                         for lab, r in zip(self.labels, self.results)],
                "table": self.rows, "figures": sorted(self.images)}
        write_atomic(out / "report.html", self.html, 0o600)
        for name, png in self.images.items():
            write_atomic(out / name, png, 0o600)
        for name in old - set(self.images):  # an earlier comparison's figures not redrawn
            (out / name).unlink(missing_ok=True)
        write_atomic(out / COMPARE_FILE, json.dumps(to_jsonable(body), indent=2,
                                                    ensure_ascii=False) + "\n", 0o600)


def check_output(out: Path) -> None:
    """Refuse, before anything is written, an ``output`` that is a file, a folder holding a
    ctxleak run (the report there is the run's own) or a non-empty folder that holds no earlier
    comparison (``compare.json``)."""
    if not out.exists():
        return
    if not out.is_dir():
        raise OutputError(f"output {out} is a file, not a folder: choose a new or empty folder "
                          "for output=...", path=str(out), errno=errno.ENOTDIR)
    if is_run_folder(out):
        raise ConfigError(f"{out} holds a ctxleak run: the comparison would overwrite its own "
                          "report; choose a new or empty folder for output=...", param="output")
    with os_errors(out, "read the folder"):
        empty = next(out.iterdir(), None) is None
    if not empty and not (out / COMPARE_FILE).is_file():
        raise ConfigError(f"{out} is not empty and holds no earlier comparison ({COMPARE_FILE}): "
                          "choose a new or empty folder for output=...", param="output")


def _old_figures(out: Path) -> set[str]:
    """The figure files an earlier comparison in ``out`` listed (plain names only)."""
    try:
        names = json.loads((out / COMPARE_FILE).read_text(encoding="utf-8")).get("figures")
    except (OSError, ValueError, AttributeError):
        return set()
    return {n for n in names or [] if isinstance(n, str) and n == Path(n).name
            and n.endswith(".png")}


def _load(run: Any, what: str) -> Result:
    if isinstance(run, Result):
        return run
    if isinstance(run, (str, os.PathLike)):
        return load_result(run)
    raise ConfigError(f"{what} must be a Result or a run directory, not {type(run).__name__}",
                      param="results")


def model_name(result: Result) -> str:
    """The run's model: its name, or the last part of a local path."""
    name = str((result.provenance.get("model") or {}).get("name")
               or result.config.get("model") or "model")
    return Path(name).name if os.sep in name.rstrip(os.sep) else name


def run_labels(results: Sequence[Result]) -> list[str]:
    """One label per run: its model, with the run folder (or a number) where models repeat."""
    names = [model_name(r) for r in results]
    labels = []
    for i, (name, r) in enumerate(zip(names, results)):
        if names.count(name) > 1:
            name = f"{name} ({r.path.name if r.path else i + 1})"
        labels.append(name)
    for i, lab in enumerate(labels):  # the same model and folder name twice
        if labels.count(lab) > 1:
            labels[i] = f"{lab} #{i + 1}"
    return labels


def compare_rows(method: str, tables: Sequence[list[dict[str, Any]]],
                 labels: Sequence[str]) -> list[dict[str, Any]]:
    """Merge the runs' summary tables: rows matched by the method's identity columns (a
    repeat of the same identity within a run gets ``#k``), one column per run."""
    view = REPORTS.get(method, None)  # its report view says which columns name a row
    ident = view.identity if view is not None else ()
    skip = view.skip if view is not None else frozenset()
    merged: dict[tuple[str, str], dict[str, Any]] = {}
    for label, rows in zip(labels, tables):
        seen: dict[str, int] = {}
        for i, row in enumerate(rows):
            key = ", ".join(f"{c}={_fmt(row[c])}" for c in ident if c in row) or f"row {i + 1}"
            seen[key] = seen.get(key, 0) + 1
            if seen[key] > 1:
                key += f" #{seen[key]}"
            for col, value in row.items():
                if col in ident or col in skip:
                    continue
                cell = merged.setdefault((key, col), {"row": key, "quantity": col})
                cell[label] = value
    return [{"row": c["row"], "quantity": c["quantity"], **{lab: c.get(lab) for lab in labels}}
            for c in merged.values()]


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def compare(results: Sequence[Any], output: str | os.PathLike[str] | None = None) -> Comparison:
    """Lay runs of the same method side by side. ``results``: :class:`Result` objects or run
    directories (at least two). Refuses runs of different methods. With ``output`` the report
    and figures are written there. Returns a :class:`Comparison`."""
    if isinstance(results, (str, os.PathLike)) or len(results) < 2:
        raise ConfigError("compare needs at least two runs", param="results")
    if output is not None:  # refused before the runs are read and the figures drawn
        check_output(Path(output))
    loaded = [_load(r, f"results[{i}]") for i, r in enumerate(results)]
    methods = [r.method if r.method != Result.method else str(r.config.get("command"))
               for r in loaded]
    if len(set(methods)) > 1:
        which = ", ".join(f"{r.path or f'results[{i}]'} is {m}"
                          for i, (r, m) in enumerate(zip(loaded, methods)))
        raise ConfigError(f"cannot compare runs of different methods ({which}): compare runs "
                          "of one method", param="results")
    method = methods[0]
    labels = run_labels(loaded)
    rows = compare_rows(method, [r.table() for r in loaded], labels)
    view = REPORTS.get("compare")  # the report layer, late bound by name
    comp = Comparison(method, labels, loaded, rows, view.figures(method, loaded, labels))
    page = view.page(comp)
    page.add_citations(papers_for(method), bibtex(method))
    comp.html = page.render()
    if output is not None:
        comp.save(output)
    return comp


def default_output() -> str:
    return str(Path("runs") / f"compare-{time.strftime('%Y%m%d-%H%M%S')}")


__all__ = ["Comparison", "compare", "compare_rows", "run_labels"]
