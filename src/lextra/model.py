"""A GPT-style decoder (pre-norm) whose layers, stated by a layer plan, take any registered scheme, mask and
pieces. Saved as safetensors plus a JSON config with a checksum (no pickle)."""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import torch
import torch.nn.functional as F
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from lextra import serialize
from lextra.attention import PositionLayout, attention, build_mask
from lextra.attention.backends import AttentionExtension, PassExtension
from lextra.attention.fox import forget_inputs
from lextra.attention.inference import LayerInference
from lextra.attention.masks import CausalMask, Mask
from lextra.attention.pieces import PIECES, SINGLE_VALUED, AttentionPiece, attend_through, check_one_caller
from lextra.attention.plan import LayerVariant, format_plan, parse_plan, stated_plan, with_scheme_options
from lextra.attention.s2 import S2Attention
from lextra.errors import CheckpointError, ConfigError
from lextra.io import atomic_write, atomic_write_json, sha256_file
from lextra.kv_cache import KVCache
from lextra.layer_inputs import AttentionInputs, LayerInputs, LayerObserver
from lextra.positions import HeadDims, PositionScheme, build_scheme
from lextra.positions.abacus import AbacusEmbedding, check_abacus
from lextra.positions.logn import LOG_SCALINGS
from lextra.serialize import check_fields as check_fields  # re-exported: configs elsewhere check their keys
from lextra.validate import check_bool, check_positive, check_range, check_temperatures

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
FORMAT_VERSION = 1
#: the mask of a layer when neither a call nor a setup names one
CAUSAL = CausalMask()


@dataclass
class GPTConfig:
    """Model shape and layers. `train_len` is L_tr: it sets BCA blocks and learned-table sizes."""

    vocab_size: int = 256
    n_layer: int = 4
    n_head: int = 4
    d_model: int = 128
    mlp_ratio: float = 4.0
    dropout: float = 0.0
    train_len: int = 128
    #: the layers as a layer plan (`lextra.attention.plan`); a scheme spec (`rope,base=500000`) is a one-variant plan
    layer_plan: str = "rope"
    tie_embeddings: bool = True
    #: per-layer, per-head softmax temperatures (temperature alignment); None = 1 everywhere
    temperatures: list[list[float]] | None = None
    #: Abacus embeddings of digit places (`lextra.positions.abacus`): {"max_k", "positions", "digits"}; None: none
    abacus: dict[str, Any] | None = field(default=None, metadata=serialize.options(omit_none=True))

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    def head_dims(self) -> HeadDims:
        return HeadDims(self.n_head, self.head_dim, self.d_model, self.train_len)

    @property
    def label(self) -> str:
        """What progress bars and messages call the model: its layer plan as written."""
        return self.layer_plan

    def plan(self) -> list[LayerVariant]:
        """Each layer's attention variant."""
        return parse_plan(self.layer_plan, self.n_layer)

    def learned_log_scaling(self) -> bool:
        """Whether a layer learns its log-n scale (a `logn` piece of a learned kind: Scalable-Softmax's `ssmax`)."""
        dims = self.head_dims()
        kinds = [PIECES.build("logn", dims, **v.pieces["logn"]).log_scaling for v in self.plan() if "logn" in v.pieces]
        return any(LOG_SCALINGS.get(str(kind)).learned for kind in kinds)

    def set_variants(self, variants: list[LayerVariant]) -> None:
        """State the layers as these per-layer variants."""
        self.layer_plan = format_plan(variants)

    def _check_plan(self) -> None:
        """Build each variant's scheme; refuse an absolute embedding on some layers only."""
        variants = self.plan()
        dims = self.head_dims()
        distinct = {v.key(): v for v in variants}
        with torch.random.fork_rng(devices=[]):  # checking the options draws no number the model's init would
            embedding = {
                v.scheme for v in distinct.values() if build_scheme(v.scheme, dims, **v.scheme_options).adds_embedding
            }
        if embedding and len(distinct) > 1:
            raise ConfigError(
                f"model config: {', '.join(sorted(embedding))} adds its positions to the input embedding once, so it "
                "cannot be one layer's scheme in a plan; use it on every layer or choose a per-layer scheme"
            )
        # the first layer's scheme built once more outside fork_rng: its draws precede the model's initialisation,
        # which a seed's weights depend on
        build_scheme(variants[0].scheme, dims, **variants[0].scheme_options)

    def validate(self) -> GPTConfig:
        """Refuse any value the model cannot be built from (before any work), naming the field and the fix."""
        for name in ("vocab_size", "n_layer", "n_head", "d_model", "train_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"model config: {name} must be a positive integer, got {value!r}")
        if self.d_model % self.n_head:
            raise ConfigError(f"model config: d_model ({self.d_model}) must be divisible by n_head ({self.n_head})")
        check_range("model config: dropout", self.dropout, 0.0, 1.0, high_open=True)
        check_positive("model config: mlp_ratio", self.mlp_ratio)
        if round(self.mlp_ratio * self.d_model) < 1:
            raise ConfigError(
                f"model config: mlp_ratio x d_model must give at least 1 hidden unit, got {self.mlp_ratio}"
            )
        check_bool("model config: tie_embeddings", self.tie_embeddings)
        self._check_plan()
        if self.abacus is not None:
            self.abacus = check_abacus(self.abacus, self.vocab_size)
        if self.temperatures is not None:
            what = "model config: temperatures"
            self.temperatures = check_temperatures(self.temperatures, self.n_layer, self.n_head, what=what)
        return self

    def to_dict(self) -> dict[str, Any]:
        return serialize.to_dict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GPTConfig:
        """Read a saved or written config (unknown keys refused); `scheme`, `scheme_options` and `log_scaling`
        read as the layer plan they make (`stated_plan`)."""
        values = dict(data) if isinstance(data, dict) else data
        if isinstance(values, dict) and STATED_BY_SCHEME & set(values):
            stated = {name: values.pop(name, None) for name in ("scheme", "scheme_options", "log_scaling")}
            n_layer = values.get("n_layer", cls.n_layer)
            values["layer_plan"] = stated_plan(
                stated["scheme"],
                stated["scheme_options"],
                values.get("layer_plan"),
                stated["log_scaling"],
                n_layer if isinstance(n_layer, int) and n_layer > 0 else 1,
            )
        return serialize.from_dict(cls, values, refuse_unknown="model config").validate()


#: the fields a model config may state its layers by besides `layer_plan` (`GPTConfig.from_dict` reads them)
STATED_BY_SCHEME = frozenset({"scheme", "scheme_options", "log_scaling"})


class SelfAttention(nn.Module):
    """Multi-head self-attention with the positions of its scheme; what inference changes is `inference`."""

    def __init__(self, config: GPTConfig, key_dim: int, variant: LayerVariant) -> None:
        super().__init__()
        H, D = config.n_head, config.head_dim
        self.n_head, self.head_dim, self.key_dim = H, D, key_dim
        self.q_proj = nn.Linear(config.d_model, H * D, bias=False)
        self.k_proj = nn.Linear(config.d_model, H * key_dim, bias=False)
        self.v_proj = nn.Linear(config.d_model, H * D, bias=False)
        self.o_proj = nn.Linear(H * D, config.d_model, bias=False)
        self.dropout = nn.Dropout(config.dropout)
        dims = config.head_dims()
        own = build_mask(variant.mask, config.train_len) if variant.mask != "causal" else None
        self.inference = LayerInference(config.train_len, own, own is not None)
        #: the plan's piece names in order; each piece is the submodule of its name
        self.piece_names: list[str] = []
        for name, options in variant.pieces.items():
            self.set_piece(name, PIECES.build(name, dims, **options))
        self.inference.log_scaling = self._piece_value("log_scaling") or "none"
        #: LongLoRA's S2-Attn group size while training (0: off); eval mode always attends fully causally
        self.s2_group = 0
        if LOG_SCALINGS.get(self.inference.log_scaling).learned:
            # Scalable-Softmax (Nakanishi 2025, arXiv 2501.19399): logits x s_h ln n, s_h learned;
            # 1 / ln L_tr makes the factor 1 at n = L_tr
            self.ssmax_scale = nn.Parameter(torch.full((H,), 1.0 / math.log(max(2, config.train_len))))

    def set_piece(self, name: str, piece: AttentionPiece | None) -> None:
        """Add the piece `name` (replacing one of that name), or remove it with None; a second piece giving a
        value a layer takes once (a sink, a cap, a log-n scaling) is refused."""
        if name in self.piece_names:
            self.piece_names.remove(name)
            delattr(self, name)
        if piece is None:
            return
        if hasattr(self, name):
            raise ConfigError(f"attention piece {name!r} is named as a part of the attention layer; rename it")
        for hook in SINGLE_VALUED:
            if getattr(piece, hook) is not None and self._piece_value(hook) is not None:
                raise ConfigError(f"a layer takes one {hook.replace('_', ' ')}; piece {name!r} gives a second one")
        check_one_caller([*self.piece_names, name], [*map(type, self.pieces), type(piece)])
        self.add_module(name, piece)
        self.piece_names.append(name)

    @property
    def pieces(self) -> list[AttentionPiece]:
        """The layer's pieces in the plan's order."""
        return [getattr(self, name) for name in self.piece_names]

    def _piece_value(self, hook: str) -> Any:
        """The one value a piece gives for a single-valued hook (`SINGLE_VALUED`), or None."""
        return next((v for v in (getattr(p, hook) for p in self.pieces) if v is not None), None)

    @property
    def sink_logits(self) -> Tensor | None:
        """The learned sink logit of each head (H,), or None."""
        return self._piece_value("sink_logits")

    @property
    def score_cap(self) -> float | None:
        """The layer's score softcap, or None."""
        return self._piece_value("score_cap")

    @property
    def extension(self) -> PassExtension | None:
        """The extension method the layer attends through (set by an `InferenceSetup`), or None."""
        return self.inference.extension

    def project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """q (B, H, L, D), pre-transform k (B, H, L, Dk) and v (B, H, L, D) for hidden states x (B, L, d)."""
        B, L, _ = x.shape
        q = self.q_proj(x).view(B, L, self.n_head, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, L, self.n_head, self.key_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, L, self.n_head, self.head_dim).transpose(1, 2)
        return q, k, v

    def query_temperature(self, q_pos: Tensor, k_pos: Tensor, mask: Mask) -> Tensor | None:
        """The softmax temperature (None, (H,) or (H, Lq)) with the pieces' query scales and learned log-n scale."""
        scales = [scale for scale in (piece.query_scale(q_pos) for piece in self.pieces) if scale is not None]
        return self.inference.query_temperature(q_pos, k_pos, mask, scales, getattr(self, "ssmax_scale", None))

    def forward(self, x: Tensor, inputs: LayerInputs) -> Tensor:
        """The attention output (B, L, d_model) for x (B, L, d_model); the last `inputs.queries` rows when set."""
        B, L, _ = x.shape
        scheme, positions, cache, layer = inputs.scheme, inputs.positions, inputs.cache, inputs.layer
        q, k, v = self.project(x)
        state = None if cache is None else cache.piece_state[layer]
        q, k, v, forget = forget_inputs(self.pieces, x, q, k, v, state, inputs.queries)
        for piece in self.pieces:
            q, k = piece.transform_qk(q, k)
        mask = self.inference.layer_mask(inputs.mask, CAUSAL)
        k_pos = q_pos = positions
        rows = inputs.queries
        if rows is not None:
            q, q_pos, L, x = q[:, :, -rows:], positions[-rows:], rows, x[:, -rows:]
        # plain RoPE under a cache: keys are cached rotated, so a decoding step rotates one key, not all of them
        untransformed = inputs.observer is not None or any(piece.transforms_in_attend for piece in self.pieces)
        rotated = cache is not None and self.extension is None and not untransformed and scheme.rotates_keys_alone
        if rotated:
            q, k = scheme.rotate(q, k, positions, positions)
        if cache is not None:
            k, v = cache.extend(layer, k, v, positions, rotated=rotated)
            k_pos = cache.key_positions(layer, positions)
        temperature = self.query_temperature(q_pos, k_pos, mask)
        sinks, softcap = self.sink_logits, self.score_cap
        if inputs.observer is not None:
            inputs.observer(
                AttentionInputs(layer, q, k, scheme, q_pos, k_pos, mask, temperature, sinks, softcap, forget)
            )
        out = attend_through(self.pieces, attention, layer)(
            q,
            k,
            v,
            scheme=None if rotated else scheme,
            mask=mask,
            q_pos=q_pos,
            k_pos=k_pos,
            backend=inputs.backend,
            temperature=temperature,
            extension=self._wrapper(cache),
            layout=inputs.layout if cache is None else None,
            sinks=sinks,
            softcap=softcap,
            forget=forget,
        )
        if cache is not None and self.extension is not None:
            keep = self.extension.retains(k_pos, int(positions[-1]) + 1)
            if keep is not None:
                cache.evict(layer, keep, k_pos)
        for piece in self.pieces:
            out = piece.transform_output(x, out)
        return self.dropout(self.o_proj(out.transpose(1, 2).reshape(B, L, -1)))

    def _wrapper(self, cache: KVCache | None) -> AttentionExtension | None:
        """What the layer attends through: its extension, S2-Attn while training without a cache, or None."""
        if self.extension is None and self.s2_group and self.training and cache is None:
            return S2Attention(self.s2_group)
        return self.extension


class MLP(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        hidden = round(config.mlp_ratio * config.d_model)
        self.up = nn.Linear(config.d_model, hidden, bias=False)
        self.down = nn.Linear(hidden, config.d_model, bias=False)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.dropout(self.down(F.gelu(self.up(x))))


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, config: GPTConfig, key_dim: int, variant: LayerVariant) -> None:
        super().__init__()
        self.ln_attn = nn.LayerNorm(config.d_model)
        self.attn = SelfAttention(config, key_dim, variant)
        self.ln_mlp = nn.LayerNorm(config.d_model)
        self.mlp = MLP(config)

    def forward(self, x: Tensor, inputs: LayerInputs) -> Tensor:
        """x (B, L, d_model) -> (B, L, d_model); the last `inputs.queries` rows alone when it is set."""
        out = self.attn(self.ln_attn(x), inputs)
        x = (x if inputs.queries is None else x[:, -inputs.queries :]) + out
        return x + self.mlp(self.ln_mlp(x))


class GPT(nn.Module):
    """Decoder-only language model; `forward(tokens)` returns logits (B, L, vocab)."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config.validate()
        #: each layer's attention variant (the config's layer plan)
        self.variants = config.plan()
        #: the position schemes, shared among layers where they can be (`_build_schemes`); `scheme_for(layer)`
        self.schemes, self.scheme_index = self._build_schemes(self.variants)
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.abacus = self._build_abacus(config)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(
            Block(config, self.scheme_for(layer).key_dim(), variant) for layer, variant in enumerate(self.variants)
        )
        self.ln_f = nn.LayerNorm(config.d_model)
        self.head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self._init_weights()
        if config.tie_embeddings:
            self.head.weight = self.embed.weight
        if config.temperatures is not None:  # the saved ones (`InferenceSetup` sets new ones)
            taus = torch.tensor(config.temperatures, dtype=torch.float32, device="cpu")
            for block, tau in zip(self.blocks, taus, strict=True):
                cast(Block, block).attn.inference.temperature = tau

    @staticmethod
    def _build_abacus(config: GPTConfig) -> AbacusEmbedding | None:
        """The Abacus table the config asks for (its digits found), or None."""
        if config.abacus is None:
            return None
        if "digits" not in config.abacus:
            raise ConfigError(
                "model config: abacus has no digits yet; training finds them from the task or tokenizer, or give "
                "abacus.digits"
            )
        options = config.abacus
        return AbacusEmbedding(config.d_model, options["digits"], options["max_k"], options["positions"])

    def _build_schemes(self, variants: list[LayerVariant]) -> tuple[nn.ModuleList, list[int]]:
        """The schemes and each layer's index into them (a variant's layers share one without per-layer weights)."""
        dims = self.config.head_dims()
        schemes: list[PositionScheme] = []
        index: list[int] = []
        shared: dict[str, int] = {}
        for variant in variants:
            if variant.key() in shared:
                index.append(shared[variant.key()])
                continue
            scheme = build_scheme(variant.scheme, dims, **variant.scheme_options)
            if scheme.shared_across_layers or scheme.adds_embedding or not any(True for _ in scheme.parameters()):
                shared[variant.key()] = len(schemes)
            index.append(len(schemes))
            schemes.append(scheme)
        return nn.ModuleList(schemes), index

    def _init_weights(self) -> None:
        """GPT-2 style: N(0, 0.02), residual outputs scaled by 1/sqrt(2 L); scheme parameters keep their own."""
        for module in (*self.blocks.modules(), self.embed, self.head):
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
        for name, param in self.blocks.named_parameters():
            if name.endswith(("o_proj.weight", "down.weight")):
                nn.init.normal_(param, std=0.02 / math.sqrt(2 * self.config.n_layer))

    def _set_scheme_options(self, layers: list[int] | None = None, drop: tuple[str, ...] = (), **options: Any) -> None:
        """Rebuild the schemes of `layers` (default: all) with changed options (`drop` removed first), keeping
        learned parameters and rewriting the config's layer plan."""
        chosen = list(range(self.config.n_layer)) if layers is None else layers
        variants = with_scheme_options(self.variants, chosen, options, drop)
        schemes, index = self._build_schemes(variants)
        for layer in range(self.config.n_layer):  # learned scheme parameters carry over from each layer's old one
            schemes[index[layer]].load_state_dict(self.scheme_for(layer).state_dict())
        device = next(self.parameters()).device
        self.schemes, self.scheme_index, self.variants = schemes.to(device), index, variants
        self.config.set_variants(variants)

    def set_s2_attn(self, group: int) -> None:
        """Train with LongLoRA's S2-Attn in groups of `group` tokens (0: off); training mode only."""
        for block in self.blocks:
            cast(Block, block).attn.s2_group = int(group)

    def scheme_for(self, layer: int) -> PositionScheme:
        return cast(PositionScheme, self.schemes[self.scheme_index[layer]])

    def new_cache(self) -> KVCache:
        """An empty key/value cache for incremental decoding with `model(tokens, cache=cache)`."""
        return KVCache(self.config.n_layer)

    def forward(self, tokens: Tensor, **options: Any) -> Tensor:
        """Logits for `tokens` (B, L); options as for `features`."""
        return self.head(self.features(tokens, **options))

    def features(self, tokens: Tensor, **options: Any) -> Tensor:
        """Final normalised hidden states (B, L, d_model); options as for `features_from_embeddings`."""
        return self.features_from_embeddings(self.input_embeddings(tokens, options.get("cache")), **options)

    def input_embeddings(self, tokens: Tensor, cache: KVCache | None = None) -> Tensor:
        """The token embeddings (B, L, d_model), plus the Abacus embedding where the model has one."""
        embeddings = self.embed(tokens)
        if self.abacus is None:
            return embeddings
        places, run = self.abacus(tokens) if cache is None else self.abacus(tokens, cache.abacus_run, cache.length)
        if cache is not None:
            cache.abacus_run = run
        return embeddings + places

    def features_from_embeddings(
        self,
        embeddings: Tensor,
        *,
        positions: Tensor | None = None,
        mask: str | Mask | None = None,
        backend: str = "auto",
        cache: KVCache | None = None,
        observer: LayerObserver | None = None,
        last: int | None = None,
    ) -> Tensor:
        """`features` from token embeddings (B, L, d_model). `mask` None is each layer's own; local layers keep
        theirs. `last`: only the last that many positions' features (B, last, d_model), computed alone by the final
        block."""
        L = embeddings.shape[1]
        if last is not None and (cache is not None or not 0 < last <= L):
            raise ValueError(f"last={last} needs 1 <= last <= L ({L}) and no cache")
        start = cache.length if cache is not None else 0
        layout = None
        if positions is None:
            positions = torch.arange(start, start + L, device=embeddings.device)
            layout = PositionLayout.ranges(start, L, start, L)  # known on the host: no layer reads positions
        if mask is not None and not isinstance(mask, Mask):
            mask = build_mask(mask, self.config.train_len)
        final = self.config.n_layer - 1
        x = self.forward_layers(
            self.embed_inputs(embeddings, positions),
            positions,
            mask,
            backend,
            cache,
            observer=observer,
            layout=layout,
            stop=final if last is not None else None,
        )
        if last is not None:
            rows = None if layout is None else PositionLayout.ranges(start + L - last, last, start, L)
            inputs = LayerInputs(self.scheme_for(final), positions, mask, backend, None, final, observer, rows, last)
            x = self.blocks[final](x, inputs)
        if cache is not None:
            cache.length += L
        return self.ln_f(x)

    def embed_inputs(self, embeddings: Tensor, positions: Tensor) -> Tensor:
        """The first block's input: token embeddings plus the scheme's absolute position signal, after dropout."""
        return self.drop(self.scheme_for(0).embed(embeddings, positions))

    def forward_layers(
        self,
        x: Tensor,
        positions: Tensor,
        mask: Mask | None,
        backend: str = "auto",
        cache: KVCache | None = None,
        *,
        start: int = 0,
        stop: int | None = None,
        observer: LayerObserver | None = None,
        layout: PositionLayout | None = None,
    ) -> Tensor:
        """Hidden states x (B, L, d_model) through blocks start..stop - 1, before the final norm; `observer` sees
        each layer's `AttentionInputs` before it attends."""
        for layer, block in itertools.islice(enumerate(self.blocks), start, stop):
            x = block(x, LayerInputs(self.scheme_for(layer), positions, mask, backend, cache, layer, observer, layout))
        return x

    def loss(self, tokens: Tensor, **kwargs: Any) -> Tensor:
        """Mean next-token cross-entropy of a (B, L + 1) batch."""
        logits = self(tokens[:, :-1], **kwargs)
        return F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


def save_model(
    model: GPT, directory: str | Path, extra: dict[str, Any] | None = None, state: dict[str, Tensor] | None = None
) -> Path:
    """Write the weights (`state`: given, e.g. gathered) then `config.json` with their sha256, each atomically."""
    directory = Path(directory)
    state = {k: v.detach().contiguous().cpu() for k, v in (model.state_dict() if state is None else state).items()}
    if model.config.tie_embeddings:
        state.pop("head.weight", None)
    weights = directory / WEIGHTS_FILE
    atomic_write(weights, lambda tmp: save_file(state, str(tmp), metadata={"format": "lextra"}))
    meta = {
        "format_version": FORMAT_VERSION,
        "model": model.config.to_dict(),
        "weights_sha256": sha256_file(weights),
        **(extra or {}),
    }
    atomic_write_json(directory / CONFIG_FILE, meta)
    return directory


def read_model_meta(directory: str | Path) -> dict[str, Any]:
    """The checkpoint's JSON metadata, with a clear error when missing or unreadable."""
    path = Path(directory) / CONFIG_FILE
    if not path.exists():
        raise CheckpointError(f"no checkpoint at {directory}: {CONFIG_FILE} is missing")
    try:
        meta = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"checkpoint config {path} is corrupt ({err}); restore it or retrain") from None
    if not isinstance(meta, dict) or "model" not in meta:
        raise CheckpointError(f"checkpoint config {path} has no 'model' section; it was not written by lextra")
    return meta


def check_finite_weights(state: dict[str, Tensor], where: str | Path) -> None:
    """Refuse weights holding nan or inf (a diverged run): every later result would be meaningless."""
    for name, tensor in state.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise CheckpointError(
                f"checkpoint {where}: tensor {name} holds non-finite values (nan or inf), so the run that wrote it "
                "had diverged; use an earlier checkpoint (resume from it with a lower --lr) or retrain"
            )


def load_model(directory: str | Path, map_location: str | torch.device = "cpu") -> GPT:
    """Rebuild a model from `config.json` with its verified weights (checked on the CPU) on `map_location`."""
    directory = Path(directory)
    meta = read_model_meta(directory)
    config = GPTConfig.from_dict(meta["model"])
    weights = directory / WEIGHTS_FILE
    if not weights.exists():
        raise CheckpointError(f"checkpoint {directory} has no {WEIGHTS_FILE}")
    expected = meta.get("weights_sha256")
    if expected and sha256_file(weights) != expected:
        raise CheckpointError(
            f"checkpoint {weights} is corrupt: its sha256 does not match config.json; "
            "use an earlier checkpoint or retrain"
        )
    try:
        state = load_file(str(weights), device="cpu")
    except (SafetensorError, OSError) as err:
        raise CheckpointError(f"checkpoint {weights} cannot be read ({err})") from None
    check_finite_weights(state, weights)
    # scheme parameters saved as `positions.*` (checkpoints of older lextra versions) load as `schemes.*`
    state = {f"schemes.{k[10:]}" if k.startswith("positions.") else k: v for k, v in state.items()}
    model = GPT(config)
    if config.tie_embeddings and "embed.weight" in state:
        state["head.weight"] = state["embed.weight"]
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise CheckpointError(
            f"checkpoint {weights} does not fit its config: missing {missing[:5]}, unexpected {unexpected[:5]}"
        )
    return model.to(map_location)
