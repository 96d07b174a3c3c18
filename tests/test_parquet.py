"""Parquet files as corpora: one document per row, read a batch of rows at a time, wherever corpus files are read
(a file, a folder of them, a mixture part, `lextra data prepare`), with one line for each bad input."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lextra.cli import main
from lextra.data import PreparedShards, iter_documents, load_corpus, prepare_shards
from lextra.data.corpora import formats as formats_module
from lextra.errors import DataError


@pytest.fixture(autouse=True)
def _tokenizer_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEXTRA_CACHE", str(tmp_path / "cache"))


def _write(path: Path, columns: dict[str, list], row_group_size: int = 3) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path, row_group_size=row_group_size)
    return str(path)


def test_a_parquet_file_gives_one_document_per_row_in_order(tmp_path: Path) -> None:
    texts = [f"row {i}: caf\u00e9 " * (i + 1) for i in range(10)]
    texts[4] = None  # a null text is no document, and keeps its row number
    with_ids = _write(
        tmp_path / "ids.parquet", {"id": [f"d{i}" for i in range(10)], "text": texts, "n": list(range(10))}
    )
    docs = load_corpus(with_ids)
    assert [d.id for d in docs] == [f"d{i}" for i in range(10) if i != 4]
    assert [d.text for d in docs] == [t for t in texts if t is not None]
    numbered = _write(tmp_path / "plain.parquet", {"body": texts})
    docs = load_corpus(numbered, text_field="body")
    assert [d.id for d in docs] == [str(i) for i in range(10) if i != 4]
    assert [d.text for d in load_corpus(numbered, text_field="body", limit_chars=40)] == texts[:3]
    large = _write(tmp_path / "large.parquet", {"text": pa.array(["a b", "c"], type=pa.large_string())})
    assert [d.text for d in load_corpus(large)] == ["a b", "c"]


def test_a_parquet_file_is_read_a_batch_of_rows_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path / "big.parquet", {"text": [f"document {i}" for i in range(100)]}, row_group_size=10)
    monkeypatch.setattr(formats_module, "PARQUET_BATCH_ROWS", 4)
    pulled: list[int] = []
    original = pq.ParquetFile.iter_batches

    def counting(self, *args, **kwargs):
        assert kwargs["batch_size"] == 4 and kwargs["columns"] == ["text"]  # only the text column is decoded
        for batch in original(self, *args, **kwargs):
            pulled.append(batch.num_rows)
            yield batch

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", counting)
    docs = iter_documents(path)
    assert [next(docs).text for _ in range(5)] == [f"document {i}" for i in range(5)]
    assert pulled == [4, 4]  # two batches decoded for five documents, not the file's 100 rows
    assert len(list(docs)) == 95 and sum(pulled) == 100


def test_a_folder_of_parquet_files_and_a_mixture_part(tmp_path: Path) -> None:
    folder = tmp_path / "folder"
    _write(folder / "b.parquet", {"text": ["second file"]})
    _write(folder / "a.parquet", {"text": ["first", "file"], "id": [7, 8]})
    _write(folder / "sub" / "c.parquet", {"text": ["nested"]})
    docs = load_corpus(str(folder))
    assert [(d.id, d.text) for d in docs] == [
        ("a.parquet:7", "first"),
        ("a.parquet:8", "file"),
        ("b.parquet:0", "second file"),
        ("sub/c.parquet:0", "nested"),
    ]
    other = _write(tmp_path / "other.parquet", {"text": ["mixed in"], "id": ["x"]})
    assert [d.id for d in load_corpus(f"{folder}+{other}")] == [d.id for d in docs] + ["x"]


def test_bad_parquet_inputs_are_one_line_each(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.parquet", {"title": ["a"], "body": ["text"], "year": [1999]})
    with pytest.raises(DataError) as err:
        load_corpus(path)
    assert str(err.value) == (
        f"{path} has no column 'text' (columns: title, body, year); choose the text column with --text-field"
    )
    with pytest.raises(DataError) as err:
        load_corpus(path, text_field="year")
    assert str(err.value) == f"{path}: column 'year' holds int64, not text; choose a string column with --text-field"
    blob = _write(tmp_path / "blob.parquet", {"text": pa.array([b"\x00\x01"], type=pa.binary())})
    with pytest.raises(DataError, match=r"column 'text' holds binary, not text"):
        load_corpus(blob)
    fake = tmp_path / "fake.parquet"
    fake.write_text("not parquet at all")
    with pytest.raises(DataError, match=rf"^{fake} is not a readable Parquet file \(.*\); write it again$"):
        load_corpus(str(fake))


def test_parquet_is_prepared_and_refused_by_the_cli_in_one_line(tmp_path: Path, capsys) -> None:
    texts = [f"the parquet document number {i} " * 20 for i in range(30)]
    path = _write(tmp_path / "corpus.parquet", {"content": texts}, row_group_size=7)
    out = tmp_path / "prepared"
    argv = ["data", "prepare", path, "--tokenizer", "bytes", "--quiet"]
    assert main([*argv, "--out", str(out), "--text-field", "content"]) == 0
    prepared = PreparedShards.open(out)
    assert sum(prepared.num_documents(split) for split in ("train", "validation", "test")) == 30
    prepare_shards(str(tmp_path / "corpus.parquet"), "bytes", tmp_path / "api", text_field="content", progress=False)
    assert PreparedShards.open(tmp_path / "api").manifest["splits"] == prepared.manifest["splits"]
    capsys.readouterr()
    assert main([*argv, "--out", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"lextra data: error: {path} has no column 'text' (columns: content); choose the text column with "
        "--text-field\n"
    )
