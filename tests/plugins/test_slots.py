"""The plugin's Model Runner V2 side without vLLM (:mod:`ctxleak.plugins.slots` on the pair
book), over steps played by hand as the V2 runner lays them out (tests/helpers/v2_steps.py):
rows shuffled every step, slots recycled, speculative rows, partial prefills, preemption. Every
answer's records and both streams' tokens equal in-process CID on the same logits (the kernels'
λ-mix, bounded CID's Alg. 1, the seeded draw), every row it forced is that step's one-hot row,
and the rows of plain requests and partial prefills are left as they were; drafts that part an
answer's streams, and a third request on a slot taken as left, void the answer."""

from __future__ import annotations

import pytest
import torch
from helpers import v2_steps
from helpers.v2_steps import STOP, Engine, Req, V, pair_id, pair_of

from ctxleak.plugins.cid_pairs import PairBook
from ctxleak.plugins.protocol import read_settings
from ctxleak.plugins.slots import Layout, SlotRows


class SlotDriver:
    """The V2 processor's calls, on :class:`SlotRows` and a free list of slots."""

    def __init__(self, max_slots: int = 8) -> None:
        self.records: dict[str, dict] = {}
        self.book = PairBook(self.records.__setitem__, {"plugin": "ctxleak-cid"}, vocab=V)
        self.prompt_len: dict[int, int] = {}
        self.prefill_len: dict[int, int] = {}
        self.tokens: dict[int, list[int]] = {}
        self.rows = SlotRows(self.book, self.prompt_len.__getitem__,
                             self.prefill_len.__getitem__)
        self.free = list(range(max_slots))
        self.used: list[int] = []
        self.slots_of: dict[str, list[int]] = {}

    def add(self, req: Req, prefill: list[int]) -> int:
        slot = self.free.pop()
        self.used.append(slot)
        self.slots_of.setdefault(req.name, []).append(slot)
        self.prompt_len[slot], self.prefill_len[slot] = len(req.prompt), len(prefill)
        self.tokens[slot] = list(prefill)
        settings = read_settings(dict(req.xargs)) if req.xargs else None
        assert self.rows.add(slot, settings, req.max_tokens) == (settings is not None)
        return slot

    def remove(self, req: Req) -> None:
        self.free.append(int(req.slot))

    def staged(self) -> None:
        self.rows.admit(lambda slot, n: self.tokens[slot][:n])

    def apply(self, logits, slots, pos, offsets, inputs):
        if not self.rows.wants(slots):
            return logits
        return self.rows.apply(logits, Layout(slots, pos, offsets, inputs))

    def commit(self, req: Req) -> None:
        self.tokens[int(req.slot)] = req.prompt + req.out


def _play(name: str, seed: int = 0, device: str = "cpu", tol: float = 0.0):
    make, slots, voided = v2_steps.SCENARIOS[name]
    reqs = make()
    driver = SlotDriver(slots)
    engine = Engine(reqs, driver, seed=seed, device=device)
    engine.run()
    v2_steps.check(engine, driver.records, voided=voided.__contains__, tol=tol)
    return engine, driver, reqs


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (a vLLM GPU "
                    "server hands the plugin its logits on the GPU)")
@pytest.mark.parametrize("name", sorted(v2_steps.SCENARIOS))
def test_logits_on_a_gpu_decide_the_same_answers(name):
    """The logits on the GPU, as a GPU server hands them over: the same tokens as in-process CID
    on the CPU, its float64 figures within 1e-9 (the GPU's own float64 arithmetic)."""
    _play(name, device="cuda", tol=1e-9)


def test_answers_equal_in_process_cid_with_rows_shuffled_and_slots_recycled():
    engine, driver, _ = _play("shuffled-recycled")
    assert len(driver.used) > len(set(driver.used))  # the late answer took recycled slots
    assert len(engine.truth) == 3


def test_speculative_rows_decide_steps_ahead_while_their_drafts_hold():
    """Steps are decided several at a time, a rejected draft's row is left alone, and the
    answer is in-process CID's; a plain request's drafts are left alone too."""
    engine, driver, _ = _play("speculative")
    steps = len(driver.records[pair_id(4)]["steps"])
    assert len({k for (name, k) in engine.seen if name.endswith("context")}) == steps
    assert engine.most == 4  # a step and its three drafts, all decided in one engine step


def test_partial_prefills_are_left_alone_and_preempted_answers_resume():
    _, driver, reqs = _play("prefill-preempt")
    # the resumed streams came back under other slots than they left (plain-c took one)
    moved = [r.name for r in reqs[2:4] if len(set(driver.slots_of[r.name])) == 2]
    assert moved and all(len(driver.slots_of[r.name]) == 2 for r in reqs[2:4])


def test_drafts_that_part_an_answers_streams_void_it():
    """One stream would take a step its partner cannot: the answer is voided and both
    streams end."""
    _, driver, (ctx, empty) = _play("parting")
    assert "partner stream is missing" in driver.records[pair_id(7)]["error"]
    assert ctx.out[-1] == STOP and empty.out[-1] == STOP


def _admitted(driver, reqs):
    for r in reqs:
        r.slot = driver.add(r, r.prompt)
    driver.staged()


def test_a_request_back_from_preemption_takes_its_role_and_a_third_voids_the_pair():
    driver = SlotDriver()
    ctx, empty = pair_of(pair_id(8), [5, 6, 7], [7], 6, lam=0.5, temperature=0.8, seed=1)
    _admitted(driver, [ctx, empty])
    old = ctx.slot
    again = Req("again", ctx.prompt, 6, ctx.pair, "context", ctx.xargs)
    _admitted(driver, [again])  # the context stream, back under a new slot
    assert old in driver.rows.stale and driver.book.pairs[pair_id(8)].error is None
    assert driver.rows.slots[again.slot].role == "context"
    layout = Layout([old, again.slot, empty.slot], [2, 2, 0], [0, 0, 0], [7, 7, 7])
    logits = driver.rows.apply(v2_steps.logits_of("x", 0).repeat(3, 1), layout)
    assert "third request" in driver.records[pair_id(8)]["error"]
    assert all(int(logits[r].argmax()) == STOP for r in range(3))


def test_two_streams_with_equal_prompts_are_a_pair_not_a_return():
    driver = SlotDriver()
    ctx, empty = pair_of(pair_id(9), [5, 6], [5, 6], 4, lam=0.5, temperature=0.8, seed=1)
    _admitted(driver, [ctx, empty])
    roles = sorted(driver.rows.slots[r.slot].role for r in (ctx, empty))
    assert roles == ["context", "empty"] and not driver.rows.stale
    assert driver.rows.add(ctx.slot, None, 4) is False  # a plain request takes the slot
    assert ctx.slot not in driver.rows.slots
