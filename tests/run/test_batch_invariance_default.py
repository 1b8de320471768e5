"""Batch invariance on the default model : the README's main job settings
(``ngram=32``) on a few demo examples give a byte-identical samples.jsonl one example at a time
and under ``batch_size="auto"``; so do ICL queries, susceptibility queries and DP-audit
sequences at 1 and 3 examples per batch. On this model float32 passes shared across examples do
move the last digits (``batch_invariant=False``: shown on the ICL queries), so these tests fail
without the option."""

from __future__ import annotations

import pytest
from helpers.rundiff import untimed_samples

import ctxleak

pytestmark = pytest.mark.integration


def test_readme_main_job_byte_identical_one_at_a_time_and_auto(default_lm, tmp_path):
    runs = {}
    for size in (1, "auto"):
        out = tmp_path / f"b{size}"
        # the main job's windows on shorter answers: the same passes, batched alike
        ctxleak.influence(default_lm, "demo", ngram=32, limit=2, max_new_tokens=16,
                          batch_size=size, output=str(out), progress=False)
        runs[size] = (out / "samples.jsonl").read_bytes()
    assert len(runs[1].splitlines()) == 2
    assert runs["auto"] == runs[1]


METHODS = {
    "icl": lambda lm, **kw: ctxleak.iclinf(lm, "demo", shots=2, queries=3, **kw),
    "audit": lambda lm, **kw: ctxleak.audit(lm, "demo", subset_size=3, sequences=3, max_new_tokens=6,
                                            min_new_tokens=2, target_eps=[100.0], **kw),
    "susceptibility": lambda lm, **kw: ctxleak.susceptibility(lm, "demo", contexts=8,
                                                              entity_contexts=2, limit=3, **kw),
}
# where sharing passes across examples was seen to change the floats on this model
#: The method whose run without the option shows the float noise the option removes (one is
#: enough to show the comparison can fail on this model; the audit's showed it too, at twice the
#: cost of its byte-identical check).
NOISY_WITHOUT = {"icl"}


@pytest.mark.parametrize("method", sorted(METHODS))
def test_byte_identical_at_1_and_3_examples_per_batch(method, default_lm, tmp_path):
    runs = {}
    # without the option only where it was seen to matter: elsewhere nothing is asserted of it
    for invariant in (True, False) if method in NOISY_WITHOUT else (True,):
        for size in (1, 3):
            out = tmp_path / f"b{size}-{invariant}"
            METHODS[method](default_lm, batch_size=size, batch_invariant=invariant,
                            output=str(out), progress=False)
            runs[size, invariant] = untimed_samples(out)
    assert len(runs[1, True]) >= 3
    assert runs[3, True] == runs[1, True]
    if method in NOISY_WITHOUT:  # the float noise the option removes
        assert runs[3, False] != runs[1, False]
