"""``ctxleak`` entry point: the Typer app, ``--config FILE.yaml`` defaults, ``--debug`` tracebacks.

User mistakes (:class:`ctxleak.errors.CtxleakError`) print one clear line and exit with status 2;
``--debug`` (anywhere on the command line, or ``CTXLEAK_DEBUG=1``) shows the traceback instead.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import typer
from tqdm.auto import tqdm

from ctxleak import __version__
from ctxleak.errors import CtxleakError, CtxleakWarning, flag_message

# Each module defines ``register(app)``; heavy imports stay inside the command functions so that
# ``ctxleak --help`` is fast.
COMMAND_MODULES = [
    "ctxleak.cli.models_cmd",
    "ctxleak.cli.run_cmd",
    "ctxleak.cli.influence_cmd",
    "ctxleak.cli.icl_cmd",
    "ctxleak.cli.audit_cmd",
    "ctxleak.cli.susceptibility_cmd",
    "ctxleak.cli.probe_cmd",
    "ctxleak.cli.dp_cmd",
    "ctxleak.cli.pii_cmd",
    "ctxleak.cli.compare_cmd",
]

app = typer.Typer(
    name="ctxleak",
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
) -> None:
    """ctxleak: context influence, ICL privacy loss, susceptibility and PII probing."""


def _register_all() -> None:
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:  # a command module not written yet
            if exc.name != name:
                raise
            continue
        module.register(app)


_register_all()


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
    words = []
    for arg in argv:
        if arg.startswith("-"):
            break
        words.append(arg)
    return words


def _command(path: list[str]) -> Any:
    """The click command at ``path`` (None when the words name no command)."""
    command: Any = typer.main.get_command(app)
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
    names; an unknown flag is an error that names it."""
    from ctxleak.errors import ConfigError

    command: Any = typer.main.get_command(app)
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
        name = by_flag.get(str(key).lstrip("-").replace("-", "_"))
        if name is None:
            raise ConfigError(f"unknown flag '{key}' in the config for 'ctxleak "
                              f"{' '.join(path)}'")
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
            try:
                text = flag_message(message, command_flags(command_path(argv)))
            except Exception:  # noqa: BLE001 - never hide a warning behind a lookup failure
                pass
        line = f"warning: {text}"
        if sys.stderr.isatty():
            line = typer.style(line, fg=typer.colors.YELLOW)
        tqdm.write(line, file=sys.stderr)  # on its own line, the progress bar redrawn below

    return printer


def main(argv: list[str] | None = None) -> None:
    """Run the CLI. ``--config FILE.yaml`` supplies defaults for any flag of the command."""
    argv = list(sys.argv[1:] if argv is None else argv)
    session: Any = sys.modules.get("ctxleak.run.runner")
    if session is not None:  # a new command (tests run several in one process)
        session._CURRENT_RUN = None
    debug = _pop_flag(argv, "--debug") or os.environ.get("CTXLEAK_DEBUG") == "1"
    if _pop_flag(argv, "--plain"):
        from ctxleak.report.console import set_plain

        set_plain(True)
    with warnings.catch_warnings(), _sigterm_as_interrupt():
        warnings.showwarning = _warning_printer(argv)
        _run(argv, debug)


def _run(argv: list[str], debug: bool) -> None:
    """The command in ``argv``; user errors as one line (exit 2), Ctrl-C and SIGTERM with the
    interrupted message (exit 130 and 143)."""
    from ctxleak.cli.config import load_config_file

    try:
        default_map = None
        config_path = _pop_value(argv, "--config")
        if config_path is not None:
            values = load_config_file(config_path)
            values.pop("command", None)
            default_map = nest_defaults(command_path(argv), values)
        app(args=argv, prog_name="ctxleak", default_map=default_map, standalone_mode=True)
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
        typer.secho(_interrupted(), err=True)
        sys.exit(143 if isinstance(exc, Terminated) else 130)
    except SystemExit as exc:
        if exc.code == 130:  # Typer turns Ctrl-C (and so SIGTERM) into a silent exit 130
            typer.secho(_interrupted(), err=True)
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


def _interrupted() -> str:
    """The Ctrl-C message: which run folder kept how many finished examples, how to resume."""
    session = sys.modules.get("ctxleak.run.runner")
    if session is None:
        return "interrupted before any run folder was written; nothing was kept"
    return session.interrupted_message()
