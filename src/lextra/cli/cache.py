"""Texts the command line prints without importing the library, cached by a hash of the package's source files
(path, size, modification time) and the Python version: `lextra list`'s catalog and every `--help`. The first run
after any change generates a text (importing torch); later runs print it in a fraction of a second."""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Callable
from functools import cache
from pathlib import Path

import lextra
from lextra.io import atomic_write_text
from lextra.registry import loaded_plugins

#: the cache root, as for the tokenizer and data caches (`$LEXTRA_CACHE`, else ~/.cache/lextra)
CACHE_ENV = "LEXTRA_CACHE"


@cache
def source_digest() -> str:
    """A hash of this source tree and interpreter: a cached text is valid while it is unchanged."""
    package = Path(lextra.__file__).parent
    digest = hashlib.sha256(f"{lextra.__version__} {sys.version}".encode())
    for path in sorted(package.rglob("*.py")):
        stat = path.stat()
        digest.update(f"{path.relative_to(package)} {stat.st_size} {stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:24]


def cache_file(kind: str, key: str = "") -> Path:
    """The file a text of `kind` (`catalog`, `help`) for `key` is cached in, under this source tree's digest."""
    root = os.environ.get(CACHE_ENV)
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "lextra"
    name = source_digest() + (f"-{hashlib.sha256(key.encode()).hexdigest()[:16]}" if key else "")
    return base / kind / f"{name}.txt"


def read_cached(kind: str, key: str) -> str | None:
    """The cached text of (`kind`, `key`) for this source tree, or None."""
    try:
        return cache_file(kind, key).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def store_cached(kind: str, key: str, text: str) -> None:
    """Cache a text (entries of earlier source trees removed first; a cache that cannot be written is skipped)."""
    path = cache_file(kind, key)
    try:
        for old in path.parent.glob("*.txt"):
            if not old.name.startswith(source_digest()):
                old.unlink(missing_ok=True)
        atomic_write_text(path, text)
    except OSError:
        pass


def cacheable() -> bool:
    """Whether a text depends on the source tree alone: not where plugins registered classes, or where this process
    has imported the library already (its code may have registered some)."""
    return not loaded_plugins() and "lextra.positions" not in sys.modules


def cached_text(kind: str, key: str, make: Callable[[], str]) -> str:
    """The cached text of (`kind`, `key`), else `make()`, cached."""
    text = read_cached(kind, key)
    if text is None:
        text = make()
        store_cached(kind, key, text)
    return text
