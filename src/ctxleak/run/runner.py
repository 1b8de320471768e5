"""``run_method``: the one loop under every method. It owns the run directory
(claim, ``config.json``, resume), the model load, data-parallel sharding and merging and the
progress bar, and returns plain data (:class:`~ctxleak.run.output.RunOutput`); the method only
measures. It never reaches up: the face that called it hands the output to
:func:`ctxleak.results.finish_run` for the Result, ``results.json`` and the report.

Data flows one way: data -> ``Method.plan`` -> batches -> ``Method.measure`` -> records appended
to ``samples.jsonl`` -> ``Method.summarize`` -> RunOutput (-> Result -> report, above this layer).
"""

from __future__ import annotations

import sqlite3
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import torch

from ctxleak.domains import whole
from ctxleak.engine.batching import BatchPolicy, is_out_of_memory, using
from ctxleak.engine.capabilities import Backend, backend_of, check_capabilities
from ctxleak.engine.lm import LanguageModel
from ctxleak.engine.progress import counting
from ctxleak.errors import ConfigError, InputError
from ctxleak.kernels.draw import DRAW
from ctxleak.run.distributed import barrier, current_world, init_distributed, local_device
from ctxleak.run.inputs import rows_sha256
from ctxleak.run.method import Method
from ctxleak.run.options import RunOptions
from ctxleak.run.output import RunOutput
from ctxleak.run.progress import RunProgress
from ctxleak.run.rundir import (
    DRAW_KEY,
    INPUTS_KEY,
    KEY_FIELD,
    MODEL_KEY,
    TARGET_KEY,
    RunDir,
    input_hashes,
)
from ctxleak.run.samples import RowCheck, Scrubbing
from ctxleak.run.stored import StoredRows
from ctxleak.targets.base import CAPABILITIES, Target, TargetError, is_target
from ctxleak.targets.journal import JOURNAL_FILE, AnswerJournal, JournaledTarget, cost_line

#: What a Method runs over: a model (any backend) or a target that only answers questions.
Over = LanguageModel | Target


def say(message: str) -> None:
    """A progress line on stderr (the console's stdout is for results)."""
    print(f"[ctxleak] {message}", file=sys.stderr, flush=True)


def default_output(command: str) -> str:
    return str(Path("runs") / f"{command}-{time.strftime('%Y%m%d-%H%M%S')}")


def interrupted_message(exc: BaseException | None = None) -> str:
    """What Ctrl-C kept and how to go on: the run folder carried by ``exc`` (or by an exception
    it was raised from or while handling; a :class:`~ctxleak.run.rundir.RunDir` names itself
    in the interrupt that leaves it), its finished rows, the resume flags."""
    run, seen, link = None, set(), exc
    while link is not None and id(link) not in seen and run is None:
        run = getattr(link, "run", None)
        seen.add(id(link))
        link = link.__cause__ or link.__context__
    if run is None:
        return "interrupted before any run folder was written; nothing was kept"
    kept = f"{run.count} finished example(s)"
    journal = Path(run.path) / JOURNAL_FILE
    if journal.is_file():  # an attack's: the target's answers are kept before their records
        try:
            with AnswerJournal(journal) as answers:
                held = answers.total()
        except (InputError, sqlite3.Error):  # unreadable: the message says what it can
            held = None
        if held is not None:
            kept += f" and {held} answer(s) of the target (none is asked again)"
    return (f"interrupted: {kept} are saved in {run.path}; "
            f"rerun the same command with --resume --output {run.path} to continue")


def open_run(command: str, common: RunOptions, config: dict[str, Any], *,
             private: bool = True, inputs: dict[str, Any] | None = None,
             check_row: RowCheck | None = None, scrubber: Scrubbing | None = None) -> Any:
    """The run directory with the full config (run options included) stored for resume, and
    the SHA-256 of each input file (``inputs``: ``{"data": path}``) and of each model file
    (:func:`ctxleak.engine.models.model_fingerprint`) that resume checks.
    Folders are 0700 and files 0600 unless ``private=False`` (runs that read no user text).

    Under ``torchrun``/``accelerate launch`` this joins the process group first; every process
    must then be given the same ``output`` (the default name is not shared between them).
    ``check_row``: the method's check of a stored row, run on each one a resume reads.
    ``scrubber``: the full config -> what each record goes through before it is written (the
    face's masking of the run's secrets), or None.
    """
    # lazy: the CLI imports this module at startup, and engine.models imports transformers
    # (seconds); tests also replace models.load_model
    from ctxleak.engine.models import model_fingerprint

    world = init_distributed(local_device(common.device, current_world()))
    if world.distributed and not common.output:
        raise ConfigError("a data-parallel run needs output (the same for every process)",
                          param="output")
    output = common.output or default_output(command)
    full = {"command": command, **common.to_dict(), **config, "output": output}
    if TARGET_KEY not in config:  # resume refuses another seeded draw: two would mix (a
        full[DRAW_KEY] = DRAW     # target's journaled answers stay whatever ctxleak draws)
    if inputs:  # files by their bytes, rows given in memory by their canonical JSON lines
        files = {k: v for k, v in inputs.items() if isinstance(v, (str, Path))}
        full[INPUTS_KEY] = {**input_hashes(files), **{
            k: rows_sha256(v) for k, v in inputs.items()
            if v is not None and not isinstance(v, (str, Path))}}
    # resume refuses other weights (a served model's are the server's: not fingerprinted)
    model_files = model_fingerprint(common.model, common.server_url)
    if model_files:
        full[MODEL_KEY] = model_files
    scrub = scrubber(full) if scrubber is not None else None
    return RunDir(output, full, resume=common.resume, private=private, world=world,
                  check_row=check_row, scrub=scrub)


def load_lm(common: RunOptions) -> LanguageModel:
    """Load ``common.model`` on this process's device (torch threads set first), or connect to
    the server that serves it (``common.server_url``): :func:`ctxleak.engine.models.load_model`,
    the one road from a model argument to a backend."""
    from ctxleak.engine.models import load_model  # lazy, as in open_run: no transformers at CLI start

    common.check()
    if common.threads is not None:
        torch.set_num_threads(common.threads)
    t0 = time.time()
    lm = load_model(common.model, device=local_device(common.device, current_world()),
                    dtype=common.dtype, chat_template=common.chat_template,
                    trust_remote_code=common.trust_remote_code, device_map=common.device_map,
                    revision=common.revision, model_args=common.model_args,
                    server_url=common.server_url, served_model=common.served_model,
                    tokenizer=common.tokenizer, request_timeout=common.request_timeout,
                    retries=common.retries)
    say(f"{lm.describe()} in {time.time() - t0:.1f}s")
    return lm


def check_unique_keys(method: Method[Any, Any, Any], items: Sequence[Any]) -> None:
    """Two items stored under one id would overwrite each other: refused (before any model is
    loaded, when :func:`run_method` calls it)."""
    seen: set[Any] = set()
    for item in items:
        key = method.ids(item).key
        if key in seen:
            raise ConfigError(f"two examples have the id {key!r}: ids must be unique")
        seen.add(key)


def sample_row(method: Method[Any, Any, Any], item: Any,
               record: dict[str, Any]) -> dict[str, Any]:
    """The ``samples.jsonl`` row of ``item``: the user's ``id`` (:meth:`Method.ids`), then,
    where the method names the item apart from it (one example under several settings), that
    name as ``key`` (what resume goes by), then the record."""
    ids = method.ids(item)
    ex_id, key = ids.example_id, ids.key
    head = {"id": ex_id} if ex_id == key else {"id": ex_id, KEY_FIELD: key}
    return {**head, **{k: v for k, v in record.items() if k not in head}}


def stored_row(method: Method[Any, Any, Any], item: Any, row: dict[str, Any]) -> dict[str, Any]:
    """A stored row as :func:`sample_row` writes it: a row of an older run folder, whose ``id``
    was the item's key, gets the user's id back (resumed runs return one shape)."""
    if KEY_FIELD in row or method.ids(item).example_id == row.get("id"):
        return row
    return sample_row(method, item, {k: v for k, v in row.items() if k != "id"})


def measure_items(run: Any, method: Method[Any, Any, Any], over: Over | None, ready: Any,
                  items: Sequence[Any], *,
                  progress: bool = True, policy: BatchPolicy | None = None,
                  first_alone: bool = False) -> StoredRows:
    """Measure every item not yet in the samples over ``over`` (what answers), in the method's
    batches under ``policy`` (default: :class:`BatchPolicy`'s), appending each record (with its
    ``id``) as it comes; return all records, earlier ones included, in item order, as rows
    read back from ``samples.jsonl`` on demand (:class:`~ctxleak.run.stored.StoredRows`): a run keeps the
    rows' names and byte spans in memory, not the rows.

    In a data-parallel run each process takes the items ``index % size == rank``, then waits
    for the others; every process returns the merged records and rank 0 writes the merged
    ``samples.jsonl``.

    ``first_alone`` (a model's run): under ``auto`` the first example is measured alone
    (whether or not a bar is shown, so the batches and the records never depend on it): the
    bar's total, so the time left, is estimated from it within seconds, not after a first batch
    that may hold the whole run. A target's batches are the questions it is sent together.
    """
    world = run.world
    check_unique_keys(method, items)
    done = run.done_keys()
    mine = [item for i, item in enumerate(items) if world.owns(i)]
    todo = [item for item in mine if method.ids(item).key not in done]
    if len(todo) < len(mine):
        say(f"resuming: {len(mine) - len(todo)} of {len(mine)} {method.unit} already done")
    label = method.desc if not world.distributed else \
        f"{method.desc} [rank {world.rank}/{world.size}]"
    with RunProgress(len(todo), label, disable=not progress, noun=method.unit) as bar, \
            counting(bar.add_tokens):

        def append(item: Any, record: dict[str, Any]) -> None:
            run.append_sample(sample_row(method, item, record))
            bar.example_done()

        policy = policy or BatchPolicy()
        if first_alone and policy.batch_size is None and len(todo) > 1:
            policy = measure_todo(method, over, ready, todo[:1], policy, append)
            todo = todo[1:]
        measure_todo(method, over, ready, todo, policy, append)
    if world.distributed:
        run.close()
        barrier()
        run.reload()
    if world.is_main and (world.distributed or run.has_shards()):
        # also when one process resumes a data-parallel run: samples.jsonl gets every row
        run.close()
        run.merge_shards([method.ids(item).key for item in items])
    done = run.done_keys()
    kept = [(item, key) for item, key in ((item, method.ids(item).key) for item in items)
            if key in done]
    rows: StoredRows = run.rows([key for _, key in kept], tags=[item for item, _ in kept],
                                convert=partial(stored_row, method))
    return rows


def measure_todo(method: Method[Any, Any, Any], over: Over | None, ready: Any,
                 todo: Sequence[Any], policy: BatchPolicy,
                 emit: Callable[[Any, dict[str, Any]], None]) -> BatchPolicy:
    """Measure ``todo`` in the method's batches under ``policy``, handing each ``(item,
    record)`` to ``emit`` in item order. An out-of-memory back-off lowers the policy's
    ``max_in_flight`` (:func:`measure_batch`): the items left are then grouped again under the
    lowered cap. Returns the policy in force at the end."""
    start = 0
    while start < len(todo):
        for batch in method.batches(ready, todo[start:], policy):
            pairs, after = measure_batch(method, over, ready, batch, policy)
            for item, record in pairs:
                emit(item, record)
            start += len(batch)
            if after != policy:
                policy = after
                break
    return policy


def measure_batch(method: Method[Any, Any, Any], over: Over | None, ready: Any,
                  batch: list[Any], policy: BatchPolicy
                  ) -> tuple[list[tuple[Any, dict[str, Any]]], BatchPolicy]:
    """``(item, record)`` for each item of ``batch``, measured together, and the policy for
    the batches after it. Under ``batch_size`` ``auto`` a batch that runs out of memory is halved
    (and later batches capped at that size through the returned policy's ``max_in_flight``)
    until it fits, the engine's back-off one level up."""
    try:
        records = method.measure(over, ready, batch)
    except Exception as exc:
        if not is_out_of_memory(exc) or len(batch) == 1 or policy.batch_size is not None:
            raise
        half = len(batch) // 2
        policy = policy.capped(half)
        say(f"out of memory with {len(batch)} examples in flight; retrying with {half}")
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        first, policy = measure_batch(method, over, ready, batch[:half], policy)
        second, policy = measure_batch(method, over, ready, batch[half:], policy)
        return first + second, policy
    if len(records) != len(batch):
        raise RuntimeError(f"{type(method).__name__}.measure returned {len(records)} "
                           f"records for {len(batch)} items")
    return list(zip(batch, records)), policy


def run_method(method: Method[Any, Any, Any], over: Over | None = None, data: Any = None,
               output: str | None = None, resume: bool | None = None,
               progress: bool = True, check_row: RowCheck | None = None,
               max_queries: int | None = None,
               scrubber: Scrubbing | None = None) -> RunOutput | None:
    """Run ``method`` on ``data`` over ``over`` and return what it measured as plain data
    (:class:`~ctxleak.run.output.RunOutput`: records, summary, config, provenance, the run
    folder); :func:`ctxleak.results.finish_run` makes the Result, its files and its report.

    ``over``, what answers: a loaded model, None to load ``method.common.model`` (after the data
    are checked), or a :class:`~ctxleak.targets.base.Target` (:func:`over_target`), refused
    before the run folder and the first request when it lacks what ``method.requires()``.
    ``output``/``resume`` override the method's run options. ``check_row``: what the method's
    stored rows must satisfy (:data:`~ctxleak.run.samples.RowCheck`, declared in
    ``methods/<m>/checks.py``): a resume refuses a stored row that breaks it. ``max_queries``:
    the most questions sent to a target in this run folder, resumes included. ``scrubber``: as
    :func:`open_run`'s. Every process of
    a data-parallel launch calls this; only rank 0 gets the output (the others get None).
    """
    max_queries = whole(max_queries, "max_queries", minimum=0, allow_none=True)
    common = method.common
    if output is not None or resume is not None:
        common = replace(common, output=output if output is not None else common.output,
                         resume=bool(resume) if resume is not None else common.resume)
    if isinstance(over, LanguageModel):  # a loaded model names itself in the config (a served
        common = replace(common, **over.run_options())  # one: where, under which name)
    elif over is not None and not is_target(over):
        raise ConfigError(f"a run is over a model or a target, not a {type(over).__name__}")
    plan = method.plan(data)  # checked before any model is loaded
    check_unique_keys(method, plan.items)
    what = f"this {method.name} run"
    model = over if isinstance(over, LanguageModel) else None
    target = None if over is None or isinstance(over, LanguageModel) else over
    # refused before the run folder, the model's load or any request to a server or target
    backend: LanguageModel | Backend = model or (
        Backend(CAPABILITIES, target.describe()) if target is not None
        else backend_of(common.model, common.server_url))
    check_capabilities(backend, method.requires(), what=what)
    if target is not None:
        return over_target(method, target, plan, common, progress=progress,
                           check_row=check_row, max_queries=max_queries, scrubber=scrubber)
    if max_queries is not None:
        raise ConfigError("max_queries bounds a target's questions, not a model's", param="max_queries")
    run = open_run(method.name, common, plan.config, private=method.private,
                   inputs=plan.inputs, check_row=check_row, scrubber=scrubber)
    with run:
        if model is None:  # after the folder's checks (a resume of another run is refused first)
            model = load_lm(replace(common, **plan.load_options))
            check_capabilities(model, method.requires(), what=what)  # what it says it has
        run.pin_model(model.identity())  # a resume refuses another model under the same name
        policy = BatchPolicy.of(common.batch_size, common.batch_invariant, model.device)
        with using(model, policy):  # the engine decides batching from here on
            ready = method.prepare(model, plan, run)
            records = measure_items(run, method, model, ready, plan.items, progress=progress,
                                    policy=policy, first_alone=True)
    if not run.world.is_main:
        return None
    summary = method.summarize(ready, records)
    from ctxleak.run.provenance import provenance  # lazy: it imports engine.models (see open_run)

    prov = provenance(model, **method.provenance(model, ready))
    return RunOutput(command=method.name, records=records, summary=summary, config=run.config,
                     provenance=prov, run=run)


def check_query_count(asked: JournaledTarget, queries: int) -> None:
    """Refuse (:class:`ConfigError`, nothing sent) a run of ``queries`` questions not known
    before they are asked (chosen from the answers) when it would take the target past
    ``max_queries``: a resume asks them again as before, so those the journal holds are among
    them (each send is checked again, :meth:`JournaledTarget.answer`)."""
    if asked.max_queries is None:
        return
    held = asked.journal.count(asked.key)
    if max(held, queries) > asked.max_queries:
        raise ConfigError(f"max_queries: this run asks {queries} questions of the target and the "
                          f"journal holds {held} already, more than the {asked.max_queries} "
                          f"allowed (nothing was sent)", param="max_queries")


def over_target(method: Method[Any, Any, Any], target: Target, plan: Any, common: RunOptions,
                *, progress: bool, check_row: RowCheck | None,
                max_queries: int | None, scrubber: Scrubbing | None = None) -> RunOutput | None:
    """:func:`run_method` over a target, no model loaded: the cost estimate (stderr); the
    target wrapped in the run folder's journal before the method sees it (a resume sends no
    question twice), which refuses ``max_queries`` before the first question (and the folder
    of a fresh run); the config naming the target; the queries sent and replayed."""
    held = getattr(target, "model", None)
    common = replace(common, model=held.info.name if isinstance(held, LanguageModel) else "none",
                     output=common.output or default_output(method.name))
    say(cost_line(target, plan.questions))
    with AnswerJournal(Path(str(common.output)) / JOURNAL_FILE) as journal:
        asked = JournaledTarget(target, journal, max_queries)
        if plan.questions_later:
            check_query_count(asked, len(plan.questions))
        else:
            asked.check(plan.questions)
        run = open_run(method.name, common, {**plan.config, "target": target.describe(),
                                             TARGET_KEY: target.fingerprint()},
                       private=method.private, inputs=plan.inputs, check_row=check_row,
                       scrubber=scrubber)
        with run:
            ready = method.prepare(asked, plan, run)
            try:
                records = measure_items(run, method, asked, ready, plan.items,
                                        progress=progress, policy=BatchPolicy.of(
                                            common.batch_size, common.batch_invariant, "cpu"))
            except TargetError as exc:
                raise TargetError(f"{exc} ({run.count} answered questions are kept in "
                                  f"{run.path}: rerun with resume=True, --resume --output "
                                  f"{run.path}, to go on; none is sent again)",
                                  index=exc.index) from exc
    if not run.world.is_main:
        return None
    note = getattr(target, "influence_note", None)
    summary = {**method.summarize(ready, records), "queries_sent": asked.sent,
               "queries_replayed": asked.replayed,
               "influence_note": note() if callable(note) else None}
    from ctxleak.run.provenance import provenance  # lazy, as in run_method

    return RunOutput(command=method.name, records=records, summary=summary, config=run.config,
                     provenance=provenance(None, **method.provenance(asked, ready)), run=run)
