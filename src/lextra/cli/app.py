"""The `lextra` command tree: one way to declare a command or a command group, its shared options, its handler and
the example invocations its `--help` ends with (docs/architecture.md, Commands). `main` imports plugins before it
builds the parser, so everything they register is in the help, and turns a `LextraError` into one line, exit code 2.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import os
import sys
import textwrap
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

from lextra.cli.cache import cacheable, read_cached, store_cached
from lextra.cli.options import apply_runtime, flags_given
from lextra.errors import LextraError
from lextra.registry import PLUGINS_ENV, load_env_plugins, load_plugins

Handler = Callable[[argparse.Namespace], int]
Configure = Callable[[argparse.ArgumentParser], Handler]
OptionSet = Callable[[argparse.ArgumentParser], None]

#: the modules that declare commands, in the order `lextra --help` lists them
COMMAND_MODULES = (
    "lextra.cli.listing",
    "lextra.cli.train",
    "lextra.cli.data",
    "lextra.cli.evaluate",
    "lextra.cli.compare",
    "lextra.cli.analyze",
    "lextra.cli.retrieval",
    "lextra.cli.hf",
    "lextra.cli.ruler",
    "lextra.cli.babilong",
    "lextra.cli.tasks",
    "lextra.cli.harness",
    "lextra.cli.study",
    "lextra.cli.tune",
)


#: retired command spellings -> the command path they run (accepted, not listed in `--help`)
ALIASES: dict[str, tuple[str, ...]] = {"ruler-compare": ("ruler", "compare")}


@dataclass
class Command:
    """A leaf command: its help, how it adds its own arguments, the shared option sets it takes and the example
    invocations its `--help` ends with (its name is its key in its group's `children`)."""

    help: str
    configure: Configure
    options: tuple[OptionSet, ...] = ()
    examples: tuple[str, ...] = ()


@dataclass
class Group:
    """A command with subcommands (`lextra retrieval train`); its subcommands share `options`."""

    name: str
    help: str
    options: tuple[OptionSet, ...] = ()
    children: dict[str, Command | Group] = field(default_factory=dict)
    #: the subcommand run when the word after the group names none of its children (`lextra ruler MODEL`)
    default: str | None = None

    def command(
        self, name: str, help_text: str, *, options: Sequence[OptionSet] = (), examples: Sequence[str] = ()
    ) -> Callable[[Configure], Configure]:
        """Declare `lextra GROUP NAME`: the decorated function adds its arguments and returns the handler;
        `examples` are full invocations (`lextra ...`) shown at the end of its `--help`."""

        def register(configure: Configure) -> Configure:
            if name in self.children:
                raise ValueError(f"command {self.name} {name!r} is declared twice")
            if not examples:
                raise ValueError(f"command {self.name} {name!r} needs at least one example invocation")
            self.children[name] = Command(help_text, configure, (*options, *self.options), tuple(examples))
            return configure

        return register

    def group(
        self, name: str, help_text: str, *, options: Sequence[OptionSet] = (), default: str | None = None
    ) -> Group:
        """Declare `lextra GROUP NAME ...`, a nested group (`default`: the subcommand a bare `NAME ARGS` runs)."""
        child = Group(name, help_text, (*options, *self.options), default=default)
        self.children[name] = child
        return child


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """`--help` with every option's default (unless its help already says what the default is), without the
    hidden alias spellings of an option, and with the `Examples:` epilog printed as written."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if not action.option_strings or action.nargs == 0 or action.required or "default" in text.lower():
            return text
        shown = "none" if action.default in (None, [], ()) else "%(default)s"
        return f"{text} (default: {shown})"

    def _split_lines(self, text: str, width: int) -> list[str]:
        """Wrapped at spaces only, so names such as `python-code` or `kerple_log` stay whole."""
        return textwrap.wrap(self._whitespace_matcher.sub(" ", text).strip(), width, break_on_hyphens=False)

    def _format_action_invocation(self, action: argparse.Action) -> str:
        hidden = getattr(action, "hidden_aliases", ())
        if not hidden:
            return super()._format_action_invocation(action)
        shown = argparse.Action([s for s in action.option_strings if s not in hidden], action.dest, action.nargs)
        shown.metavar, shown.choices = action.metavar, action.choices
        return super()._format_action_invocation(shown)


class Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line: `lextra CMD: error: WHAT (see lextra CMD --help)`, and
    whose help shows defaults and examples (`HelpFormatter`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


ROOT = Group("lextra", "Transformer length extrapolation toolkit.")
#: declare a top-level command `lextra NAME`, or a command group `lextra NAME SUBCOMMAND`
command, group = ROOT.command, ROOT.group


def _add(
    parser: argparse.ArgumentParser, node: Command | Group, path: tuple[str, ...], wanted: tuple[str, ...] | None
) -> None:
    if isinstance(node, Command):
        if wanted is not None and wanted[: len(path)] != path:
            return  # named in its group's help; its options (and their imports) only when it is the one run
        handler = node.configure(parser)
        for add_options in node.options:
            add_options(parser)
        parser.set_defaults(handler=handler, command_path=" ".join(path))
        return
    sub = parser.add_subparsers(dest=f"command_{len(path)}", required=True, metavar="COMMAND")
    for name, child in node.children.items():
        examples = child.examples if isinstance(child, Command) else _group_examples(child)
        epilog = "Examples:\n" + "\n".join(f"  {e}" for e in examples) if examples else None
        child_parser = sub.add_parser(name, help=child.help, description=child.help, epilog=epilog)
        _add(child_parser, child, (*path, name), wanted)


def _group_examples(node: Group) -> tuple[str, ...]:
    """A group's examples: the first example of each of its subcommands."""
    found: list[str] = []
    for child in node.children.values():
        found += list(child.examples[:1] if isinstance(child, Command) else _group_examples(child)[:1])
    return tuple(found)


def expand_aliases(argv: Sequence[str]) -> list[str]:
    """`argv` with a retired command spelling replaced by its path (`ALIASES`) and a group's `default`
    subcommand inserted where the word after the group names none of its subcommands (nor asks for help)."""
    args = list(argv)
    if args and args[0] in ALIASES:
        args[:1] = ALIASES[args[0]]
    node: Command | Group = ROOT
    for i, word in enumerate(args):
        if not isinstance(node, Group):
            break
        if word in node.children:
            node = node.children[word]
            continue
        if node is not ROOT and node.default is not None and word not in ("-h", "--help"):
            args.insert(i, node.default)
        break
    else:
        if isinstance(node, Group) and node is not ROOT and node.default is not None and args:
            args.append(node.default)
    return args


def declare_commands() -> None:
    """Import the plugins of `LEXTRA_PLUGINS`, then the modules that declare the commands (once each)."""
    load_env_plugins()
    for module in COMMAND_MODULES:
        importlib.import_module(module)


def command_words(argv: Sequence[str]) -> tuple[str, ...]:
    """The command path `argv` names (`("retrieval", "eval")`), after `expand_aliases`; () for none."""
    node: Command | Group = ROOT
    path: list[str] = []
    for word in argv:
        if not isinstance(node, Group) or word not in node.children:
            break
        node = node.children[word]
        path.append(word)
    return tuple(path)


def build_parser(command: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The `lextra` parser, after `declare_commands`. With `command` (a path from `command_words`) only that
    command adds its options: the others are names in the help, so `lextra --help` imports neither torch nor the
    library."""
    declare_commands()
    parser = Parser(prog="lextra", description=ROOT.help)
    parser.add_argument(
        "--plugin",
        action="append",
        default=[],
        metavar="FILE_OR_MODULE",
        help=f"import this .py file or module first (its schemes, masks, scalings, methods, tasks); repeatable; "
        f"also ${PLUGINS_ENV}=a.py,pkg.mod",
    )
    _add(parser, ROOT, (), None if command is None else tuple(command))
    return parser


def _take_plugins(argv: list[str]) -> list[str]:
    """Import the top-level `--plugin X` / `--plugin=X` (those before the command name) and return argv without
    them, so the parser built next already knows what they register."""
    rest, plugins, index = list(argv), [], 0
    while index < len(rest) and rest[index].startswith("-"):  # up to the command: what follows is its own
        if rest[index] == "--plugin" and index + 1 < len(rest):
            plugins.append(rest.pop(index + 1))
            del rest[index]
        elif rest[index].startswith("--plugin="):
            plugins.append(rest.pop(index).split("=", 1)[1])
        else:
            index += 1
    load_plugins(plugins)
    return rest


def leaf_commands(
    parser: argparse.ArgumentParser | None = None, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """(command path, its parser) for every runnable command of `parser` (default: the whole `lextra` parser)."""
    parser = build_parser() if parser is None else parser
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
        return
    for name, child in subs[0].choices.items():
        yield from leaf_commands(child, (*path, name))


def main(argv: Sequence[str] | None = None) -> int:
    """Run `lextra ARGS`; returns the exit code (2 for a user mistake, printed as one line). A `--help` is printed
    from the help cache when this source tree has written it (`lextra.cli.cache`: no torch imported)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not HELP_FLAGS & set(argv) or not _help_cacheable(argv):
        return _main(argv)
    key = "\0".join(argv)
    text = read_cached("help", key)
    if text is not None:
        sys.stdout.write(text)
        return 0
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = _main(argv)
    sys.stdout.write(buffer.getvalue())
    if code == 0 and buffer.getvalue():
        store_cached("help", key, buffer.getvalue())
    return code


#: the flags that ask for a command's help
HELP_FLAGS = frozenset({"-h", "--help"})


def _help_cacheable(argv: list[str]) -> bool:
    """Whether a help text depends on the source tree alone (`cacheable`, and no plugins to import)."""
    plugins = os.environ.get(PLUGINS_ENV) or any(a == "--plugin" or a.startswith("--plugin=") for a in argv)
    return not plugins and cacheable()


def _main(argv: list[str]) -> int:
    """`main` without the help cache."""
    try:
        argv = _take_plugins(argv)
        declare_commands()
        argv = expand_aliases(argv)
        parser = build_parser(command_words(argv))
    except LextraError as err:
        print(f"lextra: error: {err}", file=sys.stderr)
        return 2
    try:
        args, unknown = parser.parse_known_args(argv)
        leaf = dict(leaf_commands(parser)).get(tuple(getattr(args, "command_path", "").split()), parser)
        if unknown:  # named by the command that was given them, whose --help lists what it takes
            leaf.error(f"unrecognized arguments: {' '.join(unknown)}")
        args.given_flags = flags_given(leaf, list(argv))
    except SystemExit as done:  # argparse printed usage and a one-line error (exit 2), or --help (exit 0)
        return int(done.code or 0)
    name = f"lextra {args.command_path.split()[0]}"
    try:
        apply_runtime(args)
        return int(args.handler(args) or 0)
    except LextraError as err:
        print(f"{name}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{name}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader left (`lextra list | head`): stop quietly, as other command-line tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
