"""What every report view does, whatever its method (:class:`View`): a Result shown as an HTML
page with its verdict at the top, a console table, a Jupyter fragment and the figures of its run
folder, all from the Result alone (records, summary, config, provenance, its run folder). The
views of the methods (:mod:`ctxleak.report.views`) override what their method has.

A run made with ``--redact`` (``config["redact"]``) is shown through one
:class:`~ctxleak.report.redaction.Redactor` (:meth:`View.redactor`), active while the view renders
the page, the Jupyter fragments or the console (:func:`ctxleak.report.redaction.redacting`):
every :class:`Report` and console line it makes goes through it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ctxleak.methods.verdict import check_verdict
from ctxleak.report import Report
from ctxleak.report.console import print_rows, print_verdict
from ctxleak.report.redaction import Redactor, redacting, run_values


class View:
    """How a method's Result is shown; subclasses override what their method has."""

    #: The console table's title.
    title: str = "ctxleak result"
    #: Columns of :meth:`table` that name a row in ``ctxleak compare`` (the rest are compared).
    identity: tuple[str, ...] = ()
    #: Columns of :meth:`table` that describe a run rather than measure it (not compared).
    skip: frozenset[str] = frozenset()

    def table(self, result: Any) -> list[dict[str, Any]]:
        """The summary as rows (the console table)."""
        return [{"key": k, "value": v} for k, v in result.summary.items()
                if not isinstance(v, (dict, list))]

    def files(self, result: Any) -> dict[str, bytes | str]:
        """Extra files of the run folder by name: the figures (PNG bytes) and texts."""
        return {}

    def verdict(self, result: Any) -> dict[str, str] | None:
        """The run's verdict (``summary["verdict"]``, :mod:`ctxleak.methods.verdict`); for a
        run folder written before verdicts, computed again from the result where this view
        can (:meth:`compute_verdict`), else none."""
        stored = result.summary.get("verdict")
        if stored is not None:
            return stored if check_verdict(stored) is None else None
        try:
            return self.compute_verdict(result)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError):
            return None

    def compute_verdict(self, result: Any) -> dict[str, str] | None:
        """The verdict from the result alone (records, summary, config); none by default."""
        return None

    def redactor(self, result: Any) -> Redactor:
        """What everything shown of ``result`` goes through: masking PII when the run was made
        with ``--redact``, with the one set of values found in any text of its records, summary
        and verdict (so a name cued once, a key a document splits over two lines, a phone number
        a verdict quotes are masked everywhere), else nothing. Only those values are masked,
        never what the detectors would find in ctxleak's own words around them ("Def.", "≥")."""
        if not result.config.get("redact", False):
            return Redactor()
        return Redactor(True, detect=False).adding_found(
            run_values(result.records, result.summary, self.verdict(result)))

    def full_page(self, result: Any) -> Report:
        """:meth:`page` with the verdict at its top (what ``report.html`` shows)."""
        with redacting(self.redactor(result)):
            report = self.page(result)
            verdict = self.verdict(result)
            if verdict:
                report.set_verdict(verdict["text"], verdict.get("rule", ""),
                                   *self.verdict_table(result))
        return report

    def verdict_table(self, result: Any) -> tuple[list[dict[str, Any]], str]:
        """The few rows a reader acts on, shown in the verdict's box between its first
        sentence and the rest, with their caption; none by default."""
        return [], ""

    def full_show(self, result: Any, *, plain: bool = False) -> None:
        """The verdict first, then :meth:`show` (what ``result.show()`` and the CLI print)."""
        with redacting(self.redactor(result)):
            print_verdict(self.verdict(result), plain=plain)
            self.show(result, plain=plain)

    def figure_names(self, result: Any) -> list[str]:
        """The figures' file names in the order :meth:`files` draws them (the page shows them
        so, for a loaded run too, whose figures come back in file-name order)."""
        return []

    def figures(self, result: Any) -> dict[str, bytes]:
        """The result's figures in page order: those :meth:`figure_names` lists, then any
        other by name."""
        images = result.images
        names = [n for n in self.figure_names(result) if n in images]
        return {n: images[n] for n in [*names, *sorted(set(images) - set(names))]}

    def page(self, result: Any) -> Report:
        """The self-contained HTML report (``report.html``)."""
        report = Report(self.title, f"{len(result.records)} samples")
        report.add_table(self.table(result))
        return report

    def show(self, result: Any, *, plain: bool = False) -> None:
        """Print the console table (and where the run's files are)."""
        print_rows(self.table(result), title=self.title, plain=plain)

    def fragment(self, result: Any) -> str:
        """A compact HTML summary (Jupyter's ``_repr_html_``): the console table."""
        with redacting(self.redactor(result)):
            report = Report(result.title, f"{len(result.records)} samples"
                            + (f" · {result.path}" if result.path else ""))
            verdict = self.verdict(result)
            if verdict:
                report.set_verdict(verdict["text"], verdict.get("rule", ""))
            rows = self.table(result)
            if rows:
                report.add_table(rows)
            return report.fragment()

    def compare_figures(self, results: Sequence[Any], labels: Sequence[str]
                        ) -> dict[str, bytes]:
        """The headline figures of several runs, one line or bar per run."""
        return {}


def run_model(result: Any) -> Any:
    """The run's model as the run named it (the config), else as provenance recorded it."""
    return result.config.get("model") or (result.provenance.get("model") or {}).get("name", "")
