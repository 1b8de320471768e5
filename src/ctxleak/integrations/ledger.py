"""The privacy ledger of Context Influence Decoding run inside ``generate`` (Estimating Privacy
Leakage of Augmented Contextual Knowledge in Language Models), as a result.

The ledger's record shape (:class:`LedgerEntry`, :class:`RowLedger`, :func:`to_records`) is CID's
one record shape, defined with the maths in :mod:`ctxleak.mitigations.ledger` and shown here
for users of :mod:`ctxleak.integrations.transformers`. :func:`ledger_result` turns a ledger into
an :class:`~ctxleak.results.InfluenceResult`, summarised as ``ctxleak influence`` summarises one
setting.
"""

from __future__ import annotations

from collections.abc import Sequence

from ctxleak.citations import bibtex, papers_for
from ctxleak.methods.influence.summary import summarize_setting
from ctxleak.mitigations.ledger import LedgerEntry, RowLedger, to_records
from ctxleak.report.html import Report
from ctxleak.results import InfluenceResult

__all__ = ["LedgerEntry", "RowLedger", "ledger_result", "to_records"]


def ledger_result(ledger: Sequence[RowLedger], texts: Sequence[str] | None = None, *,
                  seed: int = 0) -> InfluenceResult:
    """The ledger as an :class:`~ctxleak.results.InfluenceResult`: one record per response
    (``samples.jsonl`` keys, ``id`` = ``row-<i>``), and a summary in the layout of
    ``ctxleak influence`` with one setting
    (:func:`~ctxleak.methods.influence.summary.summarize_setting`): expected influence (paper
    000, Def. 3.3, Eq. 5) with its bootstrap interval, the per-position curve and, in bounded
    mode, the composed ε (App. B). Regurgitation, quality and the context size need the
    context and a reference, which a ledger does not hold: they are ``None``. ``.show()``,
    ``.to_pandas()``, ``.save(dir)`` and ``.to_html()`` work as for any result."""
    rows = list(ledger)
    if not rows:
        raise ValueError("the ledger is empty: nothing was generated")
    if texts is not None and len(texts) != len(rows):
        raise ValueError(f"texts: {len(texts)} for {len(rows)} ledger rows")
    first = rows[0]
    key = f"lam={first.lam}|T={first.temperature}"
    records = [{"id": f"row-{row.row}", "setting": key, **record}
               for row, record in zip(rows, to_records(rows, texts))]
    config = {"command": "influence", "source": "ContextInfluenceProcessor (generate)",
              "lambda": first.lam, "temperature": first.temperature,
              "bounded_eps": first.bounded_eps, "seed": seed}
    result = InfluenceResult(records=records, summary={"settings": [summarize_setting(
        records, seed=seed)]}, config=config, n_effective=len(records))
    report = Report(InfluenceResult.title, "Context Influence Decoding inside generate(): "
                    "the processor's ledger", redact=False)
    report.add_table(result.table())
    report.add_table([{"row": r["id"], "tokens": len(r["response_ids"]),
                       "influence": r["influence"], "composed ε": r.get("composed_eps"),
                       "ex-post ε": r.get("composed_eps_ex_post"),
                       "response": r.get("response")} for r in records])
    report.add_citations(papers_for("influence"), bibtex("influence"))
    result.html = report.render()
    return result
