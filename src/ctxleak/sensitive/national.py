"""Shapes the English-language detectors miss: phone numbers written as a country writes them
at home (no ``+`` and country code), seven-digit local numbers, names in Chinese characters,
kana or Hangul, and a key spelled out one character at a time.

- National phone numbers (``0151 23456789``, ``030 1234567``, ``612 345 678``,
  ``090-1234-5678``, ``010-1234-5678``): each run of digit groups is cut to its longest prefix,
  in whole groups, that :func:`phonenumbers.is_valid_number` accepts for one of
  :data:`REGIONS` (the library's own numbering plans, not a pattern per country), written with
  the region's trunk prefix where it has one (``0`` in Germany, France, Japan, Korea);
- seven-digit local numbers with a separator (``555-0142``, ``555 0142``), not part of a longer
  run of digit groups;
- names in CJK scripts before an honorific (``山田太郎様``, ``田中さん``, ``김민준 씨``,
  ``이서연님``) or after a label (``name: 佐藤 花子``, ``氏名：鈴木一郎``, ``이름: 박지훈``);
- a key or token spelled out with spaces between its characters (``s k - l i v e - 4 f 9 a
  ...``, ``A K I A 1 2 3 ...``): read on the view with that whitespace removed and mapped back.

Every quantifier is bounded (linear in the text).
"""

from __future__ import annotations

import re

import phonenumbers

from ctxleak.sensitive.span import Span

__all__ = ["REGIONS", "find_cjk_names", "find_local_phones", "find_national_phones",
           "find_spaced_secrets"]

#: The regions whose national numbers are tried, in order (the first that validates wins).
REGIONS = ("DE", "ES", "FR", "IT", "NL", "AT", "CH", "BE", "PT", "JP", "KR")
#: A run of two to six digit groups parted by one space, dot, hyphen or slash (a bracketed
#: area code allowed), not after a letter, digit or ``+``: a phone number written at home.
_TRUNK = {r: getattr(phonenumbers.PhoneMetadata.metadata_for_region(r), "national_prefix", None)
          or "" for r in REGIONS}
_RUN_RE = re.compile(r"(?<![\w+.\-/])\(?\d{2,6}\)?(?:[ .\-/]\(?\d{2,9}\)?){1,5}(?![\w])")
_LOCAL_RE = re.compile(r"(?<![\w+.\-/])(?<!\d )\d{3}[ .\-]\d{4}(?![\w\-]|\.\d| ?\d)")


def _region_prefix(run: str) -> int:
    """The end of the longest prefix of ``run`` (in whole digit groups, 7 digits or more) that
    is a valid national number of one of :data:`REGIONS`, or 0."""
    ends = [i + 1 for i, c in enumerate(run)
            if c.isdigit() and (i + 1 == len(run) or not run[i + 1].isdigit())]
    for end in reversed(ends):
        prefix = run[:end]
        digits = sum(c.isdigit() for c in prefix)
        if digits < 7:
            break
        if digits > 13:
            continue
        written = "".join(c for c in prefix if c.isdigit())
        for region in REGIONS:
            trunk = _TRUNK[region]
            if trunk and not written.startswith(trunk):
                continue  # a region that dials a trunk prefix at home writes it
            try:
                number = phonenumbers.parse(prefix, region)
            except phonenumbers.NumberParseException:
                continue
            if phonenumbers.is_valid_number(number):
                return end + (run[end] == ")" if end < len(run) else 0)
    return 0


def find_national_phones(text: str) -> list[Span]:
    """Phone numbers written without a country code that a numbering plan of
    :data:`REGIONS` validates (type ``phone``, score 0.6)."""
    out = []
    for m in _RUN_RE.finditer(text):
        end = _region_prefix(m.group(0))
        if end:
            out.append(Span("phone", m.start(), m.start() + end, m.group(0)[:end], 0.6))
    return out


def find_local_phones(text: str) -> list[Span]:
    """Seven-digit local numbers with one separator (``555-0142``, ``555 0142``), not inside
    a longer run of digit groups (type ``phone``, score 0.5)."""
    return [Span("phone", m.start(), m.end(), m.group(0), 0.5) for m in _LOCAL_RE.finditer(text)]


_HAN = r"\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_KANA = r"\u30a0-\u30ff"
_HANGUL = r"\uac00-\ud7a3"
#: A Japanese or Chinese name (two to five Han characters or katakana, one space allowed after
#: the surname), then an honorific.
_HONORIFIC = "(?:様|さま|さん|氏|殿|君|くん|ちゃん|先生)"
_JA_NAME_RE = re.compile(
    rf"(?<![{_HAN}])([{_HAN}]{{1,3}}[ \u3000]?[{_HAN}{_KANA}]{{1,3}}){_HONORIFIC}")
#: A Korean name (two to four syllables), then 씨 or 님, a space allowed before it.
_KO_NAME_RE = re.compile(rf"(?<![{_HANGUL}])([{_HANGUL}]{{2,4}})[ ]?(?:씨|님)")
#: Hangul words before 님 or 씨 that are roles, not names ("customer", "teacher", "manager").
_KO_ROLES = frozenset("고객 선생 회원 사장 부장 과장 차장 대리 팀장 실장 교수 원장 기사 환자 손님 "
                      "여러분 아버 어머 사모 작가 의사 간호사 관리자 담당자 아가 하느 부처".split())
#: A label naming a person, then the name in CJK script (a space allowed inside it).
_LABELLED_RE = re.compile(
    r"(?:\bname|\bfull name|氏名|名前|お名前|担当者?|姓名|이름|성명|담당자)[ \t]{0,3}[:：][ \t\u3000]{0,3}"
    rf"([{_HAN}{_KANA}]{{1,4}}(?:[ \u3000][{_HAN}{_KANA}]{{1,4}})?|[{_HANGUL}]{{2,4}}"
    rf"(?:[ ][{_HANGUL}]{{1,3}})?)(?![{_HAN}{_KANA}{_HANGUL}])", re.IGNORECASE)


def find_cjk_names(text: str) -> list[Span]:
    """Names in Chinese characters, katakana or Hangul before an honorific (``様``, ``さん``,
    ``씨``, ``님``) or after a person's label (``name:``, ``氏名:``, ``이름:``); type
    ``person``, score 0.6 (a heuristic, no model: spaCy's English pipeline reads none)."""
    out = [Span("person", m.start(1), m.end(1), m.group(1), 0.6)
           for m in _JA_NAME_RE.finditer(text)]
    out += [Span("person", m.start(1), m.end(1), m.group(1), 0.6)
            for m in _KO_NAME_RE.finditer(text) if m.group(1) not in _KO_ROLES]
    out += [Span("person", m.start(1), m.end(1), m.group(1), 0.6)
            for m in _LABELLED_RE.finditer(text)]
    return out


#: Twelve or more single characters of a token, each followed by whitespace (at most three):
#: a key spelled out ("A K I A 1 2 ...", "s k - l i v e - ...").
_SPACED_RE = re.compile(r"(?<!\S)(?:[A-Za-z0-9_\-+/=.]\s{1,3}){11,400}[A-Za-z0-9_\-+/=](?!\S)")


def find_spaced_secrets(text: str) -> list[Span]:
    """Keys and tokens spelled out with whitespace between their characters: the characters
    joined (whitespace removed) make a token of 16 or more characters with letters and digits
    (type ``secret``, score 0.7), or one of 12 or more that detect-secrets' vendor patterns
    name (AWS, Stripe, GitHub ...)."""
    out = []
    for m in _SPACED_RE.finditer(text):
        joined = "".join(m.group(0).split())
        letters = sum(c.isalpha() for c in joined)
        digits = sum(c.isdigit() for c in joined)
        if not (letters and digits):
            continue
        if len(joined) >= 16 or _vendor_secret(joined):
            out.append(Span("secret", m.start(), m.end(), m.group(0), 0.7))
    return out


def _vendor_secret(token: str) -> bool:
    """Whether one of detect-secrets' vendor patterns matches ``token``."""
    from ctxleak.sensitive.secrets import find_secrets

    return any(s.type == "secret" for s in find_secrets(token))
