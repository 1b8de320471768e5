"""Run by tests/served/test_served_plugin.py in the vLLM server's environment (.venv-vllm): the
Model Runner V2 class of ctxleak's CID plugin against vLLM's own V2 interface. It must subclass
that interface, be accepted by vLLM's V2 loader (which refuses the V1 class), and, on one
simulated batch of two requests over six steps, force the same tokens as the V1 class given the
same logits. Prints one JSON line."""

from __future__ import annotations

import json
import os
import tempfile
from types import SimpleNamespace

import numpy as np
import torch
from vllm import SamplingParams
from vllm.v1.sample.logits_processor import BatchUpdate
from vllm.v1.worker.gpu.sample.logits_processor.interface import LogitsContext, LogitsProcessor
from vllm.v1.worker.gpu.sample.logits_processor.loader import _load_v2_logitsprocs_by_fqcns

os.environ["CTXLEAK_VLLM_RECORDS"] = tempfile.mkdtemp()

from ctxleak.plugins.protocol import pair_xargs  # noqa: E402
from ctxleak.plugins.vllm_cid import CIDLogitsProcessor, CIDLogitsProcessorV2  # noqa: E402

V, STEPS = 64, 6
assert issubclass(CIDLogitsProcessorV2, LogitsProcessor)
assert _load_v2_logitsprocs_by_fqcns(["ctxleak.plugins.vllm_cid:CIDLogitsProcessorV2"]) == \
    [CIDLogitsProcessorV2]
try:
    _load_v2_logitsprocs_by_fqcns(["ctxleak.plugins.vllm_cid:CIDLogitsProcessor"])
    raise SystemExit("vLLM's V2 loader took the V1 class")
except ValueError:
    pass

config = SimpleNamespace(
    scheduler_config=SimpleNamespace(enable_chunked_prefill=False, max_num_batched_tokens=8192,
                                     max_num_seqs=8, async_scheduling=False,
                                     scheduler_cls="PairingScheduler"),
    model_config=SimpleNamespace(max_model_len=128))
prompts = [[5, 6, 7, 8, 9], [7, 8, 9]]
xargs = pair_xargs(pair="ab" * 16, context_ids=prompts[0], lam=0.5, temperature=0.8, seed=9,
                   greedy=False, eps=2.0, min_new_tokens=2, stops=[0])
params = SamplingParams(max_tokens=STEPS, temperature=0.0, extra_args=xargs)
CIDLogitsProcessorV2.validate_params(params)

v1 = CIDLogitsProcessor(config, torch.device("cpu"), False)
outs: list[list[int]] = [[], []]
v1.update_state(BatchUpdate(batch_size=2, removed=[], moved=[],
                            added=[(0, params, prompts[0], outs[0]),
                                   (1, params, prompts[1], outs[1])]))

all_ids = torch.zeros((2, 128), dtype=torch.long)
for slot, prompt in enumerate(prompts):
    all_ids[slot, :len(prompt)] = torch.tensor(prompt)
states = SimpleNamespace(prompt_len=SimpleNamespace(np=np.array([5, 3])),
                         total_len=SimpleNamespace(gpu=torch.tensor([5, 3])),
                         all_token_ids=SimpleNamespace(gpu=all_ids))
v2 = CIDLogitsProcessorV2(config, states)
for slot in (1, 0):  # slots in another order than the V1 batch's rows
    assert v2.add_request(slot, params)
v2.apply_staged_writes()

same, steps_run = True, 0
torch.manual_seed(0)
for step in range(STEPS):
    logits = torch.randn(2, V) * 3
    one = v1.apply(logits.clone())
    # V2: rows in slot order 1, 0; each row the request's next token
    totals = states.total_len.gpu
    ctx = LogitsContext(expanded_idx_mapping=torch.tensor([1, 0]), idx_mapping=torch.tensor([1, 0]),
                        idx_mapping_np=np.array([1, 0]), expanded_local_pos=torch.zeros(2),
                        input_ids=torch.zeros(2, dtype=torch.long),
                        pos=torch.tensor([int(totals[1]) - 1, int(totals[0]) - 1]),
                        seq_lens_upper_bound_np=np.array([int(totals[1]), int(totals[0])]))
    two = v2.apply(logits[[1, 0]].clone(), ctx)
    steps_run = step + 1
    t1 = [int(torch.argmax(one[r])) for r in (0, 1)]
    t2 = [int(torch.argmax(two[r])) for r in (1, 0)]
    same &= t1 == t2 and t1[0] == t1[1]
    for slot in (0, 1):
        outs[slot].append(t1[slot])
        all_ids[slot, int(totals[slot])] = t1[slot]
    states.total_len.gpu = totals + 1
    if t1[0] == 0:
        break
print(json.dumps({"same_tokens": bool(same), "steps": steps_run}))
