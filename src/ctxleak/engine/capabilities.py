"""What a model backend can do, and the refusal of a run that needs more.

Every method is built on a few model operations. A model loaded in-process (transformers) has
all of them; a model behind a serving API (:class:`ctxleak.engine.served.ServedLM`, vLLM's
OpenAI-compatible completions endpoint) has the first three, and vLLM the fourth, since an HTTP
server returns log-probabilities and samples, never logits or gradients:

- :data:`CONTINUATION_LOGPROBS`: teacher-forced ``log p(y_t | prompt, y_<t)`` of a continuation
  under several prompts (temperature 1);
- :data:`NEXT_TOKEN_LOGPROBS`: ``log p(c | prompt)`` of given candidate next tokens (temperature
  1; the whole vocabulary only where the server returns that many log-probs);
- :data:`SAMPLING`: sampled (or greedy) generations, seeded;
- :data:`NEXT_TOKEN_DISTRIBUTION`: the whole next-token distribution at every step, as logits or
  as the log-probs of every token (the two differ by one constant per step, which every softmax
  removes): what mixing distributions needs (Context Influence Decoding at λ ≠ 1, bounded CID),
  and renormalising at a temperature T ≠ 1. vLLM gives it (``--max-logprobs -1``, one request
  per step and stream);
- :data:`NEXT_TOKEN_LOGITS`: the raw next-token logits themselves (the DP synthetic-text
  mechanism clips them, which a constant shift changes);
- :data:`CID_DECODING`: Context Influence Decoding done by the backend itself, both streams
  mixed inside the serving engine (a vLLM server with ctxleak's plugin, detected when ctxleak
  connects): what CID uses instead of :data:`NEXT_TOKEN_DISTRIBUTION` where it is there;
- :data:`CID_SCORING`: a given response scored under CID by the backend itself (teacher-forced
  pairs in the same plugin, protocol 2): per token log p̄_λ(y_t | D) and log p(y_t | ∅), what
  influence scoring uses instead of :data:`NEXT_TOKEN_DISTRIBUTION` where it is there;
- :data:`EMBEDDING_GRADIENTS`: gradients with respect to the input embeddings;
- :data:`WEIGHTS`: the weights themselves (fine-tuning, soft prompts).

A method states which it needs (``Method.requires``, a mapping from capability to the sentence
that says why and what to do instead); :func:`check_capabilities` refuses a backend that lacks
one before the first request. Adding a capability: add its name here, give it to the backends
that have it (``capabilities`` attribute), and name it in the methods that need it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ctxleak.errors import ConfigError

CONTINUATION_LOGPROBS = "continuation_logprobs"
NEXT_TOKEN_LOGPROBS = "next_token_logprobs"
SAMPLING = "sampling"
NEXT_TOKEN_DISTRIBUTION = "next_token_distribution"
NEXT_TOKEN_LOGITS = "next_token_logits"
CID_DECODING = "cid_decoding"
CID_SCORING = "cid_scoring"
EMBEDDING_GRADIENTS = "embedding_gradients"
WEIGHTS = "weights"
#: What a Target (:mod:`ctxleak.targets`) can do and nothing more: answer questions in text.
ANSWERS = "answers"

#: What a model loaded in-process has: every capability but :data:`CID_DECODING` and
#: :data:`CID_SCORING` (its CID mixes the logits in ctxleak's own loops).
IN_PROCESS: frozenset[str] = frozenset({CONTINUATION_LOGPROBS, NEXT_TOKEN_LOGPROBS, SAMPLING,
                                        NEXT_TOKEN_DISTRIBUTION, NEXT_TOKEN_LOGITS,
                                        EMBEDDING_GRADIENTS, WEIGHTS})
#: What a model behind an OpenAI-compatible completions API gives.
SERVED: frozenset[str] = frozenset({CONTINUATION_LOGPROBS, NEXT_TOKEN_LOGPROBS, SAMPLING})
#: What a vLLM server gives: the whole next-token distribution as well (the log-probs of every
#: token, when started with ``--max-logprobs -1``; a server that returns fewer is refused at the
#: first such request).
SERVED_DISTRIBUTION: frozenset[str] = SERVED | {NEXT_TOKEN_DISTRIBUTION}

#: What each capability is, in the words of a refusal.
DESCRIPTIONS: dict[str, str] = {
    CONTINUATION_LOGPROBS: "teacher-forced log-probs of a continuation",
    NEXT_TOKEN_LOGPROBS: "log-probs of candidate next tokens",
    SAMPLING: "sampled generations",
    NEXT_TOKEN_DISTRIBUTION: "the whole next-token distribution at every step",
    NEXT_TOKEN_LOGITS: "the raw next-token logits at every step",
    CID_DECODING: "Context Influence Decoding inside the server",
    CID_SCORING: "responses scored under Context Influence Decoding inside the server",
    EMBEDDING_GRADIENTS: "gradients with respect to the input embeddings",
    WEIGHTS: "the model's weights",
    ANSWERS: "answers to questions in text (a Target: a RAG app, an endpoint, a function)",
}


class MissingCapability(ConfigError):
    """A run needs a model operation its backend lacks: raised before the first request, naming
    what is missing (``missing``: capability names) and what to do instead."""

    def __init__(self, message: str, missing: tuple[str, ...], *, param: str | None = None,
                 also: tuple[str, ...] = ()) -> None:
        self.missing = missing
        super().__init__(message, param=param, also=also)


@dataclass(frozen=True)
class Backend:
    """A backend described before it is contacted (a served model named by its URL), so that a
    run is refused before any request, the server's own checks included."""

    capabilities: frozenset[str]
    description: str


def backend_of(model: str, server_url: str | None = None) -> Backend:
    """The backend a model argument will load as, described before anything is loaded or
    contacted: a model served at ``server_url`` (what a vLLM server gives,
    :data:`SERVED_DISTRIBUTION`; the dialect found on contact is checked again then, so a plain
    OpenAI-compatible server is refused what it lacks), else one loaded in-process
    (:data:`IN_PROCESS`)."""
    if server_url:
        return Backend(SERVED_DISTRIBUTION, f"the served model '{model}' at {server_url}")
    return Backend(IN_PROCESS, f"model '{model}'")


def capabilities_of(lm: object) -> frozenset[str]:
    """The capabilities of a model object: its ``capabilities`` attribute (a served model's),
    else all of them (a model loaded in-process)."""
    caps = getattr(lm, "capabilities", None)
    return frozenset(caps) if caps is not None else IN_PROCESS


def backend_name(lm: object) -> str:
    """How a refusal names the backend: ``the served model 'NAME' at URL`` or ``model 'NAME'``."""
    if isinstance(lm, Backend):
        return lm.description
    info = getattr(lm, "info", None)
    return backend_of(getattr(info, "name", "?"), getattr(info, "base_url", None)).description


def check_capabilities(lm: object, needs: Mapping[str, str], *, what: str = "this run",
                       param: str | None = None) -> None:
    """Refuse ``lm`` when it lacks a capability in ``needs`` (capability -> why it is needed
    and what to do instead), naming each missing one; nothing is sent to a server before."""
    have = capabilities_of(lm)
    missing = tuple(c for c in needs if c not in have)
    if not missing:
        return
    reasons = "; ".join(f"{DESCRIPTIONS.get(c, c)}: {needs[c]}" for c in missing)
    raise MissingCapability(f"{what} needs what {backend_name(lm)} cannot give ({reasons})",
                            missing, param=param)
