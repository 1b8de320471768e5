"""YAML config files: ``--config FILE.yaml`` (defaults for any flag) and ``ctxleak run FILE.yaml``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ctxleak.errors import InputError


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping of flag names (``max-new-tokens`` or ``max_new_tokens``) to values."""
    import yaml

    from ctxleak.run.records import check_input_file, read_text_file

    path = check_input_file(path)
    try:
        data = yaml.load(read_text_file(path), Loader=_unique_key_loader())  # noqa: S506
    except _AliasError as exc:
        raise InputError(f"uses the YAML alias *{exc.anchor}: a config file may not use "
                         "anchors and aliases (a few nested ones can expand to gigabytes); "
                         "write each value out", file=str(path), line=exc.line) from None
    except _DuplicateKeyError as exc:
        raise InputError("appears twice in the config (which value is meant?)", file=str(path),
                         line=exc.line, field=exc.key) from None
    except RecursionError:
        raise InputError("not readable YAML (lists or mappings nested more deeply than the "
                         "parser's limit of about 1,000 levels)", file=str(path)) from None
    except yaml.YAMLError as exc:
        line = getattr(getattr(exc, "problem_mark", None), "line", None)
        raise InputError(f"not valid YAML ({getattr(exc, 'problem', exc)})", file=str(path),
                         line=None if line is None else line + 1) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InputError("a config file must be a mapping of flag names to values", file=str(path))
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, list):  # YAML lists become the CLI's comma lists
            value = ",".join(str(v) for v in value)
        out[str(key)] = value
    return out


class _DuplicateKeyError(Exception):
    def __init__(self, key: str, line: int) -> None:
        super().__init__(key)
        self.key, self.line = key, line


class _AliasError(Exception):
    def __init__(self, anchor: str, line: int) -> None:
        super().__init__(anchor)
        self.anchor, self.line = anchor, line


def _unique_key_loader() -> type:
    """PyYAML's safe loader, except that a key repeated in one mapping is an error (plain YAML
    keeps the last value silently), and so is an alias (``*name``, merge keys ``<<: *name``
    included): aliases let a kilobyte of YAML stand for exponentially many values (the
    "billion laughs" expansion), and a file of flags has no use for them."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                raise _AliasError(str(event.anchor), event.start_mark.line + 1)
            return super().compose_node(parent, index)

        def construct_mapping(self, node: Any, deep: bool = False) -> dict:
            seen: set = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if key in seen:
                    raise _DuplicateKeyError(str(key), key_node.start_mark.line + 1)
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    return UniqueKeyLoader
