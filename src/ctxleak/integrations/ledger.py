"""The privacy ledger of Context Influence Decoding run inside ``generate`` (paper 000).

One :class:`LedgerEntry` per released token: the λ_t used at that step, the token id, its
log-probabilities ``log p̄_λ(y_t | D)`` and ``log p(y_t | ∅)`` at the ledger's temperature, the
whole-context token influence ``|log p̄_λ(y_t|D) − log p(y_t|∅)|`` (Def. 3.1 with n = |D|) and, for
bounded CID (App. B, Alg. 1), the per-token ε = 2·max_y |log p̄_λ(y|D) − log p(y|∅)|. A
:class:`RowLedger` holds one response's entries; its composed ε is their sum (basic composition).
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
    eps: float | None = None


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
    def token_eps(self) -> list[float] | None:
        return [float(e.eps) for e in self.entries] if self.bounded_eps is not None else None

    @property
    def composed_eps(self) -> float | None:
        """Basic composition of the per-token ε over every released token (bounded CID)."""
        eps = self.token_eps
        return float(sum(eps)) if eps is not None else None

    def to_record(self) -> dict[str, Any]:
        """A plain dict whose keys are those of the influence samples in ``samples.jsonl``
        where the meaning is the same (``lambdas``, ``token_eps`` and ``composed_eps`` only in
        bounded mode, as there)."""
        record: dict[str, Any] = {
            "row": self.row, "lambda": self.lam, "temperature": self.temperature,
            "response_ids": self.response_ids, "stopped_on_eos": self.stopped_on_eos,
            "logp_context": [e.logp_context for e in self._response],
            "logp_empty": [e.logp_empty for e in self._response],
            "token_influence": self.token_influence, "influence": self.influence,
        }
        if self.bounded_eps is not None:
            record.update({"bounded_eps": self.bounded_eps, "lambdas": self.lambdas,
                           "token_eps": self.token_eps, "composed_eps": self.composed_eps})
        return record


def to_records(ledger: tuple[RowLedger, ...] | list[RowLedger]) -> list[dict[str, Any]]:
    """One plain dict per response (see :meth:`RowLedger.to_record`)."""
    return [row.to_record() for row in ledger]
