"""Runs of one method side by side (``ctxleak compare``, ``ctxleak.compare``).

Runs over the same data are paired per example (by the user's ``id`` and the setting,
:mod:`ctxleak.comparison.pairs`): each per-example quantity's difference with a paired interval
and the Wilcoxon signed-rank test, labelled by what differs between the runs
(:mod:`ctxleak.comparison.labels`: ``λ = 1 vs λ = 0.5``, a model against another). Below that,
the summary tables with a column per run and each headline figure with one line (or bar) per
run, as in the papers' comparisons across models: influence against model size ("Estimating
Privacy Leakage of Augmented Contextual Knowledge in Language Models", Fig. 4), ICLInf against shots.
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxleak._version import __version__
from ctxleak.citations import bibtex, papers_for
from ctxleak.comparison.labels import model_name, pair_label, run_attributes, side_labels
from ctxleak.comparison.pairs import (
    PAIRINGS,
    UNPAIRED,
    Contrast,
    Side,
    contrast,
    fixed_apart,
    plan_contrasts,
    sides,
)
from ctxleak.errors import ConfigError, OutputError, warn
from ctxleak.report.comparing import COMPARE
from ctxleak.report.views import view_for
from ctxleak.results import Result, load_result
from ctxleak.results.base import import_pandas
from ctxleak.run.inputs import to_jsonable
from ctxleak.run.rundir import is_run_folder, os_errors, write_atomic

COMPARE_FILE = "compare.json"

@dataclass
class Comparison:
    """Several runs of one method: paired per example, and side by side.

    ``labels``: one per run, by what differs between the runs; ``rows``: the summary table, a
    column per run; ``contrasts``: the pairs of (run, setting) compared per example;
    ``unpaired``: why no example was paired, where none was, or the settings left unpaired
    (in one run only), by name."""

    method: str
    labels: list[str]
    results: list[Result]
    rows: list[dict[str, Any]]
    images: dict[str, bytes] = field(default_factory=dict, repr=False)
    html: str = field(default="", repr=False)
    path: Path | None = None
    contrasts: list[Contrast] = field(default_factory=list, repr=False)
    unpaired: str = ""

    def table(self) -> list[dict[str, Any]]:
        """The summary table: one row per (row of the method's table, quantity), a column per
        run."""
        return self.rows

    def paired(self) -> list[dict[str, Any]]:
        """One row per (comparison, quantity): how many examples were paired, each side's
        mean, the mean difference left − right with its 95% t interval (``ci low``, ``ci
        high``), the two-sided Wilcoxon signed-rank p, and a ``note`` where n cannot support a
        figure (that figure is None)."""
        return [{**row, "matched": c.matched} for c in self.contrasts for row in c.stats]

    def examples(self) -> list[dict[str, Any]]:
        """One row per paired example and comparison: ``comparison``, ``left``, ``right`` (the
        two sides' labels), the example's ``id`` (and the probe's ``pii_type``, ``template``),
        then for each quantity ``Q``: ``Q left``, ``Q right`` and ``Q difference`` (left −
        right)."""
        names = [q.name for q in PAIRINGS[self.method].quantities] if self.contrasts else []
        out = []
        for c in self.contrasts:
            shown = [n for n in names if any(s["quantity"] == n for s in c.stats)]
            for unit in c.units:
                row: dict[str, Any] = {"comparison": c.label, "left": c.left.label,
                                       "right": c.right.label, **dict(unit)}
                for n in shown:
                    a, b = c.left.values[unit][n], c.right.values[unit][n]
                    row[f"{n} left"], row[f"{n} right"] = a, b
                    row[f"{n} difference"] = a - b if a is not None and b is not None else None
                out.append(row)
        return out

    def to_pandas(self) -> Any:
        """:meth:`examples` as a DataFrame: one row per paired example (merges onto the
        user's table by ``id``)."""
        return import_pandas("to_pandas() needs").DataFrame.from_records(self.examples())

    def show(self, *, plain: bool = False) -> None:
        """Print the comparison table (what ``ctxleak compare`` prints; ``plain``: as
        tab-separated values)."""
        COMPARE.show(self, plain=plain)

    def to_html(self) -> str:
        return self.html

    def _repr_html_(self) -> str:
        return str(COMPARE.fragment(self))

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
                "paired": self.paired(), "unpaired": self.unpaired or None,
                "examples": self.examples(), "table": self.rows, "figures": sorted(self.images)}
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


def _load(run: Any, what: str, strict: bool = True) -> Result:
    if isinstance(run, Result):
        return run
    if isinstance(run, (str, os.PathLike)):
        return load_result(run, strict=strict)
    raise ConfigError(f"{what} must be a Result or a run directory, not {type(run).__name__}",
                      param="results")


def run_labels(results: Sequence[Result]) -> list[str]:
    """One label per run, by what differs between the runs (``λ = 1``, a model's name), or
    where nothing does, its model with the run folder (or a number)."""
    return side_labels([run_attributes(r) for r in results], folder_labels(results))


def folder_labels(results: Sequence[Result]) -> list[str]:
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
    view = view_for(method)  # its report view says which columns name a row
    ident = view.identity
    skip = view.skip
    merged: dict[tuple[str, str], dict[str, Any]] = {}
    names = [[", ".join(f"{c}={_fmt(row[c])}" for c in ident if c in row) for row in rows]
             for rows in tables]
    # rows matched by value; a column each run holds at its own value (one run at λ = 1, one
    # at λ = 0.5) is what the runs differ by, so rows are matched on the others
    apart = fixed_apart([[{c: row[c] for c in ident if c in row} for row in rows]
                         for rows in tables]) if len(tables) > 1 else set()
    values = [[", ".join(f"{c}={_fmt(row[c])}" for c in ident if c in row and c not in apart)
               for row in rows] for rows in tables]
    shown: dict[str, list[str]] = {}  # each matched row by every run's own name of it
    for row_names, row_values in zip(names, values):
        for name, value in zip(row_names, row_values):
            if name not in shown.setdefault(value, []):
                shown[value].append(name)
    for label, rows, row_names, row_values in zip(labels, tables, names, values):
        seen: dict[str, int] = {}
        for i, row in enumerate(rows):
            key = (" | ".join(shown[row_values[i]]) if apart else row_names[i]) or f"row {i + 1}"
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


def compare(results: Any, output: str | os.PathLike[str] | None = None, *,
            strict: bool = True) -> Comparison:
    """Pair runs of one method per example and lay them side by side. ``results``:
    :class:`Result` objects or run directories, two or more, or one run with several settings
    (λ = 1 and 0.5 in one sweep). Refuses runs of different methods, and runs over different
    data (no example id in common). Nothing is written unless ``output`` is given: then the
    report, ``compare.json`` and the figures go there. Returns a :class:`Comparison`.
    Run directories are read by :func:`~ctxleak.results.load_result`, ``strict`` as there (a
    file edited after its run refused, or with ``strict=False`` warned)."""
    if isinstance(results, (str, os.PathLike, Result)):
        results = [results]
    if not results:
        raise ConfigError("compare needs at least two runs, or one run with several settings",
                          param="results")
    if output is not None:  # refused before the runs are read and the figures drawn
        check_output(Path(output))
    loaded = [_load(r, f"results[{i}]", strict) for i, r in enumerate(results)]
    methods = [r.method_name() for r in loaded]
    if len(set(methods)) > 1:
        which = ", ".join(f"{r.path or f'results[{i}]'} is {m}"
                          for i, (r, m) in enumerate(zip(loaded, methods)))
        raise ConfigError(f"cannot compare runs of different methods ({which}): compare runs "
                          "of one method", param="results")
    method = methods[0]
    labels = run_labels(loaded)
    rows = compare_rows(method, [r.table() for r in loaded], labels)
    contrasts, unpaired = pair_runs(method, loaded)
    if len(loaded) == 1 and not contrasts:
        raise ConfigError(f"compare needs at least two runs, or one run with several settings "
                          f"(e.g. lam=[1, 0.5]); {loaded[0].path or 'results[0]'}: {unpaired}",
                          param="results")
    comp = Comparison(method, labels, loaded, rows, COMPARE.figures(method, loaded, labels),
                      contrasts=contrasts, unpaired=unpaired)
    page = COMPARE.page(comp)
    page.add_citations(papers_for(method), bibtex(method))
    comp.html = page.render()
    if output is not None:
        comp.save(output)
    return comp


def pair_runs(method: str, results: Sequence[Result]) -> tuple[list[Contrast], str]:
    """The contrasts of ``results`` paired per example, and why none were, or which settings
    were not (in one run only, by name, with a warning). Settings are paired by their values
    (:func:`~ctxleak.comparison.pairs.plan_contrasts`), never by position. Runs that share no
    example (by ``id`` and, for the probe, PII type and template) are refused, saying how many
    of each run's ids match; runs that share some are paired on those, with a warning."""
    pairing = PAIRINGS.get(method)
    if pairing is None:
        return [], UNPAIRED.get(method, f"{method} runs have no per-example pairing")
    all_sides = sides(pairing, [r.records for r in results])
    attrs = [{**run_attributes(results[s.run], pairing.sweeps), **dict(s.setting)}
             for s in all_sides]
    folders = folder_labels(results)
    for side, label in zip(all_sides, side_labels(attrs, [folders[s.run] for s in all_sides])):
        side.label = label
    planned, unmatched = plan_contrasts(all_sides, len(results))
    alone = _unmatched(unmatched, run_labels(results))
    if alone:
        warn(alone)
    if not planned:
        return [], alone or "one run with one setting: nothing to pair it with"
    index = {id(s): i for i, s in enumerate(all_sides)}
    out = [contrast(a, b, pair_label(attrs[index[id(a)]], attrs[index[id(b)]],
                                     (a.label, b.label)), pairing.quantities)
           for a, b in planned]
    if all(not c.units for c in out):
        first = out[0]
        ids = [len({dict(u)["id"] for u in side.values}) for side in (first.left, first.right)]
        raise ConfigError(
            f"the runs are over different data: none of the {ids[0]} example ids of "
            f"{first.left.label} matches the {ids[1]} of {first.right.label}, so no example "
            "can be paired; compare runs over the same examples", param="results")
    for c in out:
        if c.only_left or c.only_right:
            warn(f"{c.label}: {c.matched} examples; those in one run only are left out")
    return out, alone


def _unmatched(unmatched: Sequence[tuple[Side, Side]], runs: Sequence[str]) -> str:
    """``settings in one run only, not paired: λ = 0.5 (no setting of gpt2 has its values)``;
    empty where every setting found its match."""
    if not unmatched:
        return ""
    return "settings in one run only, not paired: " + "; ".join(
        f"{side.label} (no setting of {runs[other.run]} has its values)"
        for side, other in unmatched)


__all__ = ["Comparison", "compare", "compare_rows", "model_name", "pair_runs", "run_labels"]
