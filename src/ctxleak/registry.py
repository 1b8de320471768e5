"""The registry of the ``ctxleak`` package's lazy public names (:data:`API`): each entry a
``"module:object"`` string imported on first use, so ``import ctxleak`` stays fast.

It imports nothing of ctxleak and is read only by the package face (``ctxleak/__init__.py``):
no layer looks another up by name. (A method's Result class and report view are plain dicts in
their own modules: :func:`ctxleak.results.result_class`, :func:`ctxleak.report.views.view_for`.)

The shape follows lm-evaluation-harness's ``lm_eval/api/registry.py``: lazy entries, and an
unknown name is a :class:`KeyError` that lists the names there are.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from importlib import import_module
from typing import Any


class UnknownName(KeyError):
    """A name no registry entry has; the message lists the names there are."""

    def __init__(self, registry: str, name: str, choices: list[str]) -> None:
        self.registry, self.name, self.choices = registry, name, choices
        super().__init__(name)

    def __str__(self) -> str:
        return (f"no {self.registry} named {self.name!r}; choose one of: "
                f"{', '.join(self.choices) or '(none registered)'}")


class Registry(Mapping[str, Any]):
    """Name -> object, each given as ``"package.module:attribute"`` and looked up at each
    :meth:`get` (the module imported on first use): late binding, so the registry always
    answers what the module holds now (a test that replaces ``ctxleak.engine.models.load_model``
    replaces ``ctxleak.load_model`` too, and only while it does). Objects may also be
    registered directly."""

    def __init__(self, kind: str, entries: Mapping[str, str] | None = None) -> None:
        self.kind = kind
        self._targets: dict[str, str] = {}
        self._loaded: dict[str, Any] = {}
        for name, target in (entries or {}).items():
            self.add(name, target)

    def add(self, name: str, target: Any) -> None:
        """Register ``target`` (a ``"module:object"`` string, or the object itself) as ``name``;
        a name registered twice is refused."""
        if name in self._targets or name in self._loaded:
            raise ValueError(f"{self.kind} {name!r} is registered already")
        if isinstance(target, str):
            if ":" not in target:
                raise ValueError(f"{self.kind} {name!r}: expected 'module:object', got "
                                 f"{target!r}")
            self._targets[name] = target
        else:
            self._loaded[name] = target

    def get(self, name: str, default: Any = ...) -> Any:
        """The object registered as ``name``, read from its module now (imported if it was not
        yet). An unknown name raises :class:`UnknownName`, unless a ``default`` is given."""
        if name in self._loaded:
            return self._loaded[name]
        target = self._targets.get(name)
        if target is None:
            if default is not ...:
                return default
            raise UnknownName(self.kind, name, sorted(self))
        module, _, attr = target.partition(":")
        obj: Any = import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
        return obj

    def __getitem__(self, name: str) -> Any:
        return self.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._targets or name in self._loaded

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys([*self._targets, *self._loaded]))

    def __len__(self) -> int:
        return len(set(self._targets) | set(self._loaded))

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {sorted(self)})"


#: The lazy public names of the ``ctxleak`` package (``ctxleak.influence`` ...).
API = Registry("ctxleak function", {
    "influence": "ctxleak.api:influence",
    "influence_explain": "ctxleak.api:influence_explain",
    "canary_audit": "ctxleak.api:canary_audit",
    "canary_audit_proxy": "ctxleak.api.canary:canary_audit_proxy",
    "attack_extract": "ctxleak.api.attacks:attack_extract",
    "attack_membership": "ctxleak.api.attacks:attack_membership",
    "attack_target": "ctxleak.api.attack_targets:attack_target",
    "retrieve": "ctxleak.api:retrieve",
    "iclinf": "ctxleak.api:iclinf",
    "audit": "ctxleak.api:audit",
    "susceptibility": "ctxleak.api:susceptibility",
    "probe": "ctxleak.api:probe",
    "load_result": "ctxleak.results:load_result",
    "compare": "ctxleak.comparison:compare",
    "findings": "ctxleak.api.findings:findings",
    "load_model": "ctxleak.engine.models:load_model",
    "serve": "ctxleak.engine.served:serve",
    "run_method": "ctxleak.api:run_method",
    "cid_generate": "ctxleak.integrations.generate:cid_generate",
})
