"""An answer of Context Influence Decoding that a server decodes itself (Estimating Privacy
Leakage of Augmented Contextual Knowledge in Language Models, Def. 3.4; bounded CID: App. B,
Alg. 1): the request (:class:`PairJob`) and what comes back (:class:`PairAnswer`, one
:class:`LedgerEntry` per drawn token, the ledger's own record). Backend-free: the model interface
(:meth:`ctxleak.engine.lm.LanguageModel.decode_pairs`) takes and returns these, and a backend
that decodes CID itself declares :data:`~ctxleak.engine.capabilities.CID_DECODING`.

A response decoded elsewhere is scored the same way (:func:`scoring_job`: a job whose tokens
are forced, given to the same ``decode_pairs`` where the backend declares
:data:`~ctxleak.engine.capabilities.CID_SCORING`): per token log p̄_λ(y_t | D) under the
prompt with the context, log p(y_t | ∅) and λ_t, the numbers a teacher-forced pass over the
whole next-token distributions gives, without the distributions leaving the server."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class PairJob:
    """One answer: the prompt with the context and the one without it (token ids), λ (in
    [0, 1]; bounded CID's λ_max), T, bounded CID's ε per token (None: plain CID), the length
    limits, the seed of its own generator and greedy CID; ``forced``: the tokens of a response
    to score instead of drawing them (:func:`scoring_job`); ``ex_post``: plain CID also records
    each step's ex-post ε (bounded CID always does)."""

    context_ids: tuple[int, ...]
    empty_ids: tuple[int, ...]
    lam: float
    temperature: float
    eps: float | None
    max_new_tokens: int
    min_new_tokens: int
    seed: int
    greedy: bool = False
    forced: tuple[int, ...] = ()
    ex_post: bool = False


@dataclass(frozen=True)
class LedgerEntry:
    """One released token of one CID response, the one record of a step wherever it was drawn
    (ctxleak's own loop, a server's plugin, ``transformers``' ``generate``): its index, id,
    λ_t, ``log p̄_λ(y_t | D)`` and ``log p(y_t | ∅)`` at the decoding temperature (nats,
    float64), bounded CID's ε per token (Thm B.1) and its ex-post ε_t = 2·max_y |log p̄_λ(y|D)
    − log p(y|∅)| (about D alone; None for plain CID). ``influence``, the whole-context token
    influence |log p̄_λ(y_t|D) − log p(y_t|∅)| (Def. 3.1 with n = |D|), follows from the two
    log-probabilities and is not given."""

    step: int
    token_id: int
    lam: float
    logp_context: float
    logp_empty: float
    eps: float | None = None  # bounded CID: the token's ε-DP guarantee (Thm B.1)
    eps_ex_post: float | None = None  # 2·max_y |log p̄_λ(y|D) − log p(y|∅)|, about D alone
    influence: float = field(init=False)

    def __post_init__(self) -> None:
        # Def. 3.1 (n = |D|) in float64: the same number as mitigations.influence.token_influence
        object.__setattr__(self, "influence",
                           abs(float(self.logp_context) - float(self.logp_empty)))


@dataclass(frozen=True)
class PairAnswer:
    """The answer's token ids (the stopping EOS left out), whether EOS ended it, and one
    :class:`LedgerEntry` per drawn token."""

    token_ids: tuple[int, ...]
    stopped_on_eos: bool
    steps: tuple[LedgerEntry, ...]


def pluggable(lam: float, eps: float | None) -> bool:
    """Whether a server that decodes CID itself takes this setting: λ in [0, 1] and ε absent
    or > 0 (λ > 1, which amplifies the context, and ε = 0, the no-context answer, decode by
    the other routes)."""
    return 0.0 <= lam <= 1.0 and (eps is None or eps > 0)


def scoring_job(context_ids: Sequence[int], empty_ids: Sequence[int], response: Sequence[int],
                *, lam: float | Sequence[float], temperature: float, eps: float | None,
                min_new_tokens: int, stops: Sequence[int]) -> PairJob | None:
    """The pair that scores ``response`` (token ids) as CID at λ, T and ε would have decoded it
    under the two prompts, EOS (``stops``) masked before ``min_new_tokens`` as then, or None
    where a server's plugin cannot: λ one per token or outside [0, 1], ε ≤ 0 (:func:`pluggable`),
    an empty prompt or response, an EOS id inside the response (one at its end ends it), or no
    EOS ids to mask where a minimum length masks them."""
    response = tuple(int(t) for t in response)
    if not isinstance(lam, int | float) or not pluggable(float(lam), eps):
        return None
    if not context_ids or not empty_ids or not response:
        return None
    if (not stops and min_new_tokens > 0) or any(t in set(stops) for t in response[:-1]):
        return None
    return PairJob(tuple(int(t) for t in context_ids), tuple(int(t) for t in empty_ids),
                   float(lam), float(temperature), eps, max_new_tokens=len(response),
                   min_new_tokens=min(int(min_new_tokens), len(response)), seed=0,
                   forced=response)
