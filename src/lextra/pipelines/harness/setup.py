"""The `lextra` model's arguments (lm-eval's `--model_args`): which model, how it is loaded, and the inference setup
(`lextra.extend.InferenceSetup`) applied to it, as `lextra eval` applies its own."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from lextra.errors import ConfigError
from lextra.extend import InferenceSetup, build_extension
from lextra.pipelines.loading import read_temperatures


@dataclass(frozen=True)
class ModelArgs:
    """What the `lextra` model of lm-eval loads (`pretrained`: any model `load_model_spec` takes), its inference
    setup (`temperature`: an alignment.json of `lextra align`), a tokenizer replacing its own, a Hugging Face
    model's L_tr, the longest input (default L_tr), the rows run together and the device (auto: CUDA if any)."""

    pretrained: str
    rope_scaling: str | None = None
    extend: str | None = None
    mask: str | None = None
    temperature: str | None = None
    log_scaling: str | None = None
    temp_tuning: str | None = None
    layers: str | None = None
    tokenizer: str | None = None
    train_len: int | None = None
    max_length: int | None = None
    batch_size: int = 8
    device: str = "auto"

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> ModelArgs:
        """Checked arguments: unknown keys and malformed numbers are one line each."""
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ConfigError(f"the lextra model takes no argument {unknown[0]!r}; known: {', '.join(known)}")
        if not values.get("pretrained"):
            raise ConfigError("the lextra model needs pretrained=MODEL (a lextra run, a Hugging Face folder, ...)")
        checked = {k: (None if v in (None, "", "none", "None") and k != "pretrained" else v) for k, v in values.items()}
        numbers = ("train_len", "max_length", "batch_size")
        checked = {k: _positive(k, v) if k in numbers else str(v) for k, v in checked.items() if v is not None}
        return cls(**checked)  # type: ignore[arg-type]  # each field's type is checked above

    def setup(self, train_len: int) -> InferenceSetup:
        """The inference setup these arguments name, for a model of L_tr `train_len` (fields not given are KEEP)."""
        given = {"rope_scaling": self.rope_scaling, "mask": self.mask, "log_scaling": self.log_scaling,
                 "temp_tuning": self.temp_tuning}  # fmt: skip
        changes: dict[str, Any] = {key: value for key, value in given.items() if value is not None}
        if self.extend is not None:
            changes["extension"] = build_extension(self.extend, train_len)
        if self.temperature is not None:
            changes["temperatures"] = read_temperatures(self.temperature)[0]
        return InferenceSetup(**changes, layers=self.layers)

    def label_suffix(self) -> str:
        """`+SCALING+METHOD+MASK...` for each change, in the order the other commands name them."""
        parts = [self.rope_scaling, self.extend, self.mask, self.log_scaling and f"logn-{self.log_scaling}",
                 self.temperature and "tau-file", self.temp_tuning]  # fmt: skip
        return "".join(f"+{p}" for p in parts if p) + (f"@{self.layers}" if self.layers else "")


def _positive(key: str, value: Any) -> int:
    try:
        number = int(str(value))
    except ValueError:
        raise ConfigError(f"the lextra model's {key} must be a positive integer, got {value!r}") from None
    if number < 1:
        raise ConfigError(f"the lextra model's {key} must be a positive integer, got {value!r}")
    return number


def parse_model_args(text: str | None) -> dict[str, str]:
    """`pretrained=runs/rope,extend=self_extend:group=4,window=16,max_length=256` -> a dict: lm-eval splits at every
    comma, so an item whose key is not a `ModelArgs` field (`window=16`) joins the value before it."""
    known = {f.name for f in fields(ModelArgs)}
    values: dict[str, str] = {}
    last: str | None = None
    for item in (text or "").split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        key = key.strip()
        if sep and key in known:
            values[key], last = value.strip(), key
        elif last is not None:
            values[last] += "," + item.strip()
        else:
            raise ConfigError(f"--model_args item {item!r} names no argument; write KEY=VALUE (keys: {sorted(known)})")
    return values
