"""The privacy ledger of Context Influence Decoding run inside ``generate`` (paper 000).

One :class:`LedgerEntry` per released token: the λ_t used at that step, the token id, its
log-probabilities ``log p̄_λ(y_t | D)`` and ``log p(y_t | ∅)`` at the ledger's temperature, the
whole-context token influence ``|log p̄_λ(y_t|D) − log p(y_t|∅)|`` (Def. 3.1 with n = |D|) and, for
bounded CID (App. B, Alg. 1), the token's ε. A :class:`RowLedger` holds one response's entries.

Bounded CID's guarantee (Thm B.1): Alg. 1 keeps every neighbouring context's distribution within
ε/2 of p(·|∅), so each released token is ε-DP and a response of T tokens is (T·ε)-DP by basic
composition: that is ``eps`` and ``composed_eps``. ``eps_ex_post`` =
2·max_y |log p̄_λ(y|D) − log p(y|∅)| (and its sum, ``composed_eps_ex_post``) is a per-instance
figure about this context D alone, not a guarantee: a neighbour's divergence is only known to be
at most ε/2.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ctxleak.methods.influence.quantities import response_influence


@dataclass(frozen=True)
class LedgerEntry:
    """One released token of one response."""

    step: int
    token_id: int
    lam: float
    logp_context: float
    logp_empty: float
    influence: float
    eps: float | None = None  # bounded CID: the token's ε-DP guarantee (Thm B.1)
    eps_ex_post: float | None = None  # 2·max_y |log p̄_λ(y|D) − log p(y|∅)|, about D alone


@dataclass(frozen=True)
class RowLedger:
    """The ledger of one response (one row of ``generate``'s output).

    ``entries`` cover every released token, the stopping EOS included when the response ended
    on one (ending the response is a released choice, so it counts in the composed ε); the
    response ids and the token influence leave that EOS out, as ``samples.jsonl`` does.
    """

    row: int
    entries: tuple[LedgerEntry, ...]
    stopped_on_eos: bool
    lam: float
    temperature: float
    bounded_eps: float | None = None

    @property
    def _response(self) -> tuple[LedgerEntry, ...]:
        return self.entries[:-1] if self.stopped_on_eos else self.entries

    @property
    def response_ids(self) -> list[int]:
        return [e.token_id for e in self._response]

    @property
    def lambdas(self) -> list[float]:
        return [e.lam for e in self.entries]

    @property
    def token_influence(self) -> list[float]:
        """Whole-context token influence of each response token (Def. 3.1, n = |D|)."""
        return [e.influence for e in self._response]

    @property
    def influence(self) -> float:
        """Response influence, the sum over tokens (Def. 3.2)."""
        return response_influence(self.token_influence)

    @property
    def token_eps_ex_post(self) -> list[float] | None:
        """Each released token's 2·max_y |log p̄_λ(y|D) − log p(y|∅)| (bounded CID): about this
        context alone, not a DP guarantee."""
        if self.bounded_eps is None:
            return None
        return [float(e.eps_ex_post) for e in self.entries]  # type: ignore[arg-type]  # bounded

    @property
    def composed_eps(self) -> float | None:
        """The response's ε-DP guarantee (bounded CID, paper 000, Thm B.1): ε per released
        token, the stopping EOS included, summed by basic composition."""
        return None if self.bounded_eps is None else float(self.bounded_eps) * len(self.entries)

    @property
    def composed_eps_ex_post(self) -> float | None:
        """The sum of :attr:`token_eps_ex_post`: a per-instance figure, not the guarantee."""
        eps = self.token_eps_ex_post
        return float(sum(eps)) if eps is not None else None

    def to_record(self) -> dict[str, Any]:
        """A plain dict whose keys are those of the influence samples in ``samples.jsonl``
        where the meaning is the same (``eps``, ``lambdas``, ``composed_eps`` and the ex-post
        figures only in bounded mode, as there)."""
        record: dict[str, Any] = {
            "row": self.row, "lambda": self.lam, "temperature": self.temperature,
            "response_ids": self.response_ids, "stopped_on_eos": self.stopped_on_eos,
            "logp_context": [e.logp_context for e in self._response],
            "logp_empty": [e.logp_empty for e in self._response],
            "token_influence": self.token_influence, "influence": self.influence,
        }
        if self.bounded_eps is not None:
            record.update({"bounded_eps": self.bounded_eps, "eps": self.bounded_eps,
                           "lambdas": self.lambdas, "composed_eps": self.composed_eps,
                           "token_eps_ex_post": self.token_eps_ex_post,
                           "composed_eps_ex_post": self.composed_eps_ex_post})
        return record


def to_records(ledger: tuple[RowLedger, ...] | list[RowLedger]) -> list[dict[str, Any]]:
    """One plain dict per response (see :meth:`RowLedger.to_record`)."""
    return [row.to_record() for row in ledger]


def ledger_result(ledger: tuple[RowLedger, ...] | list[RowLedger],
                  texts: list[str] | None = None, *, seed: int = 0) -> Any:
    """The ledger as an :class:`~ctxleak.results.InfluenceResult`: one record per response
    (``samples.jsonl`` keys, ``id`` = ``row-<i>``), and a summary in the layout of
    ``ctxleak influence`` with one setting: expected influence (paper 000, Def. 3.3, Eq. 5) with
    its bootstrap interval, the per-position curve and, in bounded mode, the composed ε (App. B).
    Regurgitation and quality need the context and a reference, which a ledger does not hold:
    they are ``None``. ``.show()``, ``.to_pandas()``, ``.save(dir)`` and ``.to_html()`` work as
    for any result."""
    import numpy as np

    from ctxleak.methods.influence.metrics import mean_curve, mean_with_ci
    from ctxleak.methods.influence.quantities import expected_influence
    from ctxleak.report.html import Report
    from ctxleak.results import InfluenceResult

    rows = list(ledger)
    if not rows:
        raise ValueError("the ledger is empty: nothing was generated")
    if texts is not None and len(texts) != len(rows):
        raise ValueError(f"texts: {len(texts)} for {len(rows)} ledger rows")
    first = rows[0]
    key = f"lam={first.lam}|T={first.temperature}"
    records = []
    for i, row in enumerate(rows):
        record = {"id": f"row-{row.row}", "setting": key, **row.to_record()}
        if texts is not None:
            record["response"] = texts[i]
        records.append(record)
    setting: dict[str, Any] = {
        "setting": key, "lambda": first.lam, "temperature": first.temperature, "n": len(rows),
        "influence": expected_influence([r.influence for r in rows], seed=seed),
        "mean_tokens": float(np.mean([len(r.response_ids) for r in rows])),
        "repeat_prompts": None, "rouge_prompts": None, "rouge_l": None,
        "per_position_influence": mean_curve([r.token_influence for r in rows]),
    }
    if first.bounded_eps is not None:
        setting["composed_eps"] = mean_with_ci([float(r.composed_eps)  # type: ignore[arg-type]
                                                for r in rows], seed=seed)
        setting["composed_eps_ex_post"] = mean_with_ci(
            [float(r.composed_eps_ex_post) for r in rows],  # type: ignore[arg-type]  # bounded
            seed=seed)
        setting["mean_lambda"] = float(np.mean([np.mean(r.lambdas) for r in rows if r.lambdas]))
    config = {"command": "influence", "source": "ContextInfluenceProcessor (generate)",
              "lambda": first.lam, "temperature": first.temperature,
              "bounded_eps": first.bounded_eps, "seed": seed}
    result = InfluenceResult(records=records, summary={"settings": [setting]}, config=config,
                             n_effective=len(records))
    report = Report(InfluenceResult.title, "Context Influence Decoding inside generate(): "
                    "the processor's ledger", redact=False)
    report.add_table(result.table())
    report.add_table([{"row": r["id"], "tokens": len(r["response_ids"]),
                       "influence": r["influence"], "composed ε": r.get("composed_eps"),
                       "ex-post ε": r.get("composed_eps_ex_post"),
                       "response": r.get("response")} for r in records])
    result.html = report.render()
    return result
