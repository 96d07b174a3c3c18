"""`lextra hf finetune` on every decoder family: LoRA on the family's attention projections, `--trainable
embed,head,norm` finding its embeddings, head and norms, S2-Attn where the attention allows it (refused in one line
where it does not), and a saved folder that plain transformers loads with the merged model's logits."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import transformers
from safetensors.torch import load_file
from test_hf_families import FAMILIES, WINDOW, tiny

from lextra.errors import ConfigError
from lextra.hf import s2attn
from lextra.hf.families import DECODER_FAMILIES
from lextra.hf.finetune import FinetuneConfig, build_model, default_targets, finetune
from lextra.hf.s2attn import s2_attention

#: the bytes tokenizer's ids
VOCAB = 260
#: families whose attention S2-Attn cannot replace exactly, and the reason each refusal names
S2_REFUSED = {"gemma2": "softcaps", "gpt_oss": "sinks", "llama4_text": "chunks"}


def run_config(base: Path, corpus: str, **changes: object) -> FinetuneConfig:
    options = dict(model=str(base), train_len=16, corpus=corpus, tokenizer="bytes", steps=2, warmup=1, lr=1e-2,
                   trainable="embed,head,norm", lora="r=4,alpha=8", s2_group=WINDOW, checkpoint_every=2,
                   log_every=1)  # fmt: skip
    return FinetuneConfig(**(options | changes))  # type: ignore[arg-type]


def expected_parts(model: torch.nn.Module) -> set[str]:
    """The parameters `embed,head,norm` must train, read from module types: embeddings, the head, every norm (a
    head tied to the embeddings is one parameter, named as the embeddings)."""
    names: set[str] = set()
    for prefix, module in model.named_modules():
        kind = type(module).__name__
        if isinstance(module, torch.nn.Embedding) or "Norm" in kind or prefix == "lm_head":
            names.update(f"{prefix}.{name}" for name, _ in module.named_parameters(recurse=False))
    return names & {name for name, _ in model.named_parameters()}


def test_every_decoder_family_is_fine_tuned_here() -> None:
    assert set(FAMILIES) == set(DECODER_FAMILIES) and set(S2_REFUSED) <= set(FAMILIES)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_each_family_fine_tunes_with_lora_and_saves_a_folder_with_the_merged_logits(
    family: str, tiny_hf_corpus: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two LoRA steps (S2-Attn in groups of the sliding window where allowed): finite losses, LoRA's B matrices
    moved from zero on exactly the family's attention projections, the named parts trained, and the saved folder's
    logits equal to the merged model's to 1e-5."""
    grouped: list[int] = []  # the layers that ran S2-Attn while training

    def spy(module: Any, *args: Any, **kwargs: Any) -> Any:
        grouped.extend([module.layer_idx] if module.training else [])
        return s2_attention(module, *args, **kwargs)

    monkeypatch.setattr(s2attn, "s2_attention", spy)
    base = tmp_path / family
    reference = tiny(family, vocab_size=VOCAB)
    reference.save_pretrained(base)
    if family in S2_REFUSED:
        with pytest.raises(ConfigError, match=rf"^--s2-attn {WINDOW}: {family} layer 0 .*drop --s2-attn$"):
            finetune(run_config(base, tiny_hf_corpus), tmp_path / "refused", progress=False)
    s2 = None if family in S2_REFUSED else WINDOW
    final, merged = finetune(run_config(base, tiny_hf_corpus, s2_group=s2), tmp_path / "run", progress=False)
    losses = [float(line.split('"loss": ')[1].split(",")[0]) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert len(losses) == 2 and all(torch.isfinite(torch.tensor(losses)))
    assert set(grouped) == (set() if s2 is None else set(range(reference.config.num_hidden_layers)))
    trained = load_file(str(tmp_path / "run" / "checkpoints" / "step_0000002" / "trainable.safetensors"))
    lora_b = {name: value for name, value in trained.items() if "lora_B" in name}
    targets = {name.split(".lora_B")[0].rsplit(".", 1)[-1] for name in lora_b}
    assert targets == set(default_targets(reference.config.model_type))
    assert len(lora_b) == len(targets) * reference.config.num_hidden_layers
    assert all(value.abs().max() > 0 for value in lora_b.values())  # B starts at zero: LoRA trained
    parts = {name.removeprefix("base_model.model.") for name in trained if "lora_" not in name}
    assert parts == expected_parts(reference)
    loaded = transformers.AutoModelForCausalLM.from_pretrained(str(final)).eval()
    tokens = torch.randint(3, VOCAB, (2, 24), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert (loaded(tokens).logits - merged(tokens).logits).abs().max() < 1e-5
        assert (loaded(tokens).logits - reference(tokens).logits).abs().max() > 1e-3  # the training is in the folder


def test_s2_attn_is_refused_on_a_window_narrower_than_its_group(tiny_hf_corpus: str, tmp_path: Path) -> None:
    tiny("mistral", vocab_size=VOCAB).save_pretrained(tmp_path / "mistral")
    settings = run_config(tmp_path / "mistral", tiny_hf_corpus, train_len=32, s2_group=2 * WINDOW)
    message = (
        f"--s2-attn 16: mistral layer 0 slides a window of {WINDOW} tokens, narrower than the group of 16, so "
        "S2-Attn's grouped causal attention would not be its attention; use a group no wider than the window"
    )
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        build_model(settings, torch.device("cpu"))


def test_s2_attn_takes_a_sliding_layers_own_mask_and_refuses_a_padded_one() -> None:
    """A sliding layer hands the attention function its band mask: S2-Attn (groups within the window) computes
    what it computes without a mask; a mask that also hides a padded key is refused."""
    layer = SimpleNamespace(training=True, lextra_s2_group=4, lextra_s2_window=WINDOW)
    q, k, v = torch.randn(3, 1, 4, 16, 8, generator=torch.Generator().manual_seed(0)).unbind(0)
    i = torch.arange(16)
    band = (i[:, None] >= i[None, :]) & (i[:, None] - i[None, :] < WINDOW)
    want, _ = s2_attention(layer, q, k, v, None)
    got, _ = s2_attention(layer, q, k, v, band[None, None])
    assert torch.equal(got, want)
    padded = band.clone()
    padded[:, 0] = False
    with pytest.raises(ConfigError, match="S2-Attn trains on whole unpadded windows"):
        s2_attention(layer, q, k, v, padded[None, None])


def test_a_rope_scaling_on_gemma3_applies_to_its_global_layers_and_saves_in_both_forms(
    tiny_hf_corpus: str, tmp_path: Path
) -> None:
    """Per-layer-type RoPE (Gemma 3): the scaling trains and saves on the full-attention layers' entry, the
    sliding layers keep theirs; config.json's 4.x keys are the global layers' (and `rope_local_base_freq`)."""
    tiny("gemma3_text", vocab_size=VOCAB).save_pretrained(tmp_path / "gemma3")
    settings = run_config(tmp_path / "gemma3", tiny_hf_corpus, train_len=32, rope_scaling="linear:2", s2_group=None)
    final, merged = finetune(settings, tmp_path / "run", progress=False)
    saved = json.loads((final / "config.json").read_text())
    assert saved["rope_parameters"]["full_attention"] == {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e6}
    assert saved["rope_parameters"]["sliding_attention"] == {"rope_type": "default", "rope_theta": 10000.0}
    assert saved["rope_scaling"] == {"rope_type": "linear", "type": "linear", "factor": 2.0}
    assert (saved["rope_theta"], saved["rope_local_base_freq"], saved["max_position_embeddings"]) == (1e6, 1e4, 32)
    loaded = transformers.AutoModelForCausalLM.from_pretrained(str(final)).eval()
    rotary = loaded.model.rotary_emb
    plain = 1.0 / 1e6 ** (torch.arange(0, 16, 2) / 16)
    assert torch.allclose(merged.model.rotary_emb.full_attention_inv_freq, plain / 2)  # what trained: linear x2
    assert torch.allclose(rotary.full_attention_inv_freq, plain / 2)
    assert torch.allclose(rotary.sliding_attention_inv_freq, 1.0 / 1e4 ** (torch.arange(0, 16, 2) / 16))
    tokens = torch.randint(3, VOCAB, (1, 32), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert (loaded(tokens).logits - merged(tokens).logits).abs().max() < 1e-5
