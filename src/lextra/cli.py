"""The `lextra` command line: one subcommand per job; user mistakes end in a one-line error and exit code 2."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from lextra.errors import LextraError

Handler = Callable[[argparse.Namespace], int]
Configure = Callable[[argparse.ArgumentParser], Handler]
COMMANDS: dict[str, tuple[str, Configure]] = {}


def command(name: str, help_text: str) -> Callable[[Configure], Configure]:
    """Register `lextra NAME`: the decorated function adds its arguments and returns the handler."""

    def register(configure: Configure) -> Configure:
        COMMANDS[name] = (help_text, configure)
        return configure

    return register


@command("list", "list every position scheme and mask with its options")
def _configure_list(parser: argparse.ArgumentParser):
    def run(args: argparse.Namespace) -> int:
        from lextra.catalog import catalog_text

        print(catalog_text())
        return 0

    return run


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lextra", description="Transformer length extrapolation toolkit.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (help_text, configure) in COMMANDS.items():
        child = sub.add_parser(name, help=help_text, description=help_text)
        child.set_defaults(handler=configure(child))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    _load_commands()
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as done:  # argparse printed usage and a one-line error (exit 2), or --help (exit 0)
        return int(done.code or 0)
    try:
        return int(args.handler(args) or 0)
    except LextraError as err:
        print(f"lextra {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"lextra {args.command}: interrupted", file=sys.stderr)
        return 130


def _load_commands() -> None:
    """Import the modules that register further subcommands (kept lazy so `lextra list` starts fast)."""
    import importlib

    for module in (
        "lextra.commands",
        "lextra.analysis_commands",
        "lextra.retrieval_commands",
        "lextra.hf_commands",
        "lextra.study_commands",
    ):
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as err:
            if err.name != module:
                raise
