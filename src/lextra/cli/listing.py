"""`lextra list`: every registered position scheme and mask with its options."""

from __future__ import annotations

import argparse

from lextra.cli.app import Handler, command


@command(
    "list",
    "list every position scheme and mask with its options",
    examples=("lextra list", "lextra list | grep -A1 '^rerope'"),
)
def configure_list(parser: argparse.ArgumentParser) -> Handler:
    def run(args: argparse.Namespace) -> int:
        from lextra.reporting.catalog import catalog_text

        print(catalog_text())
        return 0

    return run
