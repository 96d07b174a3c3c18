"""The first read of a source: its size, the documents `split_corpus` moves between splits, the files it skips;
then the source cut into shards and the BPE sample."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from tqdm import tqdm

from lextra.data.corpora import DEFAULT_FRACTIONS, Document, skipped_files, split_of, split_overrides

SKIPPED_NAMED = 5
"""How many skipped files a manifest (and the summary of `lextra data prepare`) names."""


def source_shards(docs: Iterable[tuple[int, Document]], shard_chars: int) -> Iterator[list[tuple[int, Document]]]:
    """The (part, document) pairs cut into consecutive shards of at least `shard_chars` characters (the last may
    be smaller)."""
    current: list[tuple[int, Document]] = []
    chars = 0
    for part, doc in docs:
        current.append((part, doc))
        chars += len(doc.text)
        if chars >= shard_chars:
            yield current
            current, chars = [], 0
    if current:
        yield current


@dataclass
class Scan:
    """What one read of the source tells before encoding: its size and the documents `split_corpus` moves."""

    documents: int
    chars: int
    overrides: dict[str, str]
    skipped: int = 0  #: files a directory source skipped (binary, not UTF-8)
    skipped_first: list[str] = field(default_factory=list)  #: the first `SKIPPED_NAMED` of them

    def split(self, doc: Document) -> str:
        """The split of a document, exactly as `split_corpus` over the whole source decides it."""
        return self.overrides.get(doc.id) or split_of(doc.id, DEFAULT_FRACTIONS)


def scan_source(docs: Iterable[Document], bar: tqdm) -> Scan:
    """Read the source once (ids and lengths only are kept), counting documents on `bar` and the files it
    skips."""
    count, chars = 0, 0

    def id_stream() -> Iterator[str]:
        nonlocal count, chars
        for doc in docs:
            count += 1
            chars += len(doc.text)
            bar.update(1)
            yield doc.id

    with skipped_files() as skipped:
        overrides = split_overrides(id_stream(), DEFAULT_FRACTIONS)
    bar.close()
    return Scan(count, chars, overrides, len(skipped), skipped[:SKIPPED_NAMED])


def bpe_sample(docs: Iterable[Document], scan: Scan, sample_chars: int) -> list[Document]:
    """The leading train-split documents up to `sample_chars` characters (the last one whole): the whole train
    split when it fits, which is what `prepare_data` trains on."""
    sample: list[Document] = []
    total = 0
    for doc in docs:
        if total >= sample_chars:
            break
        if scan.split(doc) == "train":
            sample.append(doc)
            total += len(doc.text)
    return sample


def skipped_text(count: int, first: Sequence[str]) -> str:
    """`N files (a, b, ...)`: the count and the first few names."""
    more = ", ..." if count > len(first) else ""
    return f"{count} file{'s' if count != 1 else ''} ({', '.join(first)}{more})"
