"""`lextra list`: every registered scheme, mask, RoPE scaling, extension method, task and position sampler, with
its options and spec syntax (generated from the registries)."""

from __future__ import annotations

import argparse

from lextra.cli.app import Handler, command


@command(
    "list",
    "list every scheme, mask, RoPE scaling, extension method, task and position sampler with its options",
    examples=("lextra list", "lextra list | grep -A1 '^rerope'"),
)
def configure_list(parser: argparse.ArgumentParser) -> Handler:
    def run(args: argparse.Namespace) -> int:
        from lextra.reporting.catalog import catalog_text

        print(catalog_text())
        return 0

    return run
