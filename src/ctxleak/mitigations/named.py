"""Mechanisms by name: ``dp-vote:eps=2,shards=4`` is :class:`DPVote(eps=2, shards=4)`.

One registry (:data:`MECHANISMS`, lazy ``"module:Class"`` entries, as the package's own names)
for every mechanism a user may put between the documents and the answers
(:mod:`ctxleak.mitigations.mechanisms`): Context Influence Decoding and its bounded form
(``cid:lam=0.5,bounded_eps=2``, "Estimating Privacy Leakage of Augmented Contextual Knowledge in
Language Models"), the DP vote over shards and its sparse form
("Privacy-Preserving Retrieval-Augmented Generation with Differential Privacy", Koga, Wu and
Chaudhuri), DP-RAG ("RAG with Differential Privacy", Grislain) and PII scrubbing (Presidio's
operators). The CLI's ``--mechanism`` and the API's ``mechanisms=`` both go through
:func:`parse_mechanism`.

The grammar: ``name`` or ``name:param=value,param=value``; the form a mechanism's ``key()``
writes, ``name(param=value,...)``, is read too, so a stored key parses back to the same
mechanism. Each value is converted to the type its parameter declares (a float, an integer, a
string, a switch, ``none`` for an optional one); a parameter of another type gets the text as
written, for the class to read or refuse (scrubbing's ``entities=email+phone``). What a
mechanism cannot take from a command line is supplied here: scrubbing's detector is
:func:`ctxleak.sensitive.find_sensitive`, the same detection layer as the audit's PII and
secret columns and ``--redact``.

To add a mechanism: its entry in :data:`MECHANISMS` (and in :data:`SUPPLIED` what it needs
that is not a number or a word).
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from collections.abc import Mapping
from typing import Any

from ctxleak.errors import ConfigError
from ctxleak.mitigations.mechanisms import Mechanism
from ctxleak.registry import Registry
from ctxleak.sensitive import find_sensitive

#: The mechanisms by name, each its class (imported on first use).
MECHANISMS = Registry("mechanism", {
    "cid": "ctxleak.mitigations.cid:CID",
    "dp-vote": "ctxleak.mitigations.dp_vote:DPVote",
    "dp-sparse-vote": "ctxleak.mitigations.dp_vote:DPSparseVote",
    "dp-answer-vote": "ctxleak.mitigations.dp_answer_vote:DPAnswerVote",
    "dp-rag": "ctxleak.mitigations.dp_rag:DPRAG",
    "scrub": "ctxleak.mitigations.scrubbing:Scrubbing",
    # keyword-space aggregation ("Differentially Private Retrieval-Augmented Generation")
    "dp-ksa": "ctxleak.mitigations.dp_ksa:DPKSA",
})

#: What the registry hands a mechanism besides the parameters given: scrubbing finds what to
#: scrub with the one detection layer of secrets and personal data.
SUPPLIED: Mapping[str, Mapping[str, Any]] = {"scrub": {"detect": find_sensitive}}

#: The parameter this module's errors name (the CLI shows it as ``--mechanism``).
PARAM = "mechanisms"

_SPEC = re.compile(r"^\s*([A-Za-z0-9_.-]+)\s*(?::(.*)|\((.*)\))?\s*$", re.DOTALL)
_NONE = ("none", "null")
_NUMBER = re.compile(r"^[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$")
_SCALARS: dict[str, Any] = {"float": float, "int": int, "str": str, "bool": bool}


def is_mechanism(value: Any) -> bool:
    """Whether ``value`` is a mechanism object (has ``name``, ``key`` and ``answer``)."""
    return all(hasattr(value, attr) for attr in ("name", "key", "answer")) \
        and not isinstance(value, (str, type))


def mechanism_class(name: str) -> Any:
    """The class registered as ``name``; an unknown name, or one whose module is not part of
    this installation, is a :class:`ConfigError` listing the names there are."""
    if name not in MECHANISMS:
        raise ConfigError(f"{PARAM}: no mechanism named '{name}'; choose one of: "
                          f"{', '.join(sorted(MECHANISMS))}", param=PARAM)
    try:
        return MECHANISMS.get(name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"{PARAM}: the mechanism '{name}' is not available in this "
                          f"installation ({exc})", param=PARAM) from None


def parameters(cls: Any) -> dict[str, Any]:
    """The parameters a mechanism class takes from a spec: its init fields, each with its
    declared type."""
    try:
        hints = typing.get_type_hints(cls)
    except (NameError, TypeError):  # an annotation only a type checker resolves
        hints = {f.name: _SCALARS.get(str(f.type).split("|")[0].strip(), Any)
                 for f in dataclasses.fields(cls)}
    return {f.name: hints.get(f.name, str) for f in dataclasses.fields(cls) if f.init}


def parse_mechanism(spec: Any) -> Mechanism:
    """A mechanism from ``spec``: a mechanism object (returned as it is), a string in the
    module docstring's grammar, or a mapping ``{"name": ..., param: value, ...}``. Errors are
    one line naming the spec and what is wrong (:class:`ConfigError` naming ``mechanisms``)."""
    if is_mechanism(spec):
        return typing.cast(Mechanism, spec)
    if isinstance(spec, Mapping):
        return build(str(spec.get("name")),
                     {str(k): v for k, v in spec.items() if k != "name"}, _shown(dict(spec)))
    if not isinstance(spec, str):
        raise ConfigError(f"{PARAM}: {spec!r} is not a mechanism: give a name such as "
                          f"'dp-vote:eps=2,shards=4' or a mechanism object", param=PARAM)
    match = _SPEC.match(spec)
    if match is None:
        raise ConfigError(f"{PARAM}: '{spec}' is not 'name' or 'name:param=value,...', e.g. "
                          f"'dp-vote:eps=2,shards=4'", param=PARAM)
    name, body = match.group(1), match.group(2) or match.group(3) or ""
    given: dict[str, Any] = {}
    parts = body.split(",") if body.strip() else []
    for part in parts:
        if not part.strip():
            raise ConfigError(f"{PARAM}: '{spec}' has an empty parameter (a comma too many)",
                              param=PARAM)
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{PARAM}: '{spec}': '{part.strip()}' is not param=value",
                              param=PARAM)
        if key.strip() in given:
            raise ConfigError(f"{PARAM}: '{spec}' gives {key.strip()} twice", param=PARAM)
        given[key.strip()] = value.strip()
    return build(name, given, spec)


def _shown(spec: Any) -> str:
    """``spec`` as an error message quotes it: 120 characters at most (a request's spec may
    hold a number of any length)."""
    text = str(spec)
    return text if len(text) <= 120 else text[:119] + "…"


def build(name: str, given: Mapping[str, Any], spec: str) -> Mechanism:
    """The mechanism ``name`` with the parameters ``given`` (strings converted to the declared
    types), and what :data:`SUPPLIED` adds; the class's own check of its values is reported
    naming ``spec``."""
    cls = mechanism_class(name)
    declared = parameters(cls)
    unknown = [k for k in given if k not in declared]
    if unknown:
        raise ConfigError(f"{PARAM}: '{spec}': {name} has no parameter '{unknown[0]}'; its "
                          f"parameters: {', '.join(declared) or 'none'}", param=PARAM)
    values = {k: _convert(v, declared[k], k, spec) for k, v in given.items()}
    try:
        return typing.cast(Mechanism, cls(**{**SUPPLIED.get(name, {}), **values}))
    except (ConfigError, TypeError, ValueError) as exc:  # the class's own check, a required
        # parameter left out, a text the class cannot read
        raise ConfigError(f"{PARAM}: '{spec}': {exc}", param=PARAM) from None


def _convert(value: Any, kind: Any, key: str, spec: str) -> Any:
    """``value`` as ``kind`` (float, int, str, bool, or one of them or None); a value that is
    not a string (a JSON spec's) is kept as given, but a number must be one: not true or false,
    and within float64 (a 400-digit integer is refused, not an overflow later)."""
    args = typing.get_args(kind)
    optional = type(None) in args
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        kind = next((a for a in args if a is not type(None)), str)
    if not isinstance(value, str):
        if kind in (int, float) and value is not None:
            _check_number(value, kind, key, spec)
        return value
    if optional and value.lower() in _NONE:
        return None
    if kind not in (bool, int, float, str):  # the class reads its own text (e.g. "a+b")
        return value
    try:
        if kind is bool:
            if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError
            return value.lower() in ("true", "1", "yes")
        if kind in (int, float):
            # ASCII digits only: float() also reads "2_0" as 20 and other scripts' digits
            if not _NUMBER.match(value):
                raise ValueError
            number = float(value)
            if not math.isfinite(number):
                raise ValueError
            if kind is int:
                if number != int(number):
                    raise ValueError
                return int(number)
            return number
    except ValueError:
        raise ConfigError(f"{PARAM}: '{spec}': {key}={value} is not {_article(kind)}",
                          param=PARAM) from None
    return value


def _check_number(value: Any, kind: Any, key: str, spec: str) -> None:
    """A JSON spec's number: an int or float (not a bool), finite in float64, an integer where
    ``kind`` is int; else a :class:`ConfigError` naming ``key``."""
    try:
        ok = not isinstance(value, bool) and isinstance(value, (int, float)) \
            and math.isfinite(float(value)) and (kind is float or isinstance(value, int))
    except OverflowError:  # an integer beyond float64
        ok = False
    if not ok:
        shown = f"{str(value)[:20]}…" if len(str(value)) > 24 else repr(value)
        raise ConfigError(f"{PARAM}: '{spec}': {key}={shown} is not {_article(kind)} (a finite "
                          f"float64 number)", param=PARAM)


def _article(kind: Any) -> str:
    return {bool: "true or false", int: "an integer", float: "a number"}.get(kind, str(kind))


__all__ = ["MECHANISMS", "SUPPLIED", "build", "is_mechanism", "mechanism_class", "parameters",
           "parse_mechanism"]
