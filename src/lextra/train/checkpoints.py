"""Checkpoints of any training target: `checkpoints/step_N/` holds the target's weights,
`optimizer.safetensors` and `state.json` (step, optimizer groups, RNG, data position, each file's sha256), written
into a temporary folder and renamed; `checkpoints/LATEST` names the newest and the `KEEP_CHECKPOINTS` newest are
kept. Loading verifies every file, so a resume skips a corrupt checkpoint for the one before it."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from lextra.errors import CheckpointError, ConfigError
from lextra.io import atomic_write, atomic_write_json, atomic_write_text, sha256_file
from lextra.model import read_model_meta
from lextra.train.sharding import gathered, placed_like
from lextra.train.target import TrainingTarget

CHECKPOINTS = "checkpoints"
LATEST = "LATEST"
FINAL = "model"
KEEP_CHECKPOINTS = 2
STATE = "state.json"
OPTIMIZER = "optimizer.safetensors"


def optimizer_state(
    optimizer: torch.optim.Optimizer, keep: bool = True
) -> tuple[dict[str, torch.Tensor], list[dict[str, Any]]]:
    """The optimizer's state as whole CPU tensors named `INDEX.KEY`, and its param groups (a collective if sharded)."""
    state = optimizer.state_dict()
    tensors = gathered(((f"{i}.{k}", v) for i, e in state["state"].items() for k, v in e.items()), keep)
    return tensors, state["param_groups"]


def load_optimizer(
    optimizer: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], param_groups: list[dict[str, Any]]
) -> None:
    """Restore `optimizer_state`'s tensors, each laid out as its parameter is (sharded or on its device)."""
    by_index = [p for group in optimizer.param_groups for p in group["params"]]  # state_dict()'s numbering
    state: dict[int, dict[str, torch.Tensor]] = {}
    for name, value in tensors.items():
        index, key = name.split(".", 1)
        param = by_index[int(index)]
        state.setdefault(int(index), {})[key] = placed_like(value, param) if value.shape == param.shape else value
    optimizer.load_state_dict({"state": state, "param_groups": param_groups})


def save_checkpoint(
    run_dir: Path,
    target: TrainingTarget,
    optimizer: torch.optim.Optimizer,
    step: int,
    *,
    write: bool = True,
    position: dict[str, int] | None = None,
    device: torch.device | None = None,
) -> Path:
    """checkpoints/step_N, staged then renamed; LATEST points at it. Every process calls it (a sharded model is
    gathered); only the one with `write` writes. `position`: where an epoch-order run stands in its data."""
    root = run_dir / CHECKPOINTS
    final, staging = root / f"step_{step:07d}", root / f".step_{step:07d}.tmp"
    if write:
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
    target.save_weights(staging if write else None)
    tensors, param_groups = optimizer_state(optimizer, keep=write)
    if not write:
        return final
    atomic_write(staging / OPTIMIZER, lambda tmp: save_file(tensors, str(tmp)))
    record: dict[str, Any] = {
        "step": step,
        "optimizer": {"param_groups": param_groups},
        "sha256": {p.name: sha256_file(p) for p in sorted(staging.iterdir()) if p.is_file()},
        "torch_rng_state": torch.get_rng_state().tolist(),
    }
    if position is not None:
        record["data_position"] = position
    if device is not None and device.type == "cuda":  # dropout on the GPU draws from its own generator
        record["cuda_rng_state"] = torch.cuda.get_rng_state(device).tolist()
    atomic_write_json(staging / STATE, record)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(staging, final)
    atomic_write_text(root / LATEST, final.name + "\n")
    for old in sorted(root.glob("step_*"))[:-KEEP_CHECKPOINTS]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def read_state(path: Path) -> dict[str, Any]:
    """A checkpoint's state.json with every file it names verified against its sha256 (older checkpoints: the
    optimizer's digest alone, the param groups at the top level)."""
    try:
        record = json.loads((path / STATE).read_text())
        digests = record.get("sha256") or {OPTIMIZER: record["optimizer_sha256"]}
        record.setdefault("optimizer", {"param_groups": record.get("param_groups")})
    except (OSError, json.JSONDecodeError, KeyError, AttributeError) as err:
        raise CheckpointError(f"checkpoint {path} has a missing or corrupt {STATE} ({err})") from None
    for name, digest in digests.items():
        if not (path / name).is_file() or sha256_file(path / name) != digest:
            raise CheckpointError(f"checkpoint {path}: {name} is missing or corrupt (checksum mismatch)")
    return record


def load_checkpoint(path: Path, target: TrainingTarget, optimizer: torch.optim.Optimizer, device: torch.device) -> int:
    """Restore a checkpoint (every file verified first) into the target, the optimizer and the RNG; the step."""
    record = read_state(path)
    target.load_weights(path)
    load_optimizer(optimizer, load_file(str(path / OPTIMIZER)), record["optimizer"]["param_groups"])
    torch.set_rng_state(torch.tensor(record["torch_rng_state"], dtype=torch.uint8, device="cpu"))
    if device.type == "cuda" and "cuda_rng_state" in record:
        torch.cuda.set_rng_state(torch.tensor(record["cuda_rng_state"], dtype=torch.uint8, device="cpu"), device)
    return int(record["step"])


def continue_optimizer(optimizer: torch.optim.Optimizer, model_folder: str | Path) -> None:
    """Load into `optimizer` the state of the final checkpoint of the run that saved `model_folder` (its `model/`
    folder's parent), so that training continues with the moments it ended with."""
    run_dir = Path(model_folder).parent
    candidates = checkpoint_candidates(run_dir)
    if not candidates:
        raise ConfigError(
            f"init_optimizer: {run_dir} holds no checkpoint to take the optimizer from; give init_from the model "
            "folder of a lextra training run, or leave init_optimizer out"
        )
    final = read_model_meta(model_folder).get("steps")
    record = read_state(candidates[0])
    if final is not None and record["step"] != final:
        raise ConfigError(
            f"init_optimizer: the last checkpoint of {run_dir} is step {record['step']}, not the final step {final} "
            f"that saved {model_folder}; finish that run first"
        )
    try:
        load_optimizer(optimizer, load_file(str(candidates[0] / OPTIMIZER)), record["optimizer"]["param_groups"])
    except (ValueError, RuntimeError) as err:
        raise ConfigError(f"init_optimizer: the optimizer of {run_dir} does not fit this model ({err})") from None


def checkpoint_candidates(run_dir: Path) -> list[Path]:
    """Checkpoint folders, newest first (LATEST's target first when it names one)."""
    root = run_dir / CHECKPOINTS
    found = sorted(root.glob("step_*"), reverse=True)
    latest = root / LATEST
    if latest.exists():
        named = root / latest.read_text().strip()
        if named in found:
            found.remove(named)
            found.insert(0, named)
    return found


def resume(
    run_dir: Path, target: TrainingTarget, optimizer: torch.optim.Optimizer, device: torch.device, command: str
) -> int:
    """Load the newest usable checkpoint of `run_dir`, warning past unusable ones; the step it ends (0 without one)."""
    candidates = checkpoint_candidates(run_dir)
    if not candidates:
        print(f"{command}: no checkpoint in {run_dir}; starting from step 0", file=sys.stderr)
        return 0
    errors = []
    for path in candidates:
        try:
            return load_checkpoint(path, target, optimizer, device)
        except CheckpointError as err:
            errors.append(str(err))
            print(f"{command}: warning: skipping unusable checkpoint: {err}", file=sys.stderr)
    raise CheckpointError("no usable checkpoint to resume from: " + " | ".join(errors))


def saved_position(run_dir: Path, step: int) -> Any:
    """The data position the checkpoint of `step` recorded (None when it recorded none)."""
    state_path = run_dir / CHECKPOINTS / f"step_{step:07d}" / STATE
    return json.loads(state_path.read_text()).get("data_position")


#: settings that name a file: one file written relative or absolute is the same setting
PATH_SETTINGS = frozenset({"init_from"})


def _same_setting(key: str, saved: Any, current: Any) -> bool:
    if key in PATH_SETTINGS and isinstance(saved, str) and isinstance(current, str):
        return Path(saved).resolve() == Path(current).resolve()
    return bool(saved == current)


def refuse_changes(run_dir: Path, saved: dict[str, Any], current: dict[str, Any], allowed: frozenset[str]) -> None:
    """Refuse to resume `run_dir` with settings that differ from the saved ones in anything but `allowed`."""
    differences = [k for k in current if k not in allowed and not _same_setting(k, saved.get(k), current[k])]
    if differences:
        detail = "; ".join(f"{k}: saved {saved.get(k)!r}, now {current[k]!r}" for k in differences[:4])
        raise ConfigError(
            f"cannot resume {run_dir} with an incompatible config ({detail}); "
            "use the original settings or a new --out directory"
        )
