"""``ctxleak`` entry point: the Typer app, ``--config FILE.yaml`` defaults, ``--debug`` tracebacks.

User mistakes (:class:`ctxleak.errors.CtxleakError`) print one clear line and exit with status 2;
``--debug`` (anywhere on the command line, or ``CTXLEAK_DEBUG=1``) shows the traceback instead.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import itertools
import os
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any, Optional

import typer
from tqdm import tqdm

from ctxleak import __version__
from ctxleak.errors import CtxleakDeprecationWarning, CtxleakError, CtxleakWarning, flag_message

_TOKENS: dict[str, tuple[str, str | None]] = {
    "--max-tokens": ("--max-new-tokens", None), "--min-tokens": ("--min-new-tokens", None),
    "--n-gen": ("--sequences", None)}
#: Flags renamed for one vocabulary across commands, by command: old -> (new, the value the old
#: switch stands for, or None when it takes the value given). They keep working for one
#: release, with a warning.
RENAMED_FLAGS: dict[str, dict[str, tuple[str, str | None]]] = {
    "audit": _TOKENS,
    "dp calibrate": _TOKENS,
    "dp epsilon": _TOKENS,
    "icl": {"--calibrate": ("--calibration", "on")},
}

#: The commands in the order ``ctxleak --help`` lists them: the one to start with, the other
#: methods, then the helpers (models and data to use, comparing runs, config files, PII files, DP
#: accounting). Each is added by ``register(app)`` of its module ``ctxleak.cli.<name>_cmd``,
#: whose heavy imports stay inside the command functions so that ``ctxleak --help`` is fast.
COMMAND_ORDER = ["influence", "icl", "susceptibility", "probe", "audit", "canary", "attack",
                 "models", "data",
                 "compare", "findings", "run", "pii", "dp", "serve", "monitoring"]


class _InOrder(typer.core.TyperGroup):
    """Commands listed in :data:`COMMAND_ORDER` (others after, by name), not alphabetically."""

    def list_commands(self, ctx: Any) -> list[str]:
        rank = {name: i for i, name in enumerate(COMMAND_ORDER)}
        return sorted(self.commands, key=lambda name: (rank.get(name, len(rank)), name))

    def get_command(self, ctx: Any, name: str) -> Any:
        """The command, its help's paragraphs each on one line (rich help keeps a docstring's
        line breaks, which then cut the listing's sentences mid-line)."""
        command = super().get_command(ctx, name)
        if command is not None:
            _flow_help(command)
        return command


def _flow_help(command: Any) -> None:
    """Join the lines of each paragraph of ``command``'s help and its subcommands' helps."""
    if command.help and not getattr(command, "_flowed", False):
        paragraphs = inspect.cleandoc(command.help).split("\n\n")
        command.help = "\n\n".join(p if p.startswith("\b") else " ".join(p.split())
                                   for p in paragraphs)
        command._flowed = True
    for sub in getattr(command, "commands", {}).values():
        _flow_help(sub)


app = typer.Typer(
    name="ctxleak",
    cls=_InOrder,
    help=(
        "Measure how much a language model's output comes from, and leaks, the context in its "
        "prompt. Every model command writes a run directory (results.json, samples.jsonl, "
        "report.html). Start with:  ctxleak models   then   ctxleak influence --data demo --limit 3"
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"ctxleak {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version_callback, is_eager=True,
                                 help="Print the version and exit."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors."),
    plain: bool = typer.Option(False, "--plain", help="Print tables as tab-separated values "
                               "(for scripts)."),
    config: Optional[str] = typer.Option(None, "--config", help="YAML file of flag defaults for "
                                         "the command (flags on the command line win); also "
                                         "after the command name.",
                                         rich_help_panel="Configuration"),
) -> None:
    """ctxleak: context influence, ICL privacy loss, susceptibility and PII probing."""


for _name in COMMAND_ORDER:
    importlib.import_module(f"ctxleak.cli.{_name}_cmd").register(app)


def _deprecated(old: str, new: str) -> None:
    warnings.warn(CtxleakDeprecationWarning(f"{old} is deprecated and will be removed in the "
                                            f"next release; use {new}"), stacklevel=3)


def rename_flags(argv: list[str]) -> list[str]:
    """``argv`` with the old spellings of :data:`RENAMED_FLAGS` for its command replaced by the
    new ones (``--max-tokens 4`` -> ``--max-new-tokens 4``, ``--calibrate`` ->
    ``--calibration on``), each with a deprecation warning."""
    renamed = RENAMED_FLAGS.get(" ".join(command_path(argv)), {})
    out: list[str] = []
    for arg in argv:
        flag, sep, value = arg.partition("=")
        if flag in renamed:
            new, implied = renamed[flag]
            _deprecated(flag, f"{new} {implied}" if implied else new)
            out.extend([new, implied] if implied else [new + sep + value if sep else new])
        else:
            out.append(arg)
    return out


def renamed_key(path: list[str], key: str) -> tuple[str, Any]:
    """A config file's old flag name (``max-tokens``) as (its new one, the value it implies or
    None), with a deprecation warning; other keys as they are."""
    renamed = RENAMED_FLAGS.get(" ".join(path), {})
    flag = "--" + str(key).lstrip("-").replace("_", "-")
    if flag not in renamed:
        return key, None
    new, implied = renamed[flag]
    _deprecated(f"'{key}' in the config", f"'{new.lstrip('-')}'")
    return new.lstrip("-"), implied


def _pop_flag(argv: list[str], flag: str) -> bool:
    found = flag in argv
    while flag in argv:
        argv.remove(flag)
    return found


def _pop_value(argv: list[str], flag: str) -> str | None:
    value = None
    for i, arg in enumerate(list(argv)):
        if arg == flag and i + 1 < len(argv):
            value = argv[i + 1]
            del argv[i:i + 2]
            break
        if arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
            del argv[i]
            break
    return value


def command_path(argv: list[str]) -> list[str]:
    """The subcommand words at the start of ``argv`` (e.g. ``["dp", "calibrate"]``)."""
    return list(itertools.takewhile(lambda arg: not arg.startswith("-"), argv))


@functools.cache
def click_app() -> Any:
    """The click command tree of :data:`app`, built once per process. Typer builds it from every
    command's signature and type hints (about 0.1 s of introspection on this app), which each
    call of :func:`main`, each flag named in an error and each warning would otherwise repeat;
    the commands are all registered when this module is imported, so the tree does not change."""
    return typer.main.get_command(app)


def _command(path: list[str]) -> Any:
    """The click command at ``path`` (None when the words name no command)."""
    command: Any = click_app()
    for word in path:
        sub = getattr(command, "commands", {}).get(word)
        if sub is None:
            break
        command = sub
    return command


def command_flags(path: list[str]) -> dict[str, str]:
    """Parameter name -> its long flag, for the command at ``path`` (``{"lam": "--lambda"}``):
    library errors name parameters, the CLI shows flags."""
    flags: dict[str, str] = {}
    command = _command(path)
    for param in getattr(command, "params", []):
        opts = [o for o in getattr(param, "opts", []) if o.startswith("--")]
        if opts and param.name:
            flags[param.name] = opts[0]
    return flags


def nest_defaults(path: list[str], values: dict[str, Any]) -> dict[str, Any]:
    """Click's ``default_map`` for the command at ``path`` from a config file's flag names
    (``lambda``, ``max-new-tokens`` or ``max_new_tokens``), mapped to the command's parameter
    names; an unknown flag is an error that names it and suggests the closest known one."""
    from ctxleak.errors import ConfigError
    from ctxleak.run.params import did_you_mean

    command: Any = click_app()
    for word in path:
        if word not in getattr(command, "commands", {}):
            raise ConfigError(f"unknown command '{' '.join(path)}' in the config")
        command = command.commands[word]
    by_flag: dict[str, str] = {}
    for param in command.params:
        by_flag[param.name] = param.name
        for opt in getattr(param, "opts", []):
            by_flag[opt.lstrip("-").replace("-", "_")] = param.name
    node: dict[str, Any] = {}
    for key, value in values.items():
        key, implied = renamed_key(path, key)
        if implied is not None and value in (True, "true", "True"):
            value = implied
        typed = str(key).lstrip("-").replace("-", "_")
        name = by_flag.get(typed)
        if name is None:
            hint = did_you_mean(typed, by_flag)
            if "-" in str(key):  # suggested in the spelling the file uses
                hint = hint.replace("_", "-")
            raise ConfigError(f"unknown flag '{key}' in the config for 'ctxleak "
                              f"{' '.join(path)}'{hint}")
        node[name] = value
    for word in reversed(path):
        node = {word: node}
    return node


class Terminated(KeyboardInterrupt):
    """SIGTERM (``timeout``, a scheduler, ``kill``), raised where the program is, as Ctrl-C is:
    the same clean-up, the same message, exit status 143 (128 + 15)."""


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated()


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """Within: SIGTERM raises :class:`Terminated` (main thread only; the old handler is put
    back after, so in-process callers are left as they were)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


#: The width of ``--help`` when stdout is not a terminal (a pipe, a file) and neither COLUMNS
#: nor TERMINAL_WIDTH says one: rich would take 80 columns and give each flag's help about 20.
HELP_COLUMNS = 120


@contextmanager
def _help_width(argv: list[str]) -> Iterator[None]:
    """Within: COLUMNS is :data:`HELP_COLUMNS` for a help page printed into a pipe (put back
    after; a terminal's width and a width the user set are left as they are)."""
    asked = not argv or "--help" in argv or "-h" in argv
    if not asked or sys.stdout.isatty() or "COLUMNS" in os.environ \
            or "TERMINAL_WIDTH" in os.environ:
        yield
        return
    os.environ["COLUMNS"] = str(HELP_COLUMNS)
    try:
        yield
    finally:
        os.environ.pop("COLUMNS", None)


def _warning_printer(argv: list[str]) -> Callable[..., None]:
    """``warnings.showwarning`` for the CLI: a :class:`CtxleakWarning` is one line
    ``warning: ...`` naming flags, not parameters; other warnings print as Python prints them."""
    show = warnings.showwarning

    def printer(message: Any, category: type[Warning], *args: Any, **kwargs: Any) -> None:
        if not issubclass(category, CtxleakWarning):
            show(message, category, *args, **kwargs)
            return
        text = str(message)
        if isinstance(message, CtxleakWarning):
            with suppress(Exception):  # never hide a warning behind a lookup failure
                text = flag_message(message, command_flags(command_path(argv)))
        line = f"warning: {text}"
        if sys.stderr.isatty():
            line = typer.style(line, fg=typer.colors.YELLOW)
        tqdm.write(line, file=sys.stderr)  # on its own line, the progress bar redrawn below

    return printer


def main(argv: list[str] | None = None) -> None:
    """Run the CLI. ``--config FILE.yaml`` supplies defaults for any flag of the command."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = _pop_flag(argv, "--debug") or os.environ.get("CTXLEAK_DEBUG") == "1"
    from ctxleak.cli.output import plain_tables

    plain = _pop_flag(argv, "--plain")
    with warnings.catch_warnings(), _sigterm_as_interrupt(), plain_tables(plain), \
            _help_width(argv):
        warnings.showwarning = _warning_printer(argv)
        warnings.simplefilter("always", CtxleakDeprecationWarning)
        _run(argv, debug)


def _run(argv: list[str], debug: bool) -> None:
    """The command in ``argv``; user errors as one line (exit 2), Ctrl-C and SIGTERM with the
    interrupted message (exit 130 and 143)."""
    from ctxleak.cli.config import load_config_file

    try:
        default_map = None
        config_path = _pop_value(argv, "--config")
        argv[:] = rename_flags(argv)
        if config_path is not None:
            values = load_config_file(config_path)
            values.pop("command", None)
            default_map = nest_defaults(command_path(argv), values)
        # what ``app(...)`` does, on the tree built once (typer's exception hook is not needed:
        # the app is made with pretty_exceptions_enable=False)
        click_app()(args=argv, prog_name="ctxleak", default_map=default_map,
                    standalone_mode=True)
    except CtxleakError as exc:
        if debug:
            raise
        try:
            message = flag_message(exc, command_flags(command_path(argv)))
        except Exception:  # noqa: BLE001 - never hide the error behind a lookup failure
            message = str(exc)
        typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
        sys.exit(2)
    except KeyboardInterrupt as exc:
        typer.secho(_interrupted(exc), err=True)
        sys.exit(143 if isinstance(exc, Terminated) else 130)
    except SystemExit as exc:
        if exc.code == 130:  # Typer turns Ctrl-C (and so SIGTERM) into a silent exit 130
            typer.secho(_interrupted(exc), err=True)
            if _by_sigterm(exc):
                raise SystemExit(143) from None
        raise


def _by_sigterm(exc: BaseException) -> bool:
    """Whether ``exc`` was raised while handling :class:`Terminated` (Typer's exit 130 wraps
    the interrupt it caught)."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        if isinstance(link, Terminated):
            return True
        seen.add(id(link))
        link = link.__cause__ or link.__context__
    return False


def _interrupted(exc: BaseException) -> str:
    """The Ctrl-C message: which run folder kept how many finished examples (the folder the
    interrupt carries), how to resume."""
    session = sys.modules.get("ctxleak.run.runner")
    if session is None:
        return "interrupted before any run folder was written; nothing was kept"
    return session.interrupted_message(exc)
