"""Zhou et al.'s addition (`zhou.addition`) and Zoology's MQAR (`mqar`): hand-written rows, every generated row
checked against a plain-Python statement of the rule, and MQAR against a port of Zoology's generator."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lextra.errors import ConfigError
from lextra.tasks import IGNORE, PAD, TaskBatch, build_task, encode, task_rng
from lextra.tasks.encoding import draw_lengths, generate_rows, parse_lengths
from lextra.tasks.mqar import MQAR
from lextra.tasks.registry import TRAINING_TASKS
from lextra.tasks.zhou import HINT_LETTERS, ZhouAddition


def digits(number: int, width: int) -> np.ndarray:
    """`number`'s `width` digits, least significant first (the layout `ZhouAddition.write` takes)."""
    return np.array([[int(c) for c in str(number).zfill(width)[::-1]]])


def written(task: ZhouAddition, a: int, b: int, width: int, start: int = 0) -> str:
    return task.render(task.write(digits(a, width), digits(b, width), np.array([start])))


# ---------------------------------------------------------------- zhou.addition: hand-written rows
def test_figure_2_row_unpadded() -> None:
    # Zhou et al. 2024, Figure 2: 576 + 361 = 937, reversed, hints from a
    assert written(ZhouAddition(pad=False), 576, 361, 3) == "a6b7c5+a1b6c3= -> a7b3c9"


def test_default_pads_every_number_with_one_zero_digit() -> None:
    # Appendix B.1: "an additional zero padding to accommodate potential carry-induced extra digits"
    assert written(ZhouAddition(), 576, 361, 3) == "a6b7c5d0+a1b6c3d0= -> a7b3c9d0"


def test_carry_past_the_last_digit() -> None:
    assert written(ZhouAddition(pad=False), 95, 17, 2) == "a5b9+a7b1= -> a2b1c1"  # 95 + 17 = 112
    assert written(ZhouAddition(), 95, 17, 2) == "a5b9c0+a7b1c0= -> a2b1c1"
    assert written(ZhouAddition(pad=False), 5, 7, 1) == "a5+a7= -> a2b1"
    assert written(ZhouAddition(pad=False), 999, 999, 3, start=7) == "h9i9j9+h9i9j9= -> h8i9j9k1"  # 1998
    assert written(ZhouAddition(pad=False), 950, 50, 3) == "a0b5c9+a0b5c0= -> a0b0c0d1"  # a carry through a 9


def test_hints_off_and_reverse_off() -> None:
    assert written(ZhouAddition(index_hints=False, pad=False), 576, 361, 3) == "675+163= -> 739"
    assert written(ZhouAddition(index_hints=False), 576, 361, 3) == "6750+1630= -> 7390"
    assert written(ZhouAddition(index_hints=False, reverse=False, pad=False), 576, 361, 3) == "576+361= -> 937"
    # standard order: hints follow the writing order (Zhou et al. 2023: 42 + 39 = 81 as a4b2+a3b9=a8b1)
    assert written(ZhouAddition(reverse=False, pad=False), 42, 39, 2) == "a4b2+a3b9= -> a8b1"
    assert written(ZhouAddition(reverse=False), 576, 361, 3) == "a0b5c7d6+a0b3c6d1= -> a0b9c3d7"
    assert written(ZhouAddition(reverse=False, pad=False), 95, 17, 2, start=2) == "c9d5+c1d7= -> c1d1e2"


def test_rows_of_one_batch_pad_a_shorter_sum() -> None:
    task = ZhouAddition(pad=False)
    batch = task.write(
        np.vstack([digits(95, 2), digits(12, 2)]), np.vstack([digits(17, 2), digits(34, 2)]), np.zeros(2, int)
    )
    assert batch.outputs.shape == (2, 6)
    assert batch.outputs[1, 4:].tolist() == [PAD, PAD]
    assert task.render(batch, 1) == "a2b1+a4b3= -> a6b4"


def test_alphabet_and_options() -> None:
    assert len(set(HINT_LETTERS)) == len(HINT_LETTERS) == 110
    assert all(len(symbol) == 1 for symbol in HINT_LETTERS)
    task = ZhouAddition()
    assert task.alphabet[:12] == (*"0123456789", "+", "=") and len(task.alphabet) == 12 + 102
    assert ZhouAddition.alphabet == task.alphabet  # the class's alphabet is the default options'
    assert len(ZhouAddition(index_hints=False).alphabet) == 12
    assert len(ZhouAddition(hint_symbols=50).alphabet) == 62
    assert (task.index_hints, task.reverse, task.pad, task.hint_symbols) == (True, True, True, 102)
    assert (task.style, task.score, task.mixed_lengths) == ("decoder", "exact", True)
    assert (task.train_lengths.text(), task.test_lengths.text()) == ("1-40", "41-100")


# ---------------------------------------------------------------- zhou.addition: every generated row
def parse_number(symbols: list[str], hints: bool) -> tuple[str, list[int]]:
    """A written number's digits in writing order and its hints' indices."""
    if not hints:
        return "".join(symbols), []
    assert len(symbols) % 2 == 0
    return "".join(symbols[1::2]), [HINT_LETTERS.index(h) for h in symbols[0::2]]


def check_row(task: ZhouAddition, batch: TaskBatch, index: int, length: int) -> int:
    """Assert row `index` states the rule; return its first hint index (0 without hints)."""
    inputs, outputs = batch.row(index)
    text = [task.alphabet[i] for i in inputs]
    assert text[-1] == "=" and text.count("+") == 1
    plus = text.index("+")
    (a_text, a_hints), (b_text, b_hints) = (
        parse_number(text[:plus], task.index_hints),
        parse_number(text[plus + 1 : -1], task.index_hints),
    )
    s_text, s_hints = parse_number([task.alphabet[i] for i in outputs], task.index_hints)
    assert all(c.isdigit() for c in a_text + b_text + s_text)
    order = (lambda t: t[::-1]) if task.reverse else (lambda t: t)
    a, b = order(a_text), order(b_text)  # most significant first
    width = length + 1 if task.pad else length
    assert len(a) == len(b) == width
    if task.pad:
        assert a[0] == b[0] == "0"
    if length > 1:  # an N-digit number
        assert a[-length] != "0" and b[-length] != "0"
    total = str(int(a) + int(b))
    assert order(s_text) == (total.zfill(width) if task.pad else total)
    if not task.index_hints:
        return 0
    start = a_hints[0]
    assert a_hints == b_hints == list(range(start, start + width))
    assert s_hints == list(range(start, start + len(s_text)))
    assert start + length + 1 <= task.hint_symbols  # room for the longest sum's hints
    return start


@pytest.mark.parametrize(
    "options",
    [{}, {"pad": False}, {"reverse": False}, {"index_hints": False}, {"reverse": False, "pad": False}],
    ids=["default", "unpadded", "standard", "no-hints", "standard-unpadded"],
)
def test_generated_rows_follow_the_rule(options: dict[str, bool]) -> None:
    task = ZhouAddition(**options)
    rng = task_rng(0, 1)
    starts = []
    for length in (1, 2, 3, 7, 40, 100):
        batch = task.generate(length, 40, rng)
        assert (batch.inputs != PAD).all()  # both operands of a row's length: inputs of one width
        starts += [check_row(task, batch, i, length) for i in range(len(batch))]
    if task.index_hints:  # the run's start is drawn over every start that leaves room (Appendix B.1)
        assert min(starts) == 0 and max(starts) > 90


def test_hint_starts_are_uniform_over_the_room_left() -> None:
    task = ZhouAddition(hint_symbols=10)
    batch = task.generate(5, 4000, task_rng(3))
    starts = batch.inputs[:, 0] - 12
    assert sorted(set(starts.tolist())) == [0, 1, 2, 3, 4]  # 10 symbols, 6 hints needed: a-f up to e-j
    assert np.allclose(np.bincount(starts) / 4000, 0.2, atol=0.03)


def test_carries_occur_at_the_expected_rate() -> None:
    # a final carry out of N random digits: the operands' leading digits (1-9 each) sum to 10 or more in 45/81
    # cases, and to 9 (passing on the carry from below, about half the time) in 8/81: about 0.60
    batch = ZhouAddition(pad=False).generate(6, 4000, task_rng(4))
    long = (batch.outputs != PAD).sum(axis=1) == 14
    assert 0.57 < long.mean() < 0.65


def test_zhou_errors_name_the_fix() -> None:
    with pytest.raises(ConfigError, match=r"length 102 needs 103 index hints.*hint_symbols=102"):
        ZhouAddition().generate(102, 1, task_rng(0))
    assert ZhouAddition().check_length(101) == 101  # 102 hints: 101 digits per number, the run starting at a
    assert ZhouAddition(index_hints=False).check_length(500) == 500
    with pytest.raises(ConfigError, match="hint_symbols=200 must be an integer in 2-110"):
        ZhouAddition(hint_symbols=200)
    with pytest.raises(ConfigError, match="lengths start at 1"):
        ZhouAddition().generate(0, 1, task_rng(0))


# ---------------------------------------------------------------- mqar: Zoology's rule
def zoology_multiquery_ar(
    vocab_size: int, num_examples: int, input_seq_len: int, seed: int, power_a: float, num_kv_pairs: int
) -> tuple[np.ndarray, np.ndarray]:
    """HazyResearch/zoology's `multiquery_ar` (zoology/data/multiquery_ar.py), numpy only, num_passes=1 and
    random_non_queries=False (filler 0): inputs (n, L) and labels (n, L), -100 but at the queries."""
    assert input_seq_len % 2 == 0 and num_kv_pairs * 4 <= input_seq_len
    np.random.seed(seed)
    context_size = num_kv_pairs * 2
    key_vocab_size = vocab_size // 2
    key_choices = np.arange(1, key_vocab_size)
    value_choices = np.arange(key_vocab_size, vocab_size)
    keys = np.apply_along_axis(
        np.random.choice, 1, np.tile(key_choices, (num_examples, 1)), replace=False, size=num_kv_pairs
    )
    values = np.apply_along_axis(
        np.random.choice, 1, np.tile(value_choices, (num_examples, 1)), replace=False, size=num_kv_pairs
    )
    kvs = np.zeros((num_examples, context_size), dtype=np.int64)
    kvs[:, 0::2] = keys
    kvs[:, 1::2] = values
    space = (input_seq_len - context_size) // 2
    p = power_a * np.arange(1, space + 1) ** (power_a - 1)
    p = p / p.sum()
    x = np.stack([np.arange(space, dtype=int)] * num_examples)
    gaps = np.apply_along_axis(np.random.choice, axis=1, arr=x, replace=False, p=p, size=num_kv_pairs)
    queries = np.zeros((num_examples, input_seq_len - context_size + 1), dtype=np.int64)
    np.put_along_axis(queries, (gaps * 2), values=keys, axis=1)
    examples = np.concatenate([kvs, queries], axis=1)
    labels = np.full((num_examples, input_seq_len + 1), -100, dtype=np.int64)
    np.put_along_axis(labels, (gaps * 2) + context_size + 1, values=values, axis=1)
    return examples[:, :-1], labels[:, 1:]


def zoology_to_lextra(inputs: np.ndarray, labels: np.ndarray, vocab_size: int) -> tuple[list[str], list[str | None]]:
    """One Zoology row in lextra's framing, position by position: Zoology's key t is lextra's k{t}, value t is
    v{t - vocab/2}, 0 the filler; the label at each position (None where -100)."""
    half = vocab_size // 2
    name = lambda t: "_" if t == 0 else (f"k{t}" if t < half else f"v{t - half}")  # noqa: E731
    return [name(t) for t in inputs.tolist()], [None if t == -100 else name(t) for t in labels.tolist()]


def check_mqar_row(symbols: list[str], answers: list[str | None], pairs: int) -> list[int]:
    """Assert a row (inputs and the answers aligned with them) states MQAR in Zoology's layout; return its query
    slots (offsets in the query region / 2)."""
    assert len(answers) == len(symbols)
    context = 2 * pairs
    keys, values = symbols[0:context:2], symbols[1:context:2]
    assert all(k[0] == "k" for k in keys) and all(v[0] == "v" for v in values)
    assert len(set(keys)) == pairs and len(set(values)) == pairs  # distinct keys, distinct values
    value_of = dict(zip(keys, values, strict=True))
    region = symbols[context:]
    at = [i for i, s in enumerate(region) if s[0] == "k"]  # the queries: the only keys after the pairs
    assert all(i % 2 == 0 for i in at)
    assert sorted(region[i] for i in at) == sorted(keys)  # every key asked once
    assert all(s == "_" or s[0] == "v" for i, s in enumerate(region) if i not in at)
    # each query's answer sits at the query itself: the value paired with its key; no other position has one
    assert answers == [None] * context + [value_of[s] if i in at else None for i, s in enumerate(region)]
    return [i // 2 for i in at]


def mqar_rows(task: MQAR, batch: TaskBatch) -> list[tuple[list[str], list[str | None]]]:
    name = lambda i: None if i == PAD else task.alphabet[i]  # noqa: E731
    return [
        ([task.alphabet[i] for i in batch.inputs[r]], [name(i) for i in batch.outputs[r]]) for r in range(len(batch))
    ]


def test_mqar_hand_written_layout() -> None:
    task = MQAR(vocab=16, filler="zero")  # keys k0..k7, values v0..v7
    for symbols, answers in mqar_rows(task, task.generate(16, 20, task_rng(7))):
        assert len(symbols) == 16 and len(answers) == 16  # 4 pairs per 64 tokens: one pair at 16
        key, value = symbols[0], symbols[1]
        region = symbols[2:]  # 7 query slots at even offsets 0-12, filler between
        at = region.index(key)
        assert region.count(key) == 1 and at % 2 == 0 and at <= 12
        assert sorted(region) == sorted([key] + ["_"] * 13)
        assert answers == [None] * (2 + at) + [value] + [None] * (13 - at)  # the value is the query's own target
    assert task.alphabet[:3] == ("k0", "k1", "k2") and task.alphabet[8] == "v0"
    assert task.alphabet[-1] == "_" and task.vocab_size == 16 + 1 + 3


@pytest.mark.parametrize("filler", ["random", "zero"])
@pytest.mark.parametrize("shift", ["pairs", "gaps"])
def test_generated_mqar_rows_follow_the_rule(shift: str, filler: str) -> None:
    task = MQAR(shift=shift, filler=filler)
    rng = task_rng(1, 2)
    for length in (16, 64, 65, 128, 255, 1024):
        batch = task.generate(length, 40 if length < 1024 else 8, rng)
        pairs = task.pairs_at(length)
        assert batch.inputs.shape == batch.outputs.shape == (len(batch), length)
        assert ((batch.outputs != PAD).sum(axis=1) == pairs).all()
        for symbols, answers in mqar_rows(task, batch):
            check_mqar_row(symbols, answers, pairs)


def test_pairs_and_gaps_grow_as_the_shift_says() -> None:
    grow, hold = MQAR(shift="pairs"), MQAR(shift="gaps")
    assert [grow.pairs_at(n) for n in (64, 128, 256, 512, 1024)] == [4, 8, 16, 32, 64]  # Zoology's 4/8/16 at 64..256
    assert [hold.pairs_at(n) for n in (64, 128, 256, 1024)] == [4, 4, 4, 4]
    rng = task_rng(5)

    def mean_slot(task: MQAR, length: int) -> float:
        rows = mqar_rows(task, task.generate(length, 400, rng))
        return float(np.mean([check_mqar_row(s, a, task.pairs_at(length)) for s, a in rows]))

    held = [mean_slot(hold, n) for n in (64, 256, 1024)]
    assert held[0] < held[1] < held[2] and held[2] > 3 * held[0]  # fixed pairs: the gaps stretch
    assert [len(hold.generate(1024, 3, rng).row(r)[1]) for r in range(3)] == [4, 4, 4]
    assert [len(grow.generate(1024, 3, rng).row(r)[1]) for r in range(3)] == [64, 64, 64]


def test_zoology_rows_read_in_lextra_framing() -> None:
    inputs, labels = zoology_multiquery_ar(vocab_size=64, num_examples=50, input_seq_len=64, seed=0, power_a=0.01,
                                           num_kv_pairs=4)  # fmt: skip
    for row in range(50):
        symbols, answers = zoology_to_lextra(inputs[row], labels[row], 64)
        check_mqar_row(symbols, answers, 4)


def test_query_slots_follow_zoologys_power_law() -> None:
    # Zoology draws P slots of (L - 2P) / 2 without replacement, p(i) ~ i^(a - 1); lextra's slots (Gumbel top-k)
    # must be distributed alike: compare the histograms of both generators' slots, and against uniform slots
    length, pairs, n = 64, 4, 2000
    inputs, labels = zoology_multiquery_ar(64, n, length, seed=1, power_a=0.01, num_kv_pairs=pairs)
    theirs = np.concatenate([check_mqar_row(*zoology_to_lextra(inputs[r], labels[r], 64), pairs) for r in range(n)])
    task = MQAR(filler="zero")
    ours = np.concatenate(
        [check_mqar_row(s, a, pairs) for s, a in mqar_rows(task, task.generate(length, n, task_rng(9)))]
    )
    uniform = MQAR(filler="zero", power_a=1.0)
    flat = np.concatenate(
        [check_mqar_row(s, a, pairs) for s, a in mqar_rows(uniform, uniform.generate(length, n, task_rng(9)))]
    )
    slots = (length - 2 * pairs) // 2
    hist = lambda x: np.bincount(x, minlength=slots) / len(x)  # noqa: E731
    assert 0.5 * np.abs(hist(ours) - hist(theirs)).sum() < 0.06  # sampling noise: about 0.03
    assert 0.5 * np.abs(hist(flat) - hist(theirs)).sum() > 0.25  # about 0.35
    assert 0.5 * np.abs(hist(flat) - 1 / slots).sum() < 0.06


def test_keys_values_and_query_order_are_uniform() -> None:
    task = MQAR(vocab=16, filler="zero")
    batch = task.generate(64, 4000, task_rng(11))
    keys = batch.inputs[:, 0:8:2]
    assert np.allclose(np.bincount(keys.ravel(), minlength=8) / keys.size, 1 / 8, atol=0.02)
    first_query = batch.inputs[np.arange(4000), 8 + np.argmax(batch.inputs[:, 8:] < 8, axis=1)]
    asked = (keys == first_query[:, None]).argmax(axis=1)  # which pair the first query asks
    assert np.allclose(np.bincount(asked, minlength=4) / 4000, 0.25, atol=0.03)
    answers = batch.outputs[batch.outputs != PAD]
    assert len(answers) == 4000 * 4 and (answers >= 8).all() and (answers < 16).all()


def test_mqar_errors_name_the_fix() -> None:
    with pytest.raises(ConfigError, match=r"length 16 is too short, its 8 pairs take 4 tokens each.*from 32"):
        MQAR(shift="gaps", pairs=8).generate(16, 1, task_rng(0))
    with pytest.raises(ConfigError, match=r"length 15 is too short.*no pair; use lengths from 16"):
        MQAR().check_length(15)
    with pytest.raises(ConfigError, match=r"length 1024 needs 64 distinct keys.*vocab=64 holds 32 keys; raise vocab"):
        MQAR(vocab=64).generate(1024, 1, task_rng(0))
    with pytest.raises(ConfigError, match="vocab=6 holds fewer than 4 keys"):
        MQAR(vocab=6)
    with pytest.raises(ConfigError, match="pairs <= 16 or shift='gaps'"):
        MQAR(pairs=17)
    with pytest.raises(ConfigError, match="shift='longer' is not one of pairs, gaps"):
        MQAR(shift="longer")
    with pytest.raises(ConfigError, match="power_a=0"):
        MQAR(power_a=0)
    assert MQAR(shift="gaps", pairs=8).min_length == 32 and MQAR(pairs=2).min_length == 32


# ---------------------------------------------------------------- both: the registry and the encoding
def test_registered_and_built_from_specs() -> None:
    assert {"zhou.addition", "mqar"} <= set(TRAINING_TASKS.names())
    zhou = build_task("zhou.addition,pad=false,hint_symbols=60")
    assert isinstance(zhou, ZhouAddition) and (zhou.pad, zhou.hint_symbols) == (False, 60)
    assert build_task(zhou.spec()).vocabulary == zhou.vocabulary
    mqar = build_task("mqar,pairs=8,shift=gaps,vocab=64")
    assert isinstance(mqar, MQAR) and (mqar.pairs, mqar.shift, mqar.vocab) == (8, "gaps", 64)
    assert build_task(mqar.spec()).vocabulary == mqar.vocabulary and mqar.vocab_size == 64 + 1 + 3


def test_decoder_encoding_scores_the_answers() -> None:
    task = ZhouAddition(pad=False)
    batch = task.write(
        np.vstack([digits(95, 2), digits(12, 2)]), np.vstack([digits(17, 2), digits(34, 2)]), np.zeros(2, int)
    )
    encoded = encode(task, batch)
    eos = task.special("<eos>")
    targets = encoded.targets[1].tolist()
    assert [t for t in targets if t != -100] == [*batch.row(1)[1], eos]  # the answer, then <eos>
    mqar = MQAR()
    batch = mqar.generate(64, 3, task_rng(0))
    encoded = encode(mqar, batch)
    assert encoded.width == 64 and int(encoded.scored.sum()) == 3 * 4  # inline: the 4 values at their queries
    queries = torch.from_numpy((batch.inputs < mqar.keys) & (np.arange(64) >= 8))
    assert torch.equal(encoded.scored, queries) and torch.equal(encoded.inputs, torch.from_numpy(batch.inputs))
    assert torch.equal(encoded.targets[queries], torch.from_numpy(batch.outputs)[queries])
    assert (encoded.targets[~queries] == IGNORE).all()


def test_inline_rows_of_mixed_lengths_pad_and_ignore() -> None:
    task = MQAR(vocab=64)
    lengths = np.array([64, 128, 64])
    batch = generate_rows(task, lengths, task_rng(3))
    encoded = encode(task, batch)
    assert encoded.width == 128 and encoded.scored.sum(dim=1).tolist() == [4, 8, 4]
    assert (encoded.inputs[[0, 2], 64:] == task.special("<pad>")).all()  # the short rows' padding
    assert (encoded.targets[[0, 2], 64:] == IGNORE).all()
    assert set(draw_lengths(task, parse_lengths("64-128"), 200, task_rng(4)).tolist()) > {64, 128}  # row by row
