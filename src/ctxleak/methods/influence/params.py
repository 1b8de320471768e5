"""The influence method's options (Context Influence Decoding, "Estimating Privacy Leakage of
Augmented Contextual Knowledge in Language Models", Def. 3.1-3.4 and App. B): one frozen
dataclass that checks itself."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ctxleak.bundled import with_prompt
from ctxleak.errors import ConfigError, warn
from ctxleak.methods.influence.mechanism_mode import check_mechanism_options, mechanism_list
from ctxleak.methods.influence.setting import InfluenceOptions, Setting, eps_list, settings_grid
from ctxleak.methods.rag.app_prompt import AppPromptChoice, load_prompt_messages
from ctxleak.methods.rag.budgets import CLASS_FIELD, Budgets, parse_budgets
from ctxleak.methods.rag.passages import SPLITS
from ctxleak.methods.rag.spans import LOG_FORMATS
from ctxleak.run.classes import resolve_classes
from ctxleak.run.inputs import is_named
from ctxleak.run.options import float_list, int_list
from ctxleak.run.params import option
from ctxleak.run.validate import (
    check_limit,
    check_nonempty,
    check_number,
    check_template,
    check_unique,
)

#: Bundled sets asked under their app's own prompt by default (:data:`ctxleak.bundled.BUNDLED_SETS`):
#: ``demo-datastore``'s app asks through the model's chat template for the short answer (the
#: built-in ``short-answer``).
DEMO_PROMPTS = with_prompt()


def parse_ngram(value: Any) -> int | None:
    """``"full"``/None (the whole context, n = |D|) or a positive window size."""
    if value is None or value == "full":
        return None
    try:
        n = int(value)
        if isinstance(value, float) and value != n:
            raise ValueError
    except (TypeError, ValueError):
        raise ConfigError(f"ngram must be 'full' or a positive integer, not '{value}'",
                          param="ngram") from None
    if n < 1:
        raise ConfigError(f"ngram must be >= 1, not {n}", param="ngram")
    return n


#: The sampling temperature of an in-process run when none is given (a served model's: 1).
DEFAULT_TEMPERATURE = 0.8
#: A served model's default temperature: its influence is measured from temperature-1 log-probs.
SERVED_TEMPERATURE = 1.0


@dataclass(frozen=True)
class InfluenceParams:
    """The parameters of ``ctxleak influence``, checked and normalised on construction: ``lambda_``,
    ``temperature`` and ``context_sizes`` become tuples (a number, a list or a comma list are
    accepted; lists sweep), ``ngram`` an integer or None (the whole context), ``min_new_tokens``
    its default 10 (or ``max_new_tokens`` if smaller)."""

    task: str = option("auto", "qa, summarization, custom (needs ``template``) or auto (each "
                       "example's ``task`` field, else qa).")
    template: str | None = option(None, "Prompt template with {context} and {query}, e.g. "
                                  "'Document: {context}. {query}'.")
    fields: str | Mapping[str, str] | None = option(
        None, "Rename file fields, e.g. 'article=context,highlights=reference' or a mapping.")
    lambda_: float | Sequence[float] | str = option(
        1.0, "Context influence level λ >= 0 (0 = no context, 1 = plain decoding, >1 "
        "amplifies); a list sweeps.")
    temperature: float | Sequence[float] | str | None = option(
        None, "Sampling temperature > 0; a list sweeps. Default: 0.8 in-process; 1 against a "
        "served model (its influence is measured from temperature-1 log-probs), said in one "
        "line.")
    max_new_tokens: int = option(50, "Most new tokens per response.")
    min_new_tokens: int | None = option(
        None, "EOS is masked before this many tokens, in both streams (default: 10, or "
        "``max_new_tokens`` if smaller).")
    ngram: int | str | None = option(
        "full", "'full' (the whole context, n = |D|) or n: also the influence of every n-token "
        "window of the context.")
    stride: int | None = option(None, "Window stride (default n: non-overlapping windows).")
    context_sizes: int | Sequence[int] | str | None = option(
        None, "Also truncate contexts to their first k tokens, e.g. 32,64,128,256.")
    bounded_eps: float | Sequence[float | None] | str | None = option(
        None, "Bounded CID: ε-DP per token for any n-gram (App. B); λ becomes the upper bound "
        "λ_max. A list sweeps, combined with every λ: 'none' (or None) is plain CID, 'inf' "
        "the same (no bound), 0 forces λ_t = 0 (the no-context answer), e.g. 'none,2,8'.")
    mechanisms: Any = option(
        None, "Other mechanisms than CID, each a decoding mode of the run scored as CID at "
        "λ = 1 scores an answer: 'dp-vote:eps=2,shards=4', 'dp-sparse-vote:eps=2,shards=4,"
        "threshold=0.5', 'dp-rag:eps=5', 'scrub:operator=replace' (a list, or mechanism "
        "objects); each at every temperature, beside the λ and ε settings.")
    datastore: Any = option(
        None, "The datastore the mechanisms retrieve from, as their papers define them (each "
        "vote's voters from their own shards, DP-RAG's private retrieval over every document): "
        "a JSONL file of {id, text}, or 'retrieved' for each question's own retrieved list (the "
        "claim then covers that list, not the datastore). Default: the bundled set's own "
        "datastore (demo-datastore), else every document the examples retrieved, pooled by id.")
    classes: Any = option(
        None, "Document classes, as ctxleak serve --classes takes them: a JSONL or CSV file of "
        "id and class rows, 'demo-datastore' for the bundled datastore's, or a mapping. A "
        "document of class public stays in every prompt at full strength (CID's prompt "
        "without the documents included) and no setting bounds or charges it; the mechanisms "
        "read the private documents only.")
    deployed_temperature: float | None = option(
        None, "The temperature the team deploys (0: greedy): the sweep's default when no "
        "temperature is given, so that it measures the decoding that is served (greedy: CID's "
        "answers drawn greedily and scored at T = 1; the DP mechanisms sample by their "
        "definition, at T = 1); the run warns, in the console and the report, when it measured "
        "at another. Default: a served model's greedy default (0) against a server, for the "
        "warning only.")
    repeat_threshold: float = option(0.5, "Response-to-context overlap above which a response "
                                     "counts as repeating its context, in [0, 1].")
    rouge_threshold: float = option(0.5, "ROUGE-L above which a response counts as close to "
                                    "its reference, in [0, 1].")
    bertscore_model: str | None = option(None, "BERTScore model of the quality scores (none: "
                                         "not computed).")
    factkb_model: str | None = option(None, "FactKB model of the quality scores (none: not "
                                      "computed).")
    redact: bool = option(False, "Mask PII (e-mails, phone numbers, addresses, names) in the "
                          "report and console.")
    control: bool = option(True, "Also score each response with another example's context "
                           "(the nearest one whose context is another document): what any context does to "
                           "the query; each example is reported above it. False: no control.")
    controls: int | None = option(
        None, "Control contexts per example (other examples' documents, nearest first). "
        "Default: 1 with 20 examples or more; with fewer, enough for 20 control influences in "
        "all (at most one per other example), so that a flag has a stated false-flag rate.")
    passages: str | None = option(None, "Split each context into passages, 'sentence' or "
                                  "'paragraph', and measure each passage's influence (left "
                                  "out, response scored); a row's own 'passages' list is used "
                                  "as it is.")
    exposure_budget: float | None = option(
        None, "Retrieved documents: the most leave-one-out influence (nats, summed over every "
        "answer whose context held the document) a document may have; those above it are "
        "listed as over the budget (the CLI then exits with status 3).")
    log_format: str = option("auto", "How to read a data file: 'rows' (one example a line), "
                             "'openinference' (OpenInference/OpenTelemetry spans as JSONL, one "
                             "row per trace) or 'auto' (spans when the first line is one).")
    class_field: str = option(CLASS_FIELD, "Retrieved documents: the metadata field that gives "
                              "a document's class (e.g. public, internal, restricted).")
    class_budgets: Mapping[str, float] | str | None = option(
        None, "Retrieved documents: a leak budget per class, {'restricted': 0, 'internal': 5} "
        "or 'restricted=0,internal=5' (nats above the per-document control, summed over the "
        "answers in which the document leaked; a copy exceeds a budget of 0). Class 'public' "
        "never fails; a class no document has is an error.")
    document_budgets: Mapping[str, float] | str | None = option(
        None, "Retrieved documents: a leak budget per document id (nats, as class_budgets), "
        "{'hr-7': 0} or 'hr-7=0'; it wins over the document's class budget.")
    prompt_messages: Any = option(
        None, "The app's prompt as chat messages with {context} and {query} (a list of "
        "{'role', 'content'}, or a JSON file's path): each logged answer is scored under them, "
        "through the model's chat template.")
    system_prompt: str | None = option(None, "The app's system prompt: scored as a system "
                                       "message before one user turn holding the template.")
    app_prompt: bool | None = option(
        None, "Score logged answers under the app's prompt: None uses a trace's LLM input "
        "messages where it has them, True requires them (or prompt_messages), False uses "
        "ctxleak's template.")

    def __post_init__(self) -> None:
        def put(name: str, value: Any) -> None:
            object.__setattr__(self, name, value)

        lams = check_nonempty(float_list(self.lambda_, "lambda_"), "lambda_", "1.0 or 0.5,1,1.5")
        given = self.temperature if self.temperature is not None else DEFAULT_TEMPERATURE
        temps = check_nonempty(float_list(given, "temperature"), "temperature", "0.8")
        put("lambda_", tuple(check_unique(lams, "lambda_")))
        if self.bounded_eps is not None:
            eps = check_nonempty(eps_list(self.bounded_eps, "bounded_eps"), "bounded_eps",
                                 "2 or none,2,8")
            # 'none' alone is plain CID: the run of no --bounded-eps
            put("bounded_eps", None if eps == [None] else tuple(eps))
            if 0.0 in eps and len(lams) > 1:
                warn("bounded_eps 0 forces λ_t = 0 at every token whatever λ_max: its "
                     f"{len(lams)} λ settings are the same decoding (the no-context answer)",
                     param="bounded_eps")
        # None stays None until the model is known (:meth:`with_default_temperature`)
        if self.temperature is not None:
            put("temperature", tuple(check_unique(temps, "temperature")))
        if self.context_sizes is not None:
            sizes = check_nonempty(int_list(self.context_sizes, "context_sizes"),
                                   "context_sizes", "32,64,128")
            put("context_sizes", tuple(check_unique(sizes, "context_sizes")))
        for param in ("repeat_threshold", "rouge_threshold"):
            check_number(getattr(self, param), param, minimum=0.0, maximum=1.0)
        if self.stride is not None:
            check_limit(self.stride, "stride")
        check_template(self.template, "template", ("context", "query"), required=("context",))
        if self.min_new_tokens is None:
            put("min_new_tokens", min(10, self.max_new_tokens))
        put("ngram", parse_ngram(self.ngram))
        if self.passages is not None and self.passages not in SPLITS:
            raise ConfigError(f"passages must be {' or '.join(SPLITS)}, not "
                              f"'{self.passages}'", param="passages")
        if self.exposure_budget is not None:
            check_number(self.exposure_budget, "exposure_budget", minimum=0.0)
        for name in ("class_budgets", "document_budgets"):
            put(name, parse_budgets(getattr(self, name), name) or None)
        if not isinstance(self.class_field, str) or not self.class_field.strip():
            raise ConfigError("class_field must be a metadata field's name",
                              param="class_field")
        if self.log_format not in LOG_FORMATS:
            raise ConfigError(f"log_format must be {', '.join(LOG_FORMATS)}, not "
                              f"'{self.log_format}'", param="log_format")
        self._check_app_prompt(put)
        if self.mechanisms is not None:
            put("mechanisms", mechanism_list(self.mechanisms) or None)
            check_mechanism_options(self)
        resolve_classes(self.classes)  # a missing file or a bad mapping named now
        if self.deployed_temperature is not None and (
                isinstance(self.deployed_temperature, bool)
                or not isinstance(self.deployed_temperature, (int, float))
                or not math.isfinite(self.deployed_temperature) or self.deployed_temperature < 0):
            raise ConfigError(f"deployed_temperature must be a finite number >= 0 (0: greedy), "
                              f"not {self.deployed_temperature!r}", param="deployed_temperature")
        if self.datastore is not None and not self.mechanisms:
            raise ConfigError("datastore is read by the mechanisms only: give mechanisms too, or "
                              "leave it out", param="datastore", also=("mechanisms",))
        if self.controls is not None:
            check_limit(self.controls, "controls")
        if not isinstance(self.control, bool):
            raise ConfigError(f"control must be True or False, not {self.control!r}",
                              param="control")
        options = self.options()
        try:  # every setting checked before anything heavy
            settings = self.grid()
            for setting in settings:
                options.cid(setting)
        except ConfigError as exc:  # CID's λ is ``lam``; this face's keyword is lambda_
            if exc.param != "lam":
                raise
            raise ConfigError(str(exc).replace("lam", "lambda_", 1), param="lambda_") from None
        for setting in settings:
            if setting.context_tokens is not None and setting.context_tokens < 1:
                raise ConfigError("context_sizes must be positive integers",
                                  param="context_sizes")

    def _check_app_prompt(self, put: Any) -> None:
        """``prompt_messages`` read and checked (:func:`.app_prompt.load_prompt_messages`),
        ``system_prompt`` a string, ``app_prompt`` None, True or False and not False with
        either of them."""
        if self.prompt_messages is not None:
            put("prompt_messages", load_prompt_messages(self.prompt_messages))
        if self.system_prompt is not None and not isinstance(self.system_prompt, str):
            raise ConfigError("system_prompt must be a string", param="system_prompt")
        if self.app_prompt not in (None, True, False):
            raise ConfigError(f"app_prompt must be None, True or False, not "
                              f"{self.app_prompt!r}", param="app_prompt")
        if self.app_prompt is False and self.app_choice().given:
            raise ConfigError("app_prompt=False scores under ctxleak's template: leave out "
                              "prompt_messages and system_prompt, or app_prompt",
                              param="app_prompt", also=("prompt_messages", "system_prompt"))

    def app_choice(self, data: Any = None) -> AppPromptChoice:
        """The app's prompt as the run chose it (:mod:`.app_prompt`); a bundled set that comes
        with its app's prompt (:data:`DEMO_PROMPTS`) is asked under it where the run gives no
        prompt of its own and does not ask for ctxleak's template (``app_prompt=False``)."""
        messages = self.prompt_messages
        if messages is None and self.system_prompt is None and self.app_prompt is not False:
            for name, prompt in DEMO_PROMPTS.items():
                if is_named(data, name):
                    messages = load_prompt_messages(prompt)
        return AppPromptChoice(messages, self.system_prompt, self.app_prompt)

    def with_default_temperature(self, served: bool) -> InfluenceParams:
        """These parameters with the temperature the user did not give filled in: 0.8
        in-process, 1 against a served model (said in one line), never refusing a setting the
        user did not choose; unchanged where a temperature was given."""
        if self.temperature is not None:
            return self
        if self.deployed_temperature is not None:  # the decoding the team deploys
            deployed = float(self.deployed_temperature)
            return replace(self, temperature=(deployed if deployed > 0 else SERVED_TEMPERATURE,))
        if served:
            warn(f"temperature {SERVED_TEMPERATURE:g}: the default against a served model, "
                 f"whose influence is measured from temperature-1 log-probs (in-process the "
                 f"default is {DEFAULT_TEMPERATURE:g}); give --temperature to choose",
                 param="temperature")
        return replace(self, temperature=SERVED_TEMPERATURE if served else DEFAULT_TEMPERATURE)

    def budgets(self) -> Budgets:
        """The leak budgets per class and per document (:mod:`ctxleak.methods.rag.budgets`)."""
        return Budgets(self.class_field, dict(self.class_budgets or {}),  # type: ignore[arg-type]
                       dict(self.document_budgets or {}))  # type: ignore[arg-type]

    @property
    def temperatures(self) -> list[float]:
        """The temperatures swept: the given ones, else the in-process default (a served run
        fills in its own first, :meth:`with_default_temperature`)."""
        given = self.temperature if self.temperature is not None else (DEFAULT_TEMPERATURE,)
        return [float(t) for t in given]  # type: ignore[union-attr]

    @property
    def sizes(self) -> list[int | None]:
        """The context sizes measured: None is the whole context."""
        return [None] if self.context_sizes is None else list(self.context_sizes)  # type: ignore[arg-type]

    def deploys_greedily(self) -> bool:
        """Whether the sweep draws CID's answers greedily, as a greedy deployment does
        (``deployed_temperature`` 0 and no temperature of its own but the T = 1 it scores
        at); a temperature the user chose is sampled at, and the run warns."""
        return self.deployed_temperature == 0 and (
            self.temperature is None or self.temperatures == [SERVED_TEMPERATURE])

    def options(self) -> InfluenceOptions:
        """What the pipeline needs besides λ and T."""
        return InfluenceOptions(max_new_tokens=self.max_new_tokens,
                                min_new_tokens=self.min_new_tokens,  # type: ignore[arg-type]
                                bounded_eps=None, ngram=self.ngram,  # type: ignore[arg-type]
                                stride=self.stride, template=self.template,
                                repeat_threshold=self.repeat_threshold,
                                rouge_threshold=self.rouge_threshold, control=self.control,
                                greedy=self.deploys_greedily())

    def grid(self) -> list[Setting]:
        """Every (λ, T, bounded ε, context size) setting, in the order of each example's
        samples. A sweep (two settings or more) with a mitigated one (λ ≠ 1 or a bound) has
        each context size's settings led by the unmitigated baseline (λ = 1, no bound) at every
        T where it lacks it: every setting's utility difference is read against it. A run of
        one setting measures that setting alone."""
        lams: list[float] = list(self.lambda_)  # type: ignore[arg-type]
        mechanisms = list(self.mechanisms or ())
        asked = settings_grid(lams, self.temperatures, self.sizes, self.eps_values,
                              mechanisms=mechanisms)
        mitigated = any(not s.is_baseline for s in asked)
        return settings_grid(lams, self.temperatures, self.sizes, self.eps_values,
                             baseline=mitigated and len(asked) > 1, mechanisms=mechanisms)

    @property
    def eps_values(self) -> list[float | None]:
        """The bounded ε values swept (ε-DP per token); [None]: plain CID."""
        return [None] if self.bounded_eps is None else list(self.bounded_eps)  # type: ignore[arg-type]

    def to_config(self) -> dict[str, Any]:
        """The method's part of ``config.json`` (``lambda_`` stored as ``lambda``)."""
        options = self.options()
        return {"task": self.task, "template": self.template, "fields": self.fields,
                "lambda": list(self.lambda_), "temperature": self.temperatures,  # type: ignore[arg-type]
                "context_sizes": self.sizes, "bertscore_model": self.bertscore_model,
                "factkb_model": self.factkb_model, "redact": self.redact,
                "passages": self.passages,
                # stored when set, so a run folder from before these options still resumes
                **({} if self.log_format == "auto" else {"log_format": self.log_format}),
                **({} if self.prompt_messages is None else {"prompt_messages": [
                    {"role": r, "content": c} for r, c in self.prompt_messages]}),
                **{k: getattr(self, k) for k in ("system_prompt", "app_prompt", "controls",
                                                  "deployed_temperature")
                   if getattr(self, k) is not None},
                **({} if not self.mechanisms else {"mechanisms": [
                    m.key() for m in self.mechanisms]}),
                **({} if self.datastore is None else {"datastore": str(self.datastore)}),
                **({} if self.classes is None else {"classes": dict(self.classes) if isinstance(
                    self.classes, Mapping) else str(self.classes)}),
                **({} if self.deployed_temperature is None
                   else {"deployed_temperature": float(self.deployed_temperature)}),
                **({} if self.exposure_budget is None
                   else {"exposure_budget": self.exposure_budget}),
                **({} if self.class_field == CLASS_FIELD else {"class_field": self.class_field}),
                **{k: dict(getattr(self, k)) for k in ("class_budgets", "document_budgets")
                   if getattr(self, k) is not None},
                **{k: v for k, v in options.__dict__.items() if k != "template"},
                # one value as a number (as before sweeps), several as a list
                "bounded_eps": (None if self.bounded_eps is None else self.bounded_eps[0]  # type: ignore[index]
                                if len(self.bounded_eps) == 1 else list(self.bounded_eps))}  # type: ignore[arg-type]


def greedy_temperature(params: InfluenceParams) -> InfluenceParams:
    """``params`` at T = 1 for a log whose answers were drawn greedily (T = 0) and a run that
    gave no temperature, said in one line: influence is a property of the model's
    next-token distribution, which a greedy decoder takes only the argmax of; T = 1 is that
    distribution as the model gives it."""
    warn("temperature 1: the log's answers were drawn greedily (T = 0), and are scored "
         "under the model's own next-token distribution (T = 1); give --temperature to "
         "choose", param="temperature")
    return replace(params, temperature=SERVED_TEMPERATURE)
