"""The privacy proxy's in-process decoding of concurrent answers together: the answers waiting at
a moment go through the model as one batch, every answer's two streams (with and without the
context) in one batched KV cache, one forward pass per step for all of them (Context Influence
Decoding, Estimating Privacy Leakage of Augmented Contextual Knowledge in Language Models,
Def. 3.4; bounded: App. B, Alg. 1).

Design: a collector. One thread owns the model. It takes the first answer waiting, gathers
those that arrive within :data:`WINDOW_S` (or until the batch holds ``max_batch``), then, once it
holds the model's lock, every answer still waiting too, and decodes them all, each under its own
CID setting (λ, ε, temperature, lengths), as CID answers them
(:func:`~ctxleak.mitigations.cid.answer_together`, :meth:`CID.answer
<ctxleak.mitigations.cid.CID.answer>` for several settings at once): the engine's batched
decoding (:func:`ctxleak.engine.local.generation.decode_streams`). An answer that finishes (EOS or its
``max_tokens``) leaves the batch at once, so it stops costing compute, and is returned then
(a streamed one has sent each token as it was drawn). Answers that arrive meanwhile wait and
form the next batch. Answers do not join a batch between its steps:
that would merge a new prefilled cache into the running one (left-padding every layer's keys
and values, the room of :mod:`ctxleak.engine.local.kvroom`, sliding windows, a shared prefix),
a change to the engine's decoding loop that every method relies on, for a gain only when
answers arrive while others are mid-way. A client that sends its next request when its answer
comes back joins the next batch, so closed-loop clients settle into full batches.

A request for another mechanism (:mod:`~ctxleak.proxy.mechanism`: a DP vote, DP-RAG,
scrubbing) waits in the same queue; the requests of one batch with the same mechanism (its
``key()``) and decoding settings go through one ``mechanism.answer`` call, whole answers (if
that call fails, each request again alone, so one the mechanism refuses fails alone).

What stays equal: each answer draws from its own generator, seeded by its request's seed, so
its tokens are those of the same request decoded alone (up to float noise in the logits, as for
any batch of the engine); its entries reach its ``on_entry`` as they are drawn, so streaming
works per answer. A failure stays with its answer: an answer whose ``on_entry`` fails, or whose
preparation fails, fails alone while the batch goes on; if the batch itself fails, each answer
that released nothing yet is decoded again alone, and those that did fail with the batch's
error (their released tokens are spent)."""

from __future__ import annotations

import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from ctxleak.engine.batching import policy_of
from ctxleak.engine.lm import LanguageModel
from ctxleak.mitigations.cid import answer_together, ledger_of
from ctxleak.mitigations.ledger import LedgerEntry
from ctxleak.proxy.decode import Answer, Prepared, finish_answer, prepare_answer
from ctxleak.proxy.mechanism import Prepared as PreparedAsk
from ctxleak.proxy.mechanism import Reply, prepare, reply_of
from ctxleak.proxy.request import CIDRequest, Document, MechanismRequest

#: Seconds the collector waits after the first answer of a batch for more to arrive.
WINDOW_S = 0.005


@dataclass(eq=False)
class _Waiting:
    """One answer waiting to be decoded, and what became of it."""

    request: CIDRequest
    docs: Sequence[Document]
    on_entry: Callable[[LedgerEntry], None] | None
    future: Future[Answer] = field(default_factory=Future)
    prepared: Prepared | None = None
    entries: list[LedgerEntry] = field(default_factory=list)  # drawn so far
    error: BaseException | None = None  # its on_entry failed: it fails alone

    def hear(self, entry: LedgerEntry) -> None:
        self.entries.append(entry)
        if self.error is not None or self.on_entry is None:
            return
        try:
            self.on_entry(entry)
        except Exception as exc:  # the answer's own failure: the batch goes on without it
            self.error = exc

    def fail(self, exc: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(exc)


@dataclass(eq=False)
class _Asked:
    """One request waiting for a mechanism other than CID, and what became of it."""

    request: MechanismRequest
    docs: Sequence[Document]
    future: Future[Reply] = field(default_factory=Future)
    prepared: PreparedAsk | None = None

    def fail(self, exc: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(exc)


class BatchDecoder:
    """Decodes the answers of many threads together on one in-process model: :meth:`decode`
    from any thread; the model is used under ``lock`` (one batch at a time). ``max_batch``: the
    most answers in one batch. ``sizes`` counts the batches decoded by their number of
    answers."""

    def __init__(self, lm: LanguageModel, *, max_batch: int = 8,
                 lock: threading.Lock | None = None, window_s: float = WINDOW_S) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, not {max_batch}")
        self.lm, self.max_batch, self.window_s = lm, max_batch, window_s
        self.lock = lock or threading.Lock()
        self.sizes: Counter[int] = Counter()
        self._queue: queue.Queue[_Waiting | _Asked | None] = queue.Queue()
        self._pending, self._counting = 0, threading.Lock()
        self._thread = threading.Thread(target=self._serve, name="ctxleak-batch-decoder",
                                        daemon=True)
        self._thread.start()

    def decode(self, request: CIDRequest, docs: Sequence[Document],
               on_entry: Callable[[LedgerEntry], None] | None = None) -> Answer:
        """The answer of ``request`` with ``docs`` as its context, decoded in a batch with the
        answers other threads are waiting for; ``on_entry`` hears each of its entries as it is
        drawn (in the decoder's thread). Raises what its decoding raised."""
        return self._wait(_Waiting(request, docs, on_entry))

    def answer(self, request: MechanismRequest, docs: Sequence[Document]) -> Reply:
        """The answer of ``request`` by its mechanism (not CID) with ``docs`` as its
        documents, in one ``answer`` call with the requests other threads are waiting for that
        have the same mechanism and decoding settings. Raises what its decoding raised."""
        return self._wait(_Asked(request, docs))

    def _wait(self, waiting: _Waiting | _Asked) -> Any:
        """Queue ``waiting`` and wait for its result."""
        if not self._thread.is_alive():
            raise RuntimeError("the batch decoder is closed")
        with self._counting:
            self._pending += 1
        try:
            self._queue.put(waiting)
            while True:
                try:
                    return waiting.future.result(timeout=1.0)
                except TimeoutError:
                    if not self._thread.is_alive() and not waiting.future.done():
                        raise RuntimeError("the batch decoder was closed") from None
        finally:
            with self._counting:
                self._pending -= 1

    def pending(self) -> int:
        """How many answers were asked for and are not answered yet."""
        with self._counting:
            return self._pending

    def close(self) -> None:
        """Stop the decoder's thread once the answers already waiting are decoded."""
        self._queue.put(None)
        self._thread.join()

    # ---- the decoder's thread -----------------------------------------------------------------
    def _serve(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            # the batch: ``first`` and those that arrive within the window, then, once the
            # model is free, those that came meanwhile
            batch = [first]
            closing = self._more(batch, self.window_s)
            with self.lock:
                if not closing:
                    closing = self._more(batch, 0.0)
                try:
                    self._run(batch)
                except Exception as exc:  # a bug here must not leave a client waiting
                    for item in batch:
                        item.fail(exc)
            if closing:
                return

    def _more(self, batch: list[_Waiting | _Asked], seconds: float) -> bool:
        """Add to ``batch`` the answers that arrive within ``seconds`` (0: those waiting now),
        up to ``max_batch``; whether :meth:`close` was called meanwhile."""
        deadline = time.monotonic() + seconds
        while len(batch) < self.max_batch:
            try:
                more = self._queue.get(timeout=max(deadline - time.monotonic(), 0.0))
            except queue.Empty:
                return False
            if more is None:
                return True
            batch.append(more)
        return False

    def _run(self, batch: list[_Waiting | _Asked]) -> None:
        """Prepare each answer (one failing fails alone), then decode CID's greedy ones and
        sampled ones, each kind in one batch, and the other mechanisms' ones, one ``answer``
        call per mechanism and decoding settings."""
        self._ask([item for item in batch if isinstance(item, _Asked)])
        ready = []
        for item in (item for item in batch if isinstance(item, _Waiting)):
            try:
                item.prepared = prepare_answer(self.lm, item.request, item.docs)
            except Exception as exc:
                item.fail(exc)
                continue
            ready.append(item)
        for sample in (True, False):
            group = [item for item in ready if item.prepared and item.prepared.sample == sample]
            if group:
                self.sizes[len(group)] += 1
                self._decode(group)

    def _ask(self, asked: list[_Asked]) -> None:
        """Prepare each request for its mechanism (one failing fails alone), then answer those
        of one mechanism and decoding settings in one call."""
        groups: dict[tuple[str, Any], list[_Asked]] = {}
        for item in asked:
            try:
                item.prepared = prepare(self.lm, item.request, item.docs)
            except Exception as exc:
                item.fail(exc)
                continue
            groups.setdefault(item.prepared.group, []).append(item)
        for group in groups.values():
            self.sizes[len(group)] += 1
            self._answer(group)

    def _answer(self, group: list[_Asked]) -> None:
        """One ``answer`` call for ``group``; if it fails, each request again alone (so one
        request the mechanism refuses fails alone)."""
        prepared = [item.prepared for item in group if item.prepared is not None]
        first = prepared[0]
        try:
            answers = first.mechanism.answer(self.lm, [p.request for p in prepared],
                                             first.decoding)
        except Exception as exc:
            if len(group) == 1:
                group[0].fail(exc)
            else:
                for item in group:
                    self._answer([item])
            return
        for item, p, answer in zip(group, prepared, answers):
            try:
                item.future.set_result(reply_of(self.lm, p, answer))
            except Exception as exc:
                item.fail(exc)

    def _decode(self, group: list[_Waiting]) -> None:
        """One batch of answers (all greedy or all sampled), each under its own CID setting
        (:func:`answer_together`), each answer's entries to its own ``on_entry`` as they are
        drawn; each answer's future gets its answer or its error."""
        prepared = [item.prepared for item in group if item.prepared is not None]
        # without a replay of the floats (batch-invariant policy), the entries heard are the
        # ledger's: an answer is returned as soon as it ends, not when its batch does
        early = not policy_of(self.lm).invariant

        def heard(row: int, entry: LedgerEntry) -> None:
            group[row].hear(entry)
            if early:
                self._finish_if_ended(group[row], prepared[row], entry)

        try:
            answers = answer_together(self.lm, [(p.mechanism, p.request, p.decoding)
                                                for p in prepared], on_entry=heard)
        except Exception as exc:
            for item in group:  # whose tokens were released fails; the others again alone
                if item.entries or item.error is not None or len(group) == 1:
                    item.fail(item.error or exc)
                else:
                    self._decode([item])
            return
        for item, p, answer in zip(group, prepared, answers):
            ledger = answer.ledger
            assert ledger is not None  # CID's answers carry their ledger
            if item.future.done():  # returned as it ended
                continue
            if item.error is not None:
                item.fail(item.error)
                continue
            try:
                item.future.set_result(finish_answer(self.lm, p, ledger))
            except Exception as exc:
                item.fail(exc)

    def _finish_if_ended(self, item: _Waiting, prepared: Prepared, entry: LedgerEntry) -> None:
        """Return ``item``'s answer if ``entry`` ended it: the model's EOS, or its last token
        (as :func:`~ctxleak.engine.streams.take_step` stops)."""
        config = prepared.config
        stopped = entry.token_id in self.lm.eos_ids
        if item.error is not None or item.future.done() or \
                (not stopped and entry.step + 1 < config.max_new_tokens):
            return
        ledger = ledger_of(item.entries, stopped, config)
        try:
            item.future.set_result(finish_answer(self.lm, prepared, ledger))
        except Exception as exc:
            item.fail(exc)
