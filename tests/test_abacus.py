"""Abacus embeddings (McLeish et al. 2024): digit places as the authors' code counts them, the training offset, a
cached decoding step continuing a number, and training from the command line with the digits found in the task or
tokenizer; a task without digits refused in one line."""

from __future__ import annotations

import json

import pytest
import torch

from lextra.cli import main
from lextra.errors import ConfigError
from lextra.model import GPT, GPTConfig, load_model
from lextra.positions.abacus import AbacusEmbedding, check_abacus, digit_places

DIGITS = torch.arange(10)


def authors_places(mask: torch.Tensor) -> torch.Tensor:
    """mcleish7/arithmetic `abacus.py` `Abacus.helper`, line by line: places of a boolean digit mask (B, L)."""
    shifted = torch.cat([torch.zeros((mask.shape[0], 1), dtype=mask.dtype), mask[:, :-1]], dim=1)
    starts = (shifted != mask) & mask
    segment_ids = torch.cumsum(starts, dim=1)
    index = torch.arange(mask.size(1)).repeat(mask.size(0), 1)
    reset_index = torch.zeros_like(mask).long().scatter_add(1, segment_ids, index * starts.long())
    return (index - reset_index.gather(1, segment_ids) + 1) * mask


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_digit_places_are_the_authors_and_a_split_continues_them(seed: int) -> None:
    tokens = torch.randint(0, 13, (6, 57), generator=torch.Generator().manual_seed(seed))
    places, run = digit_places(tokens, DIGITS)
    assert torch.equal(places, authors_places(torch.isin(tokens, DIGITS)))
    assert torch.equal(run, places[:, -1])
    for cut in (1, 20, 56):  # a cached step continues the run its rows had reached
        head, carried = digit_places(tokens[:, :cut], DIGITS)
        tail, last = digit_places(tokens[:, cut:], DIGITS, carried)
        assert torch.equal(torch.cat([head, tail], dim=1), places) and torch.equal(last, run)


def test_hand_made_places() -> None:
    # "12+345=" then "7": digits count 1, 2 | 1, 2, 3 | 1; '+' (10) and '=' (11) take place 0
    tokens = torch.tensor([[1, 2, 10, 3, 4, 5, 11, 7]])
    assert digit_places(tokens, DIGITS)[0].tolist() == [[1, 2, 0, 1, 2, 3, 0, 1]]


def test_training_shifts_every_digit_by_one_offset_and_inference_does_not() -> None:
    torch.manual_seed(0)
    abacus = AbacusEmbedding(8, list(range(10)), max_k=50)
    tokens = torch.tensor([[1, 2, 10, 3, 4, 5, 11], [7, 10, 8, 9, 11, 11, 11]])
    table = abacus.table.weight
    places = digit_places(tokens, DIGITS)[0]
    assert torch.equal(abacus.eval()(tokens)[0], table[places])
    out = abacus.train()(tokens)[0]
    shifts = {int(k) for k in range(51) if torch.equal(out, table[torch.where(places > 0, places + k, places)])}
    assert len(shifts) == 1  # one k for the whole batch, digits only (non-digits keep row 0)
    draws = set()
    for _ in range(40):
        first = abacus(tokens)[0][0, 0]  # the first digit of a number: place 1 + k
        draws.add(next(k for k in range(51) if torch.equal(first, table[1 + k])))
    assert len(draws) > 10 and max(draws) <= 50


def test_cached_decoding_continues_a_number_across_steps() -> None:
    config = GPTConfig(vocab_size=14, n_layer=2, n_head=2, d_model=32, train_len=32, abacus={"max_k": 5})
    config.abacus = {"max_k": 5, "digits": list(range(10))}
    model = GPT(config).eval()
    tokens = torch.tensor([[3, 4, 5, 10, 6, 7, 8, 9, 1, 11, 2, 3, 4, 5, 12, 0]])
    with torch.no_grad():
        full = model(tokens)
        cache = model.new_cache()
        steps = [model(tokens[:, :6], cache=cache)] + [model(tokens[:, i : i + 1], cache=cache) for i in range(6, 16)]
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-5)


def test_config_checks_name_the_problem() -> None:
    assert check_abacus({"max_k": 3}, 20) == {"max_k": 3, "positions": 1024}
    for bad, match in [
        ({"max_k": -1}, "max_k must be an integer >= 0"),
        ({"max_k": 99, "positions": 50}, "positions .50. must exceed max_k"),
        ({"max_k": 3, "digits": [0, 1, 2]}, "10 distinct token ids"),
        ({"max_k": 3, "digits": list(range(15, 25))}, "below vocab_size 20"),
        ({"shift": 3}, "has no option shift"),
    ]:
        with pytest.raises(ConfigError, match=match):
            check_abacus(bad, 20)
    with pytest.raises(ConfigError, match="no digits yet"):
        GPT(GPTConfig(vocab_size=20, n_layer=1, n_head=1, d_model=8, abacus={"max_k": 3}))


TINY = ["--n-layer", "1", "--d-model", "32", "--n-head", "2", "--batch-size", "2", "--steps", "2", "--threads", "1"]


def test_training_finds_the_digits_in_the_task_and_the_tokenizer(tmp_path, capsys) -> None:
    task = ["--task", "zhou.addition,index_hints=false", "--task-lengths", "1-3"]
    assert main(["train", "--out", str(tmp_path / "task"), *task, "--abacus", "20", *TINY, "--quiet"]) == 0
    model = load_model(tmp_path / "task" / "model")
    assert model.config.abacus == {"max_k": 20, "positions": 1024, "digits": list(range(10))}
    assert model.abacus is not None and model.abacus.table.weight.shape == (1024, 32)
    saved = json.loads((tmp_path / "task" / "model" / "config.json").read_text())
    assert saved["model"]["abacus"]["digits"] == list(range(10))
    text = ["--corpus", "python-code", "--limit-chars", "60000", "--train-len", "32"]
    assert main(["train", "--out", str(tmp_path / "text"), *text, "--abacus", "3", *TINY, "--quiet"]) == 0
    assert load_model(tmp_path / "text" / "model").config.abacus["digits"] == [ord(d) for d in "0123456789"]
    capsys.readouterr()
    code = main(["train", "--out", str(tmp_path / "bits"), "--task", "ruoss.parity_check", "--abacus", "5", *TINY])
    err = capsys.readouterr().err
    assert code == 2 and "abacus: task ruoss.parity_check has no digit token for" in err
    assert not (tmp_path / "bits").exists()
