"""The view of a comparison of runs (``ctxleak compare``): each method's figures from its own
report view (:func:`ctxleak.report.views.view_for`), the paired table, the page."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ctxleak.report.compare import compare_report, paired_rows
from ctxleak.report.console import console, print_rows
from ctxleak.report.html import Report
from ctxleak.report.views import view_for


class CompareView:
    """How a :class:`ctxleak.comparison.Comparison` is shown: its figures, page, console table
    and Jupyter summary."""

    def figures(self, method: str, results: Sequence[Any], labels: Sequence[str]
                ) -> dict[str, bytes]:
        """The method's headline figures, one line or bar per run (its report view's)."""
        return view_for(method).compare_figures(results, labels)

    def page(self, comparison: Any) -> Report:
        return compare_report(comparison.method, comparison.results, comparison.labels,
                              comparison.rows, comparison.images, comparison)

    def show(self, comparison: Any, *, plain: bool = False) -> None:
        paired = paired_rows(comparison)
        if paired:
            print_rows(paired, title=f"{comparison.method}: paired per example (left − right)",
                       justify="left", plain=plain)
        else:
            console(plain).print(f"not paired: {comparison.unpaired}")
        print_rows(comparison.rows, title=f"{comparison.method}: {len(comparison.labels)} "
                   "run(s), a column per run", justify="left", plain=plain)

    def fragment(self, comparison: Any) -> str:
        report = Report(f"ctxleak compare: {comparison.method}", ", ".join(comparison.labels))
        paired = paired_rows(comparison)
        if paired:
            report.add_table(paired)
        report.add_table(comparison.rows)
        return report.fragment()


COMPARE = CompareView()

__all__ = ["COMPARE", "CompareView"]
