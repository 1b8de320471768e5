"""``run_method``: the one loop under every method (SPEC §11). It owns the run directory
(claim, ``config.json``, resume), the model load, data-parallel sharding and merging, the
progress bar, ``results.json``, the extra files and the report; the method only measures.

Data flows one way: data -> ``Method.items`` -> batches -> ``Method.measure`` -> records appended
to ``samples.jsonl`` -> ``Method.summarize`` -> :class:`ctxleak.results.Result` -> report.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ctxleak.run.method import Method
from ctxleak.run.options import RunOptions
from ctxleak.run.rundir import os_errors


def say(message: str) -> None:
    """A progress line on stderr (the console's stdout is for results)."""
    print(f"[ctxleak] {message}", file=sys.stderr, flush=True)


def default_output(command: str) -> str:
    return str(Path("runs") / f"{command}-{time.strftime('%Y%m%d-%H%M%S')}")


_CURRENT_RUN: Any = None  # the run folder of this process's latest run (for Ctrl-C)


def interrupted_message() -> str:
    """What Ctrl-C kept and how to go on: the run folder, its finished rows, the resume flags."""
    run = _CURRENT_RUN
    if run is None:
        return "interrupted before any run folder was written; nothing was kept"
    return (f"interrupted: {len(run.samples)} finished example(s) are saved in {run.path}; "
            f"rerun the same command with --resume --output {run.path} to continue")


def open_run(command: str, common: RunOptions, config: dict[str, Any], *,
             private: bool = True, inputs: dict[str, Any] | None = None) -> Any:
    """The run directory with the full config (run options included) stored for resume, and
    the SHA-256 of each input file (``inputs``: ``{"data": path}``) and of each model file
    (:func:`ctxleak.engine.models.model_fingerprint`) that resume checks.
    Folders are 0700 and files 0600 unless ``private=False`` (runs that read no user text).

    Under ``torchrun``/``accelerate launch`` this joins the process group first; every process
    must then be given the same ``output`` (the default name is not shared between them).
    """
    global _CURRENT_RUN
    from ctxleak.engine.models import model_fingerprint
    from ctxleak.errors import ConfigError
    from ctxleak.run.distributed import current_world, init_distributed, local_device
    from ctxleak.run.rundir import INPUTS_KEY, MODEL_KEY, RunDir, input_hashes

    world = init_distributed(local_device(common.device, current_world()))
    if world.distributed and not common.output:
        raise ConfigError("a data-parallel run needs output (the same for every process)",
                          param="output")
    output = common.output or default_output(command)
    full = {"command": command, **common.to_dict(), **config, "output": output}
    if inputs:  # files by their bytes, rows given in memory by their canonical JSON lines
        from ctxleak.run.inputs import rows_sha256

        files = {k: v for k, v in inputs.items() if isinstance(v, (str, Path))}
        full[INPUTS_KEY] = {**input_hashes(files), **{
            k: rows_sha256(v) for k, v in inputs.items()
            if v is not None and not isinstance(v, (str, Path))}}
    model_files = model_fingerprint(common.model)  # resume refuses other weights
    if model_files:
        full[MODEL_KEY] = model_files
    _CURRENT_RUN = RunDir(output, full, resume=common.resume, private=private, world=world)
    return _CURRENT_RUN


def load_lm(common: RunOptions) -> Any:
    """Load ``common.model`` on this process's device (torch threads set first)."""
    from ctxleak.engine.models import load_model
    from ctxleak.run.distributed import current_world, local_device

    common.check()
    if common.threads is not None:
        import torch

        torch.set_num_threads(common.threads)
    t0 = time.time()
    device = local_device(common.device, current_world())
    lm = load_model(common.model, device=device, dtype=common.dtype,
                    chat_template=common.chat_template,
                    trust_remote_code=common.trust_remote_code, device_map=common.device_map)
    say(f"model {lm.info.name} on {lm.info.device} ({lm.info.dtype}) in {time.time() - t0:.1f}s")
    return lm


def is_lm(model: Any) -> bool:
    """Whether ``model`` is a loaded :class:`ctxleak.engine.models.LM` (not a name or path)."""
    return hasattr(model, "info") and hasattr(model, "model") and hasattr(model, "tokenizer")


def check_unique_keys(method: Method, items: Sequence[Any]) -> None:
    """Two items stored under one id would overwrite each other: refused (before any model is
    loaded, when :func:`run_method` calls it)."""
    from ctxleak.errors import ConfigError

    seen: set[Any] = set()
    for item in items:
        key = method.key(item)
        if key in seen:
            raise ConfigError(f"two examples have the id {key!r}: ids must be unique")
        seen.add(key)


def measure_items(run: Any, method: Method, lm: Any, items: Sequence[Any], *,
                  progress: bool = True) -> list[dict[str, Any]]:
    """Measure every item not yet in the samples, in the method's batches, appending each
    record (with its ``id``) as it comes; return all records, earlier ones included, in item
    order.

    In a data-parallel run each process takes the items ``index % size == rank``, then waits
    for the others; every process returns the merged records and rank 0 writes the merged
    ``samples.jsonl``.
    """
    from tqdm.auto import tqdm

    from ctxleak.run.distributed import barrier

    world = run.world
    check_unique_keys(method, items)
    done = run.done_keys("id")
    mine = [item for i, item in enumerate(items) if world.owns(i)]
    todo = [item for item in mine if method.key(item) not in done]
    if len(todo) < len(mine):
        say(f"resuming: {len(mine) - len(todo)} of {len(mine)} examples already done")
    label = method.desc if not world.distributed else \
        f"{method.desc} [rank {world.rank}/{world.size}]"
    with tqdm(total=len(todo), desc=label, unit="ex", file=sys.stderr, dynamic_ncols=True,
              disable=not progress) as bar:
        method.device = str(getattr(lm.device, "type", lm.device)) if lm is not None else "cpu"
        for batch in method.batches(todo):
            for item, record in measure_batch(method, lm, batch):
                run.append_sample({"id": method.key(item), **record})
                bar.update(1)
    if world.distributed:
        run.close()
        barrier()
        run.reload()
    if world.is_main and (world.distributed or run.has_shards()):
        # also when one process resumes a data-parallel run: samples.jsonl gets every row
        run.close()
        run.merge_shards([method.key(item) for item in items])
    by_id = {row["id"]: row for row in run.samples}
    return [by_id[method.key(item)] for item in items if method.key(item) in by_id]


def measure_batch(method: Method, lm: Any, batch: list[Any]) -> list[tuple[Any, dict[str, Any]]]:
    """``(item, record)`` for each item of ``batch``, measured together. Under ``batch_size``
    ``auto`` a batch that runs out of memory is halved (and later batches capped at that size
    through ``method.max_in_flight``) until it fits, the engine's back-off one level up."""
    from ctxleak.engine.batching import is_out_of_memory, parse_batch_size

    try:
        records = method.measure(lm, batch)
    except Exception as exc:
        if (not is_out_of_memory(exc) or len(batch) == 1
                or parse_batch_size(method.common.batch_size) is not None):
            raise
        half = len(batch) // 2
        method.max_in_flight = half
        say(f"out of memory with {len(batch)} examples in flight; retrying with {half}")
        _free_accelerator_memory()
        return measure_batch(method, lm, batch[:half]) + measure_batch(method, lm, batch[half:])
    if len(records) != len(batch):
        raise RuntimeError(f"{type(method).__name__}.measure returned {len(records)} "
                           f"records for {len(batch)} items")
    return list(zip(batch, records))


def _free_accelerator_memory() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def run_method(method: Method, lm: Any = None, data: Any = None, output: str | None = None,
               resume: bool | None = None, progress: bool = True) -> Any:
    """Run ``method`` on ``data`` with the model ``lm`` and return its Result.

    ``lm``: a loaded LM, or None to load ``method.common.model`` (after the data are checked).
    ``output``/``resume`` override the method's run options. Every process of a data-parallel
    launch calls this; only rank 0 gets the Result (the others get None).
    """
    from ctxleak.run.provenance import provenance

    common = method.common
    if output is not None or resume is not None:
        common = replace(common, output=output if output is not None else common.output,
                         resume=bool(resume) if resume is not None else common.resume)
    if lm is not None and is_lm(lm):
        common = replace(common, model=lm.info.name)
    method.common = common
    items = method.items(data)  # checked before any model is loaded
    check_unique_keys(method, items)
    run = open_run(method.name, common, method.config(), private=method.private,
                   inputs=method.inputs())
    with run:
        if lm is None or not is_lm(lm):
            lm = load_lm(replace(common, **method.load_options()))
        method.setup(lm, run)
        records = measure_items(run, method, lm, items, progress=progress)
    if not run.world.is_main:
        return None
    summary = method.summarize(records)
    prov = provenance(lm, **method.provenance_extra(lm))
    result = method.result_class(records=records, summary=summary, config=run.config,
                                 provenance=prov, path=run.path)
    for name, content in method.artifacts(result, lm).items():
        run.write_file(name, content)
        if isinstance(content, bytes):
            result.images[name] = content
    body = run.write_results(summary, provenance=prov, n_effective=len(records),
                             sample_ids=[r["id"] for r in records])
    result.n_effective, result.wall_time_s = len(records), _wall_time(body)
    report = method.report(result, lm)
    with os_errors(run.path / "report.html", "write", kept=run.kept()):
        report.save(run.path / "report.html", mode=run.file_mode)
    result.html = report.render()
    return result


def _wall_time(results_path: Path) -> float | None:
    import json

    try:
        wall: float | None = json.loads(Path(results_path).read_text(encoding="utf-8")
                                        ).get("wall_time_s")
        return wall
    except (OSError, ValueError):
        return None
