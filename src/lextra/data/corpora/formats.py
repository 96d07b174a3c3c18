"""Corpora in files: one text file, a directory of text files, JSON Lines (also gzip and zstd), Parquet, and
Hugging Face datasets saved with `save_to_disk`; each read lazily, a document at a time."""

from __future__ import annotations

import contextlib
import contextvars
import gzip
import io
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from lextra.data.corpora.document import Document
from lextra.errors import DataError

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


def path_documents(path: Path, text_field: str) -> Iterator[Document]:
    """The documents of an existing file or folder, by its kind (a saved DatasetDict or Dataset, a directory of
    text files, a JSON Lines or Parquet file, else one text file)."""
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
    text = read_utf8(path)
    if text is None:
        raise DataError(f"corpus file {path} is not UTF-8 text; convert it to UTF-8 or give a .jsonl file")
    return iter([Document(path.name, text)])


def read_utf8(path: Path) -> str | None:
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


def _iter_text_directory(root: Path, text_field: str) -> Iterator[Document]:
    """Yield every UTF-8 text file under `root` (recursively, hidden entries, binary and non-UTF-8 files skipped),
    sorted by relative path; JSON Lines and Parquet files inside give a document per row (ids `rel/path:ID`)."""
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
        text = read_utf8(path)
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
                    raise DataError(
                        f"{where} has no field {text_field!r} (fields: {keys}); choose the text field to read"
                    )
                text = record[text_field]
                if not isinstance(text, str):
                    raise DataError(f"{where}: field {text_field!r} is a {type(text).__name__}, not a string")
                yield Document(f"{id_prefix}{record.get('id', line_number)}", text)
        except broken as err:
            raise DataError(f"{path} is not a complete {kind} file ({err}); compress it again") from None


# --- Parquet files ---------------------------------------------------------------------------------------------

PARQUET_SUFFIX = ".parquet"
"""File names read as Parquet tables, one document per row."""

PARQUET_BATCH_ROWS = 1024
"""Rows of a Parquet file turned into documents at a time (reading holds at most one row group's text)."""


def _iter_parquet(path: Path, text_field: str, *, id_prefix: str) -> Iterator[Document]:
    """Yield one document per row of a Parquet file (null texts skipped): text from column `text_field`, id from
    column `id` or the row number, reading only those columns `PARQUET_BATCH_ROWS` rows at a time."""
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
    view = getattr(pa.types, "is_string_view", lambda _: False)  # string, large string or string view: text
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or view(kind)):
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
    """Yield every split of a saved DatasetDict (lextra makes its own splits), ids prefixed with the split name."""
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
