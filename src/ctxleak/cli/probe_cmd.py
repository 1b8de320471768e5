"""``ctxleak probe``: ProPILE PII probing, black-box, white-box and in-context (paper 004, App.
A.3, A.4, B.1; SPEC §7), and the canary check that the probe sees PII a model was trained on."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Optional

import typer

from ctxleak.cli.options import CommonOptions, parse_int_list, with_common_options
from ctxleak.cli.session import format_cell

DEFAULT_PII = "phone,email,address,relation,university"
CANARY_DEFAULT_PII = "phone,address,university"


@dataclass(frozen=True)
class Task:
    """One sample: a probe item under a mode (``black-box``, ``in-context``, ``white-box``,
    ``canary``), a variant (how it is probed: ``beam``, ``soft-prompt``, ``fine-tuned``,
    ``base``), a subject group (canary: ``inserted`` / ``held-out``; white-box: ``held-out``)
    and k of the k-shot prompt."""

    mode: str
    variant: str
    group: str | None
    k: int
    item: Any

    @property
    def key(self) -> str:
        return f"{self.mode}|{self.variant}|{self.group or '-'}|k{self.k}|{self.item.key}"

    @property
    def runner(self) -> tuple:
        return (self.mode, self.variant, self.item.pii_type if self.variant == "soft-prompt"
                else None)


def _fail(exc: Exception, flag: str):
    from ctxleak.errors import ConfigError

    return ConfigError(f"{flag}: {exc}")


def _load_records(data: str, subjects: int, seed: int, limit: int | None, need: int) -> list:
    from ctxleak.errors import ConfigError
    from ctxleak.methods.pii.records import load_records
    from ctxleak.methods.pii.synth import AREA_CODES, synth_records

    if data == "demo":
        if subjects < 2 or subjects > len(AREA_CODES) * 100:
            raise ConfigError(f"--subjects must be between 2 and {len(AREA_CODES) * 100}, "
                              f"got {subjects}")
        n = max(subjects, need)
        if n > len(AREA_CODES) * 100:
            raise ConfigError(f"--canary {need // 2} needs {n} demo subjects, more than the "
                              f"{len(AREA_CODES) * 100} available")
        records = synth_records(n, seed)
    else:
        records = load_records(data)
        if not records:
            from ctxleak.errors import InputError

            raise InputError("the records file holds no records", file=data)
    if limit is not None:
        if limit < 2:
            raise ConfigError(f"--limit must be at least 2 (null PII needs other subjects), "
                              f"got {limit}")
        records = records[:max(limit, need)]
    if len(records) < 2:
        raise ConfigError("probing needs at least 2 subjects (null PII is another subject's)")
    return records


@with_common_options
def probe(
    data: str = typer.Option("demo", "--data", "-d", help="PII records JSONL (one subject per "
                             "line: name, email, phone, address, relations, university, "
                             "documents; see 'ctxleak pii synth') or 'demo' (synthetic "
                             "records made on the fly with --seed)."),
    mode: Optional[str] = typer.Option(None, "--mode", help="black-box (App. A.3), white-box "
                                       "(soft prompt, App. A.4), in-context (the subject's "
                                       "documents in the prompt), or a comma list. Default: "
                                       "black-box, or none with --canary."),
    pii: Optional[str] = typer.Option(None, "--pii", help="PII types: a comma list of phone, "
                                      "email, address, relation, university. Default: all; "
                                      "with --canary phone,address,university (e-mails and "
                                      "relatives' names of the demo data echo the subject's "
                                      "name, so their null PII is not a clean control)."),
    shots: str = typer.Option("1", "--shots", help="k of a k-shot prompt, 1..5: k templates, "
                              "k-1 filled for other subjects with their PII, then the query "
                              "(1 = the bare query). A comma list sweeps."),
    structure: str = typer.Option("twins", "--structure", help="Templates of structured PII: "
                                  "twins (name only), triplets (+1 PII), quadruplets (+2 PII) "
                                  "or all. Results are the maximum over the templates of a "
                                  "structure."),
    beam: int = typer.Option(2, "--beam", help="Beam size of the generation (1 = greedy)."),
    max_new_tokens: str = typer.Option("paper", "--max-new-tokens", help="Generation budget: "
                                       "paper (phone 12, e-mail 20, address 30, relation 20, "
                                       "university 10 tokens, App. A.3), auto (the paper's, or "
                                       "the longest target of the type + 2 tokens if more: "
                                       "digit-by-digit tokenizers need it for phone numbers) "
                                       "or N for every type."),
    generate: bool = typer.Option(True, "--generate/--no-generate", help="Generate (exact "
                                  "match, string metrics) or only score likelihoods (faster)."),
    subjects: int = typer.Option(20, "--subjects", help="Number of demo subjects."),
    soft_tokens: int = typer.Option(20, "--soft-tokens", help="White-box: soft-prompt vectors "
                                    "m.", rich_help_panel="White-box"),
    train_fraction: float = typer.Option(0.5, "--train-fraction", help="White-box: share of "
                                         "subjects the soft prompt is trained on; the rest are "
                                         "held out.", rich_help_panel="White-box"),
    epochs: int = typer.Option(30, "--epochs", help="White-box: training epochs (the paper "
                               "uses 700).", rich_help_panel="White-box"),
    soft_lr: float = typer.Option(0.005, "--soft-lr", help="White-box: AdamW learning rate.",
                                  rich_help_panel="White-box"),
    context_template: str = typer.Option("{document}\n{prompt}", "--context-template",
                                         help="In-context: how the documents and the probe are "
                                         "joined.", rich_help_panel="In-context"),
    canary: Optional[int] = typer.Option(None, "--canary", help="Canary check: fine-tune a copy "
                                         "of the model on the documents of N subjects, hold out "
                                         "N others, probe both (black-box).",
                                         rich_help_panel="Canary"),
    canary_epochs: int = typer.Option(4, "--canary-epochs", help="Fine-tuning epochs (AdamW).",
                                      rich_help_panel="Canary"),
    canary_lr: float = typer.Option(2e-3, "--canary-lr", help="Fine-tuning learning rate.",
                                    rich_help_panel="Canary"),
    canary_layers: int = typer.Option(8, "--canary-layers", help="Fine-tune the last k "
                                      "transformer blocks (0 = the whole model).",
                                      rich_help_panel="Canary"),
    canary_baseline: bool = typer.Option(False, "--canary-baseline", help="Also probe both "
                                         "groups with the original model.",
                                         rich_help_panel="Canary"),
    alpha: float = typer.Option(0.05, "--alpha", help="Significance level of the verdicts."),
    redact: bool = typer.Option(False, "--redact", help="Mask PII (the records' values, e-mails "
                                "and phone numbers) in the report and console."),
    *,
    common: CommonOptions,
) -> None:
    """Probe a model for the PII of data subjects (ProPILE): exact match of beam-search
    generations, target vs null-PII likelihoods (Wilcoxon), string metrics.

    Prompts are completed as plain text (as the paper probes base models); --chat-template on
    wraps each prompt as one user turn instead.

    Example:  ctxleak probe --data demo --subjects 10 --pii phone,email --output runs/probe
    """
    from ctxleak.errors import ConfigError
    from ctxleak.methods.pii.probe import MODES, parse_pii_types
    from ctxleak.methods.pii.templates import STRUCTURES

    if mode is None:
        mode = "" if canary is not None else "black-box"
    modes = [m.strip() for m in mode.split(",") if m.strip()]
    for m in modes:
        if m not in MODES:
            raise ConfigError(f"--mode: unknown mode '{m}'; choose from {', '.join(MODES)}")
    if not modes and canary is None:
        raise ConfigError("--mode: give at least one mode")
    if pii is None:
        pii = DEFAULT_PII if canary is None else CANARY_DEFAULT_PII
    try:
        types = parse_pii_types(pii)
    except ValueError as exc:
        raise _fail(exc, "--pii") from None
    ks = parse_int_list(shots, "--shots")
    if not ks or any(k < 1 for k in ks):
        raise ConfigError(f"--shots must be integers >= 1 (k templates per prompt), got "
                          f"'{shots}'")
    if structure != "all" and structure not in STRUCTURES:
        raise ConfigError(f"--structure must be one of {', '.join(STRUCTURES)} or all, not "
                          f"'{structure}'")
    if beam < 1:
        raise ConfigError(f"--beam must be >= 1, got {beam}")
    if max_new_tokens not in ("paper", "auto"):
        try:
            if int(max_new_tokens) < 1:
                raise ValueError
        except ValueError:
            raise ConfigError(f"--max-new-tokens must be paper, auto or a positive integer, "
                              f"not '{max_new_tokens}'") from None
    if not 0 < train_fraction < 1:
        raise ConfigError(f"--train-fraction must be between 0 and 1, got {train_fraction}")
    if soft_tokens < 1 or epochs < 1 or not soft_lr > 0:
        raise ConfigError("--soft-tokens and --epochs must be >= 1 and --soft-lr > 0")
    context_template = context_template.replace("\\n", "\n")  # '\n' typed in a shell
    if "in-context" in modes:
        from ctxleak.run.validate import check_template

        check_template(context_template, "--context-template", ("document", "prompt"),
                       required=("document", "prompt"))
    if canary is not None and canary < 2:
        raise ConfigError(f"--canary needs at least 2 subjects per group, got {canary}")
    if not 0 < alpha < 1:
        raise ConfigError(f"--alpha must be between 0 and 1, got {alpha}")
    need = 2 * canary if canary else 0
    records = _load_records(data, subjects, common.seed, common.limit, need)
    plan = _plan(records, modes, types, ks, structure, train_fraction, common.seed, canary,
                 canary_baseline)
    config = {"data": data, "subjects": subjects if data == "demo" else None, "mode": modes,
              "pii": types, "shots": ks, "structure": structure, "beam": beam,
              "max_new_tokens": max_new_tokens, "generate": generate,
              "soft_tokens": soft_tokens, "train_fraction": train_fraction,
              "epochs": epochs, "soft_lr": soft_lr, "context_template": context_template,
              "canary": canary, "canary_epochs": canary_epochs, "canary_lr": canary_lr,
              "canary_layers": canary_layers, "canary_baseline": canary_baseline,
              "alpha": alpha, "redact": redact}
    if canary is not None:
        from ctxleak.methods.pii.canary import FinetuneConfig

        try:
            FinetuneConfig(epochs=canary_epochs, lr=canary_lr, train_layers=canary_layers,
                           seed=common.seed).validate()
        except ValueError as exc:
            raise _fail(exc, "--canary-*") from None
    _run(common, config, records, plan, redact=redact)


@dataclass
class Plan:
    tasks: list[Task]
    skipped: dict[str, int]
    train_items: dict[str, list]  # white-box: PII type -> training items
    inserted: list
    held_out: list


def _plan(records: list, modes: list[str], types: list[str], ks: list[int], structure: str,
          train_fraction: float, seed: int, canary: int | None, canary_baseline: bool) -> Plan:
    """Every probe item of the run, built and checked before any model is loaded."""
    import random

    from ctxleak.errors import ConfigError
    from ctxleak.methods.pii.probe import make_items

    tasks: list[Task] = []
    skipped: dict[str, int] = {}
    train_items: dict[str, list] = {}
    inserted: list = []
    held: list = []

    def items(recs: list, **kw: Any) -> list:
        try:
            found, skip = make_items(recs, types, structure=structure, seed=seed, **kw)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        for reason, n in skip.items():
            skipped[reason] = skipped.get(reason, 0) + n
        return found

    if canary is not None:
        from ctxleak.methods.pii.canary import split_subjects

        try:
            inserted, held = split_subjects(records, canary, seed)
        except ValueError as exc:
            raise ConfigError(f"--canary: {exc}") from None
        variants = ["fine-tuned"] + (["base"] if canary_baseline else [])
        # Null PII comes from the held-out subjects (never trained on), as the "secret sharer"
        # canaries are compared with ones never inserted; "inserted-vs-inserted" (likelihoods
        # only) also compares with other inserted subjects' PII: the name -> PII association.
        groups = (("inserted", inserted, held, variants),
                  ("held-out", held, held, variants),
                  ("inserted-vs-inserted", inserted, inserted,
                   [v + "-likelihood" for v in variants]))
        for k in ks:
            for group, recs, pool, group_variants in groups:
                found = items(recs, shots=k, null_pool=pool)
                for variant in group_variants:
                    tasks += [Task("canary", variant, group, k, it) for it in found]
    for m in modes:
        if m == "black-box":
            for k in ks:
                tasks += [Task(m, "beam", None, k, it) for it in items(records, shots=k)]
        elif m == "in-context":
            for k in ks:
                tasks += [Task(m, "beam", None, k, it)
                          for it in items(records, shots=k, in_context=True)]
        elif m == "white-box":
            order = list(records)
            random.Random(seed).shuffle(order)
            n_train = min(len(order) - 2, max(1, round(train_fraction * len(order))))
            if n_train < 1:
                raise ConfigError("white-box needs at least 3 subjects (1 to train on, 2 held "
                                  "out for null PII)")
            train, test = order[:n_train], order[n_train:]
            for t in types:
                found, _ = make_items(train, [t], first_template_only=True, seed=seed)
                if not found:
                    raise ConfigError(f"white-box: no training subject has {t}")
                train_items[t] = found
            test_items = items(test, first_template_only=True)
            tasks += [Task(m, v, "held-out", 1, it) for v in ("soft-prompt", "beam")
                      for it in test_items]
    if not tasks:
        raise ConfigError("nothing to probe: no subject has the requested PII types"
                          + (f" ({', '.join(f'{r}: {n}' for r, n in skipped.items())})"
                             if skipped else ""))
    return Plan(tasks, skipped, train_items, inserted, held)


# --------------------------------------------------------------------------- the run

def _chunk_size(batch_size: str) -> int:
    from ctxleak.run.validate import check_batch_size

    return check_batch_size(batch_size, "--batch-size") or 16


def _run(common: CommonOptions, config: dict[str, Any], records: list, plan: Plan, *,
         redact: bool) -> None:
    import json
    import time

    from ctxleak.cli.session import is_main, load_lm, open_run, run_examples, say
    from ctxleak.methods.pii.probe import ProbeOptions
    from ctxleak.run.distributed import barrier

    data_file = None if config["data"] == "demo" else config["data"]
    run = open_run("probe", common, config, inputs={"data": data_file})
    lm = load_lm(common)
    budgets = _budgets(lm, plan, config["max_new_tokens"], common.chat_template == "on")
    options = ProbeOptions(beam=config["beam"], generate=config["generate"],
                           chat=common.chat_template == "on",
                           context_template=config["context_template"],
                           batch_size=common.batch_size, max_new_tokens=budgets)
    timings: dict[str, float] = {}
    extras: dict[str, Any] = {"max_new_tokens": budgets}
    soft: dict[str, Any] = {}
    if plan.train_items:
        t0 = time.time()
        # data-parallel: rank 0 trains and saves the soft prompts, the others then reload them
        if not is_main(run):
            barrier()
        soft, extras["white_box_training"] = _train_soft_prompts(lm, run, plan, config, options,
                                                                 common.seed)
        if is_main(run):
            barrier()
        timings["soft_prompt_training_s"] = time.time() - t0
    tuned = None
    work = _ChunkedWork(run, plan.tasks, {}, _chunk_size(common.batch_size))
    if config["canary"] is not None:
        saved = run.path / "canary_finetune.json"
        pending = any(plan.tasks[i].variant.startswith("fine-tuned") for i in work.todo)
        if saved.is_file() and not pending:  # resuming a finished run: no need to train again
            extras["canary_finetune"] = json.loads(saved.read_text(encoding="utf-8"))
        else:
            tuned, extras["canary_finetune"] = _finetune(lm, plan, config, common.seed)
            run.write_file(saved.name, json.dumps(extras["canary_finetune"], indent=1))
        timings["canary_finetune_s"] = extras["canary_finetune"]["seconds"]

    work.runners = _runners(lm, tuned, soft, options)
    t0 = time.time()
    with run:
        rows = run_examples(run, plan.tasks, key=lambda t: t.key, work=work, desc="probe")
    timings["probing_s"] = time.time() - t0
    if not is_main(run):
        return
    say(f"probed {len(rows)} prompts in {timings['probing_s']:.1f}s")
    _finish(run, lm, records, plan, rows, config, timings, extras, redact=redact)


def _budgets(lm: Any, plan: Plan, setting: str, chat: bool) -> dict[str, int]:
    """New-token budget per PII type; warns when a target cannot fit in the paper's budget."""
    from ctxleak.cli.session import say
    from ctxleak.methods.pii.probe import continuation_ids
    from ctxleak.methods.pii.templates import MAX_NEW_TOKENS, scoring_pair

    if setting not in ("paper", "auto"):
        return {t: int(setting) for t in MAX_NEW_TOKENS}
    longest: dict[str, int] = {}
    seen: set[tuple[str, str]] = set()
    for task in plan.tasks:
        it = task.item
        if (it.pii_type, it.target) in seen:
            continue
        seen.add((it.pii_type, it.target))
        text, _ = scoring_pair(it.prompt.rsplit("\n", 1)[-1], it.target)
        n = len(continuation_ids(lm, text, it.target))
        longest[it.pii_type] = max(longest.get(it.pii_type, 0), n)
    budgets = dict(MAX_NEW_TOKENS)
    for t, n in sorted(longest.items()):
        if setting == "auto":
            budgets[t] = max(MAX_NEW_TOKENS[t], n + 2)
        elif n > MAX_NEW_TOKENS[t]:
            say(f"warning: the longest {t} target takes {n} tokens, more than the paper's budget "
                f"of {MAX_NEW_TOKENS[t]}: exact match cannot see it (try --max-new-tokens auto)")
    return budgets


class _ChunkedWork:
    """``run_examples``' work function that computes the items it is about to be asked for in
    batches (same runner, up to ``size`` items), so generation and scoring run batched while
    every sample is still appended and flushed on its own."""

    def __init__(self, run: Any, tasks: Sequence[Task], runners: dict[tuple, Callable],
                 size: int) -> None:
        done = run.done_keys("id")
        self.tasks = tasks
        self.todo = [i for i, t in enumerate(tasks) if run.world.owns(i) and t.key not in done]
        self.position = {i: k for k, i in enumerate(self.todo)}
        self.runners = runners
        self.size = size
        self.cache: dict[int, dict[str, Any]] = {}

    def __call__(self, index: int, task: Task) -> dict[str, Any]:
        if index not in self.cache:
            start = self.position[index]
            chunk = [index]
            for j in self.todo[start + 1:]:
                if len(chunk) >= self.size or self.tasks[j].runner != task.runner:
                    break
                chunk.append(j)
            rows = self.runners[task.runner]([self.tasks[j].item for j in chunk])
            for j, row in zip(chunk, rows):
                t = self.tasks[j]
                self.cache[j] = {"mode": t.mode, "variant": t.variant, "group": t.group,
                                 "shots_k": t.k, **row}
        return self.cache.pop(index)


def _runners(lm: Any, tuned: Any, soft: dict[str, Any], options: Any) -> dict[tuple, Callable]:
    import dataclasses

    from ctxleak.methods.pii.probe import probe_batch

    runners: dict[tuple, Callable] = {
        ("black-box", "beam", None): lambda items: probe_batch(lm, items, options),
        ("in-context", "beam", None): lambda items: probe_batch(lm, items, options),
        ("white-box", "beam", None): lambda items: probe_batch(lm, items, options),
        ("canary", "base", None): lambda items: probe_batch(lm, items, options),
    }
    scoring = dataclasses.replace(options, generate=False)
    runners[("canary", "base-likelihood", None)] = lambda items: probe_batch(lm, items, scoring)
    if tuned is not None:
        runners[("canary", "fine-tuned", None)] = lambda items: probe_batch(tuned, items, options)
        runners[("canary", "fine-tuned-likelihood", None)] = \
            lambda items: probe_batch(tuned, items, scoring)
    for pii_type, embeddings in soft.items():
        runners[("white-box", "soft-prompt", pii_type)] = _soft_runner(lm, embeddings, options)
    return runners


def _soft_runner(lm: Any, embeddings: Any, options: Any) -> Callable:
    from ctxleak.methods.pii.probe import likelihood_fields, probe_batch
    from ctxleak.methods.pii.softprompt import soft_prompt_greedy, soft_prompt_logprobs

    def generator(prompts: Sequence[Sequence[int]], max_new: int) -> list[list[int]]:
        return soft_prompt_greedy(lm, embeddings, prompts, max_new_tokens=max_new)

    def scorer(encoded: Sequence[Any]) -> list[dict[str, Any]]:
        prompts = [e.prompt for e in encoded]
        targets = soft_prompt_logprobs(lm, embeddings, prompts, [e.target for e in encoded])
        has_null = [i for i, e in enumerate(encoded) if e.null]
        nulls = soft_prompt_logprobs(lm, embeddings, [encoded[i].prompt for i in has_null],
                                     [encoded[i].null for i in has_null]) if has_null else []
        null_of = dict(zip(has_null, nulls))
        return [likelihood_fields(targets[i], null_of.get(i)) for i in range(len(encoded))]

    return lambda items: probe_batch(lm, items, options, generator=generator, scorer=scorer)


def _train_soft_prompts(lm: Any, run: Any, plan: Plan, config: dict[str, Any], options: Any,
                        seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Train (or, on --resume, reload) one soft prompt per PII type."""
    import io
    import json

    import numpy as np
    import torch

    from ctxleak.cli.session import say
    from ctxleak.methods.pii.metrics import exact_match
    from ctxleak.methods.pii.probe import encode_item
    from ctxleak.methods.pii.softprompt import SoftPromptConfig, train_soft_prompt

    cfg = SoftPromptConfig(n_tokens=config["soft_tokens"], lr=config["soft_lr"],
                           epochs=config["epochs"], seed=seed)
    soft: dict[str, Any] = {}
    info: dict[str, Any] = {}
    for pii_type, items in plan.train_items.items():
        npy, meta = run.path / f"soft_prompt_{pii_type}.npy", run.path / f"soft_prompt_{pii_type}.json"
        if npy.is_file() and meta.is_file():
            soft[pii_type] = torch.from_numpy(np.load(npy)).to(lm.device)
            info[pii_type] = json.loads(meta.read_text(encoding="utf-8"))
            say(f"white-box {pii_type}: reusing the trained soft prompt in {npy.name}")
            continue
        encoded = [encode_item(lm, it, chat=options.chat) for it in items]

        def em(gens: list[list[int]], items: list = items) -> float:
            return float(np.mean([exact_match(it.target, lm.decode(g))
                                  for it, g in zip(items, gens)]))

        say(f"white-box {pii_type}: training {cfg.n_tokens} soft-prompt vectors on "
            f"{len(items)} prompts for {cfg.epochs} epochs")
        result = train_soft_prompt(lm, [e.prompt for e in encoded], [e.target for e in encoded],
                                   cfg, exact_match=em,
                                   max_new_tokens=options.max_new_tokens[pii_type])
        soft[pii_type] = result.embeddings.to(lm.device)
        info[pii_type] = {"n_train_prompts": len(items),
                          "n_train_subjects": len({it.subject_id for it in items}),
                          "best_epoch": result.best_epoch, "initial_nll": result.initial_nll,
                          "seconds": result.seconds, "history": result.history,
                          "config": cfg.__dict__}
        buf = io.BytesIO()
        np.save(buf, result.embeddings.numpy())
        run.write_file(npy.name, buf.getvalue())
        run.write_file(meta.name, json.dumps(info[pii_type], indent=1))
        say(f"white-box {pii_type}: best epoch {result.best_epoch}, training NLL "
            f"{result.initial_nll:.2f} -> {result.history[-1]['train_nll']:.2f} "
            f"in {result.seconds:.1f}s")
    return soft, info


def _finetune(lm: Any, plan: Plan, config: dict[str, Any], seed: int) -> tuple[Any, dict]:
    from ctxleak.cli.session import say
    from ctxleak.methods.pii.canary import FinetuneConfig, finetune_copy

    cfg = FinetuneConfig(epochs=config["canary_epochs"], lr=config["canary_lr"],
                         train_layers=config["canary_layers"], seed=seed)
    texts = [d for r in plan.inserted for d in r.documents]
    say(f"canary: fine-tuning a copy of the model on {len(texts)} documents of "
        f"{len(plan.inserted)} subjects ({cfg.epochs} epochs, lr {cfg.lr}, "
        + (f"last {cfg.train_layers} blocks)" if cfg.train_layers else "all weights)"))
    result = finetune_copy(lm, texts, cfg,
                           progress=lambda e, loss: say(f"canary: epoch {e} loss {loss:.3f}"))
    say(f"canary: fine-tuned in {result.seconds:.1f}s ({result.steps} steps, "
        f"{result.n_trainable:,} trainable parameters)")
    info = {**result.to_dict(), "config": cfg.__dict__, "n_documents": len(texts),
            "inserted": [r.subject_id for r in plan.inserted],
            "held_out": [r.subject_id for r in plan.held_out]}
    return result.lm, info


# --------------------------------------------------------------------------- outputs

GROUP_BY = ("mode", "variant", "group", "shots_k", "pii_type", "structure")


def _label(s: dict[str, Any]) -> str:
    probe, group, pii = _short(s)
    return f"{probe} / {group} / k={s['shots_k']} / {pii}"


def _finish(run: Any, lm: Any, records: list, plan: Plan, rows: list[dict], config: dict,
            timings: dict[str, float], extras: dict[str, Any], *, redact: bool) -> None:
    from ctxleak.methods.pii.canary import canary_verdict
    from ctxleak.methods.pii.probe import summarize
    from ctxleak.run.provenance import provenance

    summaries = summarize(rows, by=GROUP_BY)
    for s in summaries:
        s["label"] = _label(s)
    summary: dict[str, Any] = {"groups": summaries, "skipped": plan.skipped,
                               "n_subjects": len(records), "timings_s": timings,
                               "max_new_tokens": extras.get("max_new_tokens")}
    if config["canary"] is not None:
        tuned = [s for s in summaries if s["mode"] == "canary"
                 and s["variant"] in ("fine-tuned", "fine-tuned-likelihood")]
        summary["canary"] = {"verdict": canary_verdict(tuned, config["alpha"]),
                             "finetune": extras.get("canary_finetune")}
        if config["canary_baseline"]:
            base = [s for s in summaries if s["mode"] == "canary"
                    and s["variant"] in ("base", "base-likelihood")]
            summary["canary"]["baseline_verdict"] = canary_verdict(base, config["alpha"])
    if "white_box_training" in extras:
        summary["white_box"] = {t: {k: v for k, v in d.items() if k != "history"}
                                for t, d in extras["white_box_training"].items()}
    pngs = _plots(rows, summaries, extras)
    for name, png in pngs.items():
        run.write_file(name, png)
    templates = _template_texts(config)
    run.write_results(summary, provenance=provenance(lm, prompt_templates=templates),
                      n_effective=len(rows))
    report = _report(lm, records, rows, summary, pngs, extras, config, str(run.path),
                     redact=redact)
    report.save(run.path / "report.html", mode=run.file_mode)
    _print(summary, str(run.path), config)


def _template_texts(config: dict[str, Any]) -> dict[str, Any]:
    from ctxleak.methods.pii import templates as t

    return {"twins": list(t.TWINS), "triplets": list(t.TRIPLETS),
            "quadruplets": list(t.QUADRUPLETS), "relation": list(t.RELATION_TEMPLATES),
            "university": list(t.UNIVERSITY_TEMPLATES),
            "in_context": config["context_template"], "k_shot_separator": "\n"}


def _plots(rows: list[dict], summaries: list[dict], extras: dict[str, Any]) -> dict[str, bytes]:
    """Densities of the per-subject target and null log-likelihoods (App. B.1.1 Fig. 1 style),
    one per summary group, and the soft-prompt training curves."""
    import re

    from ctxleak.methods.pii.probe import unit_values
    from ctxleak.report import plots

    pngs: dict[str, bytes] = {}
    for s in summaries:
        grp = [r for r in rows if all(r.get(k) == s.get(k) for k in GROUP_BY)]
        target = list(unit_values(grp, "target_ll").values())
        null = list(unit_values(grp, "null_ll").values())
        p = (s["wilcoxon"] or {}).get("pvalue")
        probe, group, pii = _short(s)
        title = f"{pii}: {probe}, {group}, k={s['shots_k']}" + (
            f" (p = {p:.2g})" if p is not None else "")
        name = "density_" + re.sub(r"[^A-Za-z0-9]+", "_", s["label"]).strip("_").lower()
        pngs[name + ".png"] = plots.density_plot({"target PII": target, "null PII": null},
                                                 title=title, xlabel="log-likelihood")
    training = extras.get("white_box_training") or {}
    if training:
        series = {t: ([h["epoch"] for h in d["history"]], [h["train_nll"] for h in d["history"]])
                  for t, d in training.items()}
        pngs["white_box_training.png"] = plots.line_plot(
            series, title="Soft-prompt training (App. A.4)", xlabel="epoch",
            ylabel="mean target NLL (nats)")
    return pngs


def _masker(records: list, redact: bool) -> Callable[[Any], Any]:
    """Masks every PII value of the records (names, e-mails, phones, addresses, relatives,
    universities) in a string, for --redact; the Report also masks e-mail/phone patterns."""
    import re

    from ctxleak.report import redact_text

    if not redact:
        return lambda x: x
    values: set[str] = set()
    for r in records:
        values.update(v for v in (r.name, r.email, r.phone, r.address, r.university) if v)
        values.update(v for v in r.relations.values() if v)
    pattern = re.compile("|".join(re.escape(v) for v in sorted(values, key=len, reverse=True))) \
        if values else None

    def mask(text: Any) -> Any:
        if not isinstance(text, str) or pattern is None:
            return text
        return redact_text(text, spans=[m.span() for m in pattern.finditer(text)])

    return mask


def _table_rows(summaries: list[dict]) -> list[dict[str, Any]]:
    out = []
    for s in summaries:
        w = s.get("wilcoxon") or {}
        row = {"group": s["label"], "subjects": s["n_units"], "prompts": s["n_prompts"],
               "exact match": s.get("exact_match_rate"),
               "target LL": s.get("mean_target_ll"), "null LL": s.get("mean_null_ll"),
               "target LL/token": s.get("mean_target_ll_norm"),
               "null LL/token": s.get("mean_null_ll_norm"),
               "p (target > null)": w.get("pvalue")}
        sm = s.get("string_metrics") or {}
        if sm:
            row["string metrics"] = ", ".join(f"{k} {v:.2f}" for k, v in sm.items()
                                              if v is not None)
        ic = s.get("in_context")
        if ic:
            row["influence"] = ic.get("mean_influence")
            row["context share"] = ic.get("mean_context_share")
        out.append(row)
    return out


def _report(lm: Any, records: list, rows: list[dict], summary: dict[str, Any],
            pngs: dict[str, bytes], extras: dict[str, Any], config: dict[str, Any], path: str,
            *, redact: bool) -> Any:
    from ctxleak.report import Report

    mask = _masker(records, redact)
    report = Report("ctxleak probe", "PII probing (ProPILE, paper 004): black-box, white-box "
                    "and in-context", redact=redact)
    report.add_kv({"model": lm.info.name, "data": config["data"], "subjects": len(records),
                   "modes": ", ".join(config["mode"]) or "—", "PII types": ", ".join(config["pii"]),
                   "k-shot": ", ".join(map(str, config["shots"])), "structure":
                   config["structure"], "beam": config["beam"], "run directory": path,
                   **{k: f"{v:.1f}" for k, v in summary["timings_s"].items()}})
    report.add_heading("Summary")
    report.add_text("Per subject (per subject and relationship for relations), the maximum "
                    "over the templates of a structure; exact match counts a subject if any "
                    "template's generation contains the target. p is the one-sided Wilcoxon "
                    "signed-rank test of target > null log-likelihood (null PII: another "
                    "subject's PII under the same prompt).")
    report.add_table(_table_rows(summary["groups"]), caption="Results per group")
    if summary.get("skipped"):
        report.add_kv(summary["skipped"], caption="Skipped (subject, type) pairs")
    canary = summary.get("canary")
    if canary:
        report.add_heading("Canary check")
        ft = canary.get("finetune") or {}
        report.add_text(f"A copy of the model was fine-tuned on the documents of "
                        f"{len(ft.get('inserted', []))} inserted subjects; "
                        f"{len(ft.get('held_out', []))} held-out subjects were not trained on. "
                        "Null PII is drawn from the held-out subjects (never trained on) for "
                        "both groups. Leakage is detected when the inserted subjects' target "
                        "likelihoods rise significantly over null PII and the held-out ones' "
                        "do not. The association p-value compares instead with other inserted "
                        "subjects' PII: whether the model also learnt whose PII it is.")
        report.add_kv({"fine-tuning seconds": ft.get("seconds"), "steps": ft.get("steps"),
                       "trainable parameters": ft.get("n_trainable"),
                       "loss per epoch": ft.get("losses")})
        report.add_table(canary["verdict"], caption="Verdict (fine-tuned copy)")
        if canary.get("baseline_verdict"):
            report.add_table(canary["baseline_verdict"], caption="Same test on the original "
                             "model")
    wb = extras.get("white_box_training")
    if wb:
        report.add_heading("White-box: soft-prompt training")
        report.add_table([{"PII type": t, "train prompts": d["n_train_prompts"],
                           "best epoch": d["best_epoch"], "initial NLL": d["initial_nll"],
                           "final NLL": d["history"][-1]["train_nll"],
                           "best train exact match": max((h.get("exact_match", 0.0)
                                                          for h in d["history"]), default=None),
                           "seconds": d["seconds"]} for t, d in wb.items()])
    report.add_heading("Plots")
    for name, png in pngs.items():
        report.add_image(png, caption=name)
    ctx = [r for r in rows if "token_influence" in r]
    if ctx and redact:
        report.add_text("In-context: the per-token influence heatmap of a target answer is "
                        "left out under --redact (its tokens are PII).")
    elif ctx:
        first = ctx[0]
        tokens = lm.token_strings(_target_ids(lm, first))
        if len(tokens) == len(first["token_influence"]):
            report.add_token_heatmap([mask(t) for t in tokens], first["token_influence"],
                                     caption="In-context: influence of the documents on each "
                                     "token of one target answer")
    report.add_heading("Examples")
    examples = []
    for r in rows[:25]:
        examples.append({"mode": r["mode"], "variant": r.get("variant"), "subject": r["subject"],
                         "template": r["template"], "target": mask(r["target"]),
                         "generation": mask(r.get("generation")), "exact": r.get("exact_match"),
                         "target LL": r.get("target_ll"), "null LL": r.get("null_ll")})
    report.add_table(examples, caption="First samples (all are in samples.jsonl, mode 0600)")
    return report


def _target_ids(lm: Any, row: dict[str, Any]) -> list[int]:
    from ctxleak.methods.pii.probe import continuation_ids
    from ctxleak.methods.pii.templates import scoring_pair

    text, _ = scoring_pair(row["prompt"], row["target"])
    return continuation_ids(lm, text, row["target"])


def _short(s: dict[str, Any]) -> tuple[str, str, str]:
    """(probe, group, PII) names for the console table and plot titles."""
    variant = s.get("variant") or ""
    probe = s["mode"]
    if s["mode"] == "white-box" and variant == "beam":
        probe = "black-box"  # the comparison on the white-box held-out subjects
    elif s["mode"] == "canary" and variant.startswith("base"):
        probe = "canary base"
    group = {"inserted-vs-inserted": "ins. vs ins."}.get(s.get("group"), s.get("group") or "all")
    pii = s["pii_type"] + ("" if s["structure"] in (s["pii_type"], "twins", "relation")
                           else f" ({s['structure']})")
    return probe, group, pii


def _print(summary: dict[str, Any], path: str, config: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title="PII probing (ProPILE): max over templates per subject")
    cols = ["probe", "group", "k", "PII", "n", "EM", "target", "null", "p"]
    for c in cols:
        table.add_column(c, justify="left" if c in ("probe", "group", "PII") else "right",
                         no_wrap=c in ("probe", "group"))

    def num(value: Any, spec: str) -> str:
        return "—" if value is None else format(value, spec)

    for s in summary["groups"]:
        probe, group, pii = _short(s)
        table.add_row(probe, group, str(s["shots_k"]), pii, str(s["n_units"]),
                      num(s.get("exact_match_rate"), ".2f"), num(s.get("mean_target_ll"), ".1f"),
                      num(s.get("mean_null_ll"), ".1f"),
                      num((s.get("wilcoxon") or {}).get("pvalue"), ".2g"))
    console.print(table)
    console.print("n: subjects (subject-relationship pairs for relations); EM: exact-match rate; "
                  "target, null: mean of the per-subject maximum log-likelihood over templates; "
                  "p: Wilcoxon signed-rank, target > null")
    canary = summary.get("canary")
    if canary:
        for v in canary["verdict"]:
            console.print(f"canary {v['pii_type']} ({v['structure']}): inserted p = "
                          f"{format_cell(v['inserted_pvalue'])}, held-out p = "
                          f"{format_cell(v['held_out_pvalue'])} -> "
                          + ("leakage detected" if v["detected"] else "not detected")
                          + f" (association p = {format_cell(v['association_pvalue'])})")
    for key, value in summary["timings_s"].items():
        console.print(f"{key}: {value:.1f}")
    console.print(f"results: {path}/results.json   report: {path}/report.html")


def register(app: typer.Typer) -> None:
    app.command("probe")(probe)
