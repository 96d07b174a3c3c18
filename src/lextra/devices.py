"""Where models run: `--device auto|cpu|cuda|cuda:N` resolved once, the device of a model, autocast for it.
The device is a runtime choice, never part of a saved config; code takes it from the model (`module_device`)."""

from __future__ import annotations

import contextlib
import os
from contextlib import AbstractContextManager
from typing import Any

import torch

from lextra.errors import ConfigError

DEVICE_CHOICES = "auto, cpu, cuda or cuda:N"
#: the environment variable that `auto` resolves to when set (e.g. LEXTRA_DEVICE=cpu on a GPU host: the test
#: suite's CPU tests set it, so `make test` computes the same on every machine)
DEVICE_ENV = "LEXTRA_DEVICE"
PRECISIONS = ("fp32", "bf16")
#: what an evaluation may ask for: a precision, or `auto` (bf16 where the device multiplies bf16 natively)
EVAL_PRECISIONS = (*PRECISIONS, "auto")


def torchrun_local() -> tuple[int, int] | None:
    """(LOCAL_RANK, LOCAL_WORLD_SIZE) of this process under torchrun with more than one process, else None."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or "LOCAL_RANK" not in os.environ:
        return None
    rank = int(os.environ["LOCAL_RANK"])
    return rank, int(os.environ.get("LOCAL_WORLD_SIZE", str(rank + 1)))


def _no_cuda_reason() -> str:
    """Why torch sees no CUDA device: a CPU build, or a CUDA build that finds no GPU."""
    if torch.version.cuda is None:
        return "this torch is a CPU build"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    hidden = f", CUDA_VISIBLE_DEVICES={visible!r}" if visible is not None else ""
    return f"torch {torch.__version__} is built for CUDA {torch.version.cuda} but finds no GPU{hidden}"


def resolve_device(spec: str | torch.device | None = "auto") -> torch.device:
    """The torch device `spec` names, checked against what torch sees: `auto` (or None) is `$LEXTRA_DEVICE`, else
    CUDA when available, else the CPU; `cuda` is the LOCAL_RANK GPU under torchrun. Nothing falls back silently."""
    text = "auto" if spec is None else str(spec).strip()
    if text == "auto" and os.environ.get(DEVICE_ENV, "").strip() not in ("", "auto"):
        text = os.environ[DEVICE_ENV].strip()
        if text.partition(":")[0] not in ("cpu", "cuda"):
            raise ConfigError(f"{DEVICE_ENV}={text!r}: unknown device; use {DEVICE_CHOICES}, or unset it")
    name = text or repr(text)
    if text == "auto":
        if not torch.cuda.is_available():
            return torch.device("cpu")
        text = "cuda"
    if text == "cpu":
        return torch.device("cpu")
    kind, colon, index_text = text.partition(":")
    if kind != "cuda":
        raise ConfigError(f"--device {name}: unknown device; use {DEVICE_CHOICES}")
    if colon and not index_text.isdigit():
        raise ConfigError(f"--device {name}: {index_text!r} is not a GPU index; use cuda or cuda:N with N = 0, 1, ...")
    if not torch.cuda.is_available():
        raise ConfigError(f"--device {name}: torch sees no CUDA device ({_no_cuda_reason()}); use --device cpu or auto")
    count = torch.cuda.device_count()
    index = int(index_text) if colon else None
    local = torchrun_local()
    if local is not None:
        rank, per_node = local
        if per_node > count:
            raise ConfigError(
                f"--device {name}: torchrun starts {per_node} processes on this node but torch sees {count} GPU(s); "
                f"use --nproc-per-node={count} or --device cpu"
            )
        if index is not None and index != rank:
            raise ConfigError(
                f"--device {name}: under torchrun each process uses the GPU of its LOCAL_RANK (here {rank}); "
                "use --device cuda or auto"
            )
        index = rank
    if index is None:
        index = torch.cuda.current_device()
    if index >= count:
        raise ConfigError(
            f"--device {name}: torch sees {count} CUDA device(s), cuda:0 to cuda:{count - 1}; use one of them or auto"
        )
    return torch.device("cuda", index)


def module_device(model: Any) -> torch.device:
    """The device of a model's first parameter or buffer (the CPU when it has none): where its inputs must go."""
    for source in ("parameters", "buffers"):
        tensors = getattr(model, source, None)
        if callable(tensors):
            for tensor in tensors():
                return tensor.device
    return torch.device("cpu")


def autocast(precision: str, device: torch.device | str) -> AbstractContextManager:
    """bf16 autocast on `device`'s type (CUDA or CPU) for matrix products; nothing for fp32."""
    if precision == "bf16":
        return torch.autocast(torch.device(device).type, dtype=torch.bfloat16)
    if precision == "fp32":
        return contextlib.nullcontext()
    raise ConfigError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")


def native_bf16(device: torch.device | str) -> bool:
    """Whether `device` multiplies bf16 matrices natively: a CUDA GPU torch reports bf16 support for, or a CPU
    with AMX-BF16 or AVX512-BF16 (on any other CPU bf16 products are emulated, slower than fp32)."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    if device.type != "cpu":
        return False
    capabilities = cpu_capabilities()
    return bool(capabilities.get("amx_bf16") or capabilities.get("avx512_bf16"))


def cpu_capabilities() -> dict[str, Any]:
    """The CPU's instruction-set flags as torch reports them (`torch.cpu.get_capabilities`; empty if unknown)."""
    probe = getattr(torch.cpu, "get_capabilities", None)
    return dict(probe()) if callable(probe) else {}


def check_eval_precision(precision: str, name: str = "evaluation precision") -> str:
    """`precision` if it is one of `EVAL_PRECISIONS`, else a one-line `ConfigError` naming `name` and the choices."""
    if precision not in EVAL_PRECISIONS:
        raise ConfigError(f"{name} must be one of {', '.join(EVAL_PRECISIONS)}, got {precision!r}")
    return precision


def resolve_precision(precision: str, device: torch.device | str) -> str:
    """The precision an evaluation runs in: `fp32` or `bf16` as given, `auto` -> bf16 where `native_bf16`, else
    fp32; anything else is refused (`check_eval_precision`)."""
    if check_eval_precision(precision) == "auto":
        return "bf16" if native_bf16(device) else "fp32"
    return precision
