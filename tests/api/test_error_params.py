"""Library errors name keyword parameters, the CLI shows flags (SPEC §11): each library message
below names its keywords and no flag; the same error through the CLI's rewrite
(:func:`ctxleak.errors.flag_message` with the command's real flags) names the flags instead."""

from __future__ import annotations

import re

import numpy as np
import pytest

import ctxleak
from ctxleak.cli.app import command_flags
from ctxleak.errors import ConfigError, CtxleakError, InputError, flag_message


def _label_scoring(lm):
    from ctxleak.methods.icl.pipeline import LabelScorer

    LabelScorer(lm, ["capital city", "capital country", "no"], "first-token")


def _entity_contexts(lm):
    from ctxleak.methods.susceptibility.contexts import sample_context_mix

    sample_context_mix(["a"], [], 4, 1, np.random.default_rng(0))


def _context_mix(lm):
    from ctxleak.methods.susceptibility.contexts import check_context_mix

    check_context_mix(6, 8)


def _subset_size(lm):
    ctxleak.audit(lm, "demo", subset_size=10**6)


def _task_template(lm):
    from ctxleak.methods.influence.data import load_examples

    load_examples("demo", task="custom")


def _ngram(lm):
    from ctxleak.methods.influence.ngrams import windows

    windows(4, 9)


def _shots_window(lm):
    ctxleak.iclinf(lm, "demo", shots=0)


def _soft_lr(lm):
    ctxleak.probe(lm, "demo", mode="white-box", soft_lr=0)


def _canary_lr(lm):
    ctxleak.probe(lm, "demo", canary=2, canary_lr=0)


def _chat_template(lm):
    from ctxleak.engine.models import load_model

    load_model("default", chat_template="maybe")


CASES = [  # (raise it, command, {keyword: flag} the message must name)
    (_label_scoring, "icl", {"label_scoring": "--label-scoring", "labels": "--labels"}),
    (_entity_contexts, "susceptibility", {"entity_contexts": "--entity-contexts",
                                          "context_entities": "--context-entities"}),
    (_context_mix, "susceptibility", {"entity_contexts": "--entity-contexts",
                                      "contexts": "--contexts"}),
    (_subset_size, "audit", {"subset_size": "--subset-size", "label": "--label",
                             "data": "--data"}),
    (_task_template, "influence", {"task": "--task", "template": "--template"}),
    (_ngram, "influence", {"ngram": "--ngram"}),
    (_shots_window, "icl", {"shots": "--shots"}),
    (_soft_lr, "probe", {"soft_lr": "--soft-lr"}),
    (_canary_lr, "probe", {"canary_lr": "--canary-lr"}),
    (_chat_template, "influence", {"chat_template": "--chat-template"}),
]


def _word(name: str, text: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text) is not None


@pytest.mark.parametrize("raise_it,command,names", CASES,
                         ids=[c[0].__name__.strip("_") for c in CASES])
def test_library_names_keywords_and_cli_names_flags(raise_it, command, names, llama_lm):
    with pytest.raises(CtxleakError) as err:
        raise_it(llama_lm)
    library = str(err.value)
    assert "--" not in library, library
    assert all(_word(k, library) for k in names), library
    cli = flag_message(err.value, command_flags([command]))
    for keyword, flag in names.items():
        assert flag in cli, cli
        rest = cli.replace(flag, "")
        assert not re.search(rf"(?<![\w-]){keyword}=", rest), cli  # no keyword=value left
        if "_" in keyword:  # an identifier, never an English word: no mention left at all
            assert not _word(keyword, rest), cli


def test_flag_message_rewrites_suggested_values_and_switches():
    flags = {"label_scoring": "--label-scoring", "labels": "--labels", "resume": "--resume",
             "output": "--output"}
    exc = ConfigError("labels share a token: use label_scoring='full', or rename the labels "
                      "with labels=...", param="label_scoring", also=("labels",))
    assert flag_message(exc, flags) == ("labels share a token: use --label-scoring='full', or "
                                        "rename the labels with --labels=...")
    exc = ConfigError("pass resume=True or choose another output=...", also=("resume", "output"))
    assert flag_message(exc, flags) == "pass --resume or choose another --output=..."
    exc = InputError("unknown label 'x' (set them with labels=...)", file="a.jsonl", line=3,
                     field="label", also=("labels",))
    assert flag_message(exc, flags) == \
        "a.jsonl:3, field 'label': unknown label 'x' (set them with --labels=...)"
