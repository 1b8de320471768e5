"""Run by tests/served/test_served_plugin_contracts.py in the vLLM server's environment (.venv-vllm):
ctxleak's CID plugin against vLLM's own code for both model runners.

- **Loading**: vLLM's V1 loader and its Model Runner V2 loader both take
  ``ctxleak.plugins.vllm_cid:CIDLogitsProcessor`` (one flag for either runner) and build it
  (``build_logitsprocs``, ``build_custom_logits_processors``); the V2-only name
  ``CIDLogitsProcessorV2`` is taken by the V2 loader and refused by the V1 runner with an error
  that names the class to use; V2's admission check (``validate_params`` through
  ``build_custom_logits_processors_params_validator``) refuses a bad setting.
- **Decoding on Model Runner V2**: the processor vLLM's V2 loader built, on vLLM's own
  ``RequestState`` (its slots recycled through its free list) and a ``LogitsContext`` per step,
  plays the steps of tests/helpers/v2_steps.py: rows reordered every step, recycled slots,
  speculative rows, partial prefills, preemption. Every answer's records and tokens equal
  in-process CID on the same logits (ctxleak's kernels), and equal what the V1 processor, built
  by vLLM's V1 loader and run on the same logits, records and forces, row for row.

The CPU build has neither pinned memory nor Triton: the runner's buffers are made as vLLM makes
them where pinned memory is missing, and its staged writes are applied with plain torch. Prints
one JSON line.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for helpers.v2_steps
os.environ["CTXLEAK_VLLM_RECORDS"] = tempfile.mkdtemp()

import vllm.v1.worker.gpu.buffer_utils as buffer_utils  # noqa: E402

buffer_utils.is_uva_available = lambda: False  # type: ignore[assignment]


def _apply_write(self) -> None:
    """``StagedWriteTensor.apply_write`` in plain torch (vLLM's is a Triton kernel)."""
    at = 0
    for index, start, end in zip(self._staged_write_indices, self._staged_write_starts,
                                 self._staged_write_cu_lens):
        chunk = torch.tensor(self._staged_write_contents[at:end], dtype=self.gpu.dtype)
        if self.gpu.dim() == 1:
            self.gpu[index] = chunk[0]
        else:
            self.gpu[index, start:start + len(chunk)] = chunk
        at = end
    self.clear_staged_writes()


buffer_utils.StagedWriteTensor.apply_write = _apply_write  # type: ignore[method-assign]

from helpers import v2_steps  # noqa: E402
from helpers.v2_steps import Engine, Req, V, logits_of  # noqa: E402
from vllm import SamplingParams  # noqa: E402
from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig  # noqa: E402
from vllm.exceptions import VLLMValidationError  # noqa: E402
from vllm.v1.sample.logits_processor import BatchUpdate, build_logitsprocs  # noqa: E402
from vllm.v1.worker.gpu.sample.logits_processor import (  # noqa: E402
    LogitsContext,
    build_custom_logits_processors,
    build_custom_logits_processors_params_validator,
)
from vllm.v1.worker.gpu.states import RequestState  # noqa: E402

from ctxleak.plugins.protocol import RecordsFolder  # noqa: E402
from ctxleak.plugins.vllm_cid import CIDLogitsProcessor, WrongRunnerError  # noqa: E402

ONE = "ctxleak.plugins.vllm_cid:CIDLogitsProcessor"
V2_ONLY = "ctxleak.plugins.vllm_cid:CIDLogitsProcessorV2"
CPU = torch.device("cpu")


def tiny_config() -> VllmConfig:
    """A server config on a one-layer Llama of :data:`V` tokens (only its config.json)."""
    folder = Path(tempfile.mkdtemp())
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 16,
        "intermediate_size": 32, "num_attention_heads": 2, "num_key_value_heads": 2,
        "num_hidden_layers": 1, "vocab_size": V, "max_position_embeddings": 256,
        "rms_norm_eps": 1e-5, "torch_dtype": "float32"}))
    model = ModelConfig(model=str(folder), skip_tokenizer_init=True, dtype="float32",
                        max_model_len=128)
    sched = SchedulerConfig(max_num_seqs=16, max_num_batched_tokens=1024, max_model_len=128,
                            enable_chunked_prefill=False, is_encoder_decoder=False)
    return VllmConfig(model_config=model, scheduler_config=sched,
                      cache_config=CacheConfig(block_size=16))


def records_in(folder: str, pairs) -> dict:
    os.environ["CTXLEAK_VLLM_RECORDS"] = folder
    return {p: RecordsFolder(create=False).read(p) for p in pairs}


class V2Driver:
    """The calls Model Runner V2 makes, on the processor its loader builds."""

    def __init__(self, config: VllmConfig, slots: int) -> None:
        self.folder = tempfile.mkdtemp()
        os.environ["CTXLEAK_VLLM_RECORDS"] = self.folder
        self.states = RequestState(slots, 128, 1024, 3, V, CPU)
        [self.proc] = build_custom_logits_processors(config, self.states, False, [ONE])
        self.check = build_custom_logits_processors_params_validator([ONE])
        self.ids: dict[str, str] = {}
        self.count = 0

    def add(self, req: Req, prefill: list[int]) -> int:
        self.count += 1
        rid = self.ids[req.name] = f"{req.name}#{self.count}"
        self.states.add_request(rid, len(req.prompt), prefill, 0, req.max_tokens)
        params = SamplingParams(max_tokens=req.max_tokens, temperature=0.0,
                                extra_args=req.xargs)
        self.check(params)
        slot = self.states.req_id_to_index[rid]
        assert self.proc.add_request(slot, params) == (req.xargs is not None)
        return slot

    def remove(self, req: Req) -> None:
        self.states.remove_request(self.ids.pop(req.name))

    def staged(self) -> None:
        self.states.apply_staged_writes()
        self.proc.apply_staged_writes()

    def apply(self, logits, slots, pos, offsets, inputs):
        order = list(dict.fromkeys(slots))
        ctx = LogitsContext(
            expanded_idx_mapping=torch.tensor(slots), idx_mapping=torch.tensor(order),
            idx_mapping_np=np.array(order), expanded_local_pos=torch.tensor(offsets),
            input_ids=torch.tensor(inputs), pos=torch.tensor(pos),
            seq_lens_upper_bound_np=np.array([max(p for s, p in zip(slots, pos) if s == o) + 1
                                              for o in order]))
        return self.proc.apply(logits, ctx)

    def commit(self, req: Req) -> None:
        tokens = req.prompt + req.out
        self.states.all_token_ids.gpu[req.slot, :len(tokens)] = torch.tensor(tokens)
        self.states.total_len.gpu[req.slot] = len(tokens)


def v1_run(config: VllmConfig, reqs: list[Req]) -> tuple[dict, dict]:
    """The pairs of ``reqs`` on the V1 processor vLLM's V1 loader builds, one row per request
    and step in a fixed order: its records and its output row per (request, step)."""
    folder = tempfile.mkdtemp()
    os.environ["CTXLEAK_VLLM_RECORDS"] = folder
    procs = build_logitsprocs(config, CPU, False, False, [ONE])
    [proc] = [p for p in procs.all if isinstance(p, CIDLogitsProcessor)]
    pairs = [r for r in reqs if r.pair is not None]
    outs: list[list[int]] = [[] for _ in pairs]
    params = [SamplingParams(max_tokens=r.max_tokens, temperature=0.0, extra_args=r.xargs)
              for r in pairs]
    proc.update_state(BatchUpdate(batch_size=len(pairs), removed=[], moved=[], added=[
        (i, params[i], r.prompt, outs[i]) for i, r in enumerate(pairs)]))
    rows: dict[tuple[str, int], torch.Tensor] = {}
    live = set(range(len(pairs)))
    while live:
        logits = torch.stack([logits_of(r.name, len(outs[i])) for i, r in enumerate(pairs)])
        got = proc.apply(logits.clone())
        ended = []
        for i in sorted(live):
            rows[(pairs[i].name, len(outs[i]))] = got[i].clone()
            outs[i].append(int(torch.argmax(got[i])))
            if outs[i][-1] == v2_steps.STOP or len(outs[i]) >= pairs[i].max_tokens:
                ended.append(i)
        live -= set(ended)
        if ended:
            proc.update_state(BatchUpdate(batch_size=len(pairs), removed=ended, moved=[],
                                          added=[]))
    return records_in(folder, {r.pair for r in pairs}), rows


def loaders(config: VllmConfig) -> str:
    """The loading contract (module docstring); the V1 runner's refusal of the V2 name."""
    from vllm.v1.worker.gpu.sample.logits_processor.loader import (
        _load_v2_logitsprocs_by_fqcns,
    )

    assert _load_v2_logitsprocs_by_fqcns([ONE, V2_ONLY])[0] is CIDLogitsProcessor
    check = build_custom_logits_processors_params_validator([ONE])
    bad = v2_steps.pair_of(v2_steps.pair_id(1), [5, 6], [6], 4, lam=0.5, temperature=0.8,
                           seed=1)[0].xargs
    try:
        check(SamplingParams(max_tokens=4, extra_args={**(bad or {}), "ctxleak_lam": 2.0}))
        raise SystemExit("V2's admission check took λ = 2")
    except VLLMValidationError as exc:
        assert "ctxleak_lam" in str(exc)
    try:
        build_logitsprocs(config, CPU, False, False, [V2_ONLY])
        raise SystemExit("the V1 runner built the V2-only class")
    except WrongRunnerError as exc:
        return str(exc)


def main() -> None:
    config = tiny_config()
    summary: dict = {"refusal": loaders(config), "scenarios": {}}
    for name, (make, slots, voided) in v2_steps.SCENARIOS.items():
        driver = V2Driver(config, slots)
        reqs = make()
        engine = Engine(reqs, driver, seed=len(name))
        engine.run()
        records = records_in(driver.folder, engine.truth)
        v2_steps.check(engine, records, voided=voided.__contains__)
        v1_records, v1_rows = v1_run(config, make())
        for pair, steps in engine.truth.items():
            if pair not in voided:
                assert v1_records[pair]["steps"] == records[pair]["steps"] == steps
                assert records[pair]["server"]["runner"] == "v2"
                assert v1_records[pair]["server"]["runner"] == "v1"
        pair_of_name = {r.name: r.pair for r in reqs}
        same = [key for key in engine.seen
                if key in v1_rows and pair_of_name[key[0]] not in voided]
        assert all(torch.equal(engine.seen[k], v1_rows[k]) for k in same)
        summary["scenarios"][name] = {"answers": len(engine.truth), "voided": len(voided),
                                      "rows_compared_with_v1": len(same),
                                      "most_tokens_in_one_step": engine.most}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
