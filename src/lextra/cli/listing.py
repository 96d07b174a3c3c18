"""`lextra list`: every registered scheme, mask, RoPE scaling, extension method, task and position sampler, with
its options and spec syntax, generated from the registries (which import torch) and cached (`lextra.cli.cache`)."""

from __future__ import annotations

import argparse

from lextra.cli.app import Handler, command
from lextra.cli.cache import cacheable, cached_text


def _generate() -> str:
    from lextra.reporting.catalog import catalog_text

    return catalog_text()


def catalog() -> str:
    """`lextra list`'s text: this source tree's cached text where the registries are its own (`cacheable`)."""
    return cached_text("catalog", "", _generate) if cacheable() else _generate()


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
