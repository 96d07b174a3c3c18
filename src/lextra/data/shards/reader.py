"""Reading a prepared folder: `PreparedShards.open` maps its files copy-on-write after checking the manifest, the
files' sizes and (once per unchanged folder) their checksums; windows, documents and texts are read from the maps,
and a run draws its windows from the folder's stream (i.i.d. or in epochs) or its mixture parts by weight."""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lextra.data.corpora import SPLITS, Document, mixture_weights
from lextra.data.integrity import FAST_HASH, Expected, check_files
from lextra.data.manifest import check_tokenizer_record, validate_manifest
from lextra.data.orders import EpochOrder, check_order, in_order
from lextra.data.positions import BatchSource
from lextra.data.prepare import PreparedData, PreparedFolder
from lextra.data.shards.layout import (
    DTYPES,
    FORMAT_VERSION,
    MANIFEST,
    REQUEST,
    TOKENIZER,
    TOKENIZER_DIR,
    normal_spec,
    prepare_command,
    unfinished_command,
)
from lextra.data.tokenizers import HFTokenizer, Tokenizer, tokenizer_from_config
from lextra.data.windows import DocumentStarts, JoinedTokens, WindowSource, mixture_window_starts
from lextra.errors import DataError
from lextra.io import sha256_file


@dataclass(frozen=True)
class Part:
    """One shard's token file of a split and its documents' offsets, both mapped."""

    tokens: np.memmap
    offsets: np.ndarray


class PreparedShards(PreparedFolder):
    """A prepared folder, mapped copy-on-write: training windows, evaluation documents, its tokenizer."""

    def __init__(
        self, root: Path, manifest: dict[str, Any], digest: str, parts: dict[str, list[Part]], config: dict[str, Any]
    ) -> None:
        """Use `PreparedShards.open`."""
        self.root = root
        self.manifest = manifest
        self.sha256 = digest
        self._parts = parts
        self._streams: dict[str, JoinedTokens] = {}
        #: the saved `to_config()` of the tokenizer the folder was prepared with (`tokenizer.json`)
        self.tokenizer_config = config
        self.separator: int | None = manifest["tokenizer"]["separator"]

    @classmethod
    def open(cls, directory: str | os.PathLike[str], *, check: bool = True) -> PreparedShards:
        """Map a prepared folder, checking its manifest's schema, every file's size and (with `check`) checksum
        (`lextra.data.integrity`)."""
        root = Path(directory).expanduser()
        raw, manifest = _read_manifest(root)
        request = manifest.get("request") if isinstance(manifest.get("request"), dict) else {}
        again = f"run `{prepare_command(request, root)}` into a new folder"
        fix = f"prepare the data again: {again}"
        validate_manifest(manifest, DTYPES, SPLITS, str(root / MANIFEST), fix)
        try:
            config = json.loads((root / TOKENIZER).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            raise DataError(f"{root / TOKENIZER} is missing or not JSON; {again}") from None
        check_tokenizer_record(manifest, config, str(root / MANIFEST), fix)
        for entry in _file_entries(manifest):
            file = root / entry["name"]
            size = file.stat().st_size if file.is_file() else None
            if size != entry["bytes"]:
                found = "missing" if size is None else f"{size} bytes, expected {entry['bytes']}"
                raise DataError(f"prepared shard {file} is {found}; {again}")
        if check:
            check_files(root, _expected(manifest), f"copy the folder again from where it came from, or {again}")
        return cls(root, manifest, hashlib.sha256(raw).hexdigest(), _map_parts(root, manifest), config)

    def verify(self) -> None:
        """Check the sha256 of every file against the manifest (reads everything); `DataError` on a mismatch."""
        for expected in _expected(self.manifest):
            file = self.root / expected.name
            if not file.is_file() or sha256_file(file) != expected.sha256:
                again = prepare_command(self.manifest["request"], self.root)
                raise DataError(
                    f"prepared file {file} is missing or corrupt (sha256 mismatch); run `{again}` into a new folder"
                )

    @property
    def corpus(self) -> str:
        """The source spec the folder was prepared from (what `PreparedData.corpus` names)."""
        return str(self.manifest["source"])

    def check_model_tokenizer(self, config: dict[str, Any]) -> None:
        """Refuse to evaluate a model on data tokenized otherwise: `config` is the model's saved tokenizer config."""
        if self.tokenizer_config != config:
            theirs = config.get("kind", "?")
            if theirs == "bpe" and "vocab_size" in config:
                theirs = f"bpe:{config['vocab_size']}"
            raise DataError(
                f"the prepared data {self.root} was tokenized with {self.tokenizer_spec}, not with the model's "
                f"tokenizer ({theirs}, trained on its own corpus); prepare the data with the model's tokenizer, "
                "or drop --data to read the model's corpus"
            )

    @property
    def tokenizer_spec(self) -> str:
        """The tokenizer spec the folder was prepared with (e.g. `bpe:8192`)."""
        return str(self.manifest["tokenizer"]["spec"])

    def tokenizer(self) -> Tokenizer:
        """The tokenizer the folder was prepared with (a Hugging Face one from the folder's copy of its files)."""
        config = self.tokenizer_config
        if config.get("kind") == "hf" and (self.root / TOKENIZER_DIR).is_dir():
            return HFTokenizer(self.root / TOKENIZER_DIR, origin=config["path"])
        return tokenizer_from_config(config)

    def check_tokenizer(self, spec: str) -> None:
        """Refuse a run whose tokenizer spec differs from the one the folder was prepared with."""
        if normal_spec(spec) != normal_spec(self.tokenizer_spec):
            raise DataError(
                f"the prepared data {self.root} was tokenized with {self.tokenizer_spec}, the run asks for {spec}; "
                f"pass --tokenizer {self.tokenizer_spec}, or prepare the source again with --tokenizer {spec}"
            )

    def check_hf_tokenizer(self, own: str, spec: str | None = None) -> None:
        """Refuse data for a Hugging Face model tokenized otherwise: with `spec` (the run's --tokenizer) that
        spec, else the model's own tokenizer at the resolved path `own` (prepared with `--tokenizer hf:OWN`)."""
        if spec:
            self.check_tokenizer(spec)
            return
        if self.tokenizer_config.get("kind") != "hf" or self.tokenizer_config.get("path") != own:
            raise DataError(
                f"the prepared data {self.root} was tokenized with {self.tokenizer_spec}, not the model's "
                f"own tokenizer ({own}); prepare it with --tokenizer hf:{own}, or pass --tokenizer "
                f"{self.tokenizer_spec}"
            )

    def num_tokens(self, split: str = "train") -> int:
        """Tokens of a split's stream, separators included."""
        return int(self.manifest["splits"][split]["tokens"])

    def num_documents(self, split: str = "train") -> int:
        """Documents of a split (those that encode to at least one token)."""
        return int(self.manifest["splits"][split]["documents"])

    def __len__(self) -> int:
        """Tokens of the training stream, as `len(TrainStream)`."""
        return self.num_tokens("train")

    def span(self, split: str, start: int, stop: int) -> np.ndarray:
        """Tokens [start, stop) of a split's stream (across shard files), as a new array of the file dtype."""
        return self._stream(split).span(start, stop)

    def windows(self, starts: torch.Tensor, length: int) -> torch.Tensor:
        """The (len(starts), length + 1) int64 windows of the training stream at `starts`."""
        return self._stream("train").windows(starts, length)

    def document_starts(self) -> DocumentStarts:
        """Where each document of the training stream starts (each shard file's offsets, mapped, shifted by the
        file's first stream position)."""
        parts = self._parts["train"]
        sizes = np.array([part.tokens.size for part in parts], dtype=np.int64)
        bases = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
        return DocumentStarts(bases.tolist(), [part.offsets[:, 0] for part in parts], len(self))

    def _stream(self, split: str) -> JoinedTokens:
        """A split's token files read as one stream (they stay mapped while this object lives)."""
        if split not in self._streams:
            self._streams[split] = JoinedTokens([part.tokens for part in self._parts[split]])
        return self._streams[split]

    def part_ranges(self, split: str = "train") -> list[tuple[int, int]]:
        """Each mixture part's [start, stop) range of a split's stream (its documents are consecutive there)."""
        parts = self.manifest.get("parts")
        if parts is None:
            raise DataError(
                f"{self.root} records no mixture parts (prepared by an older lextra); prepare it again to sample "
                "its parts by weight"
            )
        gap = 0 if self.separator is None else 1
        ranges, documents, tokens = [], 0, 0
        for part in parts:
            count, size = part["splits"][split]["documents"], part["splits"][split]["tokens"]
            start = tokens + documents * gap
            ranges.append((start, start + size + max(count - 1, 0) * gap))
            documents, tokens = documents + count, tokens + size
        return ranges

    def documents(self, split: str, limit: int | None = None) -> list[torch.Tensor]:
        """The split's documents (at most `limit`) as 1-D token tensors in the file dtype, as `encode_documents`
        gives them, viewing the copy-on-write map (nothing is copied or read until used)."""
        if split not in SPLITS:
            raise DataError(f"unknown split {split!r}; use one of {', '.join(SPLITS)}")
        out: list[torch.Tensor] = []
        for part in self._parts[split]:
            for start, stop in part.offsets:
                if limit is not None and len(out) >= limit:
                    return out
                out.append(torch.from_numpy(part.tokens[int(start) : int(stop)]))
        return out

    def texts(self, split: str) -> DecodedDocuments:
        """The split's documents as text, decoded lazily (`DecodedDocuments`), for tasks whose prompts are text."""
        if split not in SPLITS:
            raise DataError(f"unknown split {split!r}; use one of {', '.join(SPLITS)}")
        return DecodedDocuments(self, split)

    def prepared_data(self) -> PreparedData:
        """The folder as `PreparedData`: every split's `texts`, its tokenizer, and the folder for its tokens."""
        splits: dict[str, Any] = {name: self.texts(name) for name in SPLITS}
        return PreparedData(self.corpus, splits, self.tokenizer(), folder=self)


def _read_manifest(root: Path) -> tuple[bytes, Any]:
    """The bytes of a folder's manifest and its JSON; one line naming the fix where the folder is a file,
    unfinished, not a prepared folder, corrupt or of another format."""
    path = root / MANIFEST
    if root.exists() and not root.is_dir():
        raise DataError(f"{root} is a file, not a prepared data folder; give the folder `lextra data prepare` wrote")
    if not path.is_file():
        again = unfinished_command(root)
        if (root / REQUEST).is_file():
            raise DataError(
                f"{root} holds an unfinished prepare (no {MANIFEST}); "
                f"run `{again or 'lextra data prepare ...'}` again to finish it"
            )
        raise DataError(
            f"{root} is not a prepared data folder (no {MANIFEST}); "
            "make one with `lextra data prepare SOURCE --tokenizer SPEC --out DIR`"
        )
    raw = path.read_bytes()
    try:
        manifest = json.loads(raw)
    except ValueError as err:
        raise DataError(f"{path} is corrupt ({err}); prepare {root} again") from None
    version = manifest.get("format") if isinstance(manifest, dict) else None
    if isinstance(version, int) and not isinstance(version, bool) and version != FORMAT_VERSION:
        raise DataError(
            f"{root} was prepared in format {version}, this lextra reads format {FORMAT_VERSION}; prepare it again"
        )
    return raw, manifest


def _file_entries(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The manifest's entry (name, bytes, hashes) of every token and offsets file, split by split."""
    return [
        entry for name in SPLITS for shard in manifest["splits"][name]["shards"] for entry in shard["files"].values()
    ]


def _expected(manifest: dict[str, Any]) -> list[Expected]:
    """Every file of the folder with the hashes the manifest records: shards, tokenizer config, copied files."""
    tokenizer = manifest["tokenizer"]
    copied = [{**e, "name": f"{TOKENIZER_DIR}/{e['name']}"} for e in tokenizer.get("files", {}).values()]
    files = [Expected(e["name"], e["sha256"], e.get(FAST_HASH)) for e in _file_entries(manifest)]
    files.append(Expected(TOKENIZER, tokenizer["config_sha256"]))
    return files + [Expected(e["name"], e["sha256"], e.get(FAST_HASH)) for e in copied]


def _map_parts(root: Path, manifest: dict[str, Any]) -> dict[str, list[Part]]:
    """Every split's shard files, mapped: tokens copy-on-write (tensors may view the map, as torch needs writable
    arrays; writes never reach the file), offsets read-only."""
    dtype = DTYPES[manifest["dtype"]]
    parts: dict[str, list[Part]] = {}
    for name in SPLITS:
        parts[name] = []
        for shard in manifest["splits"][name]["shards"]:
            files = shard["files"]
            tokens = np.memmap(root / files["tokens"]["name"], dtype=dtype, mode="c")
            offsets = np.memmap(root / files["offsets"]["name"], dtype=np.int64, mode="r").reshape(-1, 2)
            parts[name].append(Part(tokens, offsets))
    return parts


class DecodedDocuments(Sequence[Document]):
    """A prepared split's documents as text, decoded with the folder's tokenizer when first read (then kept): the
    original text exactly for `bytes` and byte-level `bpe:N` (a normalizing Hugging Face tokenizer may differ);
    ids are `SPLIT/INDEX` (the folder records no document ids)."""

    def __init__(self, shards: PreparedShards, split: str) -> None:
        self._split = split
        self._shards = shards
        self._texts: dict[int, Document] = {}

    def __len__(self) -> int:
        return self._shards.num_documents(self._split)

    @functools.cached_property
    def _tokens(self) -> list[torch.Tensor]:
        return self._shards.documents(self._split)

    @functools.cached_property
    def _tokenizer(self) -> Tokenizer:
        return self._shards.tokenizer()

    def _document(self, index: int) -> Document:
        if index not in self._texts:
            text = self._tokenizer.decode(self._tokens[index].tolist())
            self._texts[index] = Document(f"{self._split}/{index}", text)
        return self._texts[index]

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self._document(i) for i in range(len(self))[index]]
        position = range(len(self))[index]  # IndexError as a list raises it
        return self._document(position)


class WeightedMixture(WindowSource):
    """Training windows of a prepared weighted mixture (`A:0.3+B:0.7`): each window comes from one part, drawn
    by weight (`mixture_window_starts`), so every part is seen in its share whatever its size."""

    def __init__(self, shards: PreparedShards, weights: Sequence[float]) -> None:
        self.shards = shards
        self.weights = list(weights)
        self.ranges = shards.part_ranges("train")
        if len(self.ranges) != len(self.weights):
            raise DataError(
                f"{shards.root} holds {len(self.ranges)} mixture parts, the weights name {len(self.weights)}; "
                "prepare the weighted mixture itself"
            )

    def __len__(self) -> int:
        """Tokens of the training stream (every part's)."""
        return len(self.shards)

    def draw_starts(
        self, step: int, batch_size: int, length: int, seed: int, rank: int = 0, world_size: int = 1
    ) -> torch.Tensor:
        return mixture_window_starts(self.ranges, self.weights, step, batch_size, length, seed, rank, world_size)

    def windows(self, starts: torch.Tensor, length: int) -> torch.Tensor:
        return self.shards.windows(starts, length)


def training_batches(shards: PreparedShards, order: str = "iid") -> PreparedShards | WeightedMixture | EpochOrder:
    """What a run draws its windows from, in `order` (`ORDERS`): the folder's stream, i.i.d. or in epochs, or its
    parts by weight when it holds a weighted mixture (i.i.d. only: weights say how often each part is drawn, an
    epoch draws every window once)."""
    check_order(order)
    weights = mixture_weights(shards.corpus)
    if weights is not None:
        if order == "epoch":
            raise DataError(
                f"{shards.root} holds a weighted mixture ({shards.corpus}), whose windows are drawn by weight; "
                "epoch order draws every window once, so use --order iid, or an unweighted mixture A+B"
            )
        return WeightedMixture(shards, weights)
    return in_order(shards, order)


def data_batches(data: PreparedData, order: str = "iid") -> BatchSource:
    """A run's training windows in `order`: its prepared folder's (`training_batches`), else the train split's
    stream, encoded once."""
    if isinstance(data.folder, PreparedShards):
        return training_batches(data.folder, order)
    return in_order(data.stream, order)
