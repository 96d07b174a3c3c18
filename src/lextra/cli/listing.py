"""`lextra list`: every registered scheme, mask, RoPE scaling, extension method, task and position sampler, with
its options and spec syntax, generated from the registries (which import torch) and cached (`lextra.cli.cache`)."""

from __future__ import annotations

import argparse
import sys

from lextra.cli.app import Handler, command
from lextra.cli.cache import cached_text
from lextra.registry import loaded_plugins


def _generate() -> str:
    from lextra.reporting.catalog import catalog_text

    return catalog_text()


def catalog() -> str:
    """`lextra list`'s text: generated where the registries may differ from the source tree's (plugins loaded, or
    the library already imported in this process, whose code may have registered classes), else the cached text of
    this source tree (`lextra.cli.cache`)."""
    if loaded_plugins() or "lextra.positions" in sys.modules:
        return _generate()
    return cached_text("catalog", "", _generate)


@command(
    "list",
    "list every scheme, mask, RoPE scaling, extension method, task and position sampler with its options",
    examples=("lextra list", "lextra list | grep -A1 '^rerope'"),
)
def configure_list(parser: argparse.ArgumentParser) -> Handler:
    def run(args: argparse.Namespace) -> int:
        print(catalog())
        return 0

    return run
