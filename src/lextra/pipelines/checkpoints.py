"""What the analyses run on: checkpoints (with unique row labels) and held-out texts of the model's own corpus."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from lextra.data.prepare import PreparedData, model_data_spec, prepare_for_model
from lextra.errors import ConfigError
from lextra.evaluate import evaluation_documents
from lextra.model import CONFIG_FILE, GPT
from lextra.pipelines.loading import load_lextra
from lextra.validate import parse_lengths


@dataclass
class Checkpoint:
    """A loaded model, the folder it came from, its metadata and the label its table rows carry."""

    folder: Path
    model: GPT
    meta: dict[str, Any]
    label: str

    @property
    def train_len(self) -> int:
        return self.model.config.train_len


def resolve_checkpoint(path: str | Path) -> Path:
    """A model folder, or a training run folder holding `model/` (as `lextra eval` accepts)."""
    folder = Path(path)
    if (folder / "model" / CONFIG_FILE).exists():
        folder = folder / "model"
    return folder


def load_checkpoints(paths: list[str], device: str | torch.device = "cpu") -> list[Checkpoint]:
    """Load every checkpoint onto `device`; labels are scheme names, made unique with the run folder's name when
    they repeat."""
    loaded: list[Checkpoint] = []
    for path in paths:
        folder = resolve_checkpoint(path)
        model_and_meta = load_lextra(folder, device=device)
        model, meta = model_and_meta.model, model_and_meta.meta
        model.eval()
        label = model.config.layer_plan or model.config.scheme
        if any(c.label == label for c in loaded):
            run = folder.parent.name if folder.name == "model" else folder.name
            label = f"{label}@{run}"
        if any(c.label == label for c in loaded):
            raise ConfigError(f"checkpoint {path} is given twice; list each checkpoint once")
        loaded.append(Checkpoint(folder, model, meta, label))
    return loaded


def common_train_len(checkpoints: list[Checkpoint], default: int) -> int:
    """The training length shared by every checkpoint (default lengths are its multiples)."""
    values = sorted({c.train_len for c in checkpoints}) or [default]
    if len(values) > 1:
        raise ConfigError(f"the checkpoints were trained at different lengths {values}; give --lengths explicitly")
    return values[0]


def analysis_lengths(text: str | None, train_len: int, multiples: tuple[int, ...]) -> list[int]:
    """An analysis' `--lengths` (distinct, ascending, each >= 2), or L_tr times `multiples` when none are given."""
    lengths = parse_lengths(text, 2, distinct=True)
    return [train_len * m for m in multiples] if lengths is None else lengths


class TextSource:
    """Held-out texts of each checkpoint's training corpus and tokenizer, prepared once per corpus."""

    def __init__(self, split: str = "validation", corpus: str | None = None, limit_chars: int | None = None) -> None:
        self.split, self.corpus, self.limit_chars = split, corpus, limit_chars
        self._prepared: dict[str, PreparedData] = {}

    def texts(self, checkpoint: Checkpoint, need: int, count: int) -> Tensor:
        """`count` texts of `need` tokens (T, need) on the CPU: held-out pieces of whole documents where they are
        long enough (`evaluation_documents`; the analyses move them to the model's device)."""
        key = json.dumps(model_data_spec(checkpoint.meta, self.corpus, self.limit_chars), sort_keys=True)
        if key not in self._prepared:
            self._prepared[key] = prepare_for_model(checkpoint.meta, self.corpus, self.limit_chars)
        data = self._prepared[key]
        docs, stitched, _ = evaluation_documents(data, self.split, need, count)
        if stitched:
            print(
                f"lextra analyze: warning: no {self.split} document of {data.corpus} has {need} tokens; "
                "using stitched text",
                file=sys.stderr,
            )
        vocab = checkpoint.model.config.vocab_size
        stacked = torch.stack(docs).long()
        if int(stacked.max()) >= vocab:
            raise ConfigError(f"the texts of {data.corpus} hold token ids beyond the model's vocabulary ({vocab})")
        return stacked
