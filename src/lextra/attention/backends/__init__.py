"""The functional attention call and its backends: `reference`, `sdpa`, `chunked`, `flex`, and `auto`.

`attention(q, k, v, scheme=..., mask=..., q_pos=..., k_pos=...)` applies a position scheme's q/k transform and
score bias, a mask and an optional temperature, then softmax-attends:

    out = softmax((rotate(q) . rotate(k) * scale + bias) / tau, masked) v

One backend per module, each an `AttentionBackend` taking `run(q, k, v, ctx)` (`lextra.attention.context`):
- `reference` (`reference.py`): dense (H, Lq, Lk) scores with every modifier applied as a tensor: ground truth.
- `sdpa` (`sdpa.py`): one fused `scaled_dot_product_attention` call where it is exact.
- `chunked` (`chunked.py`): queries in blocks, each seeing only the keys its mask declares, its bias built for
  that block alone; inside it the tiled causal path (`tiled.py`: exactly causal without a per-distance bias,
  query blocks x key chunks merged by log-sum-exp) and the scored path (`scored.py`: softcaps, sinks under
  autograd).
- `tiled` (`tiled.py`): the tiling engine, query blocks x passes x key tiles merged by log-sum-exp, over a
  training-free extension method's passes or a mask's bands (windows, BCA: what `auto` runs for plain calls on
  CPU without autograd).
- `flex` (`flex.py`): one compiled FlexAttention call (`lextra.attention.flex`).
- `auto` (`dispatch.py`, `auto_backend`): on CPU `sdpa` when it applies, else `chunked` (rotary schemes at long
  lengths without autograd take its tiled path: no rotated copies of all of q and k); on CUDA `sdpa` (flash), else
  `flex`, else `chunked`. A single query `sdpa` cannot take goes to `chunked`, not `flex`, which would compile a
  kernel per key-length bucket the cache grows through and build a BlockMask per step.
A materialised score bias or padding mask (`AttentionContext.score_bias`, `.padding`: Hugging Face's T5 bias and
padded batches) is taken by every built-in backend: `reference` adds and masks them densely, `sdpa` passes them as
one float mask and `chunked` as each query block's rows of it (`materialised.py`; a softcap there runs the block
densely), `flex` reads them in its score_mod and mask_mod. The dispatch runs such a call only on a backend that
declares `takes_bias_and_padding`.
The dispatch (`dispatch.py`) keeps the registry (`register_backend`) and `auto`'s order per device type
(`AUTO_ORDER`), runs a training-free method's passes (`ctx.passes`) on `reference`, `tiled` or `flex`
(`passes_path`), and routes a call under another wrapper (S2-Attn) to the backend it names.
Every backend that runs passes also takes a softcap (each pass's scores) and sinks (the merged denominator).

The backends ask a mask only what it declares (`lextra.attention.masks.Mask`), never which mask it is, and a
scheme only its interface (`lextra.positions.base.PositionScheme`).
"""

from lextra.attention.backends.chunked import ChunkedBackend, chunked_attention
from lextra.attention.backends.common import (
    TILE,
    attention_logits,
    attention_with_lse,
    cap_scores,
    merge_tiles,
    sink_softmax,
)
from lextra.attention.backends.dispatch import (
    AUTO_ORDER,
    REGISTERED,
    attention,
    attention_path,
    auto_backend,
    backend_names,
    choose_backend,
    expand_kv,
    get_backend,
    passes_path,
    register_backend,
    resolve_backend,
    run_attention,
    unregister_backend,
)
from lextra.attention.backends.flex import FlexBackend
from lextra.attention.backends.reference import ReferenceBackend, context_logits, reference_attention
from lextra.attention.backends.sdpa import SdpaBackend
from lextra.attention.backends.tiled import TiledBackend
from lextra.attention.context import (
    AttentionBackend,
    AttentionContext,
    AttentionExtension,
    AttentionOptions,
    PassExtension,
    default_positions,
)
from lextra.attention.layout import PositionLayout

register_backend(ReferenceBackend())
register_backend(SdpaBackend(), auto={"cpu": None, "cuda": None})
register_backend(ChunkedBackend(), auto={"cpu": None, "cuda": None})
register_backend(FlexBackend(), auto={"cuda": 1})  # on CUDA between sdpa and chunked
register_backend(TiledBackend())  # `auto` runs it for mask bands and passes (`choose_backend`, `passes_path`)

#: the built-in backends' names (`backend_names()` adds any registered later)
BACKENDS = ("auto", "reference", "sdpa", "chunked", "flex")

__all__ = [
    "AUTO_ORDER",
    "BACKENDS",
    "REGISTERED",
    "TILE",
    "AttentionBackend",
    "AttentionContext",
    "AttentionExtension",
    "AttentionOptions",
    "PassExtension",
    "PositionLayout",
    "attention",
    "attention_logits",
    "attention_path",
    "attention_with_lse",
    "auto_backend",
    "backend_names",
    "cap_scores",
    "choose_backend",
    "chunked_attention",
    "context_logits",
    "default_positions",
    "expand_kv",
    "get_backend",
    "merge_tiles",
    "passes_path",
    "reference_attention",
    "register_backend",
    "resolve_backend",
    "run_attention",
    "sink_softmax",
    "unregister_backend",
]
