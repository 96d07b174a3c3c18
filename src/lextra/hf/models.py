"""Adapters that give Hugging Face models the interface lextra's evaluators call on a GPT (docs/hugging-face.md).

`HFCausalLM` adapts the decoder families (`DECODER_FAMILIES`), describing its layers as plan variants and
implementing what `InferenceSetup.apply` writes through; `HFSeq2Seq` (T5) adapts the encoder self-attention, with
retrieval as question answering.
"""

from __future__ import annotations

import contextlib
import copy
import json
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, cast

import torch
from torch import Tensor

from lextra.analysis.capture import DEFAULT_BLOCK, CapturedLayer, LayerAttention
from lextra.attention import build_mask
from lextra.attention.backends import get_backend
from lextra.attention.inference import LayerInference
from lextra.attention.masks import Mask
from lextra.attention.plan import LayerVariant
from lextra.devices import module_device
from lextra.errors import ConfigError
from lextra.extend import ExtensionMethod
from lextra.hf.attention import ATTENTION_NAME, AttentionState, register
from lextra.hf.families import describe_layers, rope_key
from lextra.hf.rotary import HFRoPE, IdentityRotary, call_rotary, hf_rope_parameters, inv_freq_of, scaled_source
from lextra.positions.base import HeadDims

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
    temperatures: list[list[float]] | None = None
    head_dim: int = 1

    def head_dims(self) -> HeadDims:
        return HeadDims(self.n_head, self.head_dim, self.n_head * self.head_dim, self.train_len)


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
    """The registered attention and its `AttentionState`; what `InferenceSetup.apply` asks of a model."""

    #: evaluations put the BOS its tokenizer adds by default before documents and prompts
    bos_from_tokenizer: ClassVar[bool] = True

    def __init__(self, model: Any, config: HFConfigView, default_mask: str) -> None:
        register()
        model.eval()
        model.set_attn_implementation(ATTENTION_NAME)
        self.model = model
        self.config = config
        self.default_mask = default_mask
        layers = [LayerInference(config.train_len) for _ in range(config.n_layer)]
        self.state = AttentionState(build_mask(default_mask, config.train_len), layers)
        modules = self.attention_modules()
        if len(modules) != config.n_layer:
            raise ConfigError(f"found {len(modules)} attention layers, expected {config.n_layer}")
        for module in modules:
            module.lextra_state = self.state
        #: each layer in plan vocabulary (`lextra.attention.plan`), what `--layers-select` reads
        self.variants: list[LayerVariant] = [LayerVariant(config.scheme, {}, default_mask)] * config.n_layer

    @abstractmethod
    def attention_modules(self) -> list[Any]:
        """The attention modules lextra adapts, one per layer (provided by each model family)."""

    def eval(self) -> _Adapter:
        self.model.eval()
        return self

    def parameters(self) -> Iterator[Tensor]:
        return self.model.parameters()

    def to(self, device: torch.device | str) -> _Adapter:
        """Move the wrapped model to `device`."""
        self.model.to(device)
        return self

    # --- the inference target (`InferenceSetup.apply` is the way in) ----------------------------------------
    @property
    def inference_layers(self) -> list[LayerInference]:
        return self.state.layers

    def _default_scaling_layers(self) -> list[int]:
        return []

    def _rotary_reason(self, layer: int) -> str | None:
        return f"{self.config.model_type} models have no RoPE to scale; drop the rope scaling"

    def _extension_reason(self, layer: int, method: ExtensionMethod) -> str | None:
        return f"extension methods apply to rotary models, not {self.config.model_type}; drop --extend"

    def _scale_rope(self, scaling: dict[str, Any] | None, layers: list[int]) -> None:
        raise ConfigError(f"{self.config.model_type} models have no RoPE to scale; drop the rope scaling")

    def _rotation_changed(self) -> None:  # noqa: B027  (an empty default: overridden by rotary models)
        """Only a rotary model's rotation changes under an extension method."""

    @contextlib.contextmanager
    def using_mask(self, spec: str | Mask | None, backend: str = "auto") -> Iterator[None]:
        """Run the block under the mask `spec` (None: the current one) and on `backend` ("auto": the state's)."""
        saved = self.state.call_mask, self.state.backend
        if spec is not None:
            self.state.call_mask = build_mask(spec, self.config.train_len)
        if backend != "auto":
            self.state.backend = get_backend(backend).name
        try:
            yield
        finally:
            self.state.call_mask, self.state.backend = saved

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


class HFCausalLM(_Adapter):
    """A decoder `*ForCausalLM` of the families in `DECODER_FAMILIES` with lextra's evaluation interface."""

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
        super().__init__(model, view, "causal")
        #: Hugging Face's rotary embedding as loaded (the template of scaled ones), and the one it rotates with now
        self.template_rotary = self.rotary = self.inner.rotary_emb
        self.original_rope = copy.deepcopy(dict(cfg.rope_parameters))
        self._rotary_params = self.original_rope
        modules = self.attention_modules()
        self.head_dim = int(modules[0].head_dim)
        self.layers = describe_layers(cfg, modules, self.head_dim, self._rotary_dim())
        self.variants = self.layers.variants
        self.config.head_dim = self.head_dim
        self.state.layers = [
            LayerInference(view.train_len, build_mask(v.mask, view.train_len) if v.local else None, v.local)
            for v in self.variants
        ]
        #: each layer's RoPE scaling (`rope_parameters`; None: the model's own RoPE)
        self.scalings: list[dict[str, Any] | None] = [None] * view.n_layer
        self.inner.register_forward_pre_hook(self._record_positions, with_kwargs=True)

    def _record_positions(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Record the forward's position ids for the attention (Llama 4's modules are not handed them)."""
        positions = kwargs.get("position_ids")
        if positions is None:
            tokens = kwargs.get("input_ids", args[0] if args else None)
            if tokens is None:
                tokens = kwargs["inputs_embeds"]
            cache = kwargs.get("cache", kwargs.get("past_key_values"))
            start = int(cache.get_seq_length()) if cache is not None else 0
            positions = torch.arange(start, start + tokens.shape[1], device=tokens.device)[None]
        self.state.position_ids = positions

    @property
    def inner(self) -> Any:
        return self.model.model

    def attention_modules(self) -> list[Any]:
        return [layer.self_attn for layer in self.inner.layers[: self.config.n_layer]]

    def _rotary_dim(self) -> int:
        keys = [key for key in (rope_key(self.model.config, i) for i in range(self.config.n_layer)) if key is not None]
        return 2 * inv_freq_of(self.template_rotary, keys[0] if keys else None).numel()

    def rope_key(self, layer: int) -> str | None:
        """The layer type whose `rope_parameters` the layer uses (Gemma 3, OLMo 3), or None where they are flat."""
        return self.layers.rope_keys[layer]

    # --- perplexity ---------------------------------------------------------------------------------------
    @torch.no_grad()
    def features(
        self, tokens: Tensor, mask: str | Mask | None = None, backend: str = "auto", last: int | None = None
    ) -> Tensor:
        """Final hidden states (B, L, d) under `mask` (None: the current one); `last`: the last that many only."""
        with self.using_mask(mask, backend):
            hidden = self.inner(input_ids=tokens, use_cache=False).last_hidden_state
        return hidden if last is None else hidden[:, -last:]

    def input_embeddings(self, tokens: Tensor) -> Tensor:
        """The token embeddings (B, L, d) the model's forward starts from (a family's scaling is inside it)."""
        return self.model.get_input_embeddings()(tokens)

    def features_from_embeddings(
        self, embeddings: Tensor, mask: str | Mask | None = None, backend: str = "auto"
    ) -> Tensor:
        """Final hidden states (B, L, d) from token embeddings at positions 0..L-1, with gradients."""
        with self.using_mask(mask, backend):
            return self.inner(inputs_embeds=embeddings, use_cache=False).last_hidden_state

    def head(self, hidden: Tensor) -> Tensor:
        """Logits as the family's `*ForCausalLM` makes them: Cohere's `logit_scale`, Gemma's final softcap."""
        logits = self.model.lm_head(hidden)
        scale = getattr(self.model, "logit_scale", None)
        if scale is not None:
            logits = logits * scale
        cap = getattr(self.model.config, "final_logit_softcapping", None)
        if cap is not None:
            logits = torch.tanh(logits / cap) * cap
        return logits

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

    # --- RoPE scaling and extension methods, per layer ------------------------------------------------------
    @property
    def extension(self) -> ExtensionMethod | None:
        """The training-free extension method on the `state.extended` layers, or None."""
        extended = self.state.extended
        return cast(ExtensionMethod, self.state.layers[extended[0]].extension) if extended else None

    def _default_scaling_layers(self) -> list[int]:
        """The global rotary layers (as transformers scales Gemma 3), or every rotary layer where none is global."""
        rotary = [i for i, v in enumerate(self.variants) if v.rotary]
        return [i for i in rotary if not self.variants[i].local] or rotary

    def _rotary_reason(self, layer: int) -> str | None:
        return None if self.variants[layer].rotary else "it is a NoPE layer, with no RoPE to scale"

    def _extension_reason(self, layer: int, method: ExtensionMethod) -> str | None:
        variant = self.variants[layer]
        if not variant.rotary:
            return "it is a NoPE layer, with no rotation to remap"
        if variant.local:
            return (
                f"it attends through a {variant.mask} mask (the model's sliding_window or chunk size), and the "
                "method sets its own visibility; to attend causally instead, set sliding_window to null in the "
                "model's config.json"
            )
        return None

    def _scale_rope(self, scaling: dict[str, Any] | None, layers: list[int]) -> None:
        """Scale the RoPE of `layers` (None: restore the model's own there)."""
        for layer in layers:
            hf_rope_parameters(self.model.config, self._original_params(layer), scaling)  # refuses before changes
            self.scalings[layer] = None if scaling is None else dict(scaling)
        self._rotation_changed()

    def _original_params(self, layer: int) -> dict[str, Any]:
        key = self.rope_key(layer)
        return self.original_rope[key] if key else self.original_rope

    def _layer_params(self, layer: int) -> dict[str, Any]:
        return hf_rope_parameters(self.model.config, self._original_params(layer), self.scalings[layer])

    def _native_parameters(self) -> dict[str, Any] | None:
        """The `rope_parameters` under which Hugging Face's rotary module rotates every layer as asked, or None."""
        if self.state.extended:
            return None
        per_key: dict[str | None, dict[str, Any]] = {}
        for layer, variant in enumerate(self.variants):
            if not variant.rotary:
                continue
            params = self._layer_params(layer)
            key = self.rope_key(layer)
            if per_key.setdefault(key, params) != params:
                return None
        if None in per_key:
            return per_key[None]
        return {**self.original_rope, **{str(key): params for key, params in per_key.items()}}

    def _rotation_changed(self) -> None:
        """Install the rotation the layers ask for: Hugging Face's with scaled `rope_parameters` where that is
        exact, else lextra's per rotary layer (`lextra.hf.rotary`)."""
        cfg = self.model.config
        device = module_device(self)
        native = self._native_parameters()
        if native is not None:
            cfg.rope_parameters = native
            if native == self.original_rope:
                self.rotary = self.template_rotary
            elif native != self._rotary_params:
                with torch.device(device):
                    self.rotary = type(self.template_rotary)(config=cfg)
            self._rotary_params = native
            self.inner.rotary_emb = self.rotary
            for own in self.state.layers:
                own.rotary = None
            return
        cfg.rope_parameters = copy.deepcopy(self.original_rope)
        sources: dict[str, tuple[torch.nn.Module, str | None]] = {}
        for layer, (variant, own) in enumerate(zip(self.variants, self.state.layers, strict=True)):
            own.rotary = None
            if not variant.rotary:
                continue
            key, params = self.rope_key(layer), self._layer_params(layer)
            name = json.dumps([key, params], sort_keys=True, default=str)
            if name not in sources:
                sources[name] = (scaled_source(self.template_rotary, cfg, key, params, device), key)
            source = sources[name][0]
            own.rotary = HFRoPE(source, key, self.config.head_dims(), self.layers.layout, self.layers.fraction)
        self.inner.rotary_emb = IdentityRotary(self.template_rotary, list(sources.values()))

    # --- analysis --------------------------------------------------------------------------------------------
    @torch.no_grad()
    def layer_attention(
        self, tokens: Tensor, mask: str | Mask | None = "causal", *, block_size: int = DEFAULT_BLOCK
    ) -> Iterator[LayerAttention]:
        """Each decoder layer's rotated q, k (GQA heads expanded) as `LayerAttention`; the residual stream advances
        after the consumer is done with a layer, with the temperatures set by then."""
        L = tokens.shape[1]
        positions = torch.arange(L, device=tokens.device)[None].expand(tokens.shape[0], L)
        self.state.position_ids = positions  # the layers are called one by one, not through the model's forward
        with self.using_mask(mask):
            hidden = self.inner.embed_tokens(tokens)
            for index, layer in enumerate(self.inner.layers[: self.config.n_layer]):
                rotary = call_rotary(self.inner.rotary_emb, hidden, positions, self.rope_key(index))

                def run(layer: Any = layer, hidden: Tensor = hidden, rotary: Any = rotary) -> Tensor:
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
        """With an empty cache `tokens` is the encoder input and the result the first answer token's logits
        (B, 1, V); later calls feed answer tokens."""
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
        """Each encoder layer's q, k and bucket bias, the encoder rerun up to each layer (bidirectional: "full")."""
        with self.using_mask(mask or "full"):
            for index in range(self.config.n_layer):
                view = self._capture(index, lambda: self.model.encoder(input_ids=tokens))
                view.block_size = block_size
                yield view
