"""The record of one Context Influence Decoding response (Estimating Privacy Leakage of Augmented
Contextual Knowledge in Language Models, Def. 3.4): its ledger.

One :class:`~ctxleak.engine.pairs.LedgerEntry` per released token (the record a server's
plugin answers too): the λ_t used at that step, the token id, its
log-probabilities ``log p̄_λ(y_t | D)`` and ``log p(y_t | ∅)`` at the decoding temperature, the
whole-context token influence ``|log p̄_λ(y_t|D) − log p(y_t|∅)|`` (Def. 3.1 with n = |D|) and, for
bounded CID (App. B, Alg. 1), the token's ε. A :class:`RowLedger` holds one response's entries.
It is the one record shape of CID: ctxleak's own decoding
(:meth:`~ctxleak.mitigations.cid.CID.answer`), the influence samples of
``samples.jsonl`` and the logits processor inside ``transformers``' ``generate``
(:mod:`ctxleak.integrations.transformers`) all write it.

Bounded CID's guarantee (Thm B.1): Alg. 1 keeps every neighbouring context's distribution within
ε/2 of p(·|∅), so each released token is ε-DP and a response of T tokens is (T·ε)-DP by basic
composition: that is ``eps`` and ``composed_eps``. ``eps_ex_post`` =
2·max_y |log p̄_λ(y|D) − log p(y|∅)| (and its sum, ``composed_eps_ex_post``) is a per-instance
figure about this context D alone, not a guarantee: a neighbour's divergence is only known to be
at most ε/2.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from ctxleak.engine.pairs import LedgerEntry
from ctxleak.mitigations.influence import response_influence

#: The document class no budget charges: what a ledger spends on it is never counted against
#: a leak budget (the influence run's class budgets and the privacy proxy's alike).
PUBLIC = "public"


def _listed(values: Sequence[float], digits: int | None) -> list[float]:
    """``values`` as a list, each rounded to ``digits`` decimals when given."""
    return list(values) if digits is None else [round(float(v), digits) for v in values]


@dataclass(frozen=True)
class RowLedger:
    """The ledger of one response: one row of ``generate``'s output, or one influence sample.

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

    @classmethod
    def from_scores(cls, row: int, tokens: Sequence[int],
                    logp_context: Sequence[float] | np.ndarray,
                    logp_empty: Sequence[float] | np.ndarray, *, lam: float, temperature: float,
                    stopped_on_eos: bool) -> RowLedger:
        """The ledger of a response drawn elsewhere and scored teacher-forced (a served model's
        own answer, a logged one, another mechanism's): each token with its log-probabilities
        with and without the context at λ and T (one λ for every step, no ε)."""
        entries = tuple(LedgerEntry(step=t, token_id=int(tok), lam=lam,
                                    logp_context=float(logp_context[t]),
                                    logp_empty=float(logp_empty[t]))
                        for t, tok in enumerate(tokens))
        return cls(row=row, entries=entries, stopped_on_eos=stopped_on_eos, lam=lam,
                   temperature=temperature)

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
        return cast("float", response_influence(self.token_influence))

    @property
    def token_eps_ex_post(self) -> list[float] | None:
        """Each released token's 2·max_y |log p̄_λ(y|D) − log p(y|∅)| (bounded CID, and plain
        CID decoded with its ex-post ε recorded): about this context alone, not a DP
        guarantee. None for plain CID whose steps did not record it."""
        if self.bounded_eps is None and (not self.entries or
                                         any(e.eps_ex_post is None for e in self.entries)):
            return None
        # every entry of a bounded run records it (Alg. 1's λ_t search sets it per step)
        return [float(e.eps_ex_post) for e in self.entries if e.eps_ex_post is not None]

    @property
    def composed_eps(self) -> float | None:
        """The response's ε-DP guarantee (bounded CID, Thm B.1): ε per released
        token, the stopping EOS included, summed by basic composition."""
        return None if self.bounded_eps is None else float(self.bounded_eps) * len(self.entries)

    @property
    def composed_eps_ex_post(self) -> float | None:
        """The sum of :attr:`token_eps_ex_post`: a per-instance figure, not the guarantee."""
        eps = self.token_eps_ex_post
        return float(sum(eps)) if eps is not None else None

    @property
    def logp_context(self) -> list[float]:
        """``log p̄_λ(y_t | D)`` of each response token (the stopping EOS left out)."""
        return [e.logp_context for e in self._response]

    @property
    def logp_empty(self) -> list[float]:
        """``log p(y_t | ∅)`` of each response token (the stopping EOS left out)."""
        return [e.logp_empty for e in self._response]

    def response_fields(self, digits: int | None = None) -> dict[str, Any]:
        """The response's tokens, log-probabilities and influence (Def. 3.1-3.2) under their
        ``samples.jsonl`` keys; ``digits``: per-token lists rounded to that many decimals."""
        return {"response_ids": self.response_ids, "stopped_on_eos": self.stopped_on_eos,
                "logp_context": _listed(self.logp_context, digits),
                "logp_empty": _listed(self.logp_empty, digits),
                "token_influence": _listed(self.token_influence, digits),
                "influence": self.influence}

    def eps_fields(self, digits: int | None = None) -> dict[str, Any]:
        """Bounded CID's figures under their ``samples.jsonl`` keys (empty for plain CID):
        ``eps`` and ``composed_eps`` are the guarantee (Thm B.1), the ex-post figures are about
        this context alone; ``digits`` rounds the per-token lists."""
        if self.bounded_eps is None:
            return {}
        return {"eps": self.bounded_eps, "lambdas": _listed(self.lambdas, digits),
                "composed_eps": self.composed_eps,
                "token_eps_ex_post": _listed(self.token_eps_ex_post or [], digits),
                "composed_eps_ex_post": self.composed_eps_ex_post}

    def to_record(self) -> dict[str, Any]:
        """A plain dict whose keys are those of the influence samples in ``samples.jsonl``
        where the meaning is the same (``eps``, ``lambdas``, ``composed_eps`` and the ex-post
        figures only in bounded mode, as there)."""
        record: dict[str, Any] = {"row": self.row, "lambda": self.lam,
                                  "temperature": self.temperature, **self.response_fields()}
        if self.bounded_eps is not None:
            record.update({"bounded_eps": self.bounded_eps, **self.eps_fields()})
        return record


__all__ = ["PUBLIC", "LedgerEntry", "RowLedger", "to_records"]


def to_records(ledger: Sequence[RowLedger], texts: Sequence[str] | None = None
               ) -> list[dict[str, Any]]:
    """One plain dict per response (see :meth:`RowLedger.to_record`), with its ``response``
    text when ``texts`` are given."""
    if texts is None:
        return [row.to_record() for row in ledger]
    return [{**row.to_record(), "response": text} for row, text in zip(ledger, texts)]
