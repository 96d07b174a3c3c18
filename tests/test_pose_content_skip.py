"""PoSE's content skip (`pose:TARGET,span=S`): the authors' `train_preprocess_function_pose` (dwzhu-pku/PoSE,
src/train_pose.py) reads chunk 2 from further into the document; lextra's sampler picks the same tokens and
positions from the same draws, `sampled_batch` gathers them, and what cannot use it is refused in one line."""

from __future__ import annotations

import random as stdlib_random

import pytest
import torch

from lextra.data.positions import _randint, build_sampler, sampled_batch
from lextra.errors import ConfigError
from lextra.model import GPTConfig
from lextra.train import TrainConfig


def train_preprocess_function_pose(examples, tokenizer, scaled_max_position_embeddings, model_max_position_embeddings,
                                   random=stdlib_random):  # fmt: skip
    """The authors' function, transcribed (`random` passed in so that both sides take the same draws)."""
    inputs = examples["text"]
    raw_model_inputs = tokenizer(inputs, padding=False, truncation=True, max_length=model_max_position_embeddings * 5)
    input_ids = []
    position_ids = []
    for ids in raw_model_inputs["input_ids"]:
        len_chunk = min(len(ids), model_max_position_embeddings)
        len_input = len(ids)
        lt1 = 0
        rt1 = random.randint(1, (len_chunk + 1) // 2)
        rt2 = random.randint(lt1 + len_chunk, len_input)
        lt2 = rt2 - (len_chunk - (rt1 - lt1))
        chunked_ids = ids[lt1:rt1] + ids[lt2:rt2]
        input_ids.append(chunked_ids)
        pos_ids = torch.arange(len(chunked_ids), dtype=torch.long)
        len_pos_ids = len(pos_ids)
        lt = 0
        rt = random.randint(lt, scaled_max_position_embeddings - len_pos_ids)
        pos_ids[: rt1 - lt1] += lt
        pos_ids[rt1 - lt1 :] += rt
        position_ids.append(pos_ids)
    return {"input_ids": input_ids, "position_ids": position_ids, "labels": input_ids}


class TorchRandom:
    """`random.randint` answered from a torch generator, as the sampler draws."""

    def __init__(self, seed: int) -> None:
        self.generator = torch.Generator().manual_seed(seed)

    def randint(self, low: int, high: int) -> int:
        return _randint(self.generator, low, high)


def truncating_tokenizer(inputs, padding, truncation, max_length):
    """The documents are token ids already; the tokenizer only truncates, as the authors' call does."""
    return {"input_ids": [list(ids[:max_length]) for ids in inputs]}


def test_the_sampler_picks_the_authors_tokens_and_positions() -> None:
    L, target, span = 32, 512, 5
    sampler = build_sampler(f"pose:{target},span={span}", L)
    document = list(range(1000, 1000 + 7 * L))  # longer than the 5 x L the authors read
    skips = []
    for seed in range(200):
        authors = train_preprocess_function_pose({"text": [document]}, truncating_tokenizer, target, L,
                                                 random=TorchRandom(seed))  # fmt: skip
        positions, index = sampler.draw_window(torch.Generator().manual_seed(seed))
        assert index is not None and index.shape == (L + 1,)
        window = torch.tensor(document[: span * L + 1])  # what sampled_batch reads for a window at the document
        tokens = window[index]
        assert tokens[:L].tolist() == authors["input_ids"][0]
        assert torch.equal(positions, authors["position_ids"][0])
        assert int(tokens[L]) == int(tokens[L - 1]) + 1  # the last token's target: the one after chunk 2
        skips.append(int(index[L - 1]) + 1 - L)  # chunk 2 ends this far past a contiguous window
    assert min(skips) == 0 and max(skips) > 3 * L  # from no skip to almost the whole span


def test_span_one_keeps_the_window_and_the_draws_of_before() -> None:
    L = 32
    plain, spanned = build_sampler("pose:512", L), build_sampler("pose:512,span=1", L)
    assert plain.spec() == spanned.spec() == "pose,target=512,chunks=2" and plain.read_length == L
    for step in range(5):
        positions, index = plain.window(7, step)
        assert index is None and torch.equal(positions, plain.positions(7, step))


class Windows:
    """A source whose window at row r of step s is s * 10^6 + r * 10^3 + 0..length."""

    def batch(self, step: int, batch_size: int, length: int, seed: int) -> torch.Tensor:
        rows = torch.arange(batch_size)[:, None] * 1000 + step * 1_000_000
        return rows + torch.arange(length + 1)


def test_sampled_batch_reads_the_span_and_gathers_the_chunks() -> None:
    L = 16
    sampler = build_sampler("pose:256,span=4", L)
    batch, positions = sampled_batch(sampler, Windows(), 3, 2, seed=5)
    want_positions, index = sampler.window(5, 3)
    assert batch.shape == (2, L + 1) and positions is not None and torch.equal(positions, want_positions)
    assert index is not None and torch.equal(batch, Windows().batch(3, 2, 4 * L, 5)[:, index])
    plain, none = sampled_batch(build_sampler("contiguous", L), Windows(), 3, 2, seed=5)
    assert none is None and torch.equal(plain, Windows().batch(3, 2, L, 5))  # the old loop's batch


def test_what_cannot_skip_content_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError, match=r"span=5 .* follows their 2-chunk code; use chunks=2 or span=1"):
        build_sampler("pose,target=512,chunks=3,span=5", 32)
    with pytest.raises(ConfigError, match="pose: span must be"):
        build_sampler("pose,span=0", 32)
    with pytest.raises(ConfigError, match=r"read the step.s batch with lextra\.data\.positions\.sampled_batch"):
        build_sampler("pose:512,span=5", 32).positions(0, 0)
    model = GPTConfig(n_layer=1, n_head=2, d_model=16, train_len=32, layer_plan="rope")
    with pytest.raises(ConfigError, match=r"skips content .* lextra train keeps its windows contiguous: use span=1"):
        TrainConfig(model=model, positions="pose:512,span=5").validate()
