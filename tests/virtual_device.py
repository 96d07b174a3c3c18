"""A virtual CUDA device over CPU tensors: the library's CUDA branches run on a CPU-only machine, and any tensor
that lands on the CPU where CUDA code needs a device tensor raises `DeviceMixError` where it meets one.

- `VirtualTensor`: a plain `torch.Tensor` subclass over CPU storage whose `device` is `cuda:0` (`is_cuda`
  True). Every torch call on one first checks its tensor arguments: a CPU tensor of dim > 0 next to a virtual
  one is a device mix (0-dim CPU scalars pass, as CUDA allows them; so do CPU index tensors in indexing and CPU
  sources of `copy_`, which CUDA also accepts). Results are virtual (subclass propagation), gradients too.
- `VirtualCuda`: a `TorchFunctionMode` that makes factory calls with a CUDA `device=` (arange, zeros, tensor,
  ...) return virtual tensors, `.to("cuda")` / `.cuda()` virtual ones and `.to("cpu")` / `.cpu()` plain ones,
  and counts what would be device-to-host syncs on a GPU (`.item()`, `.tolist()`, `bool`/`int`/`float`/index
  of a virtual tensor, copies to the CPU, `torch.equal`, `nonzero`, boolean-mask indexing); `.numpy()` of a
  virtual tensor raises as CUDA does.
- `emulated_flex`: FlexAttention computed densely (scores, `score_mod` and the BlockMask with its `mask_mod` on
  broadcast index tensors, softmax with rows that see no key at 0), after checking that q, k, v, every BlockMask
  tensor and every tensor the modifiers capture (closures, nested closures, bound objects) is virtual, and
  refusing head dimensions below 16 as CUDA's compiled kernel does.
- `virtual_cuda()`: the context that patches `torch.cuda` (available, one device, capability 9.0, events on the
  host clock, memory counters at 0, the CPU generator as its random state),
  `lextra.attention.flex._run_compiled` with `emulated_flex`, module conversion (`module.to("cuda")` swaps each
  parameter for a virtual one in place, so tied weights stay tied) and activates the mode; it yields the
  `VirtualCuda` with its counters.

`python tests/virtual_device.py` prints the path `backend="auto"` takes on CUDA for every scheme x mask, and the
device-to-host syncs per layer forward with the lines that make them.
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
import sys
import time
import types
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
import torch.utils._pytree as pytree
from torch import Tensor
from torch.overrides import TorchFunctionMode

CUDA = torch.device("cuda", 0)
CPU = torch.device("cpu")


class DeviceMixError(AssertionError):
    """A CPU tensor met a device tensor where CUDA would refuse the mix (or flex would capture it)."""


def virtual(t: Tensor) -> VirtualTensor:
    """`t`'s data as a virtual CUDA tensor (shared storage, autograd history kept)."""
    return t if isinstance(t, VirtualTensor) else t.as_subclass(VirtualTensor)


def plain(t: Tensor) -> Tensor:
    """`t`'s data as a plain CPU tensor."""
    return t.as_subclass(Tensor) if isinstance(t, VirtualTensor) else t


def _mixing(value: Any) -> bool:
    """A tensor that CUDA refuses next to a device tensor: a plain CPU tensor of dim > 0 (not one of vmap's
    batched wrappers, inside which torch's own BlockMask code runs: its results are checked where flex gets them)."""
    return (
        isinstance(value, Tensor)
        and not isinstance(value, VirtualTensor)
        and value.dim() > 0
        and not torch._C._functorch.is_functorch_wrapped_tensor(value)
    )


def _on_device(value: Any) -> bool:
    return isinstance(value, VirtualTensor) and value.dim() > 0


def _boolean_index(index: Any) -> bool:
    return any(isinstance(t, Tensor) and t.dtype == torch.bool and t.dim() > 0 for t in pytree.tree_leaves(index))


def _name(func: Any) -> str:
    return getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or repr(func)


#: Tensor methods and torch functions whose result a GPU must copy to the host (a sync), by name
SYNC_METHODS = {
    Tensor.item: "item",
    Tensor.tolist: "tolist",
    Tensor.__bool__: "bool",
    Tensor.__int__: "int",
    Tensor.__float__: "float",
    Tensor.__index__: "index",
    torch.equal: "equal",
    Tensor.nonzero: "nonzero",
    torch.nonzero: "nonzero",
}
#: calls whose tensor arguments CUDA accepts on the CPU: index tensors of indexing, sources of copies, and
#: nn.Module.to's type query
MIX_ALLOWED = {Tensor.__getitem__, Tensor.__setitem__, Tensor.copy_, torch._has_compatible_shallow_copy_type}
_GRAD_GET = Tensor.grad.__get__
#: the mode in force (None outside `virtual_cuda`): where syncs are counted
_ACTIVE: list[VirtualCuda] = []


class VirtualTensor(Tensor):
    """A CPU tensor that says it lives on `cuda:0`; torch calls on it refuse CPU tensors (see the module)."""

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return CUDA

    @property
    def is_cuda(self) -> bool:  # type: ignore[override]
        return True

    @property
    def is_cpu(self) -> bool:  # type: ignore[override]
        return False

    def get_device(self) -> int:  # type: ignore[override]
        return 0

    def numpy(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        raise TypeError("can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor first.")

    def __deepcopy__(self, memo: dict) -> VirtualTensor:
        """A virtual copy (torch's default makes its copy through `new_empty`, which comes back plain)."""
        if id(self) in memo:
            return memo[id(self)]
        result = virtual(plain(self).detach().clone()).requires_grad_(self.requires_grad)
        memo[id(self)] = result
        result.__dict__.update(copy.deepcopy(self.__dict__, memo))  # a parameter's `_is_param`, among others
        if self.grad is not None:
            result.grad = copy.deepcopy(self.grad, memo)
        return result

    def __repr__(self, *args: Any, **kwargs: Any) -> str:  # type: ignore[override]
        with torch._C.DisableTorchFunctionSubclass():
            return f"Virtual({Tensor.__repr__(self)})"

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func not in MIX_ALLOWED:
            flat, _ = pytree.tree_flatten((args, kwargs))
            mixed = [t for t in flat if _mixing(t)]
            if mixed:
                shapes = ", ".join(str(tuple(t.shape)) for t in mixed)
                raise DeviceMixError(
                    f"device mix in {_name(func)}: CPU tensor(s) of shape {shapes} next to cuda:0 tensors"
                )
        elif func is Tensor.__setitem__ and not isinstance(args[0], VirtualTensor) and _on_device(args[-1]):
            raise DeviceMixError(f"device mix in {_name(func)}: a cuda:0 value written into a CPU tensor")
        if func is Tensor.__getitem__ and not isinstance(args[0], VirtualTensor):
            raise DeviceMixError(f"device mix in {_name(func)}: a CPU tensor indexed with a cuda:0 index")
        if _ACTIVE and func in SYNC_METHODS:
            _ACTIVE[-1].sync(SYNC_METHODS[func])
        elif _ACTIVE and func is Tensor.__getitem__ and _boolean_index(args[1]):
            _ACTIVE[-1].sync("boolean index")  # the result's size is on the device
        result = super().__torch_function__(func, types, args, kwargs)
        if func == _GRAD_GET and isinstance(result, Tensor):  # torch leaves `.grad` unwrapped
            return virtual(result)
        return result


def _is_cuda(device: Any) -> bool:
    return device is not None and torch.device(device).type == "cuda"


def _created(t: Tensor) -> VirtualTensor:
    """A factory's result as virtual; a leaf that requires grad stays a leaf."""
    if t.requires_grad and t.is_leaf:
        return virtual(t.detach()).requires_grad_()
    return virtual(t)


def _wrap(result: Any) -> Any:
    return pytree.tree_map_only(Tensor, _created, result)


class VirtualCuda(TorchFunctionMode):
    """Factory calls and copies to `cuda` give virtual tensors; copies of virtual ones to the CPU are counted."""

    def __init__(self) -> None:
        super().__init__()
        #: device-to-host syncs by kind (item, int, bool, cpu, ...)
        self.syncs: Counter[str] = Counter()
        #: the same by the innermost lextra line that asked: "kind at module.py:123 (function)"
        self.sites: Counter[str] = Counter()
        #: FlexAttention calls (emulated)
        self.flex_calls = 0

    def sync(self, kind: str) -> None:
        self.syncs[kind] += 1
        frame = sys._getframe(1)
        while frame is not None and f"{os.sep}lextra{os.sep}" not in frame.f_code.co_filename:
            frame = frame.f_back
        if frame is not None:
            where = frame.f_code.co_filename.rpartition(f"{os.sep}lextra{os.sep}")[2]
            self.sites[f"{kind} at {where}:{frame.f_lineno} ({frame.f_code.co_name})"] += 1

    def clear(self) -> None:
        """Reset the counters."""
        self.syncs.clear()
        self.sites.clear()
        self.flex_calls = 0

    def total(self) -> int:
        return sum(self.syncs.values())

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is Tensor.to or func is Tensor.cuda or func is Tensor.cpu:
            return self._move(func, args, kwargs)
        if _is_cuda(kwargs.get("device")):
            return _wrap(func(*args, **{**kwargs, "device": CPU}))
        return func(*args, **kwargs)

    def _move(self, func: Callable, args: tuple, kwargs: dict) -> Any:
        """`.to` / `.cuda()` / `.cpu()`: a copy when the device changes (virtual on cuda, plain on the CPU, then
        counted as a sync), the tensor itself when nothing changes, as torch does."""
        source, dtype, copy = args[0], None, bool(kwargs.get("copy", False))
        if func is Tensor.cuda:
            target = CUDA
        elif func is Tensor.cpu:
            target = CPU
        elif len(args) > 1 and isinstance(args[1], Tensor):  # .to(other): other's (possibly virtual) device
            target, dtype = args[1].device, args[1].dtype
        else:
            parsed = {k: value for k, value in kwargs.items() if k != "copy"}
            target, dtype, _, _ = torch._C._nn._parse_to(*args[1:], **parsed)
        from_device = isinstance(source, VirtualTensor)
        to_device = from_device if target is None else torch.device(target).type == "cuda"
        crossing = to_device != from_device
        data = plain(source)
        moved = data.to(dtype=dtype or source.dtype, copy=copy or crossing)
        if crossing and not to_device:
            self.sync("cpu")
        if moved is data:  # nothing to convert
            return source
        return virtual(moved) if to_device else moved


# --------------------------------------------------------------------------------------------------------------
# FlexAttention, densely
# --------------------------------------------------------------------------------------------------------------


def _captured(value: Any, where: str, seen: set[int], found: list[tuple[str, Tensor]], depth: int = 0) -> None:
    """Collect every tensor reachable from a score_mod / mask_mod: closure cells, nested functions, bound
    methods' objects and their attributes, containers."""
    if id(value) in seen or depth > 8:
        return
    seen.add(id(value))
    if isinstance(value, Tensor):
        found.append((where, value))
    elif isinstance(value, types.FunctionType):
        for name, cell in zip(value.__code__.co_freevars, value.__closure__ or (), strict=True):
            with contextlib.suppress(ValueError):  # an empty cell
                _captured(cell.cell_contents, f"{where}.{name}", seen, found, depth + 1)
    elif isinstance(value, types.MethodType):
        _captured(value.__func__, where, seen, found, depth + 1)
        _captured(value.__self__, f"{where}.__self__", seen, found, depth + 1)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for i, item in enumerate(value):
            _captured(item, f"{where}[{i}]", seen, found, depth + 1)
    elif isinstance(value, dict):
        for key, item in value.items():
            _captured(item, f"{where}[{key!r}]", seen, found, depth + 1)
    elif isinstance(value, torch.nn.Module):
        for name, tensor in [*value.named_parameters(), *value.named_buffers()]:
            _captured(tensor, f"{where}.{name}", seen, found, depth + 1)
    elif hasattr(value, "__dict__") and not isinstance(value, type):
        for key, item in vars(value).items():
            _captured(item, f"{where}.{key}", seen, found, depth + 1)


def check_on_device(what: str, root: Any) -> None:
    """Raise `DeviceMixError` naming the first tensor reachable from `root` that is not on the virtual device."""
    found: list[tuple[str, Tensor]] = []
    _captured(root, what, set(), found)
    for where, tensor in found:
        if not isinstance(tensor, VirtualTensor):
            raise DeviceMixError(
                f"{where}: a CPU tensor of shape {tuple(tensor.shape)} captured by FlexAttention on cuda:0"
            )


def _dense_blocks(counts: Tensor, indices: Tensor, n_kb: int) -> Tensor:
    """A BlockMask's (B, H, nq) counts and (B, H, nq, nk) indices as a dense (B, H, nq, n_kb) boolean."""
    listed = torch.arange(indices.shape[-1], device=indices.device) < counts[..., None]
    dense = torch.zeros(*indices.shape[:-1], n_kb + 1, dtype=torch.bool, device=indices.device)
    slot = torch.where(listed, indices.long(), n_kb)  # unlisted entries go to a spare column
    return dense.scatter_(-1, slot, True)[..., :n_kb]


#: the smallest head dimension torch's inductor FlexAttention kernel compiles for on CUDA
FLEX_MIN_HEAD_DIM = 16


class FlexCompileError(RuntimeError):
    """What compiling FlexAttention for CUDA raises where its kernel cannot run (inductor's own refusal)."""


def emulated_flex(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    score_mod: Callable | None = None,
    block_mask: Any = None,
    scale: float | None = None,
    **options: Any,
) -> Any:
    """`flex_attention(q, k, v, score_mod=..., block_mask=..., scale=...)` after checking that its inputs and every
    tensor its modifiers and BlockMask hold are on the device, and that CUDA's kernel takes their head dimensions;
    computed by `dense_flex`."""
    if q.shape[-1] < FLEX_MIN_HEAD_DIM or v.shape[-1] < FLEX_MIN_HEAD_DIM:
        raise FlexCompileError(
            "NYI: embedding dimension of the query, key, and value must be at least 16 but got "
            f"E={q.shape[-1]} and Ev={v.shape[-1]}"
        )
    check_on_device("flex inputs", {"q": q, "k": k, "v": v})
    check_on_device("score_mod", score_mod)
    check_on_device("block_mask", block_mask)  # its block tensors and its mask_mod's captures
    if _ACTIVE:
        _ACTIVE[-1].flex_calls += 1
    return dense_flex(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale, **options)


def dense_flex(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    score_mod: Callable | None = None,
    block_mask: Any = None,
    scale: float | None = None,
    return_lse: bool = False,
    return_aux: Any = None,
    **options: Any,
) -> Any:
    """FlexAttention densely: (B, H, Lq, Lk) scores x scale, `score_mod` on broadcast index tensors, the BlockMask's
    partial blocks through its `mask_mod` and its full blocks as they are, softmax (a row that sees no key: 0).
    Returns as flex does: the output; with `return_lse` also the rows' log-sum-exp; with `return_aux`
    (`AuxRequest`) an `AuxOutput` of the log-sum-exp and the rows' largest score (-inf where a row sees no key)."""
    unknown = {key: value for key, value in options.items() if value not in (None, False)}
    if unknown:
        raise NotImplementedError(f"dense_flex: options {sorted(unknown)} are not emulated")
    B, H, Lq, Lk = q.shape[0], q.shape[1], q.shape[-2], k.shape[-2]
    device = q.device
    b = torch.arange(B, device=device).view(B, 1, 1, 1)
    h = torch.arange(H, device=device).view(1, H, 1, 1)
    q_idx = torch.arange(Lq, device=device).view(1, 1, Lq, 1)
    kv_idx = torch.arange(Lk, device=device).view(1, 1, 1, Lk)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q.float() @ k.float().transpose(-1, -2)) * scale
    if score_mod is not None:
        scores = score_mod(scores, b, h, q_idx, kv_idx).float().expand(B, H, Lq, Lk)
    if block_mask is not None:
        size_q, size_k = block_mask.BLOCK_SIZE
        n_qb, n_kb = -(-Lq // size_q), -(-Lk // size_k)
        partial = _dense_blocks(block_mask.kv_num_blocks, block_mask.kv_indices, n_kb)[..., :n_qb, :]
        full = torch.zeros_like(partial)
        if block_mask.full_kv_num_blocks is not None:
            full = _dense_blocks(block_mask.full_kv_num_blocks, block_mask.full_kv_indices, n_kb)[..., :n_qb, :]

        def expand(blocks: Tensor) -> Tensor:
            return blocks.repeat_interleave(size_q, -2)[..., :Lq, :].repeat_interleave(size_k, -1)[..., :Lk]

        rule = block_mask.mask_mod(b, h, q_idx, kv_idx)
        visible = (expand(partial) & rule) | expand(full)
        scores = scores.masked_fill(~visible, float("-inf"))
    empty = torch.isneginf(scores).all(-1, keepdim=True)
    scores = scores.masked_fill(empty, 0.0)
    lse = torch.logsumexp(scores, -1, keepdim=True)
    weights = torch.exp(scores - lse).masked_fill(empty, 0.0)
    out = (weights @ v.float()).to(v.dtype)
    lse = lse.masked_fill(empty, float("-inf")).squeeze(-1)
    if return_aux is not None:
        from torch.nn.attention.flex_attention import AuxOutput

        largest = scores.masked_fill(empty, float("-inf")).amax(-1)
        return out, AuxOutput(lse if return_aux.lse else None, largest if return_aux.max_scores else None)
    return (out, lse) if return_lse else out


# --------------------------------------------------------------------------------------------------------------
# the session
# --------------------------------------------------------------------------------------------------------------


class _Event:
    """`torch.cuda.Event` on the host clock: `elapsed_time` in milliseconds between two `record`s."""

    def __init__(self, enable_timing: bool = False, **options: Any) -> None:
        self.time: float | None = None

    def record(self, stream: Any = None) -> None:
        self.time = time.perf_counter()

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: _Event) -> float:
        if self.time is None or end.time is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end.time - self.time) * 1e3


def _patch_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch.cuda as one H200 reports it, for the calls the library's CUDA branches make."""
    cuda = torch.cuda
    monkeypatch.setattr(cuda, "is_available", lambda: True)
    monkeypatch.setattr(cuda, "device_count", lambda: 1)
    monkeypatch.setattr(cuda, "current_device", lambda: 0)
    monkeypatch.setattr(cuda, "_lazy_init", lambda: None)
    monkeypatch.setattr(cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(cuda, "get_device_name", lambda device=None: "virtual H200")
    monkeypatch.setattr(cuda, "is_bf16_supported", lambda including_emulation=True: True)
    # benchmarks/gpu.py's timer: events read the host clock, memory counters stay 0 (the harness holds no device memory)
    monkeypatch.setattr(cuda, "Event", _Event)
    for name in ("memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved"):
        monkeypatch.setattr(cuda, name, lambda device=None: 0)
    monkeypatch.setattr(cuda, "reset_peak_memory_stats", lambda device=None: None)
    monkeypatch.setattr(cuda, "empty_cache", lambda: None)
    # the device's random numbers are the CPU generator's (its ops run there): dropout on "cuda" draws from it
    monkeypatch.setattr(cuda, "get_rng_state", lambda device="cuda": torch.get_rng_state())
    monkeypatch.setattr(cuda, "set_rng_state", lambda state, device="cuda": torch.set_rng_state(plain(state)))


def _keep_virtual(fn: Callable) -> Callable:
    """`fn` whose tensor results are virtual when an argument is: torch's BlockMask code densifies block indices
    under `torch.vmap`, whose outputs lose the subclass (on a GPU they stay on the inputs' device)."""

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        result = fn(*args, **kwargs)
        if any(isinstance(t, VirtualTensor) for t in pytree.tree_leaves((args, kwargs))):
            return pytree.tree_map_only(Tensor, virtual, result)
        return result

    return wrapped


@contextlib.contextmanager
def virtual_cuda() -> Iterator[VirtualCuda]:
    """The virtual device for the block: torch.cuda patched, flex emulated, `VirtualCuda` active; everything is
    restored on leaving it (its own monkeypatch context)."""
    import torch.nn.attention.flex_attention as flex_api

    import lextra.attention.flex as flex

    swap = torch.__future__.get_swap_module_params_on_conversion()
    mode = VirtualCuda()
    with pytest.MonkeyPatch.context() as patch:
        _patch_cuda(patch)
        patch.setattr(flex, "_run_compiled", emulated_flex)
        patch.setattr(flex_api, "_ordered_to_dense", _keep_virtual(flex_api._ordered_to_dense))
        flex._BLOCK_MASKS.clear()  # BlockMasks cached for "cuda:0" hold virtual tensors only when built in here
        torch.__future__.set_swap_module_params_on_conversion(True)
        _ACTIVE.append(mode)
        try:
            with mode:
                yield mode
        finally:
            _ACTIVE.remove(mode)
            torch.__future__.set_swap_module_params_on_conversion(swap)
            flex._BLOCK_MASKS.clear()


def label_table(n_heads: int = 4, head_dim: int = 16, length: int = 256, grad: bool = False) -> list[list[str]]:
    """Rows [scheme, label per mask] of `attention_path` on cuda:0 for `length` aligned positions."""
    from lextra.attention.backends import attention_path
    from lextra.attention.masks import build_mask
    from lextra.positions import SCHEMES, HeadDims, build_scheme

    masks = ("causal", "window:64", "bca:128")
    rows = [["scheme", *masks]]
    pos = torch.arange(length)
    with torch.set_grad_enabled(grad):
        for name in SCHEMES.names():
            scheme = build_scheme(name, HeadDims(n_heads, head_dim, n_heads * head_dim, length // 2))
            rows.append([name, *(attention_path(scheme, build_mask(m), pos, pos, device=CUDA) for m in masks)])
    return rows


def tiny_gpt(scheme: str, layers: int = 2, **options: Any):
    """A small GPT (head_dim 16) with random scheme parameters, so that they matter."""
    from lextra.model import GPT, GPTConfig

    config = GPTConfig(vocab_size=61, n_layer=layers, n_head=2, d_model=32, train_len=16, layer_plan=scheme, **options)
    model = GPT(config)
    with torch.no_grad():
        for module in model.schemes:
            for param in module.parameters():
                param.normal_(0, 0.3)
    return model


def layer_syncs(scheme: str, mask: str, length: int = 48) -> tuple[int, int, Counter, int]:
    """Device-to-host syncs on CUDA: one layer's forward (a 2-layer forward less a 1-layer one, so the embedding
    and head do not count; forwards after the first), the extra ones of the first forward (building the BlockMask
    that later layers and forwards find cached), the sites of the 2-layer model's later forward, and its total."""
    totals, sites = {}, Counter()
    for layers in (1, 2):
        torch.manual_seed(0)
        model = tiny_gpt(scheme, layers).eval()
        tokens = torch.randint(0, 61, (1, length))
        with torch.no_grad(), virtual_cuda() as mode:
            model.to("cuda")
            ids = virtual(tokens)
            mode.clear()
            model(ids, mask=mask)
            first = mode.total()
            mode.clear()
            model(ids, mask=mask)
            totals[layers] = (first, mode.total())
            sites = mode.sites.copy()
    return totals[2][1] - totals[1][1], totals[1][0] - totals[1][1], sites, totals[2][1]


def decoding_counts(scheme: str, mask: str, prompt: int = 20, steps: int = 20) -> dict[str, float]:
    """Per one-token decoding step of a 2-layer model on CUDA after a `prompt`-token prefill: FlexAttention calls,
    BlockMasks built (issue 25 item 7: decoding should run SDPA, or reuse its BlockMask) and device-to-host syncs."""
    import lextra.attention.flex as flex

    torch.manual_seed(0)
    model = tiny_gpt(scheme).eval()
    tokens = torch.randint(0, 61, (1, prompt + steps))
    builds = Counter()
    classify = flex._classify_blocks

    def counted(*args: Any) -> Any:
        builds["block masks"] += 1
        return classify(*args)

    with pytest.MonkeyPatch.context() as patch, torch.no_grad(), virtual_cuda() as mode:
        patch.setattr(flex, "_classify_blocks", counted)
        model.to("cuda")
        ids = virtual(tokens)
        cache = model.new_cache()
        model(ids[:, :prompt], cache=cache, mask=mask)
        mode.clear()
        builds.clear()
        for t in range(prompt, prompt + steps):
            model(ids[:, t : t + 1], cache=cache, mask=mask)
        found = {"flex calls": mode.flex_calls, "block masks": builds["block masks"], "syncs": mode.total()}
    return {key: value / steps for key, value in found.items()}


#: the (scheme, mask) pairs whose syncs issue 25 item 7 asks for
SYNC_CASES = (("rope", "causal"), ("alibi", "window:5"), ("fire", "causal"))


def sync_report() -> str:
    """Syncs per layer forward for `SYNC_CASES`, with the sites of each."""
    lines = []
    for scheme, mask in SYNC_CASES:
        per_layer, build, sites, _ = layer_syncs(scheme, mask)
        lines.append(f"{scheme} + {mask}: {per_layer} syncs per layer forward, {build} more to build a BlockMask")
        lines += [f"    {count:3d}  {site}" for site, count in sorted(sites.items())]
    for scheme, mask in SYNC_CASES:
        counts = decoding_counts(scheme, mask)
        lines.append(
            f"{scheme} + {mask}, per one-token decoding step of 2 layers: "
            + ", ".join(f"{value:g} {key}" for key, value in counts.items())
        )
    return "\n".join(lines)


def format_table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows)


if __name__ == "__main__":
    for grad in (False, True):
        print(f"backend='auto' on cuda:0, {'training (autograd)' if grad else 'inference'}, 256 positions:")
        print(format_table(label_table(grad=grad)))
        print()
    print("device-to-host syncs on cuda:0 (2-layer model's sites, 48 tokens):")
    print(sync_report())
