"""The options every method run shares: model, device, dtype, batch size, limit, seed,
run directory and resume. The CLI's common flags and the keywords of the Python API
(:mod:`ctxleak.api`) are these, under the same names."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any, Optional

from ctxleak.engine.model_args import parse_model_args
from ctxleak.engine.served_options import (
    check_request_timeout,
    check_retries,
    check_server_url,
    normal_server_url,
)
from ctxleak.errors import ConfigError
from ctxleak.run.params import option
from ctxleak.run.validate import check_common


@dataclass(frozen=True)
class RunOptions:
    """What a run needs besides its method: stored in ``config.json`` under these names."""

    model: str = option("default", "'default' (SmolLM2-135M-Instruct), 'gemma-270m', a Hugging "
                        "Face id, a local model directory or a .gguf file.")
    device: str = option("auto", "auto, cpu, cuda, cuda:N or mps.")
    dtype: str = option("auto", "auto (float32 on CPU, bfloat16 on GPUs that have it), float32, "
                        "bfloat16 or float16.")
    batch_size: str = option("auto", "Examples measured together: auto (as many as fit a token "
                             "budget, halving on out-of-memory) or a number N.")
    batch_invariant: bool = option(True, "Every number written for an example comes from "
                                   "forward passes over that example alone, so the samples do "
                                   "not depend on the batch size (off: faster, floats move by "
                                   "about 1e-5).")
    limit: int | None = option(None, "Use only the first N examples.")
    seed: int = option(0, "Run seed; each example's sampling seed is derived from it and the "
                       "example's index.")
    output: str | None = option(None, "Run directory (default: runs/<command>-<time>).")
    resume: bool = option(False, "Continue the run in ``output``, skipping finished examples; "
                          "refuses a changed config.")
    chat_template: str = option("auto", "auto (the model's chat template if it has one; icl "
                                "and susceptibility: off), on or off.")
    trust_remote_code: bool = option(False, "Allow a hub model's own code to run.")
    device_map: Optional[str] = option(None, "'auto' spreads a large model over the GPUs "
                                       "(accelerate).")
    threads: Optional[int] = option(None, "CPU threads for torch (default: torch's choice).")
    server_url: Optional[str] = option(None, "Base URL of a server that serves the model over an "
                                       "OpenAI-compatible API (vLLM: exact log-probs), e.g. "
                                       "http://127.0.0.1:8000; the API key, if any, comes "
                                       "from CTXLEAK_API_KEY or OPENAI_API_KEY.")
    served_model: Optional[str] = option(None, "The name the server serves the model under "
                                         "(default: its only model).")
    tokenizer: Optional[str] = option(None, "The served model's tokenizer, a Hugging Face id "
                                      "or folder (default: the model's own; checked against "
                                      "the server's).")
    request_timeout: Optional[float] = option(None, "Seconds one request to the served model "
                                              "may take (the whole answer) before it counts "
                                              "as failed (default: 600).")
    retries: Optional[int] = option(None, "Times a request to the served model that failed for "
                                    "a transient reason (refused connection, timeout, HTTP 429 "
                                    "or 5xx) is sent again (default: 3; 0: tried once).")
    revision: Optional[str] = option(None, "Hub model revision: a branch, tag or commit hash "
                                     "(default: the main branch; the commit used is recorded).")
    model_args: Any = option(None, "More keyword arguments of transformers' from_pretrained, "
                             "'key=value,key2=value2' or a mapping, e.g. "
                             "'attn_implementation=eager' (recorded in the provenance).")
    keep_texts: bool = option(False, "Keep the run's texts whole in its folder: by default "
                              "the secrets and direct identifiers found in them (passwords, keys, "
                              "PINs, ids, e-mail addresses, phone numbers) are masked in "
                              "samples.jsonl, results.json and report.html.")

    def __post_init__(self) -> None:
        if isinstance(self.server_url, str):
            object.__setattr__(self, "server_url", normal_server_url(self.server_url))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    def check(self) -> RunOptions:
        """Errors name the parameter (the CLI maps it to its flag)."""
        check_common(limit=self.limit, batch_size=self.batch_size, threads=self.threads)
        check_server_url(self.server_url)
        check_request_timeout(self.request_timeout)
        check_retries(self.retries)
        check_served_only(self)
        parse_model_args(self.model_args)
        if not isinstance(self.batch_invariant, bool):
            raise ConfigError(f"batch_invariant must be True or False, not "
                              f"{self.batch_invariant!r}", param="batch_invariant")
        return self


#: Options that only a served model reads: without ``server_url`` the model runs in this
#: process and they would be ignored (and recorded as if they had been used).
SERVED_ONLY = ("served_model", "tokenizer", "request_timeout", "retries")

def check_served_only(options: RunOptions) -> None:
    """Refuse an option of :data:`SERVED_ONLY` given without ``server_url``."""
    if options.server_url is not None:
        return
    given = [name for name in SERVED_ONLY if getattr(options, name) is not None]
    if given:
        name = given[0]
        raise ConfigError(f"{name} is for a model on a server and needs server_url=URL (the "
                          "server's base URL, e.g. http://127.0.0.1:8000); without it the "
                          "model runs in this process and would ignore it: give server_url=URL, "
                          "or leave it out", param=name, also=("server_url",))


def float_list(value: Any, param: str) -> list[float]:
    """A number, a list of numbers or a comma list (``"0.5,1,1.5"``) as floats; errors name
    ``param``."""
    if value is None:
        return []
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return [float(value)]
    try:
        if isinstance(value, (list, tuple)):
            values = [float(v) for v in value]
        else:
            values = [float(v) for v in str(value).split(",") if v.strip()]
    except (TypeError, ValueError):
        raise ConfigError(f"{param} must be a number or a comma list of numbers, not '{value}'",
                          param=param) from None
    bad = [v for v in values if not math.isfinite(v)]
    if bad:
        raise ConfigError(f"{param} must be finite numbers, not {bad[0]}", param=param)
    return values


def int_list(value: Any, param: str) -> list[int]:
    """An integer, a list of integers or a comma list (``"1,2,4"``); errors name ``param``."""
    if value is None:
        return []
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    try:
        if isinstance(value, (list, tuple)):
            out = [int(v) for v in value]
            if any(float(v) != i for v, i in zip(value, out)):
                raise ValueError
            return out
        return [int(v) for v in str(value).split(",") if v.strip()]
    except (TypeError, ValueError):
        raise ConfigError(f"{param} must be an integer or a comma list of integers, not "
                          f"'{value}'", param=param) from None
