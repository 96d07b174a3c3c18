"""`lextra ...`: the command line. Nothing in the library imports this package."""

from lextra.cli.app import main

__all__ = ["main"]
