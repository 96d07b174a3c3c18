"""Adapters that give Hugging Face models the interface lextra's evaluators use.

`HFCausalLM` (Llama family: llama, mistral, qwen2) offers what `lextra.evaluate`, `lextra.evaluate.retrieval`,
`lextra.analysis` and `lextra.methods` call on a GPT: `features` / `head` (perplexity), `model(tokens, cache=)` and
`new_cache()` (retrieval by greedy decoding and likelihood ranking), `layer_attention` (resolution, dispersion,
alignment), `set_temperatures`, and a `config` with `n_layer`, `n_head`, `train_len`. RoPE scalings are delegated
to Hugging Face's own `rope_parameters` (`set_rope_scaling`); masks, temperatures and log-n scaling run in
lextra's registered attention (`lextra.hf.attention`). `set_extension` applies a training-free extension method
(`lextra.extend`): Hugging Face's rotary embedding then gives the identity (`IdentityRotary`) and lextra's
attention rotates q and k at the method's remapped positions with Hugging Face's own frequencies (`HFRoPE`).
`apply_setup` (what `lextra.extend.InferenceSetup.apply` calls) sets any of these in one step.

`HFSeq2Seq` (T5 family) adapts the encoder: temperatures, masks and capture act on the encoder self-attention,
retrieval is question answering (the prompt is the encoder input, the answer is decoded), and analysis reads the
encoder layers with their bucket bias.
"""

from __future__ import annotations

import contextlib
import copy
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from lextra.analysis.capture import DEFAULT_BLOCK, CapturedLayer, LayerAttention
from lextra.attention import build_mask
from lextra.attention.masks import Mask
from lextra.devices import module_device
from lextra.errors import ConfigError
from lextra.extend import KEEP, ExtensionMethod, InferenceSetup, build_extension
from lextra.hf.attention import (
    ATTENTION_NAME,
    AttentionState,
    check_log_scaling,
    check_temperatures,
    register,
)
from lextra.positions.base import HeadDims
from lextra.positions.rotary import RoPE

CAUSAL_FAMILIES = ("llama", "mistral", "qwen2")
SEQ2SEQ_FAMILIES = ("t5",)


@dataclass
class HFConfigView:
    """The part of a GPTConfig that lextra's evaluators read, for a Hugging Face model."""

    n_layer: int
    n_head: int
    train_len: int
    scheme: str
    model_type: str
    vocab_size: int = 0
    log_scaling: str = "none"
    temperatures: list[list[float]] | None = None


class HFCache:
    """A Hugging Face cache behind lextra's cache protocol (`repeat_rows`); T5 also keeps the encoder output."""

    def __init__(self, cache: Any, encoder: Any = None) -> None:
        self.hf, self.encoder = cache, encoder

    def repeat_rows(self, repeats: int) -> HFCache:
        clone = HFCache(copy.deepcopy(self.hf), copy.deepcopy(self.encoder))
        clone.hf.batch_repeat_interleave(repeats)
        if clone.encoder is not None:
            clone.encoder.last_hidden_state = clone.encoder.last_hidden_state.repeat_interleave(repeats, dim=0)
        return clone


class _Adapter(ABC):
    """Shared state handling: the registered attention, masks, temperatures, log-n scaling."""

    #: evaluations put the BOS its tokenizer adds by default before documents and prompts (`evaluation_prefix`)
    bos_from_tokenizer: ClassVar[bool] = True

    def __init__(self, model: Any, config: HFConfigView, default_mask: str) -> None:
        register()
        model.eval()
        model.set_attn_implementation(ATTENTION_NAME)
        self.model = model
        self.config = config
        self.default_mask = default_mask
        self.state = AttentionState(mask=build_mask(default_mask, config.train_len), train_len=config.train_len)
        modules = self.attention_modules()
        if len(modules) != config.n_layer:
            raise ConfigError(f"found {len(modules)} attention layers, expected {config.n_layer}")
        for module in modules:
            module.lextra_state = self.state

    @abstractmethod
    def attention_modules(self) -> list[Any]:
        """The attention modules lextra adapts, one per layer (provided by each model family)."""

    def eval(self) -> _Adapter:
        self.model.eval()
        return self

    def parameters(self) -> Iterator[Tensor]:
        return self.model.parameters()

    def to(self, device: torch.device | str) -> _Adapter:
        """Move the wrapped model to `device`; its caches and lextra's attention inputs follow it there."""
        self.model.to(device)
        return self

    def apply_setup(self, setup: InferenceSetup) -> None:
        """Apply an `InferenceSetup` (`setup.apply(adapter)`): RoPE scaling, log scaling, temperatures, then an
        extension's removal, the mask and an extension's addition (so a setup may swap a mask for one). Layer
        selection and temperature tuning are a lextra GPT's (its layer plan's) and refused here."""
        if setup.layers is not None or setup.temp_tuning is not KEEP:
            raise ConfigError("layer selection and temp_tuning apply to lextra models; drop them here")
        if setup.rope_scaling is not KEEP:
            self.set_rope_scaling(setup.rope_scaling)
        if setup.log_scaling is not KEEP:
            self.set_log_scaling(setup.log_scaling)
        if setup.temperatures is not KEEP:
            self.set_temperatures(setup.temperatures)
        removing = setup.extension is not KEEP and setup.extension in (None, "none")
        if removing:
            self.set_extension(None)
        if setup.mask is not KEEP:
            self.set_mask(setup.mask)
        if setup.extension is not KEEP and not removing:
            self.set_extension(setup.extension)

    def set_rope_scaling(self, spec: str | dict | None) -> dict[str, Any]:
        """Apply a RoPE scaling as Hugging Face `rope_parameters` (the Llama family)."""
        raise ConfigError(f"{self.config.model_type} models have no RoPE to scale; drop the rope scaling")

    def set_extension(self, spec: str | ExtensionMethod | None, **options: Any) -> ExtensionMethod | None:
        """Apply a training-free extension method (the Llama family)."""
        if spec is None or spec == "none":
            return None
        raise ConfigError(f"extension methods apply to rotary models, not {self.config.model_type}; drop --extend")

    def set_temperatures(self, temperatures: Any) -> None:
        """Per-layer, per-head softmax temperatures (n_layer, n_head); None resets them to 1."""
        if temperatures is None:
            self.state.temperatures, self.config.temperatures = None, None
            return
        tau = check_temperatures(temperatures, self.config.n_layer, self.config.n_head)
        self.state.temperatures, self.config.temperatures = tau.to(module_device(self)), tau.tolist()

    def set_log_scaling(self, kind: str) -> None:
        """ "qwen": queries past L_tr multiplied by log_{L_tr} i; "none" turns it off."""
        self.state.log_scaling = self.config.log_scaling = check_log_scaling(kind)

    def set_mask(self, spec: str | Mask | None) -> None:
        """The mask every adapted layer uses from now on (causal, window:W, bca[:B], full)."""
        mask = build_mask(spec or self.default_mask, self.config.train_len)
        if self.state.extension is not None and not mask.exactly_causal:
            raise ConfigError(
                f"extension {self.state.extension.name!r} sets its own visibility over causal attention; "
                f"use mask causal, not {spec!r}"
            )
        self.state.mask = mask

    @contextlib.contextmanager
    def using_mask(self, spec: str | Mask | None) -> Iterator[None]:
        saved = self.state.mask
        if spec is not None:
            self.state.mask = build_mask(spec, self.config.train_len)
        try:
            yield
        finally:
            self.state.mask = saved

    def _capture(self, layer: int, run: Any) -> LayerAttention:
        """Run `run()` until `layer` records its attention inputs."""
        self.state.capture_layer = layer
        try:
            run()
        except CapturedLayer as captured:
            return captured.view
        finally:
            self.state.capture_layer = None
        raise ConfigError(f"layer {layer} was never reached; is the model's attention lextra's?")


class IdentityRotary(torch.nn.Module):
    """Stands in for a Llama-family model's rotary embedding under an extension method: it runs the real one (so
    that dynamic NTK and LongRoPE update their frequencies for this input, as Hugging Face would) and returns
    cos = 1, sin = 0, so `apply_rotary_pos_emb` leaves q and k exactly as projected and the cache holds
    un-rotated keys."""

    def __init__(self, source: torch.nn.Module) -> None:
        super().__init__()
        self.source = source

    def forward(self, x: Tensor, position_ids: Tensor) -> tuple[Tensor, Tensor]:
        cos, sin = self.source(x, position_ids)
        return torch.ones_like(cos), torch.zeros_like(sin)


def hf_rope_parameters(cfg: Any, original: dict[str, Any], spec: str | dict | None) -> dict[str, Any]:
    """The Hugging Face `rope_parameters` of a lextra RoPE scaling spec (`yarn:4`, a dict; None: `original`) for
    a Llama-family config trained with plain RoPE `original`, at its `max_position_embeddings`; lextra's `ntk`
    (no HF type) becomes its exact HF equivalent, rope_type "default" with the NTK base."""
    from lextra.positions.rotary import build_rope_scaling
    from lextra.positions.scaling import ntk_base, parse_rope_scaling, to_hf

    base = float(original["rope_theta"])
    if original.get("rope_type", "default") != "default":
        raise ConfigError(
            f"this model already uses rope_type {original['rope_type']!r}; lextra only adds a "
            "scaling to models trained with plain RoPE"
        )
    if spec is None:
        return dict(original)
    raw = parse_rope_scaling(spec) if isinstance(spec, str) else dict(spec)
    scaling = build_rope_scaling(raw, int(cfg.max_position_embeddings))
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    if scaling.type == "ntk":
        return {"rope_type": "default", "rope_theta": ntk_base(scaling.factor, head_dim, base)}
    return to_hf(scaling, base=base)


class HFRoPE(RoPE):
    """lextra's RoPE in the half-split layout (Hugging Face's `rotate_half`) with the inverse frequencies and
    cos/sin factor that a Hugging Face rotary module holds at call time (`inv_freq`, `attention_scaling`: its
    scaling's, e.g. YaRN's, and dynamic NTK's after its forward updated them), so that rotating at remapped
    positions is exactly Hugging Face's RoPE there."""

    def __init__(self, source: torch.nn.Module, n_heads: int, head_dim: int, train_len: int) -> None:
        super().__init__(HeadDims(n_heads, head_dim, n_heads * head_dim, train_len))
        self.sources = [source]  # a plain list: not a submodule of this scheme

    def frequencies_for(self, seq_len: int | None) -> tuple[Tensor, float]:
        source = self.sources[0]
        return source.inv_freq, float(source.attention_scaling)


class HFCausalLM(_Adapter):
    """A Llama-family `*ForCausalLM` with lextra's evaluation interface."""

    def __init__(self, model: Any, train_len: int | None = None) -> None:
        cfg = model.config
        view = HFConfigView(
            n_layer=cfg.num_hidden_layers,
            n_head=cfg.num_attention_heads,
            train_len=int(train_len or cfg.max_position_embeddings),
            scheme="rope",
            model_type=cfg.model_type,
            vocab_size=int(cfg.vocab_size),
        )
        self.original_rope = dict(cfg.rope_parameters)
        super().__init__(model, view, "causal")
        #: Hugging Face's rotary embedding (under an extension method the model holds an `IdentityRotary` of it)
        self.rotary = self.inner.rotary_emb

    @property
    def inner(self) -> Any:
        return self.model.model

    def attention_modules(self) -> list[Any]:
        return [layer.self_attn for layer in self.inner.layers[: self.config.n_layer]]

    # --- perplexity ---------------------------------------------------------------------------------------
    @torch.no_grad()
    def features(
        self, tokens: Tensor, mask: str | Mask | None = None, backend: str = "auto", last: int | None = None
    ) -> Tensor:
        """Final hidden states (B, L, d) under `mask` (the adapter's current mask when None); `last`: those of the
        last that many positions only (computed for every position, then sliced)."""
        with self.using_mask(mask):
            hidden = self.inner(input_ids=tokens, use_cache=False).last_hidden_state
        return hidden if last is None else hidden[:, -last:]

    def head(self, hidden: Tensor) -> Tensor:
        return self.model.lm_head(hidden)

    # --- decoding ------------------------------------------------------------------------------------------
    def new_cache(self) -> HFCache:
        from lextra.hf.cache import growing_cache

        return HFCache(growing_cache(self.model.config))

    @torch.no_grad()
    def __call__(self, tokens: Tensor, cache: HFCache | None = None) -> Tensor:
        """Logits (B, L, V); with a cache, the tokens continue what the cache holds."""
        if cache is None:
            return self.model(input_ids=tokens, use_cache=False).logits
        return self.model(input_ids=tokens, cache=cache.hf, use_cache=True).logits

    # --- RoPE scaling, delegated to Hugging Face --------------------------------------------------------------
    def set_rope_scaling(self, spec: str | dict | None) -> dict[str, Any]:
        """Apply a RoPE scaling (`yarn:2`, `dynamic:2`, a dict, or None to restore) as HF `rope_parameters`.

        lextra's `ntk` (no HF type) becomes its exact HF equivalent, rope_type "default" with the NTK base.
        Returns the parameters set. HF's dynamic NTK takes L_tr from `max_position_embeddings`.
        """
        cfg = self.model.config
        params = hf_rope_parameters(cfg, self.original_rope, spec)
        cfg.rope_parameters = params
        with torch.device(module_device(self)):  # Hugging Face builds its frequency buffers on the default device
            self.rotary = type(self.rotary)(config=cfg)
        self._install_rotary()
        return params

    # --- training-free extension methods -------------------------------------------------------------------
    @property
    def extension(self) -> ExtensionMethod | None:
        return self.state.extension

    def set_extension(self, spec: str | ExtensionMethod | None, **options: Any) -> ExtensionMethod | None:
        """Apply a training-free extension method (`rerope`, `self_extend:group=4`, a built method; None or
        "none" removes it), for this model's L_tr. Combines with `set_rope_scaling` (the method rotates with
        the scaled frequencies) and temperatures; the mask must be causal. Returns the method."""
        if spec is None or spec == "none":
            self.state.extension, self.state.rotary = None, None
            self._install_rotary()
            return None
        method = build_extension(spec, self.config.train_len, **options)
        if not self.state.mask.exactly_causal:
            raise ConfigError(
                f"extension {method.name!r} sets its own visibility over causal attention; "
                f"drop the mask {self.state.mask!r}"
            )
        self._check_full_rotary()
        self.state.extension = method
        self._install_rotary()
        return method

    def _check_full_rotary(self) -> None:
        """Extension methods rotate every channel pair of a head, as Llama-family RoPE does."""
        cfg = self.model.config
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        if 2 * self.rotary.inv_freq.numel() != head_dim:
            raise ConfigError(
                f"extension methods rotate the whole head (dimension {head_dim}), but this model's RoPE rotates "
                f"{2 * self.rotary.inv_freq.numel()} channels (partial rotary); use the model without --extend"
            )

    def _install_rotary(self) -> None:
        """Put Hugging Face's rotary embedding in the model, or its identity stand-in under an extension (with the
        lextra RoPE that then rotates q and k, reading the frequencies of that same rotary module)."""
        if self.state.extension is None:
            self.inner.rotary_emb = self.rotary
            return
        cfg = self.model.config
        head_dim = 2 * self.rotary.inv_freq.numel()
        self.state.rotary = HFRoPE(self.rotary, cfg.num_attention_heads, head_dim, self.config.train_len)
        self.inner.rotary_emb = IdentityRotary(self.rotary)

    # --- analysis --------------------------------------------------------------------------------------------
    @torch.no_grad()
    def layer_attention(
        self, tokens: Tensor, mask: str | Mask | None = "causal", *, block_size: int = DEFAULT_BLOCK
    ) -> Iterator[LayerAttention]:
        """Each decoder layer's rotated q, k (GQA heads expanded) as `LayerAttention`, layer by layer.

        The residual stream advances after the consumer is done with a layer, with the temperatures set by then
        (as `lextra.analysis.layer_attention` does for a GPT), which is what bottom-up alignment needs.
        """
        L = tokens.shape[1]
        positions = torch.arange(L, device=tokens.device)[None].expand(tokens.shape[0], L)
        with self.using_mask(mask):
            hidden = self.inner.embed_tokens(tokens)
            rotary = self.inner.rotary_emb(hidden, position_ids=positions)
            for index, layer in enumerate(self.inner.layers[: self.config.n_layer]):

                def run(layer: Any = layer, hidden: Tensor = hidden) -> Tensor:
                    return layer(hidden, attention_mask=None, position_ids=positions, position_embeddings=rotary)

                view = self._capture(index, run)
                view.block_size = block_size
                yield view
                hidden = run()


class HFSeq2Seq(_Adapter):
    """A T5-family encoder-decoder; lextra acts on the encoder self-attention."""

    def __init__(self, model: Any, train_len: int | None = None) -> None:
        cfg = model.config
        view = HFConfigView(
            n_layer=cfg.num_layers,
            n_head=cfg.num_heads,
            train_len=int(train_len or getattr(cfg, "n_positions", 512) or 512),
            scheme="t5",
            model_type=cfg.model_type,
            vocab_size=int(cfg.vocab_size),
        )
        super().__init__(model, view, "full")

    def attention_modules(self) -> list[Any]:
        return [block.layer[0].SelfAttention for block in self.model.encoder.block]

    def new_cache(self) -> HFCache:
        from transformers import DynamicCache, EncoderDecoderCache

        return HFCache(EncoderDecoderCache(DynamicCache(), DynamicCache()))

    @torch.no_grad()
    def __call__(self, tokens: Tensor, cache: HFCache | None = None) -> Tensor:
        """Question answering through lextra's decoding protocol: with an empty cache, `tokens` is the encoder
        input and the result the logits (B, 1, V) of the first answer token; later calls feed answer tokens."""
        if cache is None:
            raise ConfigError("an encoder-decoder is called with a cache: cache = model.new_cache()")
        if cache.encoder is None:
            cache.encoder = self.model.encoder(input_ids=tokens)
            start = self.model.config.decoder_start_token_id or 0
            tokens = torch.full((tokens.shape[0], 1), start, dtype=torch.long, device=tokens.device)
        out = self.model(encoder_outputs=cache.encoder, decoder_input_ids=tokens, cache=cache.hf, use_cache=True)
        return out.logits

    @torch.no_grad()
    def layer_attention(
        self, tokens: Tensor, mask: str | Mask | None = "full", *, block_size: int = DEFAULT_BLOCK
    ) -> Iterator[LayerAttention]:
        """Each encoder layer's q, k and bucket bias, layer by layer (the encoder is rerun up to each layer, so
        temperatures set on lower layers in between are in effect). The encoder is bidirectional: pass "full"."""
        with self.using_mask(mask or "full"):
            for index in range(self.config.n_layer):
                view = self._capture(index, lambda: self.model.encoder(input_ids=tokens))
                view.block_size = block_size
                yield view
