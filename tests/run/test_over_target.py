"""run_method over what answers: a Method is refused what it needs and the thing it runs over
lacks, before any request and before the run folder (a model-needing Method given a target, an
attack given a model); over a target, the journal wraps it before the Method sees it, and
``max_queries`` is refused by the journal before the first question is sent, on a fresh run and
on a resume (counting what the journal holds), in one wording."""

from __future__ import annotations

import pytest

from ctxleak.engine import capabilities as caps
from ctxleak.engine.capabilities import MissingCapability
from ctxleak.errors import ConfigError
from ctxleak.methods.attacks.attack_method import ExtractMethod, ExtractParams
from ctxleak.methods.influence.method import InfluenceMethod
from ctxleak.methods.influence.params import InfluenceParams
from ctxleak.run.options import RunOptions
from ctxleak.run.runner import run_method
from ctxleak.targets.base import ANSWERS, CAPABILITIES, FunctionTarget, TargetError
from ctxleak.targets.journal import JOURNAL_FILE, AnswerJournal

DOCS = [{"id": f"d{k}", "text": text} for k, text in enumerate([
    "Ana Lopez works in the Lisbon office and her badge number is 4471 since March.",
    "The quarterly roadmap moves the billing service to the new cluster in October.",
    "Payroll runs on the last Friday of each month through the finance portal.",
    "The on-call rotation for the storage team changes every Monday at nine."])]


class Counting:
    """A function target that records every question it is sent, failing on the ``fail``-th."""

    def __init__(self, fail: int = 0) -> None:
        self.asked: list[str] = []
        self.fail = fail

    def __call__(self, question: str) -> str:
        self.asked.append(question)
        if len(self.asked) == self.fail:
            raise TimeoutError("read timed out")
        return "no idea"


def extract(tmp_path, **params):
    return ExtractMethod(RunOptions(output=str(tmp_path / "run")), ExtractParams(**params))


def test_a_target_has_answers_only_and_the_attacks_need_nothing_else():
    assert CAPABILITIES == {ANSWERS} and not CAPABILITIES & caps.IN_PROCESS
    assert set(ExtractMethod().requires()) == {ANSWERS}


def test_a_target_given_to_influence_is_refused_before_any_request(tmp_path):
    fn = Counting()
    method = InfluenceMethod(RunOptions(output=str(tmp_path / "run")),
                             InfluenceParams(lambda_=1.0, temperature=1.0))
    with pytest.raises(MissingCapability) as info:
        run_method(method, FunctionTarget(fn, "app"), "demo", progress=False)
    needs = method.requires()
    assert set(info.value.missing) == set(needs) and ANSWERS not in needs
    message = str(info.value)
    assert "this influence run needs what Python function app cannot give" in message
    assert all(caps.DESCRIPTIONS[c] in message for c in needs)  # names each one it lacks
    assert fn.asked == [] and not (tmp_path / "run").exists()


def test_an_attack_given_a_model_is_refused_before_it_is_loaded(tmp_path, llama_lm,
                                                                monkeypatch):
    from ctxleak.run import runner

    monkeypatch.setattr(runner, "load_lm", lambda *a, **k: pytest.fail("model loaded"))
    for over in (llama_lm, None):  # loaded, or named by the run options (not loaded)
        with pytest.raises(MissingCapability,
                           match="answers to questions in text .*: attack-extract asks") as info:
            run_method(extract(tmp_path), over, DOCS, progress=False)
        assert info.value.missing == (ANSWERS,)
    assert not (tmp_path / "run").exists()
    with pytest.raises(ConfigError, match="a model or a target, not a str"):
        run_method(extract(tmp_path), "tiny-llama", DOCS, progress=False)  # type: ignore[arg-type]


def test_max_queries_is_refused_before_any_question_fresh_and_resumed(tmp_path):
    fn = Counting(fail=3)
    target = FunctionTarget(fn, "app")
    with pytest.raises(ConfigError) as info:  # fresh: 4 questions, 3 allowed
        run_method(extract(tmp_path), target, DOCS, progress=False, max_queries=3)
    assert info.value.param == "max_queries" and "\n" not in str(info.value)
    assert "need 4 new queries to the target and the journal holds 0 already: 4 in all, more " \
           "than the 3 allowed (nothing was sent)" in str(info.value)
    assert fn.asked == [] and not (tmp_path / "run").exists()
    with pytest.raises(TargetError):  # the third question fails: two answers journaled
        run_method(extract(tmp_path, batch=1), target, DOCS, progress=False)
    sent = list(fn.asked)
    with pytest.raises(ConfigError, match="need 2 new queries to the target and the journal "
                                          "holds 2 already: 4 in all, more than the 3"):
        run_method(extract(tmp_path, batch=1), target, DOCS, progress=False, resume=True,
                   max_queries=3)
    assert fn.asked == sent  # refused on the resume before its first question
    done = run_method(extract(tmp_path, batch=1), target, DOCS, progress=False, resume=True,
                      max_queries=4)
    assert done is not None and len(done.records) == len(DOCS)
    assert fn.asked[len(sent):] == [r["question"] for r in done.records[2:]]
    assert (done.summary["queries_sent"], done.summary["queries_replayed"]) == (2, 0)
    with AnswerJournal(tmp_path / "run" / JOURNAL_FILE) as journal:
        assert journal.count(target.fingerprint()) == len(DOCS)


def test_the_journal_wraps_the_target_so_a_resume_sends_nothing_twice(tmp_path):
    """A failure inside a batch: the answers had before it are journaled, not yet records; the
    resume reads them back from the journal and sends only the others."""
    fn = Counting(fail=3)
    target = FunctionTarget(fn, "app")
    with pytest.raises(TargetError, match="--resume --output"):
        run_method(extract(tmp_path, batch=4), target, DOCS, progress=False)
    samples = tmp_path / "run" / "samples.jsonl"
    assert not samples.exists() or not samples.read_text()  # the batch never finished
    first = list(fn.asked)
    done = run_method(extract(tmp_path, batch=4), target, DOCS, progress=False, resume=True)
    assert done is not None
    resent = fn.asked[len(first):]
    assert resent == first[2:] + [r["question"] for r in done.records[3:]]
    assert len(set(fn.asked)) == len(DOCS) and len(fn.asked) == len(DOCS) + 1
    assert (done.summary["queries_sent"], done.summary["queries_replayed"]) == (2, 2)
    assert done.config["target"] == "Python function app"
    assert done.config["target_fingerprint"] == target.fingerprint() and done.config["model"] == "none"
    with pytest.raises(ConfigError, match="target"):  # another target: not this run's resume
        run_method(extract(tmp_path, batch=4), FunctionTarget(fn, "other"), DOCS,
                   progress=False, resume=True)


def test_max_queries_is_for_targets(tmp_path, llama_lm):
    method = InfluenceMethod(RunOptions(output=str(tmp_path / "run")),
                             InfluenceParams(lambda_=1.0, temperature=1.0))
    with pytest.raises(ConfigError, match="not a model.s") as info:
        run_method(method, llama_lm, "demo", progress=False, max_queries=3)
    assert info.value.param == "max_queries" and not (tmp_path / "run").exists()
