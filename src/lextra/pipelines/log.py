"""One status line to stderr per call, written whole, so lines from several processes never run together."""

from __future__ import annotations

import sys


def log(command: str, message: str) -> None:
    """Write `lextra <command>: <message>` and its newline in one write (under torchrun the ranks share a pipe)."""
    sys.stderr.write(f"lextra {command}: {message}\n")
    sys.stderr.flush()
