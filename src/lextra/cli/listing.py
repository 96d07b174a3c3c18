"""`lextra list`: every registered scheme, mask, RoPE scaling, extension method, task and position sampler, with
its options and spec syntax (generated from the registries).

Building the registries imports torch (their classes are torch modules), so the text is kept in a cache file named
by a hash of the package's source files (path, size, modification time) and the Python version: the first run after
any change generates it, later runs print it without importing the library. With plugins loaded, or the library
already imported (`main(["list"])` in a process that registered classes), it is generated."""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from pathlib import Path

import lextra
from lextra.cli.app import Handler, command
from lextra.io import atomic_write_text
from lextra.registry import loaded_plugins

#: the cache root, as for the tokenizer and data caches (`$LEXTRA_CACHE`, else ~/.cache/lextra)
CACHE_ENV = "LEXTRA_CACHE"


def catalog_cache_file() -> Path:
    """The file the catalog of this source tree is cached in."""
    package = Path(lextra.__file__).parent
    digest = hashlib.sha256(f"{lextra.__version__} {sys.version}".encode())
    for path in sorted(package.rglob("*.py")):
        stat = path.stat()
        digest.update(f"{path.relative_to(package)} {stat.st_size} {stat.st_mtime_ns}\n".encode())
    root = os.environ.get(CACHE_ENV)
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "lextra"
    return base / "catalog" / f"{digest.hexdigest()[:24]}.txt"


def catalog() -> str:
    """`lextra list`'s text: generated where the registries may differ from the source tree's (plugins loaded, or
    the library already imported in this process, whose code may have registered classes), else the cached text of
    this source tree (generated and cached when missing; a cache that cannot be written is skipped)."""
    if loaded_plugins() or "lextra.positions" in sys.modules:
        from lextra.reporting.catalog import catalog_text

        return catalog_text()
    path = catalog_cache_file()
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        pass
    from lextra.reporting.catalog import catalog_text

    text = catalog_text()
    try:
        for old in path.parent.glob("*.txt"):  # entries of earlier source trees
            old.unlink(missing_ok=True)
        atomic_write_text(path, text)
    except OSError:
        pass
    return text


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
