"""The pairs of a vLLM batch decoded by Context Influence Decoding, whatever vLLM's interface:
which rows belong to which answer, one seeded draw per answer and step, and the failure of a
pair that falls out of step (Estimating Privacy Leakage of Augmented Contextual Knowledge in
Language Models, Def. 3.4, Eq. 6; bounded CID: App. B, Alg. 1).

An answer is two requests of one batch, the prompt with the context D and the one without it
(:mod:`ctxleak.plugins.protocol`). At each step the plugin's ``apply`` hands this book the batch's
logits and, for each row of a pair request, the request and its step (the number of tokens it
has produced). For each pair, :meth:`PairBook.apply`:

- **decides a step once**: with both rows at step t, the EOS ids are masked before the minimum
  length, λ_t is λ or bounded CID's Alg. 1 search (:func:`ctxleak.kernels.cid.bounded_lambda`)
  (plain CID's ex-post ε, where asked: :func:`ctxleak.kernels.cid.divergence_at`),
  ``log p̄_λ`` is mixed in float64 and one token is drawn from the pair's own generator
  (:func:`ctxleak.kernels.draw.draw`: the same float64 draw as in-process CID, on any device), all as
  :func:`ctxleak.engine.streams.take_step` does; both rows are then forced to that token;
- **emits a forced token** where the answer is teacher-forced (``ctxleak_forced``): the same
  step, the token given instead of drawn (the generator is not drawn from), so that the records
  hold the CID log-probs of a response decoded elsewhere; past the forced tokens (where
  ``max_tokens`` allows more) the answer is drawn on;
- **repeats a decided step**: a row at a step already decided (a recompute after preemption, a
  sample vLLM discards) is forced to the same token, and the generator is not drawn from again;
- **fails a pair that falls out of step**, never guessing: a row at an undecided step whose
  partner is not in the batch at that step (not yet scheduled, preempted, aborted), a row ahead
  of the decisions, a third request, or settings or lengths that differ between the two. Its
  rows are forced to EOS (the requests end) and the error goes into its records, so the client
  sees the answer void and tries it again;
- **fails a pair whose step raises**, alone: whatever a request carries (an EOS id outside the
  vocabulary, logits that are not finite, a seed torch refuses) voids its own pair as above,
  with the exception in its records, and the other pairs of the batch go on; nothing a request
  carries stops the engine. A record that cannot be written is logged and dropped (the client
  then finds none and tries the answer again).

A pair's records are written once, when it ends (EOS or its last token) or fails, by the
``write`` callable (the plugin writes a file per answer, :mod:`ctxleak.plugins.vllm_records`
serves it). Torch, the kernels and the protocol only: no vLLM, so the fast tests drive it with
a simulated batch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ctxleak.kernels.cid import (
    MASKED_LOGIT,
    SEARCH_TOGETHER_ON,
    bounded_lambda,
    bounded_lambda_rows,
    cid_logprobs,
    divergence_at,
)
from ctxleak.kernels.draw import draw, seeded_generator
from ctxleak.plugins.protocol import PROTOCOL_VERSION, PairSettings, prompt_digest

#: Seconds after which a pair none of whose requests is in the batch is given up.
STALE_SECONDS = 600.0

LOG = logging.getLogger(__name__)

Write = Callable[[str, dict[str, Any]], None]


@dataclass
class Member:
    """One request of a pair: its settings, its ``max_tokens`` and its prompt's digest."""

    settings: PairSettings
    max_tokens: int
    digest: str
    role: str = ""
    present: bool = True


@dataclass
class Pair:
    """One answer: its two requests by role, its decided steps and its generator."""

    settings: PairSettings
    max_tokens: int
    generator: torch.Generator
    members: dict[str, Member] = field(default_factory=dict)
    steps: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    written: bool = False
    last_seen: float = field(default_factory=time.monotonic)

    @property
    def stopped(self) -> bool:
        return bool(self.steps) and self.steps[-1]["token"] in self.settings.stops

    @property
    def complete(self) -> bool:
        return self.stopped or len(self.steps) >= self.max_tokens


class PairBook:
    """The pairs in flight in one vLLM engine (see the module docstring). ``server``: the flags
    the plugin runs under, sent in every record; ``vocab``: the model's vocabulary size, where
    known (a pair whose EOS ids fall outside it is voided when it is admitted)."""

    def __init__(self, write: Write, server: dict[str, Any], *, vocab: int | None = None
                 ) -> None:
        self.write, self.server, self.vocab = write, dict(server), vocab
        self.pairs: dict[str, Pair] = {}

    # ---- the batch's membership -----------------------------------------------------------
    def admit(self, settings: PairSettings, max_tokens: int, prompt_ids: Sequence[int] | None,
              *, digest: str | None = None) -> Member:
        """A request joins its pair (created with the first): it is the context stream when its
        prompt's digest is the one the pair names and that role is free, else the no-context
        stream. A request coming back after preemption takes its role again."""
        self._sweep()
        got = digest if digest is not None else prompt_digest(list(prompt_ids or []))
        member = Member(settings, int(max_tokens), got)
        pair = self.pairs.get(settings.pair)
        if pair is None:
            pair = self.pairs[settings.pair] = self._new_pair(settings, int(max_tokens))
        pair.last_seen = time.monotonic()
        wants = "context" if got == settings.context_digest else "empty"
        held = pair.members.get(wants)
        if held is not None and held.present:  # equal prompts: the other role
            wants = "empty" if wants == "context" else "context"
            held = pair.members.get(wants)
        if held is not None and held.present:
            self.fail(pair, "a third request came with this pair id")
        elif held is not None and held.digest != got:
            self.fail(pair, f"the {wants} stream came back with another prompt")
        elif settings != pair.settings:
            self.fail(pair, "the two requests of the pair have different settings")
        elif int(max_tokens) != pair.max_tokens:
            self.fail(pair, f"the two requests of the pair have different max_tokens "
                            f"({pair.max_tokens} and {max_tokens})")
        member.role = wants
        pair.members[wants] = member
        return member

    def _new_pair(self, settings: PairSettings, max_tokens: int) -> Pair:
        """A pair, voided from the start where its settings cannot be run (checked at
        admission already; here so that nothing a request carries raises in the engine)."""
        why = None
        try:
            generator = seeded_generator(settings.seed)
        except (ValueError, RuntimeError, OverflowError, TypeError) as exc:
            generator, why = torch.Generator(device="cpu"), f"its seed was refused: {exc}"
        for what, ids in (("EOS ids", settings.stops), ("forced token ids", settings.forced)):
            outside = sorted({t for t in ids if self.vocab is not None and t >= self.vocab})
            if outside:
                why = f"its {what} {outside[:8]} are outside the vocabulary of {self.vocab} ids"
        pair = Pair(settings, max_tokens, generator)
        if why is not None:
            self.fail(pair, why)
        return pair

    def leave(self, member: Member) -> None:
        """A request left the batch (finished, aborted or preempted): its pair is dropped once
        neither request is left and its records are out."""
        member.present = False
        pair = self.pairs.get(member.settings.pair)
        if pair is None or pair.members.get(member.role) is not member:
            return
        if not any(m.present for m in pair.members.values()):
            if pair.complete or pair.error is not None:
                self._finish(pair)
                del self.pairs[member.settings.pair]

    # ---- one step of the batch ------------------------------------------------------------
    def apply(self, logits: torch.Tensor, rows: Sequence[tuple[int, Member, int]]
              ) -> torch.Tensor:
        """Decide, repeat or fail each pair's step on ``logits`` ``[rows, V]`` (in place);
        ``rows``: (row index, request, its step) of every row of a pair request. A pair whose
        step raises is voided alone (the module docstring)."""
        by_pair: dict[str, list[tuple[int, Member, int]]] = {}
        for row in rows:
            by_pair.setdefault(row[1].settings.pair, []).append(row)
        searched = self._search_together(logits, by_pair)
        for pair_id, own in by_pair.items():
            pair = self.pairs.get(pair_id)
            if pair is None:  # cannot happen through admit; end the rows rather than guess
                for index, member, _ in own:
                    end(logits, index, member.settings.stops)
                continue
            pair.last_seen = time.monotonic()
            try:
                self._step_pair(logits, pair, own, searched.get(pair_id))
            except Exception as exc:  # noqa: BLE001 - one request never stops the engine
                LOG.exception("ctxleak's CID plugin voids pair %s", pair_id)
                self.fail(pair, f"the plugin's step failed: {type(exc).__name__}: {exc}")
                for index, _, _ in own:
                    end(logits, index, pair.settings.stops)
        return logits

    def _search_together(self, logits: torch.Tensor,
                         by_pair: dict[str, list[tuple[int, Member, int]]]
                         ) -> dict[str, tuple[float, float]]:
        """Where :data:`~ctxleak.kernels.cid.SEARCH_TOGETHER_ON` says (a GPU), Alg. 1's λ_t and
        divergence of every bounded pair that decides a step in this batch, one search per
        group of pairs with equal (ε, λ_max, T) (:func:`~ctxleak.kernels.cid.bounded_lambda_rows`:
        each row's floats as alone). Elsewhere nothing: each pair searches alone. A group whose
        search raises is left out: its pairs search alone in :meth:`_decide`, and one that
        raises there is voided alone."""
        if logits.device.type not in SEARCH_TOGETHER_ON:
            return {}
        groups: dict[tuple[float, float, float], list[tuple[str, torch.Tensor, torch.Tensor]]] = {}
        for pair_id, own in by_pair.items():
            pair = self.pairs.get(pair_id)
            eps = None if pair is None else pair.settings.eps
            if pair is None or eps is None:
                continue
            new, problem = _new_rows(pair, own)
            if new and problem is None:
                try:
                    zc, ze = _masked(logits, pair, *new)
                except Exception:  # noqa: BLE001 - the pair's own step says why, alone
                    continue
                key = (eps, pair.settings.lam, pair.settings.temperature)
                groups.setdefault(key, []).append((pair_id, zc, ze))
        found: dict[str, tuple[float, float]] = {}
        for (eps, lam_max, temperature), members in groups.items():
            if len(members) < 2:
                continue
            try:
                rows = bounded_lambda_rows([m[1] for m in members], [m[2] for m in members],
                                           eps, lam_max, temperature)
            except Exception:  # noqa: BLE001 - each pair searches alone instead
                LOG.exception("ctxleak's CID plugin searches %d answers' λ_t one at a time",
                              len(members))
                continue
            found.update(zip((m[0] for m in members), rows))
        return found

    def _step_pair(self, logits: torch.Tensor, pair: Pair,
                   own: list[tuple[int, Member, int]],
                   searched: tuple[float, float] | None = None) -> None:
        if pair.error is None:
            new, problem = _new_rows(pair, own)
            if problem is not None:
                self.fail(pair, problem)
            elif new:
                self._decide(logits, pair, *new, searched)
        for row, _, step in own:
            if pair.error is not None:
                end(logits, row, pair.settings.stops)
            else:
                force(logits, row, pair.steps[step]["token"])

    def _decide(self, logits: torch.Tensor, pair: Pair, row_context: int, row_empty: int,
                searched: tuple[float, float] | None = None) -> None:
        """One step of CID on the pair's two rows (the order of ``take_step``: mask, combine,
        draw or take the forced token, record); ``searched``: bounded CID's λ_t and divergence
        where :meth:`_search_together` found them."""
        cfg, step = pair.settings, len(pair.steps)
        zc, ze = _masked(logits, pair, row_context, row_empty)
        eps_ex_post = None
        lam: float = cfg.lam
        if cfg.eps is not None:
            lam, div = searched if searched is not None else \
                bounded_lambda(zc, ze, cfg.eps, cfg.lam, cfg.temperature)
            eps_ex_post = 2.0 * div
        elif cfg.ex_post:
            eps_ex_post = 2.0 * divergence_at(zc, ze, lam, cfg.temperature)
        mixed = cid_logprobs(zc, ze, lam, cfg.temperature)
        token = cfg.forced[step] if step < len(cfg.forced) else \
            draw(mixed, pair.generator, not cfg.greedy)
        empty = torch.log_softmax(ze / cfg.temperature, dim=-1)
        pair.steps.append({"step": step, "token": token, "lam": lam,
                           "logp_mix": float(mixed[token]), "logp_empty": float(empty[token]),
                           "eps_ex_post": eps_ex_post})
        if pair.complete:
            self._finish(pair)

    def fail(self, pair: Pair, why: str) -> None:
        """Void the pair: its rows are forced to EOS from now on and its records say why."""
        if pair.error is None:
            pair.error = why
            self._finish(pair)

    def _finish(self, pair: Pair) -> None:
        if pair.written:
            return
        pair.written = True
        try:
            self.write(pair.settings.pair, {
                "protocol": PROTOCOL_VERSION, "pair": pair.settings.pair, "steps": pair.steps,
                "stopped": pair.stopped, "error": pair.error, "server": self.server})
        except Exception:  # noqa: BLE001 - a full disk voids the answer, not the engine
            LOG.exception("ctxleak's CID plugin could not write the records of pair %s",
                          pair.settings.pair)

    def _sweep(self) -> None:
        """Give up pairs none of whose requests has been in the batch for
        :data:`STALE_SECONDS` (their client went away)."""
        now = time.monotonic()
        for pair_id, pair in list(self.pairs.items()):
            if now - pair.last_seen > STALE_SECONDS and \
                    not any(m.present for m in pair.members.values()):
                if not pair.complete:
                    self.fail(pair, "the pair's requests left the batch before it ended")
                del self.pairs[pair_id]


def _new_rows(pair: Pair, own: list[tuple[int, Member, int]]
              ) -> tuple[tuple[int, int] | None, str | None]:
    """The (context, no-context) rows of the pair's undecided step in this batch, or None where
    every row of it repeats a decided step; and why the pair falls out of step, if it does."""
    new = [(r, m, s) for r, m, s in own if s >= len(pair.steps)]
    steps = {s for _, _, s in new}
    if any(s > len(pair.steps) for s in steps):
        return None, f"a stream is at step {max(steps)} but only {len(pair.steps)} were decided"
    if new and (len(new) != 2 or {m.role for _, m, _ in new} != {"context", "empty"}):
        return None, f"the partner stream is missing from the batch at step {len(pair.steps)}"
    by_role = {m.role: r for r, m, _ in new}
    return ((by_role["context"], by_role["empty"]) if new else None), None


def _masked(logits: torch.Tensor, pair: Pair, row_context: int, row_empty: int
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """The pair's two rows in float64, its EOS ids masked before its minimum length."""
    zc, ze = logits[row_context].double(), logits[row_empty].double()
    if len(pair.steps) < pair.settings.min_new_tokens:
        stops = torch.tensor(pair.settings.stops, dtype=torch.long, device=zc.device)
        zc, ze = zc.clone(), ze.clone()
        zc[stops], ze[stops] = MASKED_LOGIT, MASKED_LOGIT
    return zc, ze


def end(logits: torch.Tensor, row: int, stops: Sequence[int]) -> None:
    """Force ``row`` to the first of the EOS ids ``stops`` that is a column of ``logits`` (the
    request ends); where none is, the row is left as it is (the pair is void all the same)."""
    width = logits.shape[-1]
    token = next((int(s) for s in stops if 0 <= int(s) < width), None)
    if token is not None:
        force(logits, row, token)


def force(logits: torch.Tensor, row: int, token: int) -> None:
    """Leave ``token`` the only possible one of ``row`` (log-prob 0, every other −inf): vLLM's
    greedy pick then takes it, whatever its sampler does next."""
    logits[row].fill_(float("-inf"))
    logits[row, int(token)] = 0.0
