"""Load what a command or a study evaluates -- a lextra run or model folder, a Hugging Face folder, a GGUF file or
`smollm2` -- with its inference setup applied, its tokenizer, a label naming the changes and its key in resumable
result cells."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from lextra.errors import CheckpointError, ConfigError, DataError
from lextra.extend import KEEP, InferenceSetup
from lextra.io import sha256_file
from lextra.tasks.ruler import DEFAULT_HAYSTACK


@dataclass
class ModelOptions:
    """The `InferenceSetup` applied while loading, an alignment.json whose temperatures join it, a tokenizer
    replacing the model's own (`build_tokenizer_spec`), a Hugging Face model's L_tr (default its maximum) and
    whether to hide transformers' loading bars."""

    setup: InferenceSetup = field(default_factory=InferenceSetup)
    temperatures: str | None = None
    tokenizer: str | None = None
    haystack: str = DEFAULT_HAYSTACK
    train_len: int | None = None
    quiet: bool = False

    def loaded_setup(self) -> tuple[InferenceSetup, str]:
        """The setup with the alignment file's temperatures and the label suffix naming each change."""
        setup, label = self.setup, setup_label(self.setup)
        if not self.temperatures:
            return setup, label
        temperatures, strategy = read_temperatures(self.temperatures)
        return replace(setup, temperatures=temperatures), f"{label}+tau-{strategy}"


def setup_from(
    *,
    rope_scaling: str | None = None,
    mask: str | None = None,
    log_scaling: str | None = "none",
    layers: str | None = None,
) -> InferenceSetup:
    """The `InferenceSetup` of command-line values: each one unset (None; "none" for the log-n scaling) leaves the
    model as it is."""
    return InferenceSetup(
        rope_scaling=rope_scaling or KEEP,
        mask=mask or KEEP,
        log_scaling=KEEP if log_scaling in (None, "none") else log_scaling,
        layers=layers,
    )


def setup_label(setup: InferenceSetup) -> str:
    """`+SCALING[@LAYERS]`, `+MASK`, `+logn-KIND`, `+extend-METHOD` for what a setup changes."""
    changes = setup.changes()
    label = ""
    if changes.get("rope_scaling") is not None:
        scaling = changes["rope_scaling"]
        label += f"+{scaling if isinstance(scaling, str) else json.dumps(scaling, sort_keys=True)}"
        label += f"@{setup.layers}" if setup.layers else ""
    if changes.get("mask") is not None:
        label += f"+{changes['mask']}"
    if changes.get("log_scaling") not in (None, "none"):
        label += f"+logn-{changes['log_scaling']}"
    if changes.get("extension") not in (None, "none"):
        extension = changes["extension"]
        label += f"+extend-{extension if isinstance(extension, str) else extension.name}"
    return label


#: the corpus a Hugging Face model is evaluated on when no --corpus or --data is given
HF_CORPUS = "english"


@dataclass
class LoadedModel:
    """A model ready to evaluate: the model, its tokenizer (None when not asked for), its label (`base`, then the
    setup's changes), the name results record, a lextra model's folder, the metadata evaluations read, what `key`
    is made of and the `InferenceSetup` applied."""

    model: Any
    tokenizer: Any
    label: str
    name: str = ""
    folder: Path | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    base: str = ""
    #: the weights file or folder of a Hugging Face model, checksummed when `key` is first read
    weights_path: Path | None = None
    inference: InferenceSetup = field(default_factory=InferenceSetup)
    _key: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def is_lextra(self) -> bool:
        return self.folder is not None

    @property
    def setup(self) -> str:
        """What the label adds to the model's own name (`yarn:4+bca`), or `causal` where nothing changes."""
        return self.label.removeprefix(self.base).removeprefix("+") or "causal"

    @property
    def results_root(self) -> Path:
        """Where a command's results go by default: a lextra model's run folder; runs/hf/NAME for another."""
        if self.folder is not None:
            return self.folder.parent
        return Path("runs") / "hf" / self.base

    @property
    def key(self) -> dict[str, Any]:
        """What identifies the model in resumable result cells: its folder, the checksums of its weights and the
        temperatures applied (computed once)."""
        if self._key is None:
            if self.folder is not None:
                key: dict[str, Any] = {"model": str(self.folder), "weights": self.meta.get("weights_sha256")}
            else:  # a .gguf file, or a folder's .safetensors / .bin files
                path = self.weights_path or Path(self.name)
                files = [path] if path.is_file() else sorted([*path.glob("*.safetensors"), *path.glob("*.bin")])
                key = {"model": str(path.resolve()), "weights": [sha256_file(f) for f in files]}
            temperatures = self.inference.temperatures
            if temperatures is not KEEP and temperatures is not None:
                key["temperatures"] = temperatures
            self._key = key
        return dict(self._key)


def model_folder(path: str | Path) -> Path:
    """A model folder, or a training run folder holding `model/`."""
    folder = Path(path)
    return folder / "model" if (folder / "model" / "config.json").exists() else folder


def lextra_folder(spec: str | Path) -> Path | None:
    """The lextra model folder `spec` names (a model folder or a run holding `model/`), or None for anything else."""
    folder = model_folder(spec)
    try:
        data = json.loads((folder / "config.json").read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return None
    return folder if isinstance(data, dict) and "model" in data and "model_type" not in data else None


def read_temperatures(path: str | Path) -> tuple[Any, str]:
    """The temperatures of an alignment.json (`lextra align`) and its strategy."""
    try:
        saved = json.loads(Path(path).read_text())
        return saved["temperatures"], str(saved.get("strategy", "file"))
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as err:
        raise DataError(f"--temperature {path}: not an alignment.json from `lextra align` ({err})") from err


def build_tokenizer_spec(spec: str, haystack: str = DEFAULT_HAYSTACK) -> Any:
    """A tokenizer spec: bytes, hf:PATH, or bpe[:VOCAB] trained on the `haystack` corpus's train split."""
    from lextra.data import build_tokenizer, prepare_data

    if spec.strip().startswith("bpe"):
        return prepare_data(haystack, tokenizer=spec).tokenizer
    return build_tokenizer(spec)


def load_lextra(
    spec: str | Path,
    options: ModelOptions | None = None,
    device: str | torch.device = "cpu",
    *,
    with_tokenizer: bool = False,
) -> LoadedModel:
    """A lextra model (a model folder or a run holding `model/`) on `device` with `options` applied; its label is
    the scheme (or layer plan), then the setup's changes (`setup_label`) and `+tau-STRATEGY`."""
    from lextra.data import tokenizer_from_config
    from lextra.model import load_model, read_model_meta

    options = options or ModelOptions()
    folder = model_folder(spec)
    model = load_model(folder, map_location=device)
    meta = read_model_meta(folder)
    setup, suffix = options.loaded_setup()
    base = model.config.label  # the plan as trained: the setup may rewrite it
    label = base + suffix
    setup.apply(model)
    tokenizer = None
    if with_tokenizer:
        if options.tokenizer:
            tokenizer = build_tokenizer_spec(options.tokenizer, options.haystack)
        else:
            tokenizer = tokenizer_from_config(meta.get("tokenizer", {"kind": "bytes"}))
    return LoadedModel(model, tokenizer, label, str(folder), folder, meta, base, inference=setup)


def hf_label(spec: str) -> str:
    """What a Hugging Face model's results are labelled: its file or folder name; a fine-tuned run's `model/` folder
    (`lextra hf finetune --out RUN` writes RUN/model) by its run's name; `smollm2` as it is."""
    if spec == "smollm2":
        return spec
    path = Path(spec)
    return path.parent.name if path.name == "model" and path.parent.name else path.stem


def load_model_spec(
    spec: str,
    options: ModelOptions | None = None,
    device: str | torch.device = "cpu",
    *,
    with_tokenizer: bool = True,
) -> LoadedModel:
    """Whatever `spec` names -- a lextra run or model folder, a Hugging Face folder, a .gguf file or `smollm2` --
    loaded on `device` with `options` applied (and its tokenizer, with `with_tokenizer`), a Hugging Face model
    labelled by `hf_label`. An L_tr (`options.train_len`) for a lextra model is refused: it is the one it was
    trained at."""
    folder = lextra_folder(spec)
    if folder is not None:
        if options is not None and options.train_len is not None:
            raise ConfigError(
                "--train-len applies to Hugging Face models; a lextra model's L_tr is the one it was trained at"
            )
        return load_lextra(folder, options, device, with_tokenizer=with_tokenizer)
    from lextra.data import tokenizer_from_config
    from lextra.hf import load_hf
    from lextra.hf.load import SMOLLM2, resolve_model_path, tokenizer_config

    if spec != SMOLLM2 and not Path(spec).expanduser().exists():
        raise CheckpointError(
            f"no checkpoint at {spec}: give a lextra run or model folder, a Hugging Face folder with config.json, "
            f"a .gguf file, or '{SMOLLM2}' (hub names are not downloaded)"
        )
    options = options or ModelOptions()
    if options.quiet:  # transformers' own loading bars too, so that a refusal after loading is one line
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    model = load_hf(spec, train_len=options.train_len, device=device)
    setup, suffix = options.loaded_setup()
    setup.apply(model)
    if options.tokenizer:
        chosen = build_tokenizer_spec(options.tokenizer, options.haystack)
        config = chosen.to_config()
    else:
        config = tokenizer_config(spec)
        chosen = tokenizer_from_config(config) if with_tokenizer else None
    path = resolve_model_path(spec)
    meta = {
        "train": {"corpus": HF_CORPUS},
        "tokenizer": config,
        "hf": {"path": str(path.resolve()), "tokenizer": options.tokenizer},
    }
    base = hf_label(spec)
    tokenizer = chosen if with_tokenizer else None
    return LoadedModel(model, tokenizer, base + suffix, spec, None, meta, base, path, setup)
