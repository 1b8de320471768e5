"""What every model command does around its method: open the run directory, load the model,
loop over examples with a progress bar (skipping finished ones on resume), and finish with
``results.json`` and the report."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from ctxleak.cli.options import CommonOptions
from ctxleak.errors import ConfigError
from ctxleak.run.distributed import barrier, current_world, init_distributed, local_device
from ctxleak.run.rundir import INPUTS_KEY, RunDir, input_hashes


def default_output(command: str) -> str:
    return str(Path("runs") / f"{command}-{time.strftime('%Y%m%d-%H%M%S')}")


def open_run(command: str, common: CommonOptions, config: dict[str, Any], *,
             private: bool = True, inputs: dict[str, Any] | None = None) -> RunDir:
    """The run directory with the full config (common flags included) stored for resume, and
    the SHA-256 of each input file (``inputs``: ``{"data": path}``) that ``--resume`` checks.
    Folders are 0700 and files 0600 unless ``private=False`` (commands that read no user text).

    Under ``torchrun``/``accelerate launch`` this joins the process group first; every process
    must then be given the same ``--output`` (the default name is not shared between them).
    """
    world = init_distributed(local_device(common.device, current_world()))
    if world.distributed and not common.output:
        from ctxleak.errors import ConfigError

        raise ConfigError("a data-parallel run needs --output (the same for every process)")
    output = common.output or default_output(command)
    full = {"command": command, **common.to_dict(), **config, "output": output}
    if inputs:
        full[INPUTS_KEY] = input_hashes(inputs)
    run = RunDir(output, full, resume=common.resume, private=private, world=world)
    global _CURRENT_RUN
    _CURRENT_RUN = run
    return run


_CURRENT_RUN: RunDir | None = None


def interrupted_message() -> str:
    """What Ctrl-C kept and how to go on: the run folder, its finished rows, the resume flags."""
    run = _CURRENT_RUN
    if run is None:
        return "interrupted before any run folder was written; nothing was kept"
    return (f"interrupted: {len(run.samples)} finished example(s) are saved in {run.path}; "
            f"rerun the same command with --resume --output {run.path} to continue")


def load_lm(common: CommonOptions):
    from ctxleak.engine.models import load_model

    if common.threads is not None:
        import torch

        if common.threads < 1:
            from ctxleak.errors import ConfigError

            raise ConfigError(f"--threads must be at least 1, got {common.threads}")
        torch.set_num_threads(common.threads)
    t0 = time.time()
    device = local_device(common.device, current_world())
    lm = load_model(common.model, device=device, dtype=common.dtype,
                    chat_template=common.chat_template,
                    trust_remote_code=common.trust_remote_code, device_map=common.device_map)
    say(f"model {lm.info.name} on {lm.info.device} ({lm.info.dtype}) in {time.time() - t0:.1f}s")
    return lm


def format_cell(value: Any) -> str:
    """A value for a printed table: 4 significant digits, a dash for missing."""
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def say(message: str) -> None:
    print(f"[ctxleak] {message}", file=sys.stderr, flush=True)


def run_examples(run: RunDir, items: Sequence[Any], key: Callable[[Any], str],
                 work: Callable[[int, Any], dict[str, Any]], *, desc: str) -> list[dict]:
    """Call ``work(index, item)`` for each item not yet in the samples and append its record
    (with ``id``); return all records, earlier ones included, in item order.

    In a data-parallel run each process takes the items ``index % size == rank``, then waits
    for the others; every process returns the merged records and rank 0 writes the merged
    ``samples.jsonl`` (callers let only rank 0 write results: see :func:`is_main`).
    """
    from tqdm.auto import tqdm

    world = run.world
    keys = [key(item) for item in items]
    if len(set(keys)) != len(keys):  # two items would be stored under one id
        repeated = next(k for k in keys if keys.count(k) > 1)
        raise ConfigError(f"two examples have the id {repeated!r}: ids must be unique")
    done = run.done_keys("id")
    mine = [(i, item) for i, item in enumerate(items) if world.owns(i)]
    todo = [(i, item) for i, item in mine if key(item) not in done]
    if len(todo) < len(mine):
        say(f"resuming: {len(mine) - len(todo)} of {len(mine)} examples already done")
    label = desc if not world.distributed else f"{desc} [rank {world.rank}/{world.size}]"
    for i, item in tqdm(todo, desc=label, unit="ex", file=sys.stderr, dynamic_ncols=True):
        record = work(i, item)
        record = {"id": key(item), **record}
        run.append_sample(record)
    if world.distributed:
        run.close()
        barrier()
        run.reload()
    if world.is_main and (world.distributed or run.has_shards()):
        # also when one process resumes a data-parallel run: samples.jsonl gets every row
        run.close()
        run.merge_shards([key(item) for item in items])
    by_id = {row["id"]: row for row in run.samples}
    return [by_id[key(item)] for item in items if key(item) in by_id]


def is_main(run: RunDir) -> bool:
    """Whether this process writes results and reports (always, outside data-parallel runs)."""
    return run.world.is_main


def iter_limit(rows: Iterable[Any], limit: int | None) -> list[Any]:
    rows = list(rows)
    return rows if limit is None else rows[:limit]
