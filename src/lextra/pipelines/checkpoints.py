"""What the analyses run on: checkpoints (with unique row labels) and held-out texts of the model's own corpus."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor

from lextra.data.prepare import PreparedData, model_data_spec
from lextra.data.shards import text_data_for_model
from lextra.errors import ConfigError
from lextra.evaluate import evaluation_documents
from lextra.pipelines.loading import ModelOptions, lextra_folder, load_model_spec
from lextra.validate import parse_lengths


@dataclass
class Checkpoint:
    """A loaded model (a lextra GPT or a Hugging Face adapter), the spec it came from, its metadata (its texts'
    corpus and tokenizer), the label its rows carry and the mask it runs under unless one is asked for."""

    name: str
    model: Any
    meta: dict[str, Any]
    label: str
    default_mask: str = "causal"

    @property
    def train_len(self) -> int:
        return self.model.config.train_len


def load_checkpoints(
    specs: list[str],
    device: str | torch.device = "cpu",
    options: ModelOptions | None = None,
    *,
    hf_train_len: bool = False,
) -> list[Checkpoint]:
    """Load every model `specs` name (`load_model_spec`) onto `device` with `options` applied, labels made unique
    with the run folder's name when they repeat. With `hf_train_len` the options' L_tr applies to the Hugging Face
    models only instead of being refused on a lextra one."""
    loaded: list[Checkpoint] = []
    for spec in specs:
        chosen = options
        if hf_train_len and options is not None and lextra_folder(spec) is not None:
            chosen = replace(options, train_len=None)
        model_and_meta = load_model_spec(spec, chosen, device, with_tokenizer=False)
        model, label = model_and_meta.model.eval(), model_and_meta.label
        if any(c.label == label for c in loaded) and model_and_meta.folder is not None:
            folder = model_and_meta.folder
            run = folder.parent.name if folder.name == "model" else folder.name
            label = f"{label}@{run}"
        if any(c.label == label for c in loaded):
            raise ConfigError(f"checkpoint {spec} is given twice; list each checkpoint once")
        default = getattr(model, "default_mask", "causal")
        loaded.append(Checkpoint(model_and_meta.name, model, model_and_meta.meta, label, default))
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
    """Held-out texts of each checkpoint's training corpus and tokenizer (or of `corpus`, or of the prepared folder
    `data`), prepared once per corpus."""

    def __init__(
        self,
        split: str = "validation",
        corpus: str | None = None,
        limit_chars: int | None = None,
        data: str | None = None,
    ) -> None:
        self.split, self.corpus, self.limit_chars, self.data = split, corpus, limit_chars, data
        self._prepared: dict[str, PreparedData] = {}

    def texts(self, checkpoint: Checkpoint, need: int, count: int) -> Tensor:
        """`count` texts of `need` tokens (T, need) on the CPU (`evaluation_documents`)."""
        spec = model_data_spec(checkpoint.meta, self.corpus, self.limit_chars)
        key = json.dumps([self.data, spec, checkpoint.meta.get("hf")], sort_keys=True)
        if key not in self._prepared:  # a given folder is checked against each tokenizer it is read with
            self._prepared[key] = text_data_for_model(checkpoint.meta, self.data, self.corpus, self.limit_chars)
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
