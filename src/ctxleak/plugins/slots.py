"""The rows of a Model Runner V2 batch that belong to Context Influence Decoding pairs, read the
way vLLM's V2 logits-processor interface lays a step out
(``vllm.v1.worker.gpu.sample.logits_processor``: ``LogitsProcessor``, ``LogitsContext``,
``LogitsProcRequestState``), for :class:`~ctxleak.plugins.cid_pairs.PairBook`.

The V2 model runner keys a request by its *slot*, a row of its persistent buffers that is
recycled through a free list: ``add_request(slot, params)`` says that a request now holds the
slot (whatever held it before is gone), and nothing says when a request leaves. At each step
``apply`` gets the batch's logits, one row per sampled position, in an order that changes from
step to step, with the layout of the step (:class:`Layout`: the slot of each row, the position
of its input token, its offset among its own request's rows, the token fed at that position).
From these :class:`SlotRows` finds, for each row of a pair request:

- **its step**: the number of tokens its request had produced before the token the row
  samples, ``pos + 1 − prompt_len`` (the runner's positions are exact on the device, also
  under asynchronous scheduling, and a request resumed after preemption is prefilled with its
  earlier output, so its first row lands on the step it left at);
- **whether it counts**: a row of a partial prefill (``pos + 1 < prefill_len``: vLLM samples
  it and throws the sample away) is left alone; a speculative row (offset k > 0 among its
  request's rows, fed the k-th draft token) stands for step s + k only where every draft token
  up to it is the token the pair decided at that step, and the answer has not ended before it.
  Otherwise vLLM's rejection sampler rejects that draft (the row before it is forced to another
  token) or the request stops short of it, so the row's sample is thrown away, and it is left
  alone too.

The rows that count are handed to the book one offset at a time (all offset-0 rows, then
offset 1, …), so that a step decided at offset k is known when the drafts of offset k + 1 are
checked against it. Two streams whose drafts part ways (one accepts a draft at offset k, the
other rejects it) would leave the pair out of step; the book then finds a stream without its
partner at that step and voids the pair, which the client tries again.

A request that comes back after preemption gets a new slot; the slot it left still names it
until vLLM reuses that slot. When a request of a pair is admitted with the prompt of a member
that is still on the book under another slot, that slot is taken as left (the book lets the
new request take its role again); should a row of that slot turn up after all, it was a third
request of the pair and the pair is voided. Torch, the kernels and the book only (no vLLM), so
the fast tests drive it with simulated steps.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from ctxleak.plugins.cid_pairs import Member, PairBook, end
from ctxleak.plugins.protocol import PairSettings, prompt_digest


@dataclass(frozen=True)
class Layout:
    """One step of the batch, one entry per logits row, read from vLLM's ``LogitsContext``:
    ``slots`` (``expanded_idx_mapping``), ``pos`` (the position of the row's input token),
    ``offsets`` (``expanded_local_pos``: 0 for a request's first row, k for its k-th draft
    token) and ``inputs`` (``input_ids``: the token fed at that position)."""

    slots: Sequence[int]
    pos: Sequence[int]
    offsets: Sequence[int]
    inputs: Sequence[int]


class SlotRows:
    """The pair requests of a V2 batch by slot (see the module docstring). ``prompt_len`` and
    ``prefill_len`` read the runner's per-slot lengths (host copies, no device read)."""

    def __init__(self, book: PairBook, prompt_len: Callable[[int], int],
                 prefill_len: Callable[[int], int]) -> None:
        self.book = book
        self.prompt_len, self.prefill_len = prompt_len, prefill_len
        self.slots: dict[int, Member] = {}
        self.pending: dict[int, tuple[PairSettings, int]] = {}
        self.stale: dict[int, Member] = {}  # slots taken as left by a returning request

    def add(self, slot: int, settings: PairSettings | None, max_tokens: int) -> bool:
        """A request now holds ``slot`` (``settings`` None: not a pair request); whatever held
        the slot before has left. True where the request is a pair's."""
        old = self.slots.pop(slot, None)
        if old is not None:
            self.book.leave(old)
        self.stale.pop(slot, None)
        self.pending.pop(slot, None)
        if settings is None:
            return False
        self.pending[slot] = (settings, int(max_tokens))
        return True

    def admit(self, prompt_of: Callable[[int, int], Sequence[int]]) -> None:
        """The requests added since the last step join their pairs; ``prompt_of(slot, n)``:
        the first n tokens the slot holds (its prompt, on the device by now)."""
        for slot, (settings, max_tokens) in self.pending.items():
            digest = prompt_digest([int(t) for t in prompt_of(slot, self.prompt_len(slot))])
            self._returning(settings.pair, digest)
            self.slots[slot] = self.book.admit(settings, max_tokens, None, digest=digest)
        self.pending.clear()

    def _returning(self, pair: str, digest: str) -> None:
        """Where both requests of ``pair`` are on the book under other slots and exactly one
        has this prompt, that one is back after preemption: its old slot is taken as left."""
        present = [(slot, m) for slot, m in self.slots.items()
                   if m.settings.pair == pair and m.present]
        same = [(slot, m) for slot, m in present if m.digest == digest]
        if len(present) >= 2 and len(same) == 1:
            slot, member = same[0]
            self.stale[slot] = self.slots.pop(slot)
            self.book.leave(member)

    def wants(self, slots: Sequence[int]) -> bool:
        """Whether any of ``slots`` (the step's requests, a host array) is a pair's."""
        return any(int(s) in self.slots or int(s) in self.stale for s in slots)

    def apply(self, logits: torch.Tensor, layout: Layout) -> torch.Tensor:
        """Decide, repeat or void each pair's steps on ``logits`` (in place): the rows that
        count, offset by offset (module docstring)."""
        levels: dict[int, list[tuple[int, int]]] = {}
        for row, slot in enumerate(layout.slots):
            slot = int(slot)
            if slot in self.stale:
                self._third(logits, row, self.stale[slot])
            elif slot in self.slots:
                levels.setdefault(int(layout.offsets[row]), []).append((row, slot))
        live: set[int] = set()  # the slots whose row at the offset before counted
        for offset in sorted(levels):
            rows, counted = [], set()
            for row, slot in levels[offset]:
                step = self._step(layout, row, slot)
                if step is None:
                    continue
                member = self.slots[slot]
                if offset > 0 and (slot not in live or
                                   not self._draft_holds(member, step, layout.inputs[row])):
                    continue
                counted.add(slot)
                rows.append((row, member, step))
            live = counted
            self.book.apply(logits, rows)
        return logits

    def _step(self, layout: Layout, row: int, slot: int) -> int | None:
        """The row's step, None for a row of a partial prefill."""
        pos = int(layout.pos[row])
        if pos + 1 < self.prefill_len(slot):
            return None
        return pos + 1 - self.prompt_len(slot)

    def _draft_holds(self, member: Member, step: int, fed: int) -> bool:
        """Whether the draft token fed at this row is the token the pair decided at the step
        before the row's (else vLLM rejects it, and the row's sample is thrown away), and the
        answer goes on past it (else vLLM ends the request there, and throws the rest away)."""
        pair = self.book.pairs.get(member.settings.pair)
        if pair is None or step < 1 or step > len(pair.steps) or \
                (pair.complete and step == len(pair.steps)):
            return False
        return int(pair.steps[step - 1]["token"]) == int(fed)

    def _third(self, logits: torch.Tensor, row: int, member: Member) -> None:
        """A row of a slot taken as left: a third request of the pair. The pair is void."""
        pair = self.book.pairs.get(member.settings.pair)
        if pair is not None:
            self.book.fail(pair, "a third request came with this pair id")
        end(logits, row, member.settings.stops)
