"""Analyses on constructed cases with known answers: resolution, receptive field, dispersion, and the commands."""

from __future__ import annotations

import json
import math

import pytest
import torch
from conftest import make_scheme

import lextra.cli.analyze  # noqa: F401  (registers `lextra analyze`)
from lextra.analysis.capture import layer_attention
from lextra.analysis.dispersion import dispersion, normal_quantiles, row_entropy, row_max
from lextra.analysis.receptive_field import (
    effective_receptive_field,
    gradient_shares,
    logits_from_embeddings,
    receptive_field,
)
from lextra.analysis.resolution import empirical_scores, resolution, scheme_resolution, theoretical_scores
from lextra.attention import AttentionContext, attention_logits, build_mask, reference_attention
from lextra.cli import main
from lextra.model import GPT, GPTConfig, save_model
from lextra.pipelines.checkpoints import TextSource, load_checkpoints
from lextra.positions.bias import alibi_slopes
from lextra.positions.rotary import rope_inv_freq


def tiny_model(scheme: str = "rope", layers: int = 2, mask_free: bool = False, **kwargs) -> GPT:
    """A small random GPT (d_model 16, 2 heads, L_tr 8) with non-trivial scheme parameters."""
    config = GPTConfig(n_layer=layers, n_head=2, d_model=16, train_len=8, layer_plan=scheme, **kwargs)
    model = GPT(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.startswith("schemes.") and param.numel() > 1:
                param.normal_(0.0, 0.5)
            elif "proj" in name:
                param.normal_(0.0, 0.4)
    return model


# --- attention resolution ---------------------------------------------------------------------------------------


def test_resolution_of_a_strictly_decreasing_score_matches_the_hand_computation() -> None:
    e = math.e
    by_hand = (e**2 * (e**2 - e) + e * (e - 1) + 1 * (1 - 0)) / (e**2 + e + 1) ** 2
    assert resolution(torch.tensor([2.0, 1.0, 0.0])) == pytest.approx(by_hand, rel=1e-12)
    # s[i] = -c i: numerator sum_{i<N} r^2i - sum_{i<N-1} r^(2i+1), denominator ((1 - r^N) / (1 - r))^2
    c, N = 0.3, 50
    r = math.exp(-c)
    numerator = (1 - r ** (2 * N)) / (1 - r**2) - r * (1 - r ** (2 * (N - 1))) / (1 - r**2)
    analytic = numerator / ((1 - r**N) / (1 - r)) ** 2
    assert resolution(-c * torch.arange(N, dtype=torch.float64)) == pytest.approx(analytic, rel=1e-12)
    assert resolution(-c * torch.arange(N, dtype=torch.float64) + 7.5) == pytest.approx(
        analytic, rel=1e-12
    )  # shift invariant
    assert resolution(torch.zeros(N)) == pytest.approx(1 / N**2)  # flat: only the edge term e^{s_{N-1}} remains
    assert 0 < resolution(torch.randn(200) * 3) <= 1


def test_theoretical_rope_is_the_cosine_sum_and_xpos_adds_the_decay() -> None:
    N, D = 300, 16
    n = torch.arange(N, dtype=torch.float64)
    theta = rope_inv_freq(D).double()
    cosines = torch.cos(n[:, None] * theta[None, :])
    rope = theoretical_scores(make_scheme("rope", head_dim=D), N)
    expected = 2 / math.sqrt(D) * cosines.sum(-1)
    torch.testing.assert_close(rope.double(), expected.expand(4, N), atol=2e-5, rtol=0)
    interleaved = theoretical_scores(make_scheme("rope", head_dim=D, layout="interleaved"), N)
    torch.testing.assert_close(interleaved, rope, atol=2e-5, rtol=0)
    zeta = (torch.arange(0, D, 2, dtype=torch.float64) + 0.4 * D) / (1.4 * D)
    xpos = theoretical_scores(make_scheme("xpos", head_dim=D, scale_base=64.0), N)
    expected = 2 / math.sqrt(D) * (cosines * zeta[None, :] ** (n[:, None] / 64.0)).sum(-1)
    torch.testing.assert_close(xpos.double(), expected.expand(4, N), atol=2e-5, rtol=0)
    coca = theoretical_scores(make_scheme("coca", head_dim=D), N)
    torch.testing.assert_close(coca.double(), (cosines.sum(-1) / math.sqrt(D)).expand(4, N), atol=2e-5, rtol=0)


def test_theoretical_alibi_is_linear_and_biases_are_their_tables() -> None:
    N = 64
    alibi = theoretical_scores(make_scheme("alibi"), N)
    torch.testing.assert_close(alibi, -alibi_slopes(4)[:, None] * torch.arange(N)[None, :].float())
    mean = alibi.mean(0).double()
    assert torch.allclose(mean.diff(2), torch.zeros(N - 2, dtype=torch.float64), atol=1e-5)
    assert scheme_resolution(make_scheme("alibi"), N).r == pytest.approx(resolution(mean), rel=1e-6)
    t5 = make_scheme("t5")
    torch.testing.assert_close(theoretical_scores(t5, N), t5.distance_bias(torch.arange(N)).detach())
    assert theoretical_scores(make_scheme("nope"), N).abs().max() == 0


@pytest.mark.parametrize("name", ["fire", "sinusoidal"])
def test_theoretical_scores_of_position_dependent_schemes_average_over_queries(name: str) -> None:
    N = 40
    scheme = make_scheme(name, head_dim=8, train_len=16, **({"threshold": 10.0} if name == "fire" else {}))
    positions = torch.arange(N)
    with torch.no_grad():
        if name == "fire":
            dense = scheme.bias(positions, positions)
        else:
            e = scheme.embed(torch.zeros(1, N, 32), positions)[0].view(N, 4, 8).transpose(0, 1)
            dense = e @ e.transpose(-1, -2) / math.sqrt(8)
    brute = torch.stack([torch.stack([dense[:, m, m - n] for m in range(n, N)]).mean(0) for n in range(N)], dim=1)
    torch.testing.assert_close(theoretical_scores(scheme, N, block_size=7), brute, atol=1e-5, rtol=1e-5)


def test_theory_under_bca_is_defined_on_visible_distances_only() -> None:
    scheme = make_scheme("xpos", train_len=16)
    s = theoretical_scores(scheme, 48, "bca")
    assert torch.isfinite(s[:, :16]).all() and torch.isnan(s[:, 16:]).all()
    bca = scheme_resolution(scheme, 48, "bca")
    assert bca.visible == 16
    assert bca.r == pytest.approx(scheme_resolution(scheme, 16).r, rel=1e-6)


def _brute_force_scores(model: GPT, tokens: torch.Tensor, mask_spec: str) -> tuple[torch.Tensor, list]:
    """s_hat (layers, H, N) by explicit loops over dense logits of the attention inputs seen by forward hooks."""
    mask = build_mask(mask_spec, model.config.train_len)
    seen: list[tuple[torch.Tensor, torch.Tensor]] = []
    hooks = [
        block.attn.register_forward_hook(lambda module, args, out: seen.append((args[0], out)))
        for block in model.blocks
    ]
    with torch.no_grad():
        model(tokens, mask=mask, backend="reference")
    for hook in hooks:
        hook.remove()
    B, N = tokens.shape
    positions = torch.arange(N)
    scores, weights = [], []
    for layer, (x, out) in enumerate(seen):
        attn, scheme = model.blocks[layer].attn, model.scheme_for(layer)
        q = attn.q_proj(x).view(B, N, attn.n_head, -1).transpose(1, 2)
        k = attn.k_proj(x).view(B, N, attn.n_head, -1).transpose(1, 2)
        v = attn.v_proj(x).view(B, N, attn.n_head, -1).transpose(1, 2)
        tau = None if attn.inference.temperature is None else attn.inference.temperature[:, None]
        ctx = AttentionContext.build(q, k, scheme=scheme, mask=mask, q_pos=positions, k_pos=positions, temperature=tau)
        result, w = reference_attention(q, k, v, ctx, return_weights=True)
        torch.testing.assert_close(attn.o_proj(result.transpose(1, 2).reshape(B, N, -1)), out)  # hooks saw the model
        logits = attention_logits(q, k, scheme, positions, positions, tau=tau)
        allowed = mask.allowed(positions, positions)
        s = torch.full((attn.n_head, N), float("nan"), dtype=torch.float64)
        for n in range(N):
            pairs = [logits[:, :, i, i - n] for i in range(n, N) if allowed[i, i - n]]
            if pairs:
                s[:, n] = torch.stack(pairs).double().mean((0, 1))
        scores.append(s)
        weights.append(w)
    return torch.stack(scores), weights


@pytest.mark.parametrize(
    ("scheme", "mask"), [("rope", "causal"), ("alibi", "bca"), ("fire", "causal"), ("xpos", "bca")]
)
def test_empirical_scores_match_a_brute_force_over_dense_logits(scheme: str, mask: str) -> None:
    model = tiny_model(scheme)
    model.blocks[1].attn.inference.temperature = torch.tensor([0.7, 1.3])
    tokens = torch.randint(0, 256, (3, 21))
    expected, _ = _brute_force_scores(model, tokens, mask)
    got = empirical_scores(model, tokens, mask, batch_size=2, block_size=5)
    torch.testing.assert_close(got.s_per_head, expected, equal_nan=True, atol=1e-5, rtol=1e-5)
    visible = 8 if mask == "bca" else 21
    assert got.visible == visible
    assert got.r == pytest.approx(resolution(expected[..., :visible].mean((0, 1))), rel=1e-5)


def test_captured_weights_are_the_models_attention_weights() -> None:
    model = tiny_model("kerple_log")
    model.blocks[0].attn.inference.temperature = torch.tensor([0.5, 2.0])
    tokens = torch.randint(0, 256, (2, 19))
    _, dense = _brute_force_scores(model, tokens, "bca")
    seen: list[tuple[torch.Tensor, torch.Tensor]] = []
    hooks = [b.attn.register_forward_hook(lambda m, args, out: seen.append((args[0], out))) for b in model.blocks]
    with torch.no_grad():
        model(tokens, mask="bca")
    for hook in hooks:
        hook.remove()
    for view in layer_attention(model, tokens, "bca", block_size=4):
        full = torch.zeros(2, 2, 19, 19)
        for block in view.blocks():
            rows = dense[view.layer][:, :, block.q_pos][..., block.k_pos]
            torch.testing.assert_close(block.weights(), rows, atol=1e-6, rtol=1e-5)
            full[:, :, block.q_pos[:, None], block.k_pos[None, :]] = block.weights()
        torch.testing.assert_close(full, dense[view.layer], atol=1e-6, rtol=1e-5)  # keys outside get weight 0
        attn, (x, out) = model.blocks[view.layer].attn, seen[view.layer]
        v = attn.v_proj(x).view(2, 19, 2, -1).transpose(1, 2)
        torch.testing.assert_close(
            attn.o_proj((full @ v).transpose(1, 2).reshape(2, 19, -1)), out, atol=1e-5, rtol=1e-4
        )


# --- empirical receptive field ----------------------------------------------------------------------------------


def test_erf_of_a_constructed_curve() -> None:
    assert effective_receptive_field(torch.tensor([0.5, 0.9, 0.99, 1.0])) == 3
    assert effective_receptive_field(torch.tensor([0.995, 1.0])) == 1
    assert effective_receptive_field(torch.tensor([0.2, 0.5, 1.0]), threshold=0.5) == 2


def test_manual_forward_from_embeddings_is_the_models_forward() -> None:
    model = tiny_model("sinusoidal")
    tokens = torch.randint(0, 256, (2, 12))
    mask = build_mask("window:5")
    with torch.no_grad():
        torch.testing.assert_close(logits_from_embeddings(model, model.embed(tokens), mask), model(tokens, mask=mask))


@pytest.mark.parametrize("scheme", ["rope", "alibi"])
def test_a_window_of_w_tokens_bounds_the_erf(scheme: str) -> None:
    w, L = 6, 40
    segments = torch.randint(0, 256, (4, L + 1))
    one_layer = tiny_model(scheme, layers=1)
    shares = gradient_shares(one_layer, segments, f"window:{w}", batch_size=3)
    assert shares.shape == (4, L)
    torch.testing.assert_close(shares.sum(-1), torch.ones(4, dtype=torch.float64))
    assert shares[:, w:].abs().max() == 0  # nothing beyond the window reaches the last token
    assert receptive_field(one_layer, segments, f"window:{w}").erf <= w
    two_layers = tiny_model(scheme, layers=2)
    reach = 2 * (w - 1) + 1  # each layer looks w - 1 tokens further back
    stacked = gradient_shares(two_layers, segments, f"window:{w}")
    assert stacked[:, reach:].abs().max() == 0 and stacked[:, w:reach].sum() > 0
    assert receptive_field(two_layers, segments, f"window:{w}").erf <= reach
    assert gradient_shares(one_layer, segments, "causal")[:, w:].sum() > 0  # the bound comes from the window
    assert all(p.requires_grad for p in one_layer.parameters())  # parameters are restored after freezing


# --- attention dispersion ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 7, 300])
def test_uniform_attention_over_n_keys_has_entropy_ln_n_and_max_one_over_n(n: int) -> None:
    weights = torch.full((3, n), 1.0 / n)
    torch.testing.assert_close(row_entropy(weights), torch.full((3,), math.log(n), dtype=torch.float64))
    torch.testing.assert_close(row_max(weights), torch.full((3,), 1.0 / n))
    one_hot = torch.zeros(n)
    one_hot[0] = 1.0
    assert float(row_entropy(one_hot)) == 0.0 and float(row_max(one_hot)) == 1.0


def test_a_model_without_queries_attends_uniformly_to_its_causal_keys() -> None:
    model = tiny_model("nope", layers=3)
    for block in model.blocks:
        torch.nn.init.zeros_(block.attn.q_proj.weight)
    L = 23
    stats = dispersion(model, torch.randint(0, 256, (3, L)), batch_size=2, block_size=5)
    keys = torch.arange(1, L + 1, dtype=torch.float64)
    assert stats.uniform.entropy == pytest.approx(float(keys.log().mean()), rel=1e-12)
    assert stats.entropy == pytest.approx([float(keys.log().mean())] * 3, rel=1e-6)  # fp32 weights
    assert stats.max_prob == pytest.approx([float((1 / keys).mean())] * 3, rel=1e-6)
    assert stats.first_layer.sorted_logits == pytest.approx([0.0] * L)


def test_first_layer_logits_are_the_last_rows_sorted() -> None:
    model = tiny_model("alibi")
    tokens = torch.randint(0, 256, (2, 13))
    stats = dispersion(model, tokens, block_size=4)
    view = next(layer_attention(model, tokens, block_size=13))
    last = next(view.blocks()).logits[:, :, -1]
    expected = torch.sort(last, dim=-1, descending=True).values.mean((0, 1))
    assert stats.first_layer.sorted_logits == pytest.approx(expected.tolist(), rel=1e-5, abs=1e-6)
    qq = stats.first_layer.qq
    assert qq.count == 2 * 2 * 13 and qq.sample == sorted(qq.sample)
    assert normal_quantiles(3)[1] == 0 and normal_quantiles(2)[0] == pytest.approx(-0.6744897501960817)


# --- commands ---------------------------------------------------------------------------------------------------


@pytest.fixture
def corpus(tmp_path):
    """A small text corpus (every split gets documents of more than 64 bytes)."""
    folder = tmp_path / "corpus"
    folder.mkdir()
    generator = torch.Generator().manual_seed(1)
    for i in range(12):
        words = ["def", "return", "self", "x", "(", ")", ":", "\n", "for", "in", "range", " "]
        picks = torch.randint(0, len(words), (60,), generator=generator)
        (folder / f"doc{i}.py").write_text(" ".join(words[int(j)] for j in picks))
    return folder


def _save(model: GPT, folder, corpus) -> str:
    save_model(model, folder, extra={"train": {"corpus": str(corpus)}, "tokenizer": {"kind": "bytes"}})
    return str(folder)


def test_resolution_command_writes_empirical_and_theoretical_rows(tmp_path, corpus, capsys) -> None:
    ckpt = _save(tiny_model("alibi"), tmp_path / "alibi", corpus)
    out = tmp_path / "res"
    argv = ["analyze", "resolution", ckpt, "--scheme", "alibi", "--train-len", "8", "--lengths", "8,16"]
    assert main([*argv, "--mask", "causal", "--mask", "bca", "--documents", "2", "--out", str(out)]) == 0
    data = json.loads((out / "resolution.json").read_text())
    assert set(data["rows"]) == {"alibi", "alibi+bca", "alibi [theory]", "alibi+bca [theory]"}
    slopes = alibi_slopes(4).double().mean()
    for n in (8, 16):
        assert data["table"]["alibi [theory]"][str(n)] == pytest.approx(resolution(-slopes * torch.arange(n)), rel=1e-5)
    assert data["table"]["alibi+bca [theory]"]["16"] == pytest.approx(data["table"]["alibi [theory]"]["8"], rel=1e-6)
    assert data["rows"]["alibi+bca"]["by_length"]["16"]["visible"] == 8
    texts = TextSource().texts(load_checkpoints([ckpt])[0], 16, 2)
    direct = empirical_scores(load_checkpoints([ckpt])[0].model, texts, "causal")
    assert data["table"]["alibi"]["16"] == pytest.approx(direct.r, rel=1e-6)
    assert len(data["rows"]["alibi"]["by_length"]["16"]["R_per_layer"]) == 2
    assert (out / "resolution.png").stat().st_size > 0 and "| alibi+bca |" in capsys.readouterr().out
    assert "alibi" in (out / "resolution.csv").read_text().splitlines()[1]


def test_receptive_field_command_reports_the_window_bound(tmp_path, corpus) -> None:
    ckpt = _save(tiny_model("rope", layers=1), tmp_path / "rope", corpus)
    out = tmp_path / "erf"
    argv = ["analyze", "receptive-field", ckpt, "--lengths", "16,32", "--mask", "causal", "--mask", "window:4"]
    assert main([*argv, "--documents", "3", "--out", str(out)]) == 0
    data = json.loads((out / "receptive_field.json").read_text())
    for n in ("16", "32"):
        windowed = data["rows"]["rope+window:4"]["by_length"][n]
        assert windowed["erf"] <= 4 and windowed["curve"][3] == pytest.approx(1.0)
        assert len(data["rows"]["rope"]["by_length"][n]["curve"]) == int(n)
    assert data["table"]["rope"]["L_tr"] == 8 and (out / "receptive_field.png").exists()


def test_dispersion_command_matches_uniform_rows_for_a_model_without_queries(tmp_path, corpus, capsys) -> None:
    model = tiny_model("nope")
    for block in model.blocks:
        torch.nn.init.zeros_(block.attn.q_proj.weight)
    ckpt = _save(model, tmp_path / "nope", corpus)
    out = tmp_path / "disp"
    assert main(["analyze", "dispersion", ckpt, "--lengths", "8,32", "--documents", "2", "--out", str(out)]) == 0
    data = json.loads((out / "dispersion.json").read_text())
    for n in (8, 32):
        result = data["rows"]["nope"]["by_length"][str(n)]
        uniform = float(torch.arange(1, n + 1, dtype=torch.float64).log().mean())
        assert result["entropy"] == pytest.approx([uniform] * 2, rel=1e-6)
        assert result["uniform"]["entropy"] == pytest.approx(uniform, rel=1e-12)
    assert (out / "dispersion.png").exists() and (out / "first_layer_logits.png").exists()
    assert "| nope L1 |" in (out / "dispersion.md").read_text()
    capsys.readouterr()
    argv = [
        "analyze",
        "dispersion",
        ckpt,
        "--lengths",
        "8",
        "--documents",
        "1",
        "--out",
        str(tmp_path / "q"),
        "--quiet",
    ]
    assert main(argv) == 0  # --quiet: where the results are, not the table
    printed = capsys.readouterr().out.strip().splitlines()
    assert len(printed) == 1 and printed[0].startswith("results: ")


@pytest.mark.parametrize(
    "argv",
    [
        ["analyze", "resolution", "--out", "x"],
        ["analyze", "dispersion", "no/such/checkpoint", "--out", "x"],
        ["analyze", "resolution", "--scheme", "nosuch", "--out", "x"],
        ["analyze", "resolution", "--scheme", "rope", "--lengths", "a,b", "--out", "x"],
        ["analyze", "receptive-field", "no/such", "--mask", "bogus", "--out", "x"],
    ],
)
def test_user_mistakes_end_in_one_line_errors(argv: list[str], capsys) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("lextra analyze: error:") and "\n" not in err


@pytest.mark.parametrize("name", ["resolution", "receptive-field", "dispersion"])
def test_every_analysis_has_help(name: str, capsys) -> None:
    assert main(["analyze", name, "--help"]) == 0
    assert "--out" in capsys.readouterr().out


@torch.no_grad()
def test_logit_blocks_of_chosen_rows_equal_those_rows_of_all_blocks() -> None:
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=2, n_head=2, d_model=32, train_len=16, layer_plan="alibi+logn:qwen")).eval()
    tokens = torch.randint(0, 256, (2, 70))
    for mask in ("causal", "bca", "window:9"):
        for view in layer_attention(model, tokens, mask, block_size=16):
            full = torch.full((2, 2, 70, 70), float("nan"))
            for block in view.blocks():
                sub = block.logits.masked_fill(~block.allowed, float("-inf"))
                full[:, :, block.q_pos[:, None], block.k_pos[None, :]] = sub
            rows = torch.tensor([69, 3, 40, 17, 3, 0])
            got = {}
            for block in view.blocks(rows):
                sub = block.logits.masked_fill(~block.allowed, float("-inf"))
                for i, q in enumerate(block.q_pos.tolist()):
                    got[q] = (block.k_pos, sub[:, :, i])
            assert sorted(got) == [0, 3, 17, 40, 69]
            for q, (k_pos, row) in got.items():
                want = full[:, :, q, k_pos]
                reached = ~want.isnan()  # keys outside every full block are masked: -inf here
                assert torch.allclose(row[reached], want[reached], atol=1e-6)
                assert bool((row[~reached] == float("-inf")).all())
