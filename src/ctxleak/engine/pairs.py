"""An answer of Context Influence Decoding that a server decodes itself (Estimating Privacy
Leakage of Augmented Contextual Knowledge in Language Models, Def. 3.4; bounded CID: App. B,
Alg. 1): the request (:class:`PairJob`) and what comes back (:class:`PairAnswer`, one
:class:`PairStep` per drawn token). Backend-free: the model interface
(:meth:`ctxleak.engine.lm.LanguageModel.decode_pairs`) takes and returns these, and a backend
that decodes CID itself declares :data:`~ctxleak.engine.capabilities.CID_DECODING`."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PairJob:
    """One answer: the prompt with the context and the one without it (token ids), λ (in
    [0, 1]; bounded CID's λ_max), T, bounded CID's ε per token (None: plain CID), the length
    limits, the seed of its own generator and greedy CID."""

    context_ids: tuple[int, ...]
    empty_ids: tuple[int, ...]
    lam: float
    temperature: float
    eps: float | None
    max_new_tokens: int
    min_new_tokens: int
    seed: int
    greedy: bool = False


@dataclass(frozen=True)
class PairStep:
    """One drawn token (the stopping EOS included): its id, λ_t, log p̄_λ(y_t | D) and
    log p(y_t | ∅) at T (nats, float64), and bounded CID's ex-post ε of the step (None for
    plain CID)."""

    token: int
    lam: float
    logp_mix: float
    logp_empty: float
    eps_ex_post: float | None


@dataclass(frozen=True)
class PairAnswer:
    """The answer's token ids (the stopping EOS left out), whether EOS ended it, and one
    :class:`PairStep` per drawn token."""

    token_ids: tuple[int, ...]
    stopped_on_eos: bool
    steps: tuple[PairStep, ...]


def pluggable(lam: float, eps: float | None) -> bool:
    """Whether a server that decodes CID itself takes this setting: λ in [0, 1] and ε absent
    or > 0 (λ > 1, which amplifies the context, and ε = 0, the no-context answer, decode by
    the other routes)."""
    return 0.0 <= lam <= 1.0 and (eps is None or eps > 0)
