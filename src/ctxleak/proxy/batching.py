"""The privacy proxy's in-process decoding of concurrent answers together: the answers waiting at
a moment go through the model as one batch, every answer's two streams (with and without the
context) in one batched KV cache, one forward pass per step for all of them (Context Influence
Decoding, Estimating Privacy Leakage of Augmented Contextual Knowledge in Language Models,
Def. 3.4; bounded: App. B, Alg. 1).

Design: a collector. One thread owns the model. It takes the first answer waiting, gathers
those that arrive within :data:`WINDOW_S` (or until the batch holds ``max_batch``), then, once it
holds the model's lock, every answer still waiting too, and answers them all, each group of them
in one call of its mechanism's ``answer_group`` (CID's: every answer under its own λ, ε,
temperature and lengths, in the engine's batched decoding,
:func:`ctxleak.engine.local.generation.decode_streams`). A CID answer that finishes (EOS or its
``max_tokens``) leaves the batch at once, so it stops costing compute, and is returned then
(a streamed one has sent each token as it was drawn). Answers that arrive meanwhile wait and
form the next batch. Answers do not join a batch between its steps:
that would merge a new prefilled cache into the running one (left-padding every layer's keys
and values, the room of :mod:`ctxleak.engine.local.kvroom`, sliding windows, a shared prefix),
a change to the engine's decoding loop that every method relies on, for a gain only when
answers arrive while others are mid-way. A client that sends its next request when its answer
comes back joins the next batch, so closed-loop clients settle into full batches.

Every defence waits in the one queue: the answers of a batch are grouped by their mechanism's
``batch_key`` (every CID answer, whatever its λ, ε, temperature and lengths, in one group of
those that sample and one of those that are greedy; another mechanism's by its key and decoding
settings), and each group goes through one ``answer_group`` call.

What stays equal: each answer draws from its own generator, seeded by its request's seed, so
its tokens are those of the same request decoded alone (up to float noise in the logits, as for
any batch of the engine); its tokens reach its own listener as they are decided, so streaming
works per answer. A failure stays with its answer: an answer whose listener fails, or whose
preparation fails, fails alone while the batch goes on; if the batch itself fails, each answer
that released nothing yet is decoded again alone (so one the mechanism refuses fails alone),
and those that did fail with the batch's error (their released tokens are spent)."""

from __future__ import annotations

import queue
import threading
import time
from collections import Counter
from collections.abc import Hashable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

from ctxleak.engine.lm import LanguageModel
from ctxleak.mitigations.mechanisms import Listener, MechanismAnswer
from ctxleak.proxy.answering import Prepared, Reply, prepare, reply_of
from ctxleak.proxy.chat_request import ChatRequest, Document

#: Seconds the collector waits after the first answer of a batch for more to arrive.
WINDOW_S = 0.005


@dataclass(eq=False)
class _Waiting:
    """One answer waiting to be decoded, and what became of it: the tokens heard so far, and
    the error of its own listener (it then fails alone)."""

    request: ChatRequest
    docs: Sequence[Document]
    listener: Listener | None
    future: Future[Reply] = field(default_factory=Future)
    prepared: Prepared | None = None
    heard: int = 0
    error: BaseException | None = None

    def fail(self, exc: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(exc)

    def finish(self, lm: LanguageModel, answer: MechanismAnswer) -> None:
        """Its reply, unless it failed or was finished as it ended."""
        if self.future.done():
            return
        if self.error is not None:
            self.fail(self.error)
            return
        assert self.prepared is not None
        try:
            self.future.set_result(reply_of(lm, self.prepared, answer))
        except Exception as exc:
            self.fail(exc)


class _Heard:
    """The listener of one group's ``answer_group`` call: each answer's tokens to its own
    listener (one that fails fails its answer alone), each answer returned as it ends."""

    def __init__(self, lm: LanguageModel, group: list[_Waiting]) -> None:
        self.lm, self.group = lm, group

    def token(self, k: int, token_id: int, spent: float | None) -> None:
        item = self.group[k]
        item.heard += 1
        if item.error is not None or item.listener is None:
            return
        try:
            item.listener.token(0, token_id, spent)
        except Exception as exc:  # the answer's own failure: the batch goes on without it
            item.error = exc

    def done(self, k: int, answer: MechanismAnswer) -> None:
        if self.group[k].error is None:
            self.group[k].finish(self.lm, answer)


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
        self._queue: queue.Queue[_Waiting | None] = queue.Queue()
        self._pending, self._counting = 0, threading.Lock()
        self._thread = threading.Thread(target=self._serve, name="ctxleak-batch-decoder",
                                        daemon=True)
        self._thread.start()

    def answer(self, request: ChatRequest, docs: Sequence[Document],
               listener: Listener | None = None) -> Reply:
        """The answer of ``request`` by its mechanism with ``docs`` as its documents, in one
        ``answer_group`` call with the answers other threads are waiting for that its
        mechanism may decode together; ``listener`` hears its tokens as they are decided (in
        the decoder's thread). Raises what its decoding raised."""
        waiting = _Waiting(request, docs, listener)
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

    def _more(self, batch: list[_Waiting], seconds: float) -> bool:
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

    def _run(self, batch: list[_Waiting]) -> None:
        """Prepare each answer (one failing fails alone), then answer each group of its
        mechanism's ``batch_key`` in one ``answer_group`` call."""
        groups: dict[Hashable, list[_Waiting]] = {}
        for item in batch:
            try:
                item.prepared = prepare(self.lm, item.request, item.docs)
            except Exception as exc:
                item.fail(exc)
                continue
            groups.setdefault(item.prepared.group, []).append(item)
        for group in groups.values():
            self.sizes[len(group)] += 1
            self._answer(group)

    def _answer(self, group: list[_Waiting]) -> None:
        """One ``answer_group`` call for ``group``, each answer's tokens to its own listener
        as they are decided; each answer's future gets its reply or its error. If the call
        fails, each answer that released nothing is answered again alone, those that did fail
        with its error (their released tokens are spent)."""
        prepared = [item.prepared for item in group if item.prepared is not None]
        first = prepared[0].mechanism
        try:
            answers = first.answer_group(self.lm, [p.asked for p in prepared],
                                         _Heard(self.lm, group))
        except Exception as exc:
            for item in group:
                if item.heard or item.error is not None or len(group) == 1:
                    item.fail(item.error or exc)
                else:
                    self._answer([item])
            return
        for item, answer in zip(group, answers):
            item.finish(self.lm, answer)
