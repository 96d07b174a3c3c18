"""Stick-breaking attention (`stickbreak` piece): held to the authors' functions (shawntan/stickbreaking-attention's
`sb_ref.stickbreaking` with their tests' remainder, dolomite-engine's `SBAttention` layer and its
`decoding_stickbreaking`, ported below in float64), every path to the dense reference, forward and backward,
fp32 at 64k positions, memory that does not grow as L^2, cached decoding, and one-line refusals."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from lextra.analysis.capture import layer_attention
from lextra.attention import S2Attention, attention, stickbreak
from lextra.attention.pieces import PIECES
from lextra.attention.plan import parse_plan
from lextra.attention.stickbreak import StickBreaking
from lextra.cli import main
from lextra.errors import ConfigError
from lextra.model import GPT, GPTConfig
from lextra.positions import HeadDims, build_scheme

TOL = 1e-5


# ------------------------------------------------------------------- the authors' functions, ported (float64)
def authors_stickbreaking(q, k, v, mask, cum_weight):
    """`stickbreaking_attention.sb_ref.stickbreaking`: (att @ v, 1 - att.sum(-1)); `mask` True hides a pair."""
    logits = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    log_z = F.logsigmoid(logits).masked_fill(mask, -1e5)
    log_beta = F.logsigmoid(-logits).masked_fill(mask, 0)
    re_cum_log_beta = torch.einsum("bhij,jk->bhik", log_beta, cum_weight)
    att = (log_z + re_cum_log_beta).exp()
    return att @ v, 1 - att.sum(dim=-1)


def authors_forward(q, k, v, attend_current):
    """Their tests' `ref_fwd`: the mask hides the future (and the diagonal unless attend_current), remainder to v."""
    L = q.shape[-2]
    cum_weight = torch.ones(L, L, dtype=q.dtype).tril(-1)
    mask = torch.ones(L, L).triu(1 if attend_current else 0).bool()
    out, rem = authors_stickbreaking(q, k, v, mask, cum_weight)
    return out, rem


def authors_decoding(q, k, v):
    """dolomite-engine's `decoding_stickbreaking`: one query over the cache, its own (last) key left out."""
    logits = q @ k[..., :-1, :].transpose(-1, -2) / math.sqrt(q.shape[-1])
    log_z = F.logsigmoid(logits)
    log_beta = F.logsigmoid(-logits)
    re_cum_log_beta = log_beta.flip(-1).cumsum(dim=-1).flip(-1) - log_beta
    att = (log_z + re_cum_log_beta).exp()
    return att @ v[..., :-1, :], 1 - att.sum(dim=-1)


def authors_layer(q, k, v, head_bias, norm: torch.nn.GroupNorm):
    """dolomite-engine's `SBAttention.forward` between the projections: o + rem head_bias, then GroupNorm(H, H D)."""
    out, rem = authors_forward(q, k, v, attend_current=False)
    out = out + rem[..., None] * head_bias[None, :, None, :]
    B, H, L, D = out.shape
    return norm(out.transpose(1, 2).reshape(B * L, H * D)).reshape(B, L, H, D).transpose(1, 2)


# ------------------------------------------------------------------------------------------------ helpers
def _qkv(B: int = 2, H: int = 2, L: int = 70, D: int = 16, spread: float = 1.0) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(L + H)
    q = spread * (torch.randn(B, H, L, D) + 0.5)
    k = spread * (torch.randn(B, H, L, D) - 0.5)
    return q, k, torch.randn(B, H, L, D)


def _sb(piece: StickBreaking, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **options) -> torch.Tensor:
    """The piece's attention, as a layer calls it (its `attend` hook with the options of `attention`)."""
    return piece.attend(q, k, v, call=attention, layer=0, **options)


def _piece(H: int = 2, D: int = 16, **options) -> StickBreaking:
    piece = PIECES.build("stickbreak", HeadDims(H, D, H * D, 16), **options)
    assert isinstance(piece, StickBreaking)
    return piece


# ------------------------------------------------------------------------------------- the authors' definition
@pytest.mark.parametrize("attend_current", [False, True])
@pytest.mark.parametrize("backend", ["reference", "chunked", "auto"])
def test_every_path_equals_the_authors_function(attend_current: bool, backend: str) -> None:
    q, k, v = _qkv(L=77)
    piece = _piece(remainder="value", attend_current=attend_current, norm=False)
    out, rem = authors_forward(q.double(), k.double(), v.double(), attend_current)
    want = out + rem[..., None] * v.double()
    with torch.no_grad():
        got = _sb(piece, q, k, v, backend=backend, block_size=16)
    assert (got.double() - want).abs().max() < TOL
    none = _sb(_piece(remainder="none", attend_current=attend_current), q, k, v, backend=backend)
    assert (none.double() - out).abs().max() < TOL


def test_the_piece_equals_the_authors_model_layer_with_its_defaults() -> None:
    """Defaults: keys strictly before the query, the remainder to a learned per-head bias, GroupNorm per head."""
    q, k, v = _qkv(L=50)
    piece = _piece()
    assert (piece.remainder, piece.attend_current, piece.group_norm) == ("bias", False, True)
    norm = torch.nn.GroupNorm(2, 32).double()
    with torch.no_grad():
        for param in (piece.head_bias, piece.norm_weight, piece.norm_bias):
            param.normal_()
        norm.weight.copy_(piece.norm_weight)
        norm.bias.copy_(piece.norm_bias)
        got = piece.transform_output(q, _sb(piece, q, k, v))
        want = authors_layer(q.double(), k.double(), v.double(), piece.head_bias.double(), norm)
        assert (got.double() - want).abs().max() < TOL
        # the first token sees no key: its whole stick is the remainder, so its output is the head bias
        first = _sb(piece, q, k, v)[:, :, 0]
        assert (first - piece.head_bias[None]).abs().max() < TOL


def test_one_cached_decoding_step_equals_the_authors_decoding_function() -> None:
    q, k, v = _qkv(L=40)
    out, rem = authors_decoding(q[..., -1:, :].double(), k.double(), v.double())
    got = _sb(_piece(remainder="none"), q[..., -1:, :], k, v)
    assert (got.double() - out).abs().max() < TOL
    full = _sb(_piece(remainder="value"), q, k, v, backend="chunked", block_size=8)
    step = _sb(_piece(remainder="value"), q[..., -1:, :], k, v)
    assert (step - full[..., -1:, :]).abs().max() < TOL
    assert (step.double() - (out + rem[..., None] * v[..., -1:, :].double())).abs().max() < TOL


# ------------------------------------------------------------------------------ every path against the reference
CASES = [
    ("nope", "causal", "scalar", False),
    ("rope", "causal", True, False),
    ("alibi", "causal", True, True),  # a per-distance bias added to z: one (H, T, T) tile per diagonal
    ("fire", "causal", False, False),  # a per-query bias: the row path
    ("rope", "window:9", False, True),  # a mask beside causal: the row path
    ("t5", "chunk:16", True, False),
]


def _args(scheme: str, temperature: bool, softcap: bool, L: int) -> dict:
    built = build_scheme(scheme, HeadDims(2, 16, 32, 16))
    tau = 1.3 if temperature == "scalar" else torch.rand(2, L) + 0.5 if temperature else None
    return {"scheme": built, "temperature": tau, "softcap": 3.0 if softcap else None}


@pytest.mark.parametrize(("scheme", "mask", "temperature", "softcap"), CASES)
def test_every_backend_equals_the_dense_reference(scheme: str, mask: str, temperature: bool, softcap: bool) -> None:
    q, k, v = _qkv(L=75)
    args = _args(scheme, temperature, softcap, 75)
    piece = _piece()
    with torch.no_grad():
        piece.head_bias.normal_()
        want = _sb(piece, q, k, v, mask=mask, backend="reference", **args)
        for backend, block in (("chunked", 16), ("chunked", None), ("auto", 7)):
            got = _sb(piece, q, k, v, mask=mask, backend=backend, block_size=block, **args)
            assert (got - want).abs().max() < TOL, (backend, block)
        # queries that are the last 9 keys (a cached prefill) and one decoding step: the row path
        tail = _sb(piece, q[..., -9:, :], k, v, mask=mask, **{**args, "temperature": None})
        dense = _sb(piece, q, k, v, mask=mask, backend="reference", **{**args, "temperature": None})
        assert (tail - dense[..., -9:, :]).abs().max() < TOL


@pytest.mark.parametrize(("scheme", "mask", "temperature", "softcap"), [CASES[2], CASES[3], CASES[4]])
def test_gradients_of_the_tiled_and_row_paths_equal_the_references(scheme, mask, temperature, softcap) -> None:
    q, k, v = (x.requires_grad_(True) for x in _qkv(L=45))
    args = _args(scheme, temperature, softcap, 45)
    piece = _piece()
    with torch.no_grad():
        piece.head_bias.normal_()
    weight = torch.randn(2, 2, 45, 16)
    leaves = [q, k, v, piece.head_bias, *[p for p in args["scheme"].parameters() if p.requires_grad]]

    def grads(backend: str) -> list[torch.Tensor]:
        out = _sb(piece, q, k, v, mask=mask, backend=backend, block_size=8, **args)
        return list(torch.autograd.grad((out * weight).sum(), leaves))

    for mine, theirs in zip(grads("chunked"), grads("reference"), strict=True):
        assert (mine - theirs).abs().max() < 1e-4 * max(1.0, float(theirs.abs().max()))


def test_query_blocks_walking_in_groups_equal_the_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    """Groups of 3 query blocks of 8 rows (a budget of 3 x 8 x 8 scores per head): forward and gradients."""
    monkeypatch.setattr(stickbreak, "GROUP_BUDGET", 2 * 2 * 3 * 8 * 8)
    q, k, v = (x.requires_grad_(True) for x in _qkv(L=61))
    args = _args("alibi", True, False, 61)
    piece = _piece(remainder="value")

    def run(backend: str) -> list[torch.Tensor]:
        out = _sb(piece, q, k, v, backend=backend, block_size=8, **args)
        return [out.detach(), *torch.autograd.grad((out * out).sum(), [q, k, v])]

    for mine, theirs in zip(run("chunked"), run("reference"), strict=True):
        assert (mine - theirs).abs().max() < 1e-4 * max(1.0, float(theirs.abs().max()))


def test_default_tiles_split_the_sequence_evenly_without_padding(monkeypatch: pytest.MonkeyPatch) -> None:
    """No block size: the fewest tiles of at most TILE keys, evenly filled (TILE 32 and L 70: three tiles of 24, not
    three of 32 with 26 keys of padding; L below TILE: one tile of L), each equal to the reference."""
    monkeypatch.setattr(stickbreak, "TILE", 32)
    seen: list[tuple[int, ...]] = []
    step = stickbreak._tile_step

    def spy(qb, *rest):
        seen.append(tuple(qb.shape[-3:-1]))
        return step(qb, *rest)

    monkeypatch.setattr(stickbreak, "_tile_step", spy)
    piece = _piece(remainder="value")
    for L, tiles in ((70, (3, 24)), (20, (1, 20))):
        seen.clear()
        q, k, v = _qkv(L=L)
        with torch.no_grad():
            out = _sb(piece, q, k, v, backend="chunked")
            ref = _sb(piece, q, k, v, backend="reference")
        assert max(seen) == tiles and all(t == tiles[1] for _, t in seen)
        assert (out - ref).abs().max() < TOL


def test_positions_enter_only_through_their_differences() -> None:
    """Without a scheme, shifting every position changes nothing (the tiled walk reads the order alone)."""
    q, k, v = _qkv(L=40)
    piece = _piece(remainder="value")
    base = _sb(piece, q, k, v, backend="chunked", block_size=8)
    shifted = torch.arange(40) + 1000
    moved = _sb(piece, q, k, v, backend="chunked", block_size=8, q_pos=shifted, k_pos=shifted)
    assert (base - moved).abs().max() < TOL


# ------------------------------------------------------------------------------------------------ numerics
def test_fp32_rows_at_64k_positions_equal_float64_without_nan() -> None:
    """The last query rows at 64k over every key in fp32, large logits included (sticks broken to e^-1000s)."""
    L, rows = 65536, 4
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 1, rows, 8) * 3, torch.randn(1, 1, L, 8) * 3, torch.randn(1, 1, L, 8)
    scheme = build_scheme("rope", HeadDims(1, 8, 8, 16))
    q_pos, k_pos = torch.arange(L - rows, L), torch.arange(L)
    got = _sb(_piece(1, 8, remainder="value"), q, k, v, scheme=scheme, q_pos=q_pos, k_pos=k_pos)
    assert bool(torch.isfinite(got).all())
    qr, kr = scheme.rotate(q.double(), k.double(), q_pos, k_pos, L)
    z = qr @ kr.transpose(-1, -2) / math.sqrt(8)
    visible = k_pos[None, :] < q_pos[:, None]
    broken = F.softplus(z).masked_fill(~visible, 0)
    after = broken.flip(-1).cumsum(-1).flip(-1) - broken
    weights = (F.logsigmoid(z) - after).exp().masked_fill(~visible, 0)
    want = weights @ v.double() + (1 - weights.sum(-1))[..., None] * v[..., -rows:, :].double()
    assert (got.double() - want).abs().max() < 1e-4


def test_saturated_sticks_stay_finite_forward_and_backward() -> None:
    q, k, v = _qkv(L=64, spread=6.0)  # logits in the hundreds: beta = 1 and 1 - beta = e^-hundreds
    q.requires_grad_(True)
    out = _sb(_piece(remainder="value"), q, k, v, backend="chunked", block_size=16)
    (grad,) = torch.autograd.grad(out.sum(), [q])
    assert bool(torch.isfinite(out).all()) and bool(torch.isfinite(grad).all())
    want = _sb(_piece(remainder="value"), q.detach().double(), k.double(), v.double(), backend="reference")
    assert (out.double() - want).abs().max() < TOL


class _LargestTensor(TorchDispatchMode):
    """Records the most elements any op's output holds."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for item in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(item, torch.Tensor):
                self.largest = max(self.largest, item.numel())
        return out


def test_the_tiled_walk_never_builds_a_quadratic_tensor_forward_or_backward() -> None:
    L, T = 1024, 32
    q, k, v = (x.requires_grad_(True) for x in _qkv(B=1, H=1, L=L, D=8))
    piece = _piece(1, 8)
    for backend, bound in (("chunked", 2 * L * T), ("reference", L * L)):
        with _LargestTensor() as mode:
            out = _sb(piece, q, k, v, backend=backend, block_size=T)
            out.sum().backward()
        assert (mode.largest <= bound) if backend == "chunked" else (mode.largest >= bound), (backend, mode.largest)


# ------------------------------------------------------------------------------------------------ in a model
def _tiny(plan: str) -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=61, n_layer=2, n_head=2, d_model=32, train_len=16, layer_plan=plan))


def test_cached_decoding_equals_the_full_forward() -> None:
    model = _tiny("nope+stickbreak;rope+window:6+stickbreak:value,attend_current=true,norm=false").eval()
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.1 * torch.randn_like(param))
        tokens = torch.randint(0, 61, (1, 30))
        cache = model.new_cache()
        steps = [model(tokens[:, :5], cache=cache)] + [model(tokens[:, t : t + 1], cache=cache) for t in range(5, 30)]
        assert (torch.cat(steps, 1) - model(tokens)).abs().max() < 1e-4


def test_a_model_trains_with_gradients_into_the_remainder_and_the_norm() -> None:
    model = _tiny("nope+stickbreak")
    model.loss(torch.randint(0, 61, (2, 25))).backward()
    for name in ("attn.stickbreak.head_bias", "attn.stickbreak.norm_weight", "attn.q_proj.weight"):
        grad = dict(model.blocks[0].named_parameters())[name].grad
        assert grad is not None and bool(grad.abs().sum() > 0), name


# ------------------------------------------------------------------------------------------------ refusals
@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({"backend": "sdpa"}, "the sdpa backend cannot run stick-breaking attention"),
        ({"backend": "flex"}, "the flex backend cannot run stick-breaking attention"),
        ({"mask": "full"}, "use a causal mask"),
        ({"sinks": torch.zeros(2)}, "drop the sinks piece"),
        ({"padding": torch.ones(1, 1, 20, 20, dtype=torch.bool)}, "materialised score bias or padding"),
        ({"extension": S2Attention(4)}, "does not run under 's2_attn:4'"),
    ],
)
def test_what_it_cannot_run_is_refused_in_one_line(options: dict, needle: str) -> None:
    q, k, v = _qkv(L=20)
    with pytest.raises(ConfigError, match=needle) as err:
        _sb(_piece(), q, k, v, **options)
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="remainder must be one of bias, value, none"):
        _piece(remainder="current")


def test_a_layer_it_is_undefined_in_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError, match="not 'cope''s content-dependent scores"):
        parse_plan("cope+stickbreak", 2)
    with pytest.raises(ConfigError, match="mask 'full' shows later ones"):
        parse_plan("nope+full+stickbreak", 2)
    with pytest.raises(ConfigError, match="takes no forget gate"):
        _tiny("nope+fox+stickbreak").loss(torch.randint(0, 61, (1, 12)))


def test_the_analyses_refuse_a_model_without_softmax_attention() -> None:
    with pytest.raises(ConfigError, match="layer 1 replaces the softmax"):
        next(layer_attention(_tiny("rope;nope+stickbreak"), torch.randint(0, 61, (1, 8))))


def test_the_command_line_refuses_a_plan_it_cannot_run_with_exit_2(tmp_path, capsys) -> None:
    argv = ["train", "--out", str(tmp_path / "r"), "--layer-plan", "nope+stickbreak+sinks", "--steps", "1"]
    small = ["--n-layer", "1", "--d-model", "16", "--train-len", "16", "--limit-chars", "4000", "--threads", "1"]
    assert main([*argv, *small, "--device", "cpu", "--quiet"]) == 2
    err = [line for line in capsys.readouterr().err.strip().splitlines() if "error" in line.lower()]
    assert len(err) == 1 and "drop the sinks piece" in err[0] and "Traceback" not in err[0], err
