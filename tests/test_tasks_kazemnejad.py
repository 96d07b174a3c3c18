"""Kazemnejad et al. 2023's tasks (arXiv 2305.19466) against plain-Python ports of the authors' data builders and
instance processors: every generated row's prompt and answer rebuilt from the row's instance with the authors'
templates and rule; literal rows; SCAN against its grammar and semantics (Lake and Baroni 2018, arXiv 1711.00350)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from functools import partial

import numpy as np
import pytest

from lextra.errors import ConfigError
from lextra.tasks import PAD, AlgorithmicTask, LengthRange, TaskBatch, build_task, encode, generate_rows
from lextra.tasks.kazemnejad.addition import Addition
from lextra.tasks.kazemnejad.copy import VARIANTS as COPY_VARIANTS
from lextra.tasks.kazemnejad.reverse import VARIANTS as REVERSE_VARIANTS
from lextra.tasks.kazemnejad.scan import Scan, scan_pairs
from lextra.tasks.kazemnejad.sort import VARIANTS as SORT_VARIANTS
from lextra.tasks.kazemnejad.sort import Sort
from lextra.tasks.kazemnejad.suite import KAZEMNEJAD, SYMBOLS
from lextra.tasks.registry import TRAINING_TASKS

NAMES = ("copy", "reverse", "addition", "sort", "parity", "summation", "scan")
Words = list[str]


def words(text: str) -> Words:
    """The authors' string as symbols: split at spaces, a trailing ',' or '.' split off a longer word."""
    out: Words = []
    for chunk in text.split():
        tail: Words = []
        while len(chunk) > 1 and chunk[-1] in ",.":
            tail.insert(0, chunk[-1])
            chunk = chunk[:-1]
        out += [chunk, *tail]
    return out


def decoded(task: AlgorithmicTask, batch: TaskBatch) -> list[tuple[Words, Words]]:
    rows = [batch.row(i) for i in range(len(batch))]
    return [([task.alphabet[i] for i in x], [task.alphabet[i] for i in y]) for x, y in rows]


def nts(number: int) -> str:
    """The authors' `number_to_string`: digits separated by spaces."""
    return " ".join(str(number))


def inside(row: Words) -> Words:
    """The items between '[' and ']', commas dropped (one item's digits joined)."""
    body = " ".join(row[row.index("[") + 1 : row.index("]")])
    return ["".join(item.split()) for item in body.split(",")]


# ---- the authors' rules: a row's instance -> (prompt ++ separator, answer) as they write them ---------------------
def copy_rule(variant: str, row: Words) -> tuple[str, str]:
    if variant == "repeat_double_char":
        a, b, source = row[1], row[3], row[5:-1]
        assert row[0] == "Replace" and a != b and set(source) == {a}
        return f"Replace {a} with {b} in {' '.join(source)} [SEP]", " ".join([b] * len(source))
    source = row[1:-1]
    if variant.startswith("repeat"):
        assert len(set(source)) == 1
    target = " ".join(source)
    if variant == "copy_multi_char_2x":
        target = f"{target} [NEXT] {target}"
    if variant == "repeat_single_2x_char":
        target = " ".join(source * 2)
    return f"Copy: {' '.join(source)} [SEP]", target


def reverse_rule(variant: str, row: Words) -> tuple[str, str]:
    source = row[1:-1]
    rev = " ".join(source[::-1])
    target = {"multi_char": rev, "multi_char_2x": f"{rev} [NEXT] {rev}"}.get(
        variant, f"{rev} [NEXT] {' '.join(source)}"
    )
    return f"Reverse: {' '.join(source)} [SEP]", target


def addition_rule(row: Words) -> tuple[str, str]:
    plus = row.index("+")
    a_text, b_text = "".join(row[1:plus]), "".join(row[plus + 1 : -1])
    a, b = int(a_text), int(b_text)
    assert (str(a), str(b)) == (a_text, b_text)  # no leading zeros
    return f"Compute {nts(a)} + {nts(b)} ? ", f"The answer is {nts(a + b)}."


def sort_rule(variant: str, row: Words) -> tuple[str, str]:
    items = inside(row)
    if variant == "single_token":
        order = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMN"  # the token ids the authors sort by
        assert all(len(t) == 1 and t in order for t in items)
        src, tgt = items, sorted(items, key=order.index)
    else:
        numbers = [int(t) for t in items]
        assert all(10 <= n < 10_000 for n in numbers)
        src, tgt = [nts(n) for n in numbers], [nts(n) for n in sorted(numbers)]
    return f"Sort the following list [ {', '.join(src)} ]. ", f"The sorted list is [ {', '.join(tgt)} ]."


def parity_rule(row: Words) -> tuple[str, str]:
    values = [int(v) for v in inside(row)]
    assert set(values) <= {0, 1}
    answer = {"0": "Yes", "1": "No"}[str(sum(values) % 2)]
    prompt = f"Is the number of 1's even in the sequence [ {', '.join(map(str, values))} ] ? "
    return prompt, f"The answer is {answer}."


def summation_rule(row: Words) -> tuple[str, str]:
    values = [int(v) for v in row[1:-2:2]]
    assert all(1 <= v <= 9 for v in values)
    return f"Compute: {' + '.join(map(str, values))} . [SEP]", f"The answer is {nts(sum(values) % 10)} ."


def interpret(command: str) -> list[str]:
    """SCAN's semantics (Lake and Baroni 2018), in SCAN's action names."""
    for word, swap in ((" after ", True), (" and ", False)):
        if word in command:
            first, second = command.split(word)
            return interpret(second) + interpret(first) if swap else interpret(first) + interpret(second)
    w = command.split()
    if w[-1] in ("twice", "thrice"):
        return interpret(" ".join(w[:-1])) * (2 if w[-1] == "twice" else 3)
    own = {"walk": ["I_WALK"], "look": ["I_LOOK"], "run": ["I_RUN"], "jump": ["I_JUMP"], "turn": []}[w[0]]
    if len(w) == 1:
        return own
    turn = {"left": "I_TURN_LEFT", "right": "I_TURN_RIGHT"}[w[-1]]
    if w[1] == "opposite":
        return [turn, turn, *own]
    if w[1] == "around":
        return [turn, *own] * 4
    return [turn, *own]


AUTHOR_NAMES = {"I_WALK": "Walk", "I_RUN": "Run", "I_JUMP": "Jump", "I_LOOK": "Look", "I_TURN_LEFT": "Left"}
AUTHOR_NAMES["I_TURN_RIGHT"] = "Right"


def scan_rule(row: Words) -> tuple[str, str]:
    assert row[0] == "Solve:" and row[-1] == "[SEP]"
    command = " ".join(row[1:-1])
    return f"Solve: {command} [SEP]", " ".join(AUTHOR_NAMES[a] for a in interpret(command))


RULES: dict[str, Callable[[Words], tuple[str, str]]] = {
    **{f"copy,variant={v}": partial(copy_rule, v) for v in COPY_VARIANTS},
    **{f"reverse,variant={v}": partial(reverse_rule, v) for v in REVERSE_VARIANTS},
    "addition": addition_rule,
    **{f"sort,variant={v}": partial(sort_rule, v) for v in SORT_VARIANTS},
    "parity": parity_rule,
    "summation": summation_rule,
    "scan": scan_rule,
}


def check_batch(task: AlgorithmicTask, batch: TaskBatch, count: int) -> None:
    """Shapes, symbols inside the alphabet, PAD only on the right, no EOS in the outputs."""
    assert len(batch) == count and batch.inputs.dtype == batch.outputs.dtype == np.int64
    for array in (batch.inputs, batch.outputs):
        present = array != PAD
        assert ((array >= 0) & (array < len(task.alphabet)) | ~present).all()
        assert (np.sort(~present, axis=1, kind="stable") == ~present).all()  # padding only after the symbols
        assert present[:, 0].all() and present[:, -1].any()  # no empty row, no all-PAD column
    assert batch.scored is None


# ---- the registry's view ---------------------------------------------------------------------------------------
def test_tasks_registered_with_the_papers_setup() -> None:
    expected = {
        "copy": ((4, 20), (21, 40)),
        "reverse": ((4, 20), (21, 40)),
        "addition": ((4, 8), (9, 16)),
        "sort": ((4, 8), (9, 16)),
        "parity": ((3, 8), (9, 16)),
        "summation": ((4, 8), (9, 16)),
        "scan": ((1, 25), (26, 48)),
    }
    for name in NAMES:
        cls = TRAINING_TASKS.get(f"kazemnejad.{name}")
        assert issubclass(cls, AlgorithmicTask)
        assert cls.name == f"kazemnejad.{name}" and cls.suite is KAZEMNEJAD
        assert (cls.style, cls.score, cls.mixed_lengths) == ("decoder", "exact", True)
        assert ((cls.train_lengths.low, cls.train_lengths.high), (cls.test_lengths.low, cls.test_lengths.high)) == (
            expected[name]
        )
        assert len(set(cls.alphabet)) == len(cls.alphabet)
    assert KAZEMNEJAD.name == "kazemnejad" and "2305.19466" in KAZEMNEJAD.paper
    assert len(SYMBOLS) == 100
    assert build_task("kazemnejad.copy").spec() == "kazemnejad.copy,variant=copy_multi_char"
    sort, addition, scan = (
        build_task(f"kazemnejad.{s}") for s in ("sort,variant=multi_digit", "addition,min_digits=2", "scan,solve=0")
    )
    assert isinstance(sort, Sort) and sort.variant == "multi_digit"
    assert isinstance(addition, Addition) and addition.min_digits == 2
    assert isinstance(scan, Scan) and scan.solve is False
    assert build_task("kazemnejad.summation,modulo=7").spec() == "kazemnejad.summation,modulo=7"


@pytest.mark.parametrize(
    "spec",
    [
        "kazemnejad.copy,variant=cmc",
        "kazemnejad.reverse,variant=copy",
        "kazemnejad.sort,variant=sngd",
        "kazemnejad.addition,min_digits=0",
        "kazemnejad.summation,modulo=1",
    ],
)
def test_bad_options_are_config_errors(spec: str) -> None:
    with pytest.raises(ConfigError, match=r"kazemnejad\."):
        build_task(spec)


@pytest.mark.parametrize("name", NAMES)
def test_length_below_one_is_a_config_error(name: str) -> None:
    with pytest.raises(ConfigError, match="lengths start at 1"):
        build_task(f"kazemnejad.{name}").generate(0, 3, np.random.default_rng(0))


# ---- every row against the authors' rule ---------------------------------------------------------------------
@pytest.mark.parametrize("spec", list(RULES))
def test_rows_follow_the_authors_rule(spec: str) -> None:
    task = build_task(f"kazemnejad.{spec}")
    rule = RULES[spec]
    low, high = task.train_lengths.low, task.test_lengths.high
    for length in (low, task.train_lengths.high, high) if spec != "scan" else (4, 25, 48):
        batch = task.generate(length, 200, np.random.default_rng(length))
        check_batch(task, batch, 200)
        for inputs, outputs in decoded(task, batch):
            prompt, answer = rule(inputs)
            assert (inputs, outputs) == (words(prompt), words(answer))
    top = 48 if spec == "scan" else high
    first, again = (task.generate(top, 200, np.random.default_rng(top)) for _ in range(2))
    assert np.array_equal(first.inputs, again.inputs) and np.array_equal(first.outputs, again.outputs)


def test_length_is_the_papers_size_of_an_instance() -> None:
    rng = np.random.default_rng(3)
    for variant, answer in (("copy_multi_char", 7), ("repeat_single_2x_char", 14), ("copy_multi_char_2x", 15)):
        batch = build_task(f"kazemnejad.copy,variant={variant}").generate(7, 50, rng)
        assert batch.inputs.shape == (50, 9) and batch.outputs.shape == (50, answer)
    addition = build_task("kazemnejad.addition")
    pairs: Counter[tuple[int, int]] = Counter()
    for inputs, _ in decoded(addition, addition.generate(6, 3000, rng)):
        plus = inputs.index("+")
        pairs[(plus - 1, len(inputs) - plus - 2)] += 1
    # the authors' bins with max(a, b) = 6 and both >= 4, equally likely
    assert set(pairs) == {(6, 4), (6, 5), (6, 6), (4, 6), (5, 6)}
    assert min(pairs.values()) > 3000 / 5 * 0.8
    # below min_digits both operands take the length's digits; min_digits=1 lets the other operand take 1..L
    assert {len(r) for r, _ in decoded(addition, addition.generate(2, 200, rng))} == {7}
    lenient = build_task("kazemnejad.addition,min_digits=1")
    assert {len(r) for r, _ in decoded(lenient, lenient.generate(2, 200, rng))} == {6, 7}
    for name, length, size in (("sort", 5, 5), ("parity", 5, 5), ("summation", 5, 5)):
        task = build_task(f"kazemnejad.{name}")
        for inputs, _ in decoded(task, task.generate(length, 20, rng)):
            items = inputs[1:-2:2] if name == "summation" else inside(inputs)
            assert len(items) == size


def test_summation_modulo() -> None:
    rng = np.random.default_rng(5)
    task = build_task("kazemnejad.summation,modulo=100")
    for inputs, outputs in decoded(task, task.generate(16, 200, rng)):
        values = [int(v) for v in inputs[1:-2:2]]
        assert outputs == words(f"The answer is {nts(sum(values) % 100)} .")


# ---- literal rows --------------------------------------------------------------------------------------------------
def render_rows(spec: str, length: int, count: int = 1, seed: int = 1) -> list[str]:
    task = build_task(spec)
    batch = task.generate(length, count, np.random.default_rng(seed))
    return [task.render(batch, i) for i in range(count)]


def find(spec: str, length: int, text: str, count: int = 20_000) -> str:
    """The answer of a generated row whose input reads `text` (drawn until it appears)."""
    task = build_task(spec)
    batch = task.generate(length, count, np.random.default_rng(11))
    wanted = [task.alphabet.index(w) for w in text.split()]
    if batch.inputs.shape[1] < len(wanted):
        raise AssertionError(f"{text!r} not drawn")
    padded = np.full(batch.inputs.shape[1], PAD)
    padded[: len(wanted)] = wanted
    hits = np.flatnonzero((batch.inputs == padded).all(axis=1))
    if not len(hits):
        raise AssertionError(f"{text!r} not drawn")
    return " ".join(task.alphabet[i] for i in batch.row(int(hits[0]))[1])


def test_literal_rows() -> None:
    # seeded rows (pin the generator's stream; each checked by hand against the rule)
    assert render_rows("kazemnejad.copy", 5) == ["Copy: L P ; ρ 3 [SEP] -> L P ; ρ 3"]
    assert render_rows("kazemnejad.copy,variant=copy_multi_char_2x", 3) == ["Copy: L P ; [SEP] -> L P ; [NEXT] L P ;"]
    assert render_rows("kazemnejad.copy,variant=repeat_double_char", 3) == ["Replace L with υ in L L L [SEP] -> υ υ υ"]
    assert render_rows("kazemnejad.copy,variant=repeat_single_2x_char", 2) == ["Copy: L L [SEP] -> L L L L"]
    assert render_rows("kazemnejad.reverse", 5) == ["Reverse: L P ; ρ 3 [SEP] -> 3 ρ ; P L"]
    assert render_rows("kazemnejad.reverse,variant=multi_char_rev_cop", 3) == [
        "Reverse: L P ; [SEP] -> ; P L [NEXT] L P ;"
    ]
    assert render_rows("kazemnejad.addition", 5) == ["Compute 8 7 9 0 1 + 3 2 3 8 4 ? -> The answer is 1 2 0 2 8 5 ."]
    # the authors' token order: digits, then lower case, then upper case
    assert render_rows("kazemnejad.sort", 4, seed=4) == [
        "Sort the following list [ A , L , I , p ] . -> The sorted list is [ p , A , I , L ] ."
    ]
    # numbers sorted by value (865 < 1802 < 8116), not as strings
    assert render_rows("kazemnejad.sort,variant=multi_digit", 3, seed=3) == [
        "Sort the following list [ 8 1 1 6 , 8 6 5 , 1 8 0 2 ] . -> The sorted list is [ 8 6 5 , 1 8 0 2 , 8 1 1 6 ] ."
    ]
    assert render_rows("kazemnejad.parity", 4, seed=4) == [
        "Is the number of 1's even in the sequence [ 1 , 1 , 1 , 1 ] ? -> The answer is Yes ."
    ]
    assert render_rows("kazemnejad.summation", 4) == ["Compute: 5 + 5 + 7 + 9 . [SEP] -> The answer is 6 ."]
    # hand-written inputs, drawn from small spaces
    assert find("kazemnejad.addition,min_digits=1", 2, "Compute 9 9 + 5 ?", 60_000) == "The answer is 1 0 4 ."
    assert find("kazemnejad.addition,min_digits=1", 1, "Compute 0 + 0 ?", 2_000) == "The answer is 0 ."
    assert find("kazemnejad.parity", 3, "Is the number of 1's even in the sequence [ 1 , 0 , 1 ] ?", 200) == (
        "The answer is Yes ."
    )
    assert find("kazemnejad.parity", 3, "Is the number of 1's even in the sequence [ 1 , 1 , 1 ] ?", 200) == (
        "The answer is No ."
    )
    assert find("kazemnejad.summation", 2, "Compute: 9 + 8 . [SEP]", 5_000) == "The answer is 7 ."
    assert find("kazemnejad.sort", 2, "Sort the following list [ b , 3 ] .", 20_000) == "The sorted list is [ 3 , b ] ."
    assert find("kazemnejad.copy", 1, "Copy: α [SEP]", 5_000) == "α"
    assert find("kazemnejad.scan", 4, "Solve: jump twice after walk left [SEP]") == "Left Walk Jump Jump"


# ---- SCAN ----------------------------------------------------------------------------------------------------------
#: Lake and Baroni 2018's examples, in their action names
SCAN_EXAMPLES = {
    "jump": "JUMP",
    "jump left": "LTURN JUMP",
    "jump around right": "RTURN JUMP RTURN JUMP RTURN JUMP RTURN JUMP",
    "turn left twice": "LTURN LTURN",
    "jump thrice": "JUMP JUMP JUMP",
    "jump opposite left and walk thrice": "LTURN LTURN JUMP WALK WALK WALK",
    "jump opposite left after walk around left": "LTURN WALK LTURN WALK LTURN WALK LTURN WALK LTURN LTURN JUMP",
    "jump twice after walk left": "LTURN WALK JUMP JUMP",
    "turn around right thrice and turn opposite left": " ".join(["RTURN"] * 12 + ["LTURN"] * 2),
}
PAPER_NAMES = {"WALK": "Walk", "LOOK": "Look", "RUN": "Run", "JUMP": "Jump", "LTURN": "Left", "RTURN": "Right"}


def test_scan_grammar_and_semantics() -> None:
    pairs = scan_pairs()
    assert len(pairs) == 20_910
    for command, actions in SCAN_EXAMPLES.items():
        assert pairs[command] == " ".join(PAPER_NAMES[a] for a in actions.split())
    assert all(actions == " ".join(AUTHOR_NAMES[a] for a in interpret(c)) for c, actions in pairs.items())
    lengths = Counter(len(a.split()) for a in pairs.values())
    assert max(lengths) == 48 and max(len(c.split()) for c in pairs) == 9
    # SCAN's own length split (train <= 22, test >= 24) and the authors' cut at 25
    assert sum(n for k, n in lengths.items() if k <= 22) == 16_990 and 23 not in lengths
    assert (sum(n for k, n in lengths.items() if k <= 25), sum(n for k, n in lengths.items() if k > 25)) == (
        17_774,
        3_136,
    )


def test_scan_split_and_lengths() -> None:
    task = build_task("kazemnejad.scan")
    assert isinstance(task, Scan)
    have = task.length_values(LengthRange(1, 60))
    assert have == [*range(1, 23), 24, 25, 26, 27, 28, 30, 32, 33, 36, 40, 48]
    assert task.length_values(task.train_lengths) == [*range(1, 23), 24, 25]
    assert task.length_values(task.test_lengths) == [26, 27, 28, 30, 32, 33, 36, 40, 48]
    for bad in (23, 29, 47, 49):
        with pytest.raises(ConfigError, match=f"no SCAN command has {bad} actions"):
            task.generate(bad, 2, np.random.default_rng(0))
    rng = np.random.default_rng(2)
    seen: set[str] = set()
    for length in have:
        batch = task.generate(length, 400, rng)
        check_batch(task, batch, 400)
        assert ((batch.outputs != PAD).sum(axis=1) == length).all()
        for inputs, outputs in decoded(task, batch):
            assert (inputs, outputs) == tuple(map(words, scan_rule(inputs)))
            seen.add(" ".join(inputs))
    assert len(seen) > 8_000  # drawn from the whole pool, not a few commands
    plain = build_task("kazemnejad.scan,solve=false")
    row, out = decoded(plain, plain.generate(1, 50, rng))[0]
    assert row[-1] == "[SEP]" and "Solve:" not in row and len(out) == 1


# ---- through the decoder encoding ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_mixed_length_batches_encode(name: str) -> None:
    task = build_task(f"kazemnejad.{name}")
    rng = np.random.default_rng(9)
    values = task.length_values(task.train_lengths) if isinstance(task, Scan) else task.train_lengths.values()
    lengths = rng.choice(values, size=64)
    batch = generate_rows(task, lengths, rng)
    encoded = encode(task, batch)
    eos, pad = task.special("<eos>"), task.special("<pad>")
    for i in (0, 31, 63):
        inputs, outputs = batch.row(i)
        sequence = [*inputs, *outputs, eos]
        row = encoded.inputs[i].tolist()  # the sequence without its last token, right-padded
        assert row == ([*sequence, *[pad] * encoded.width])[: encoded.width]
        targets = encoded.targets[i].tolist()
        assert [t for t in targets if t >= 0] == [*outputs, eos]
