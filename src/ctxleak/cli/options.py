"""The common flags of every model command, added to a command by a decorator so each
command's own signature lists only its own flags."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any, Optional

import typer

from ctxleak.run.options import RunOptions

#: The common flags' values: the library's run options (:class:`ctxleak.run.options.RunOptions`).
CommonOptions = RunOptions


def api_options(common: RunOptions) -> dict[str, Any]:
    """The run options as keywords of a :mod:`ctxleak.api` function (``model`` apart)."""
    return {k: v for k, v in common.to_dict().items() if k != "model"}


#: How count flags are named, said in --limit's help.
COUNT_RULE = ("Counts are named by what they count: --limit N is how many items of the data "
              "run; --queries, --subjects and --sequences set how many a command draws or makes, "
              "--contexts and --shots how many go with each item, --max-new-tokens how many "
              "tokens each generation may add.")

#: The generation flags that several commands declare, each by its one meaning: flag -> the start
#: of its help, which each command ends with what is its own (a default, one value or a sweep).
GENERATION_HELP = {
    "--template": "Prompt template with {context} and {query}",
    "--lambda": "Context influence level λ ≥ 0",
    "--temperature": "Sampling temperature",
    "--max-new-tokens": "Most new tokens",
    "--min-new-tokens": "EOS is masked before this many tokens",
}


def generation_option(flag: str, default: Any, rest: str) -> Any:
    """The typer option ``flag`` with ``default``; its help: ``GENERATION_HELP[flag] + rest``."""
    return typer.Option(default, flag, help=GENERATION_HELP[flag] + rest)


#: typer.Option in the help panel of the model flags, and in that of the run flags.
_MODEL = functools.partial(typer.Option, rich_help_panel="Model")
_RUN = functools.partial(typer.Option, rich_help_panel="Run")

_COMMON: list[tuple[str, Any, Any]] = [  # (name, annotation, typer.Option)
    ("model", str, _MODEL(
        "default", "--model", "-m", help="'default' (SmolLM2-135M-Instruct), 'gemma-270m', a "
        "Hugging Face id, a local model directory or a .gguf file.")),
    ("device", str, _MODEL("auto", "--device", help="auto, cpu, cuda, cuda:N or mps.")),
    ("dtype", str, _MODEL("auto", "--dtype", help="auto (float32 on CPU, bfloat16 on GPUs that "
                          "have it), float32, bfloat16 or float16.")),
    ("chat_template", str, _MODEL("auto", "--chat-template", help="auto (the model's chat "
                                  "template if it has one; icl and susceptibility: off), on or "
                                  "off.")),
    ("trust_remote_code", bool, _MODEL(False, "--trust-remote-code", help="Allow a hub model's "
                                       "own code to run (off by default).")),
    ("device_map", Optional[str], _MODEL(None, "--device-map", help="'auto' spreads a large "
                                         "model over the GPUs (accelerate).")),
    ("threads", Optional[int], _MODEL(None, "--threads", help="CPU threads for torch (default: "
                                      "torch's choice). On a shared or busy machine 1 is often "
                                      "fastest.")),
    ("server_url", Optional[str], _MODEL(
        None, "--server-url", help="Measure a model served over an OpenAI-compatible API at "
        "this base URL (vLLM for exact log-probs), e.g. http://127.0.0.1:8000; --model then "
        "names it for ctxleak and gives its tokenizer. API key: env CTXLEAK_API_KEY or "
        "OPENAI_API_KEY.")),
    ("served_model", Optional[str], _MODEL(
        None, "--served-model", help="The name the server serves the model under (default: "
        "its only model).")),
    ("tokenizer", Optional[str], _MODEL(
        None, "--tokenizer", help="The served model's tokenizer: a Hugging Face id or folder "
        "(default: --model's own); checked against the server's before the run.")),
    ("request_timeout", Optional[float], _MODEL(
        None, "--request-timeout", metavar="SECONDS", help="With --server-url: seconds one "
        "request may take (the whole answer) before it counts as failed and is sent again "
        "(default: 600). Changes no number: a run may resume with another value.")),
    ("retries", Optional[int], _MODEL(
        None, "--retries", metavar="N", help="With --server-url: times a request that failed "
        "for a transient reason (refused connection, timeout, HTTP 429 or 5xx) is sent again, "
        "with exponential backoff (default: 3; 0: tried once). Changes no number: a run may "
        "resume with another value.")),
    ("revision", Optional[str], _MODEL(None, "--revision", help="Hub model revision: a branch, "
                                       "tag or commit hash (default: the main branch; the "
                                       "commit used is recorded in results.json).")),
    ("model_args", Optional[str], _MODEL(None, "--model-args", help="More arguments of "
                                         "transformers' from_pretrained, "
                                         "'key=value,key2=value2', e.g. "
                                         "'attn_implementation=eager' (recorded in "
                                         "results.json).")),
    ("batch_size", str, _RUN("auto", "--batch-size", help="Examples measured together: auto "
                             "(as many as fit a token budget, halving on out-of-memory) or a "
                             "number N. Same seed, same samples whatever the size (see "
                             "--batch-invariant).")),
    ("batch_invariant", bool, _RUN(
        True, "--batch-invariant/--no-batch-invariant", help="On (default): every number "
        "written for an example comes from forward passes over that example alone, so "
        "samples.jsonl is byte-identical whatever --batch-size, the examples in flight or "
        "torchrun sharding (generation is still batched across examples). Off: scoring passes "
        "mix examples (N rows each under --batch-size N; faster on GPUs) and floats move by "
        "about 1e-5 between batch sizes; tokens stay the same.")),
    ("limit", Optional[int], _RUN(None, "--limit", help="Run only the first N items of the data "
                                  "(examples, queries, relations, subjects or sequences per "
                                  "target). " + COUNT_RULE)),
    ("seed", int, _RUN(0, "--seed", help="Run seed; each example's sampling seed is derived "
                       "from it and the example's index.")),
    ("output", Optional[str], _RUN(None, "--output", "-o", help="Run directory (default: "
                                   "runs/<command>-<time>).")),
    ("resume", bool, _RUN(False, "--resume", help="Continue the run in --output, skipping "
                          "finished examples; refuses a changed config.")),
    ("keep_texts", bool, _RUN(False, "--keep-texts", help="Keep the run's texts whole in its "
                              "folder. By default the secrets and direct identifiers found in "
                              "them (passwords, keys, PINs and door codes, ids, e-mail addresses, "
                              "phone numbers) are masked in every file the run writes, so the "
                              "folder is safe to forward.")),
    ("config", Optional[str], _RUN(None, "--config", help="YAML file of flag defaults "
                                   "(max-new-tokens: 20, ...); flags on the command line "
                                   "win.")),
]
COMMON_NAMES = [name for name, _, _ in _COMMON if name != "config"]


def flags_signature(func: Callable[..., Any], replaced: str,
                    flags: Sequence[tuple[str, Any, Any]]) -> inspect.Signature:
    """``func``'s signature with its parameter ``replaced`` taken out and ``flags`` (name,
    annotation, typer.Option) added after its own as keyword-only ones: what a decorator that
    adds CLI flags shows typer."""
    sig = inspect.signature(func)
    own = [p for p in sig.parameters.values() if p.name != replaced]
    extra = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                               annotation=annotation) for name, annotation, default in flags]
    positional = [p for p in own if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    keyword = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own if p not in positional]
    return sig.replace(parameters=positional + keyword + extra)


def with_common_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Give ``func(common: CommonOptions, ...)`` the common flags as CLI options."""
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        kwargs.pop("config", None)  # read by ctxleak.cli.app.main before the command runs
        common = CommonOptions(**{name: kwargs.pop(name) for name in COMMON_NAMES})
        # checked before the command does anything, the model load included
        common.check()
        return func(*args, common=common, **kwargs)

    wrapper.__signature__ = flags_signature(func, "common", _COMMON)  # type: ignore
    return wrapper

