"""Layer plans: each block of a model with its own attention variant, written in the spec grammar with repeats.

A variant is a scheme spec followed by `+`-joined mask specs or attention pieces (`lextra.attention.pieces`):

    rope,base=10000+window:1024+qknorm

A plan is variants separated by `;`; `N*V` repeats a variant and `N*(A;B)` a group; the pattern repeats over the
model's layers (cut at n_layer, as Hugging Face's `layer_types`):

    3*(rope,base=10000+window:1024);rope,base=1000000

A plan may name a preset (`PRESETS`): `gemma3`, `gemma3,window=64`, `irope,chunk=32`. A variant without a mask is
causal; a layer whose mask is causal or full is `global`, any other `local`."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import Any

from lextra.attention.masks import MASKS
from lextra.attention.pieces import PIECES, check_one_caller, piece_options
from lextra.errors import ConfigError
from lextra.positions.base import SCHEMES, split_scheme_spec
from lextra.positions.logn import check_log_scaling
from lextra.registry import format_spec, parse_spec, split_top_level


@dataclass(frozen=True)
class LayerVariant:
    """One block's attention: its scheme and options, its mask spec and its pieces (name -> options)."""

    scheme: str = "rope"
    scheme_options: dict[str, Any] = field(default_factory=dict)
    mask: str = "causal"
    pieces: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def local(self) -> bool:
        """A layer whose mask hides more than the future (window, chunk, bca): `local`; else `global`."""
        return MASKS.canonical(parse_spec(self.mask).name) not in ("causal", "full")

    @property
    def rotary(self) -> bool:
        """Whether the layer's scheme rotates q and k by frequencies (RoPE, xPos): it can take a RoPE scaling."""
        from lextra.positions.rotary import RotaryFrequencies

        return issubclass(SCHEMES.get(self.scheme), RotaryFrequencies)

    def spec(self) -> str:
        """The variant's text: `rope,base=10000+window,width=64+qknorm` (parses back to an equal variant)."""
        items = [format_spec(self.scheme, self.scheme_options)]
        if self.mask != "causal":
            items.append(self.mask)
        items += [format_spec(name, options) for name, options in self.pieces.items()]
        return "+".join(items)

    def key(self) -> str:
        """The scheme's identity (name and options), for sharing one scheme instance among layers."""
        return json.dumps([self.scheme, self.scheme_options], sort_keys=True, default=str)


def parse_variant(text: str) -> LayerVariant:
    """`scheme_spec[+mask][+piece...]` -> LayerVariant; unknown names and options are ConfigErrors."""
    items = [item.strip() for item in re.split(r"\+(?=\s*[A-Za-z_])", text)]
    if not items[0]:
        raise ConfigError(f"layer variant {text!r} has no scheme; write e.g. rope,base=10000+window:1024")
    name = items[0].split(":")[0].split(",")[0].strip()
    if name not in SCHEMES:
        try:
            SCHEMES.canonical(name)
        except ConfigError as err:  # the registry's line: the known schemes, and how a plugin's is loaded
            raise ConfigError(f"layer variant {text!r} starts with {items[0]!r}, not a position scheme: {err}") from err
    scheme, options = split_scheme_spec(items[0])
    mask = "causal"
    pieces: dict[str, dict[str, Any]] = {}
    for item in items[1:]:
        name = parse_spec(item).name
        if name in MASKS:
            if mask != "causal":
                raise ConfigError(f"layer variant {text!r} names two masks ({mask!r} and {item!r}); keep one")
            mask_name, mask_options = MASKS.parse(item)
            mask = format_spec(mask_name, mask_options)
        elif name in PIECES:
            piece, values = PIECES.parse(item)
            if piece in pieces:
                raise ConfigError(f"layer variant {text!r} names {piece!r} twice; keep one")
            pieces[piece] = piece_options(piece, values)
        else:
            raise ConfigError(
                f"layer variant {text!r}: {name!r} is neither a mask ({', '.join(MASKS.names())}) nor an attention "
                f"piece ({', '.join(PIECES.names())})"
            )
    for piece in pieces:  # a piece undefined with the layer's scheme or mask refuses it here, before any work
        PIECES.get(piece).check_layer(SCHEMES.get(scheme), mask)
    check_one_caller(list(pieces), [PIECES.get(piece) for piece in pieces])
    return LayerVariant(scheme, options, mask, pieces)


def parse_pattern(text: str) -> list[LayerVariant]:
    """The plan's pattern (before it is repeated over the layers): variants, `N*V` and `N*(...)` groups."""
    variants: list[LayerVariant] = []
    for raw in split_top_level(text, ";"):
        item = raw.strip()
        if not item:
            raise ConfigError(f"layer plan {text!r} has an empty layer (two ';' in a row or a trailing ';')")
        count = 1
        repeat = re.match(r"^(\d+)\s*\*\s*(.*)$", item, re.S)
        if repeat:
            count, item = int(repeat.group(1)), repeat.group(2).strip()
            if count < 1:
                raise ConfigError(f"layer plan {text!r}: a repeat count must be >= 1, got {count}")
        if item.startswith("(") and item.endswith(")"):
            variants += parse_pattern(item[1:-1]) * count
        else:
            variants += [parse_variant(item)] * count
    return variants


@dataclass(frozen=True)
class Preset:
    """A named plan: its text with `{option}` fields, their defaults, and where the layout comes from."""

    template: str
    defaults: dict[str, int | float]
    summary: str


#: the designs the presets reproduce (`transformers/models/<family>` in the pinned 5.24 and the papers)
PRESETS: dict[str, Preset] = {
    "gemma3": Preset(
        "5*(rope,base=10000+window:{window}+qknorm);rope,base=1000000+qknorm",
        {"window": 4096},
        "Gemma 3: 5 sliding (base 10k) : 1 global (base 1M), QK-norm (gemma3 layer_types, pattern 6)",
    ),
    "irope": Preset(
        "3*(rope,base=500000+chunk:{chunk}+qknorm,weight=false,eps=0.00001);nope+temp_tuning,beta=0.1,gamma={gamma}",
        {"chunk": 8192, "gamma": 8192},
        "Llama 4's iRoPE: 3 chunked RoPE layers with L2 QK-norm : 1 NoPE global layer with temperature tuning",
    ),
    "rnope-swa": Preset(
        "3*(rope+window:{window});nope",
        {"window": 4096},
        "RNoPE-SWA (Yang 2025, arXiv 2501.18795; Cohere2): 3 sliding RoPE : 1 NoPE global",
    ),
    "smollm3": Preset(
        "3*(rope,base={base});nope",
        {"base": 2000000},
        "SmolLM3: NoPE in every 4th layer (no_rope_layer_interval 4), RoPE base 2M elsewhere",
    ),
    "gpt-oss": Preset(
        "rope,base=150000+window:{window}+sinks;rope,base=150000+sinks",
        {"window": 128},
        "gpt-oss: alternating 128-token sliding and full layers, learned sinks (its YaRN scaling is left out)",
    ),
    "swan": Preset(
        "3*(rope+window:{window});nope+logn:qwen",
        {"window": 512},
        "SWAN-GPT (arXiv 2504.08719): 3 sliding RoPE : 1 NoPE global with log-n scaling of its queries",
    ),
}


def _preset_text(text: str) -> str | None:
    """The plan a preset spec (`gemma3`, `gemma3,window=64`) stands for, or None when `text` is no preset."""
    if ";" in text or "+" in text or "*" in text:
        return None
    spec = parse_spec(text, "layer plan")
    preset = PRESETS.get(spec.name)
    if preset is None:
        return None
    if spec.positional is not None:
        raise ConfigError(f"preset {spec.name!r} takes options as key=value ({', '.join(preset.defaults)})")
    unknown = sorted(set(spec.options) - set(preset.defaults))
    if unknown:
        raise ConfigError(
            f"preset {spec.name!r} has no option {', '.join(unknown)}; its options: {', '.join(preset.defaults)}"
        )
    values: dict[str, Any] = dict(preset.defaults)
    for key, raw in spec.options.items():
        try:
            number = float(raw)
        except ValueError:
            raise ConfigError(f"preset {spec.name!r}: {key} takes a number, got {raw!r}") from None
        if number <= 0 or (isinstance(preset.defaults[key], int) and number != int(number)):
            raise ConfigError(f"preset {spec.name!r}: {key} must be a positive {type(preset.defaults[key]).__name__}")
        values[key] = int(number) if isinstance(preset.defaults[key], int) else number
    return preset.template.format(**values)


def parse_plan(text: str, n_layer: int) -> list[LayerVariant]:
    """The variant of each of `n_layer` layers: the pattern (or preset) repeated and cut at n_layer."""
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(
            f"layer plan must be a non-empty text such as 'gemma3' or '3*(rope+window:64);nope', got {text!r}"
        )
    pattern = parse_pattern(_preset_text(text.strip()) or text)
    return [pattern[i % len(pattern)] for i in range(n_layer)]


def format_plan(variants: list[LayerVariant]) -> str:
    """The explicit text of per-layer variants, runs of equal variants written `N*V`; one variant on every layer is
    written alone (`rope,base=500000.0`: the pattern repeats over the layers)."""
    if len({v.spec() for v in variants}) == 1:
        return variants[0].spec()
    parts: list[str] = []
    i = 0
    while i < len(variants):
        j = i
        while j < len(variants) and variants[j] == variants[i]:
            j += 1
        text = variants[i].spec()
        parts.append(text if j - i == 1 else f"{j - i}*{text}")
        i = j
    return ";".join(parts)


def select_layers(variants: list[LayerVariant], selector: str) -> list[int]:
    """Layer indices a selector names: `all`, `rotary`, `global`, `local`, `nope` or indices (`0,3,5`, `2-4`)."""
    text = selector.strip()
    kinds = {
        "all": lambda v: True,
        "rotary": lambda v: v.rotary,
        "global": lambda v: not v.local,
        "local": lambda v: v.local,
        "nope": lambda v: v.scheme == "nope",
    }
    if text in kinds:
        return [i for i, v in enumerate(variants) if kinds[text](v)]
    chosen: list[int] = []
    for part in text.split(","):
        part = part.strip()
        bounds = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not bounds:
            raise ConfigError(
                f"layer selector {selector!r}: use all, rotary, global, local, nope or indices such as 0,3 or 2-4"
            )
        lo = int(bounds.group(1))
        hi = int(bounds.group(2)) if bounds.group(2) else lo
        if hi < lo or hi >= len(variants):
            raise ConfigError(f"layer selector {selector!r}: the model has layers 0..{len(variants) - 1}")
        chosen += [i for i in range(lo, hi + 1) if i not in chosen]
    return sorted(chosen)


def with_scheme_options(
    variants: list[LayerVariant], layers: list[int], options: dict[str, Any], drop: tuple[str, ...] = ()
) -> list[LayerVariant]:
    """The variants with `options` set on the schemes of `layers` (`drop`: options removed first)."""
    changed = list(variants)
    for layer in layers:
        old = changed[layer]
        kept = {k: v for k, v in old.scheme_options.items() if k not in drop}
        changed[layer] = LayerVariant(old.scheme, {**kept, **options}, old.mask, old.pieces)
    return changed


def stated_plan(
    scheme: str | None = None,
    options: dict[str, Any] | None = None,
    plan: str | None = None,
    log_scaling: str | None = None,
    n_layer: int = 1,
    what: str = "model config",
) -> str:
    """The layer plan a model stated as a scheme spec with options, as a plan, or as both (`scheme` must be the
    plan's first layer's), with a model-wide log-n scaling as a `logn` piece on every layer that has none."""
    if options is not None and not isinstance(options, dict):
        raise ConfigError(f"{what}: scheme_options must be a table, got {options!r}")
    if scheme is not None and not isinstance(scheme, str):
        raise ConfigError(f"{what}: scheme must be a scheme spec such as 'rope,base=500000', got {scheme!r}")
    if plan is None:
        text = parse_variant(format_spec(*split_scheme_spec(scheme or "rope", options))).spec()  # options typed
    else:
        text = plan
        first = parse_plan(plan, 1)[0]
        given = split_scheme_spec(scheme or "rope", options)
        if (scheme is not None or options) and given not in (("rope", {}), (first.scheme, first.scheme_options)):
            raise ConfigError(
                f"{what}: the layer plan names each layer's scheme; drop scheme={scheme!r} (and its options) or the "
                "layer plan"
            )
    if log_scaling in (None, "none"):
        return text
    kind = check_log_scaling(log_scaling, what=f"{what}: log_scaling")
    logn = {"logn": {"kind": kind}}
    variants = parse_plan(text, n_layer)
    return format_plan([v if "logn" in v.pieces else replace(v, pieces={**v.pieces, **logn}) for v in variants])
