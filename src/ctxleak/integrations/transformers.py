"""Context Influence Decoding inside anyone's ``model.generate()`` (Estimating Privacy Leakage of
Augmented Contextual Knowledge in Language Models, Def. 3.4; bounded CID: App. B, Alg. 1), with a
per-token privacy ledger.

:class:`ContextInfluenceProcessor` is a ``transformers.LogitsProcessor``. ``generate`` runs the
prompt *with* the private context D; the processor runs the prompt *without* it (the same
template with an empty slot) in its own KV cache, feeds it each generated token, and replaces
the scores by the CID mixture of the two streams' logits::

    log p̄_λ(·) = log_softmax(λ·z(·|D, x, y<t) + (1−λ)·z(·|x, y<t))      (returned, T = 1)

How it composes with ``generate``'s own settings:

- Processors that ``generate`` builds from its config (``min_new_tokens``, ``bad_words_ids``,
  ``repetition_penalty``, ...) run *before* custom processors, on the context stream only. Tokens
  they forbid (score −inf) are forbidden in both streams, as ctxleak's own loop masks EOS in both;
  penalties rescale the context stream only (:func:`cid_generate` refuses them and neutralises
  those the model's ``generation_config`` sets).
- The warpers (``temperature``, ``top_k``, ``top_p``, ``min_p``, ...) run *after* it. Dividing the
  returned log-probabilities by T gives ``softmax((λ·z_D + (1−λ)·z_∅) / T)``, exactly CID at
  temperature T. ``generate`` samples with ``top_k=50`` unless told otherwise: pass ``top_k=0``
  for pure CID (§3; :func:`cid_generate` does). Truncation changes the sampled distribution,
  so the ledger (always the untruncated ``p̄_λ``) and bounded CID's ε-DP guarantee hold only for
  pure temperature sampling at the processor's ``temperature``.
- Greedy decoding takes the argmax of ``p̄_λ`` (the same at every T). Beam search sums the
  returned ``log p̄_λ`` at T = 1; the processor follows the beams (it re-orders its own cache as
  they are re-ordered) and its ledger is read per returned sequence with :meth:`ledger_for`.
- The ledger uses the processor's ``temperature``: give it the T that ``generate`` samples at.

The processor sees a step's token only at the next step; ``observer`` (a never-stopping
``StoppingCriteria``) shows it each token as soon as it is drawn, the last one included, so pass
``stopping_criteria=[processor.observer]`` as well (or ``**processor.generate_kwargs()``).
"""

from __future__ import annotations

from collections.abc import Sequence
from numbers import Integral, Real
from typing import Any

import torch
from transformers import LogitsProcessor, LogitsProcessorList, StoppingCriteria, StoppingCriteriaList

from ctxleak.engine.forward import head_logits, hidden_states, left_pad
from ctxleak.engine.models import LM, ModelInfo
from ctxleak.errors import ConfigError
from ctxleak.integrations.ledger import ledger_result
from ctxleak.integrations.renamed import cid_config, lam_renamed
from ctxleak.kernels.cid import MASKED_LOGIT
from ctxleak.mitigations.cid import cid_combine, ledger_of
from ctxleak.mitigations.ledger import LedgerEntry, RowLedger, to_records
from ctxleak.results import InfluenceResult

Ids = Sequence[int]


def as_lm(model: Any) -> LM:
    """A ctxleak :class:`LM` for a transformers causal LM (or the LM itself)."""
    if isinstance(model, LM):
        return model
    if not hasattr(model, "get_output_embeddings") or not hasattr(model, "base_model"):
        raise ConfigError("model must be a transformers causal LM or a ctxleak LM, not "
                          f"{type(model).__name__}", param="model")
    gen = getattr(model, "generation_config", None)
    eos = getattr(gen, "eos_token_id", None) if gen is not None else None
    eos = [] if eos is None else ([int(eos)] if isinstance(eos, int) else [int(i) for i in eos])
    info = ModelInfo(name=type(model).__name__, source="in-memory", path="")
    return LM(model=model, tokenizer=None, info=info, eos_ids=eos)


def _is_id(value: Any) -> bool:
    return isinstance(value, Integral) and not isinstance(value, bool)


def _rows(ids: Ids | Sequence[Ids], name: str) -> list[list[int]]:
    """One prompt or a list of prompts (one per batch row) as lists of ints."""
    if isinstance(ids, torch.Tensor):
        ids = ids.tolist()
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Sequence):
        raise ConfigError(f"{name} must be a list of token ids (ints), or one such list per "
                          f"prompt, not {type(ids).__name__}", param=name)
    rows: list[Any] = [list(ids)] if not ids or _is_id(ids[0]) else [
        r.tolist() if isinstance(r, torch.Tensor) else r for r in ids]
    for i, row in enumerate(rows):
        if isinstance(row, (str, bytes)) or not isinstance(row, Sequence) \
                or not all(_is_id(t) for t in row):
            raise ConfigError(f"{name} must be a list of token ids (ints), or one such list per "
                              f"prompt: prompt {i} is not", param=name)
    if not rows or any(len(r) == 0 for r in rows):
        raise ConfigError(f"{name}: every prompt needs at least one token id", param=name)
    return [[int(t) for t in r] for r in rows]


def number_param(value: Any, name: str) -> float:
    """``value`` as a float, or a :class:`ConfigError` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ConfigError(f"{name} must be a number, not {type(value).__name__}", param=name)
    return float(value)


def _eos_ids(value: Any, name: str = "eos_token_id") -> set[int]:
    """An EOS id or a list of them."""
    if _is_id(value):
        return {int(value)}
    if isinstance(value, torch.Tensor):
        value = value.tolist()
    if isinstance(value, (str, bytes)) or not isinstance(value, (Sequence, set, frozenset)) \
            or not all(_is_id(t) for t in value):
        raise ConfigError(f"{name} must be a token id (int) or a list of them, not "
                          f"{type(value).__name__}", param=name)
    return {int(t) for t in value}


class ContextInfluenceProcessor(LogitsProcessor):
    """CID (λ fixed) or bounded CID (λ_t per step, ``bounded_eps``) as a logits processor.

    ``empty_ids``: the token ids of the prompt without the context, one list per prompt of the
    batch given to ``generate`` (beams and ``num_return_sequences`` copies follow their prompt).
    ``full_ids`` (optional): the prompts with the context, to check that ``generate``'s rows are
    these prompts (left padding allowed). ``lambda_`` ≥ 0 (``lam`` before, deprecated): 0 = no
    context, 1 = plain decoding, > 1 amplifies the context; with ``bounded_eps`` it is λ_max of
    Alg. 1. ``eos_token_id``: the ids that end a response in the ledger (default: the model's
    generation config).
    One processor serves one ``generate`` call; :meth:`reset` readies it for another.
    """

    @lam_renamed("ContextInfluenceProcessor()")
    def __init__(self, model: Any, empty_ids: Ids | Sequence[Ids], *, lambda_: float = 1.0,
                 temperature: float = 1.0, bounded_eps: float | None = None,
                 full_ids: Ids | Sequence[Ids] | None = None,
                 eos_token_id: int | Sequence[int] | None = None) -> None:
        cid, decoding = cid_config(
            number_param(lambda_, "lambda_"), temperature=number_param(temperature, "temperature"),
            bounded_eps=None if bounded_eps is None else number_param(bounded_eps, "bounded_eps"),
            min_new_tokens=0)
        self.config = cid.settings(decoding)
        self.lm = as_lm(model)
        self.empty_ids = _rows(empty_ids, "empty_ids")
        self.full_ids = _rows(full_ids, "full_ids") if full_ids is not None else None
        if self.full_ids is not None and len(self.full_ids) != len(self.empty_ids):
            raise ConfigError(f"full_ids has {len(self.full_ids)} prompts, empty_ids "
                              f"{len(self.empty_ids)}: give one of each per batch row")
        self.eos_ids = _eos_ids(self.lm.eos_ids if eos_token_id is None else eos_token_id)
        self.observer = _Observer(self)
        self.reset()

    @classmethod
    def from_context_span(cls, model: Any, prompt_ids: Ids | Sequence[Ids],
                          span: tuple[int, int] | Sequence[tuple[int, int]],
                          **kwargs: Any) -> ContextInfluenceProcessor:
        """The processor for prompts whose context is ``prompt_ids[start:end]`` (one span for
        all prompts or one per prompt): the no-context prompt is the rest of the ids."""
        full = _rows(prompt_ids, "prompt_ids")
        spans = _spans(span, len(full))
        if len(spans) != len(full):
            raise ConfigError(f"{len(spans)} context spans for {len(full)} prompts")
        empty = []
        for row, (ids, (start, end)) in enumerate(zip(full, spans)):
            if not 0 <= start <= end <= len(ids):
                raise ConfigError(f"context span {(start, end)} is outside prompt {row} "
                                  f"({len(ids)} tokens)")
            empty.append(ids[:start] + ids[end:])
        return cls(model, empty, full_ids=full, **kwargs)

    def reset(self) -> None:
        """Forget the last generation (its ledger included)."""
        self._prompt_len = 0
        self._group = 0
        self._gen_len = 0
        self._cache: Any = None
        self._row_of: dict[tuple[int, tuple[int, ...]], int] = {}
        self._entries: dict[tuple[int, tuple[int, ...]], LedgerEntry] = {}
        self._step: dict[str, Any] = {}
        self._last: torch.Tensor | None = None
        self._beams = False

    def generate_kwargs(self) -> dict[str, Any]:
        """``logits_processor`` and ``stopping_criteria`` for ``model.generate(...)``."""
        return {"logits_processor": LogitsProcessorList([self]),
                "stopping_criteria": StoppingCriteriaList([self.observer])}

    # ------------------------------------------------------------------ the two streams

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor
                 ) -> torch.FloatTensor:
        with torch.inference_mode():
            if self._cache is None:
                z_empty = self._start(input_ids)
            else:
                z_empty = self._advance(input_ids)
            return self._mix(scores, z_empty)  # type: ignore[return-value]  # float logits

    def _start(self, input_ids: torch.Tensor) -> torch.Tensor:
        n, length = input_ids.shape
        batch = len(self.empty_ids)
        if n % batch:
            raise ConfigError(f"generate has {n} rows but the processor {batch} no-context "
                              "prompts: give one per prompt of the batch")
        self._group, self._prompt_len, self._gen_len = n // batch, length, 0
        if self.full_ids is not None:
            for r in range(n):
                full = self.full_ids[r // self._group]
                tail = input_ids[r, max(0, length - len(full)):].tolist()
                if len(full) > length or tail != full:
                    raise ConfigError(f"row {r} of generate's input_ids is not prompt "
                                      f"{r // self._group} given to the processor (full_ids)")
        ids, mask, pos = left_pad(self.empty_ids, 0, self.lm.device)
        hidden, cache = hidden_states(self.lm, ids, mask, pos, use_cache=True)
        if self._group > 1:
            cache.batch_repeat_interleave(self._group)
            hidden, mask, pos = (t.repeat_interleave(self._group, dim=0)
                                 for t in (hidden, mask, pos))
        self._cache, self._mask, self._pos = cache, mask, pos
        self._row_of = {(r // self._group, ()): r for r in range(n)}
        return head_logits(self.lm, hidden[:, -1])

    def _parents(self, input_ids: torch.Tensor) -> tuple[list[int], list[tuple[int, ...]]]:
        """For each row, the row of the last step whose sequence it extends by one token."""
        gens = [tuple(row) for row in input_ids[:, self._prompt_len:].tolist()]
        parents = []
        for r, gen in enumerate(gens):
            parent = self._row_of.get((r // self._group, gen[:-1])) if gen else None
            if parent is None:
                raise ConfigError(
                    f"ContextInfluenceProcessor: row {r} does not extend any sequence of the "
                    "previous step by one token. It supports greedy decoding, sampling and beam "
                    "search in one generate call; not assisted, speculative or contrastive "
                    "decoding, nor a processor reused across calls without reset()")
            parents.append(parent)
        return parents, gens

    def _advance(self, input_ids: torch.Tensor) -> torch.Tensor:
        if input_ids.shape[0] != self._mask.shape[0]:
            raise ConfigError("ContextInfluenceProcessor: the number of rows changed between "
                              "steps (not a decoding mode it supports)")
        parents, gens = self._parents(input_ids)
        self._record(parents, gens)  # without the observer, tokens are known only now
        order = torch.as_tensor(parents, device=self._mask.device)
        if parents != list(range(len(parents))):
            self._beams = True
            self._cache.reorder_cache(order)
            self._mask, self._pos = self._mask[order], self._pos[order]
        new = torch.as_tensor([[g[-1]] for g in gens], dtype=torch.long, device=self.lm.device)
        self._mask = torch.cat([self._mask, torch.ones_like(new)], dim=1)
        self._pos = self._pos[:, -1:] + 1
        hidden, self._cache = hidden_states(self.lm, new, self._mask, self._pos,
                                            cache=self._cache, use_cache=True)
        self._row_of = {(r // self._group, g): r for r, g in enumerate(gens)}
        self._gen_len = len(gens[0])
        return head_logits(self.lm, hidden[:, -1])

    def _mix(self, scores: torch.Tensor, z_empty: torch.Tensor) -> torch.Tensor:
        """The CID mixture per row (λ fixed, or Alg. 1's λ_t), kept with the step's
        distributions at the ledger temperature until the drawn tokens are known."""
        cfg = self.config
        forbidden = torch.isneginf(scores) | torch.isnan(scores)
        z_ctx = scores.double().masked_fill(forbidden, MASKED_LOGIT)
        z_emp = z_empty.to(scores.device).double().masked_fill(forbidden, MASKED_LOGIT)
        # CID's own step at T = 1 (the warpers divide by T): one λ for all rows, or Alg. 1's
        # λ_t row by row at the ledger temperature
        if cfg.bounded_eps is None:
            out, lam, _ = cid_combine(z_ctx, z_emp, cfg, temperature=1.0)
            lams, eps = [lam] * len(scores), None
        else:
            steps = [cid_combine(z_ctx[r], z_emp[r], cfg, temperature=1.0)
                     for r in range(len(scores))]
            out = torch.stack([s[0] for s in steps])
            lams, eps = [s[1] for s in steps], [s[2] for s in steps]
        t = cfg.temperature
        self._step = {"mix": out if t == 1 else torch.log_softmax(out / t, dim=-1),
                      "empty": torch.log_softmax(z_emp / t, dim=-1), "lam": lams, "eps": eps}
        return out.to(scores.dtype).masked_fill(forbidden, float("-inf"))

    # ------------------------------------------------------------------ the ledger

    def _record(self, parents: Sequence[int], gens: Sequence[tuple[int, ...]]) -> None:
        """Ledger entries for the tokens drawn at the last step (row ``parents[i]`` chose the
        last token of ``gens[i]``)."""
        todo = [(p, g) for p, g in zip(parents, gens)
                if (self._row_of_group(p), g) not in self._entries]
        if not todo or not self._step:
            return
        rows = torch.as_tensor([p for p, _ in todo], device=self._step["mix"].device)
        toks = torch.as_tensor([g[-1] for _, g in todo], device=rows.device)
        mix = self._step["mix"][rows, toks].tolist()
        emp = self._step["empty"][rows, toks].tolist()
        eps = self._step["eps"]
        for (p, g), lc, le in zip(todo, mix, emp):
            self._entries[(self._row_of_group(p), g)] = LedgerEntry(
                step=len(g) - 1, token_id=g[-1], lam=float(self._step["lam"][p]),
                logp_context=lc, logp_empty=le,
                eps=None if eps is None else float(self.config.bounded_eps),  # type: ignore[arg-type]
                eps_ex_post=None if eps is None else float(eps[p]))

    def _row_of_group(self, row: int) -> int:
        return row // self._group

    def _observe(self, input_ids: torch.Tensor) -> None:
        if not self._group or input_ids.shape[1] != self._prompt_len + self._gen_len + 1:
            return
        m = input_ids.shape[0]
        if m != self._mask.shape[0]:
            self._beams = True  # beam search shows the stopping criteria its candidates
        per = m // len(self.empty_ids)
        gens = [tuple(row) for row in input_ids[:, self._prompt_len:].tolist()]
        pairs = [(self._row_of.get((c // per, g[:-1])), g) for c, g in enumerate(gens)]
        self._record([p for p, _ in pairs if p is not None], [g for p, g in pairs if p is not None])
        self._last = input_ids.detach().cpu()

    @property
    def ledger(self) -> tuple[RowLedger, ...]:
        """The ledger of every row of the last ``generate`` call (sampling and greedy
        decoding; for beam search use :meth:`ledger_for` with the returned sequences)."""
        if self._beams:
            raise ConfigError("beam search: read the ledger of the returned sequences with "
                              "processor.ledger_for(output_ids)")
        if self._last is None:
            raise ConfigError("the ledger is empty: run generate with logits_processor="
                              "[processor] and stopping_criteria=[processor.observer]")
        return self.ledger_for(self._last)

    def ledger_for(self, sequences: torch.Tensor | Sequence[Sequence[int]]
                   ) -> tuple[RowLedger, ...]:
        """The ledger of each row of ``sequences`` (``generate``'s output: prompt then new
        tokens), up to and including its first EOS."""
        if isinstance(sequences, torch.Tensor):
            sequences = sequences.tolist()
        batch = len(self.empty_ids)
        if not self._group or len(sequences) % batch:
            raise ConfigError(f"{len(sequences)} sequences for {batch} prompts")
        per = len(sequences) // batch
        out = []
        for m, seq in enumerate(sequences):
            gen = [int(t) for t in seq[self._prompt_len:]]
            entries, stopped = [], False
            for t in range(len(gen)):
                entry = self._entries.get((m // per, tuple(gen[:t + 1])))
                if entry is None:
                    raise ConfigError(
                        f"no ledger entry for token {t} of row {m}: pass stopping_criteria="
                        "[processor.observer] to generate (or use ctxleak.cid_generate)")
                entries.append(entry)
                if entry.token_id in self.eos_ids:
                    stopped = True
                    break
            out.append(ledger_of(entries, stopped, self.config, row=m))
        return tuple(out)

    def to_records(self) -> list[dict[str, Any]]:
        """:attr:`ledger` as plain dicts (keys as in ``samples.jsonl``)."""
        return to_records(self.ledger)

    def to_result(self, *, seed: int = 0) -> InfluenceResult:
        """:attr:`ledger` as an :class:`~ctxleak.results.InfluenceResult` (see
        :func:`~ctxleak.integrations.ledger.ledger_result`)."""
        return ledger_result(self.ledger, seed=seed)


def _spans(span: Any, n: int) -> list[tuple[int, int]]:
    """One ``(start, end)`` for all ``n`` prompts, or a list of them (one per prompt)."""
    def pair(x: Any) -> tuple[int, int] | None:
        ok = isinstance(x, (Sequence, torch.Tensor)) and not isinstance(x, (str, bytes)) \
            and len(x) == 2 and all(_is_id(int(v) if isinstance(v, torch.Tensor) else v)
                                    for v in x)
        return (int(x[0]), int(x[1])) if ok else None

    one = pair(span)
    if one is not None:
        return [one] * n
    many = [pair(x) for x in span] if isinstance(span, Sequence) \
        and not isinstance(span, (str, bytes)) else [None]
    if not many or any(p is None for p in many):
        raise ConfigError("span must be (start, end) token positions of the context, or one "
                          "such pair per prompt", param="span")
    return many  # type: ignore[return-value]


class _Observer(StoppingCriteria):
    """Shows the processor each token as soon as ``generate`` has drawn it; never stops."""

    def __init__(self, processor: ContextInfluenceProcessor) -> None:
        self.processor = processor

    def __call__(self, input_ids: torch.LongTensor, scores: Any, **kwargs: Any
                 ) -> torch.BoolTensor:
        with torch.inference_mode():
            self.processor._observe(input_ids)
        return torch.zeros(input_ids.shape[0], dtype=torch.bool,  # type: ignore[return-value]
                           device=input_ids.device)  # transformers' signature says BoolTensor

