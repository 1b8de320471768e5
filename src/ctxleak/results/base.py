"""The Result: what every method returns (records, summary, config, provenance), with its
tables, pandas frame, console view, HTML report and the one writer of ``results.json``.

A :class:`Result` holds ``records`` (one dict per sample, as in ``samples.jsonl``; a run's and a
loaded run folder's are read from that file on demand, :class:`~ctxleak.run.stored.StoredRows`,
so that a long run's rows are not all in memory at once), ``summary``
(as in ``results.json``), ``config`` and ``provenance``; ``to_pandas()`` gives one row per sample,
``to_html()`` the self-contained report, ``show()`` prints the console table, ``save(dir)`` writes
a run directory, and ``_repr_html_`` renders a compact summary in Jupyter. What is shown is built
by the method's report view (:func:`ctxleak.report.views.view_for`), which sits below the result
and is imported directly.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from ctxleak.citations import bibtex, cite_block, papers_for
from ctxleak.methods.checks import RecordChecks
from ctxleak.report.view import View
from ctxleak.report.views import view_for
from ctxleak.run.atomic import refuse_foreign_folder
from ctxleak.run.inputs import to_jsonable
from ctxleak.run.manifest import start_manifest, write_lines_whole, write_recorded
from ctxleak.run.rundir import CONFIG_FILE, RESULTS_FILE, SAMPLES_FILE, row_key


def import_pandas(what: str) -> Any:
    """pandas, or an ImportError saying that ``what`` (``"to_pandas() needs"``) needs it."""
    try:
        import pandas as pd
    except ImportError:
        raise ImportError(f"{what} pandas: pip install pandas") from None
    return pd


@dataclass
class Result:
    """The outcome of one method run."""

    records: Sequence[dict[str, Any]]
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
    #: Paths in ``summary`` that hold numbers (or null), ``*`` for any key or list position;
    #: :func:`load_result` refuses anything else there, naming the path.
    numeric_fields: ClassVar[tuple[str, ...]] = ()
    #: The method's checks of its stored rows and summary (``methods/<m>/checks.py``), which
    #: :func:`load_result` and resume run on what they read; None: none declared.
    checks: ClassVar[RecordChecks | None] = None

    def __repr__(self) -> str:
        where = f", path={str(self.path)!r}" if self.path else ""
        return f"{type(self).__name__}({len(self.records)} records{where})"

    # ---- tables ----------------------------------------------------------------------------
    def method_name(self) -> str:
        """The method's command name (a plain Result goes by the command of its config)."""
        return self.method if self.method != Result.method else str(self.config.get("command"))

    def view(self) -> View:
        """This method's report view (:func:`ctxleak.report.views.view_for`, by method name; a
        plain Result goes by the command of its config)."""
        return view_for(self.method_name())

    def table(self) -> list[dict[str, Any]]:
        """The summary as rows (the console table); the method's report view says which."""
        return list(self.view().table(self))

    def to_pandas(self) -> Any:
        """One row per sample (``records``); nested fields stay Python objects in their cells."""
        return import_pandas("to_pandas() needs").DataFrame.from_records(list(self.records))

    def show(self, *, plain: bool = False) -> None:
        """Print the verdict, the console table of this result and where its files are (what
        the CLI prints); ``plain``: tables as tab-separated values."""
        self.view().full_show(self, plain=plain)

    # ---- HTML -------------------------------------------------------------------------------
    def render(self) -> str:
        """Build the HTML report from this result alone (records, summary, config; no model),
        ending with the papers to cite (:mod:`ctxleak.citations`)."""
        page = self.view().full_page(self)
        page.add_citations(papers_for(self.method_name()), bibtex(self.method_name()))
        return page.render()

    def to_html(self) -> str:
        """The self-contained HTML report (the run's ``report.html``; rendered from the result
        when the run folder has none)."""
        if self.html is None and self.path is not None and (self.path / "report.html").is_file():
            self.html = (self.path / "report.html").read_text(encoding="utf-8")
        if self.html is None:
            try:
                self.html = self.render()
            except (KeyError, TypeError, IndexError) as exc:
                raise ValueError(f"this result has no report and lacks what its report needs "
                                 f"({type(exc).__name__}: {exc})") from exc
        return self.html

    def _repr_html_(self) -> str:
        return str(self.view().fragment(self))

    # ---- files ------------------------------------------------------------------------------
    def save(self, directory: str | Path, *, overwrite: bool = False) -> Path:
        """Write ``config.json``, ``samples.jsonl``, ``results.json``, ``report.html`` and the
        plots into ``directory`` (created; files that may hold PII get mode 0600), each
        recorded with its SHA-256 in the folder's manifest (:mod:`ctxleak.run.manifest`).

        ``directory`` must be new, empty, or this result's own run folder (``self.path``);
        another run's folder or a folder holding other files is refused unless
        ``overwrite=True``, so saving never replaces files ctxleak was not asked to."""
        out = Path(directory)
        own = self.path is not None and out.exists() and out.resolve() == Path(
            self.path).resolve()
        if not overwrite and not own:
            refuse_foreign_folder(out)
        out.mkdir(parents=True, exist_ok=True)
        mode = 0o600
        start_manifest(out, mode)
        write_recorded(out, CONFIG_FILE, json.dumps(to_jsonable(self.config), indent=2,
                                                    sort_keys=True) + "\n", mode)
        write_lines_whole(out / SAMPLES_FILE, "".join(
            json.dumps(to_jsonable(r), ensure_ascii=False) + "\n" for r in self.records), mode)
        self.save_results(out, mode)
        with suppress(ValueError):  # a result built by hand, without what its page needs
            write_recorded(out, "report.html", self.to_html(), mode)
        for name, png in self.images.items():
            write_recorded(out, name, png, mode)
        return out

    def save_results(self, directory: str | Path, mode: int = 0o600) -> Path:
        """Write ``results.json``: the summary with config, provenance, sample count, wall time
        and ``sample_ids``, the names of the samples the summary was computed from (their
        ``key``, else their ``id``, in order; :func:`load_result` checks ``samples.jsonl`` against
        them), and ``cite``: the papers of the method with their BibTeX
        (:func:`ctxleak.citations.cite_block`). The one writer of that file, for :meth:`save` and
        for :func:`ctxleak.results.finish_run`."""
        body = {"summary": self.summary, "config": self.config, "provenance": self.provenance,
                "n_effective": self.n_effective if self.n_effective is not None
                else len(self.records), "wall_time_s": self.wall_time_s}
        if self.n_effective in (None, len(self.records)) and all(
                isinstance(r, dict) and "id" in r for r in self.records):
            body["sample_ids"] = [row_key(r) for r in self.records]
        body["cite"] = cite_block(self.method_name())
        write_recorded(Path(directory), RESULTS_FILE,
                       json.dumps(to_jsonable(body), indent=2, ensure_ascii=False) + "\n", mode)
        return Path(directory) / RESULTS_FILE
