"""Ruoss et al. 2023's tasks (`ruoss.*`) against plain-Python ports of the authors' rules (their
google-deepmind/neural_networks_chomsky_hierarchy tasks, as randomized_positional_encodings configures them):
hand-written literal cases pin each port, then ~200 seeded rows at each of several lengths must agree with it;
plus shapes, alphabets, score masks, options and a few distribution quirks of the authors' samplers."""

from __future__ import annotations

import itertools
import math
import random
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from lextra.errors import ConfigError
from lextra.tasks.base import AlgorithmicTask
from lextra.tasks.registry import TRAINING_TASKS

#: a port: a row's input symbols -> the output symbols the authors' code writes, and the scored positions
#: (None: all, their default `accuracy_mask`)
Port = Callable[[AlgorithmicTask, list[int]], tuple[list[int], list[bool] | None]]


def task(name: str, **options: object) -> Any:
    """A task with its options (typed Any: tests read their own attributes, e.g. `modulus`)."""
    return TRAINING_TASKS.get(f"ruoss.{name}")(**options)


def ids(t: AlgorithmicTask, text: str) -> list[int]:
    """Symbols written as text: one character each, or space-separated where the alphabet has longer names."""
    words = list(text) if all(len(s) == 1 for s in t.alphabet) else text.split()
    return [t.alphabet.index(w) for w in words]


# ---- ports of the authors' rules (plain Python, on our symbol indices) ----------------------------------------------


def port_parity_check(t: AlgorithmicTask, s: list[int]) -> tuple[list[int], None]:
    return [sum(s) % 2], None


def port_even_pairs(t: AlgorithmicTask, s: list[int]) -> tuple[list[int], None]:
    return [sum(a != b for a, b in itertools.pairwise(s)) % 2], None


def port_cycle_navigation(t: AlgorithmicTask, s: list[int]) -> tuple[list[int], None]:
    assert all(a in (0, 1, 2) for a in s)
    return [3 + sum(a - 1 for a in s) % 5], None  # their action a moves a - 1; state p is our symbol 3 + p


def port_modular_arithmetic(t: Any, s: list[int]) -> tuple[list[int], None]:
    m = t.modulus
    plus, minus, times = m, m + 1, m + 2
    assert len(s) % 2 == 1 and all(d < m for d in s[::2]) and all(op in (plus, minus, times) for op in s[1::2])
    # `_replace_subtractions`: each - becomes + and negates the digit after it
    e = list(s)
    for i in range(1, len(e), 2):
        if e[i] == minus:
            e[i], e[i + 1] = plus, -e[i + 1]
    # `_perform_multiplications`: the products of the runs between +, then their sum mod m
    terms = [e[0]]
    for i in range(1, len(e), 2):
        if e[i] == plus:
            terms.append(e[i + 1])
        else:
            terms[-1] *= e[i + 1]
    return [sum(terms) % m], None


def port_stack_manipulation(t: AlgorithmicTask, s: list[int]) -> tuple[list[int], list[bool]]:
    end = t.alphabet.index("$")
    if len(s) == 1:
        assert s[0] in (0, 1)
        return [s[0], end], [True, True]
    k = next(i for i, v in enumerate(s) if v >= 2)  # the stack's bits, then the actions
    assert 1 <= k <= len(s) - 1 and all(v in (2, 3, 4) for v in s[k:])
    stack = list(s[:k])
    for action in s[k:]:
        if action == 2:
            if stack:
                stack.pop()
        else:
            stack.append(action - 3)
    result = [*stack[::-1], end]
    result += [0] * (len(s) + 1 - len(result))
    return result, [j <= len(stack) for j in range(len(s) + 1)]


def parse_brackets(tokens: list[int], m: int, sym: dict[str, int]) -> int:
    """The value mod m of an expression of the authors' grammar (d, -d, (d), (-d), (T op T)); AssertionError if
    the tokens are not one."""

    def term(i: int) -> tuple[int, int]:
        first = tokens[i]
        if first < m:
            return first, i + 1
        if first == sym["-"]:
            assert tokens[i + 1] < m
            return -tokens[i + 1] % m, i + 2
        assert first == sym["("]
        if tokens[i + 1] < m and tokens[i + 2] == sym[")"]:
            return tokens[i + 1], i + 3
        if tokens[i + 1] == sym["-"] and tokens[i + 2] < m and tokens[i + 3] == sym[")"]:
            return -tokens[i + 2] % m, i + 4
        a, j = term(i + 1)
        op = tokens[j]
        b, k = term(j + 1)
        assert tokens[k] == sym[")"]
        if op == sym["+"]:
            return (a + b) % m, k + 1
        if op == sym["-"]:
            return (a - b) % m, k + 1
        assert op == sym.get("*")
        return (a * b) % m, k + 1

    value, end = term(0)
    assert end == len(tokens)
    return value


def symbols_of(t: Any) -> dict[str, int]:
    return {s: i for i, s in enumerate(t.alphabet) if i >= t.modulus}


def port_modular_arithmetic_brackets(t: Any, s: list[int]) -> tuple[list[int], None]:
    return [parse_brackets(s, t.modulus, symbols_of(t))], None


def port_solve_equation(t: Any, s: list[int]) -> tuple[list[int], None]:
    m, sym = t.modulus, symbols_of(t)
    if len(s) < 3:
        assert s == [0] * len(s)
        return [0], None
    assert s[-2] == sym["="] and s[-1] < m and s[:-2].count(sym["x"]) == 1
    at = s.index(sym["x"])
    # mult=False: x appears once, with coefficient +-1, so exactly one digit solves the equation
    solutions = [v for v in range(m) if parse_brackets([*s[:at], v, *s[at + 1 : -2]], m, sym) == s[-1]]
    assert len(solutions) == 1
    return solutions, None


def port_reverse_string(t: AlgorithmicTask, s: list[int]) -> tuple[list[int], None]:
    return s[::-1], None


def port_duplicate_string(t: Any, s: list[int]) -> tuple[list[int], None]:
    return s * t.duplication, None


def port_missing_duplicate(t: AlgorithmicTask, s: list[int]) -> tuple[list[int], None]:
    if len(s) == 1:
        assert s == [1]
        return [1], None
    half = len(s) // 2
    assert s[2 * half :] == [3] * (len(s) % 2) and s[: 2 * half].count(2) == 1
    hidden = s.index(2)
    other = hidden + half if hidden < half else hidden - half
    assert [a for i, a in enumerate(s[:half]) if i != hidden % half] == [
        b for i, b in enumerate(s[half : 2 * half]) if i != hidden % half
    ]
    return [s[other]], None


def port_odds_first(t: AlgorithmicTask, s: list[int]) -> tuple[list[int], None]:
    return s[1::2] + s[::2], None


def port_bucket_sort(t: AlgorithmicTask, s: list[int]) -> tuple[list[int], None]:
    return sorted(s), None


def little_endian(number: int, width: int = 0) -> list[int]:
    """The authors' `numbers_to_variable_length_binary` for one number."""
    return [int(c) for c in f"{number:b}".zfill(width)[::-1]]


def value_of(bits: list[int]) -> int:
    return sum(b << i for i, b in enumerate(bits))


def operands(s: list[int]) -> tuple[int, int]:
    """The two numbers of `n 2 m` (little-endian), checked as the authors draw them."""
    assert s.count(2) == 1
    split = s.index(2)
    assert 1 <= split <= len(s) - 2
    n, m = value_of(s[:split]), value_of(s[split + 1 :])
    assert n >= 1 and m >= 1
    return n, m


def port_binary_addition(t: AlgorithmicTask, s: list[int]) -> tuple[list[int], list[bool]]:
    end = t.alphabet.index("$")
    if len(s) <= 2:
        number = value_of(s)
        assert number <= 2 ** len(s) - 2
        result = little_endian(number)
    else:
        result = little_endian(sum(operands(s)))
    out = [*result, end] + [0] * (len(s) - len(result))
    return out, [j <= len(result) for j in range(len(out))]


def port_binary_multiplication(t: AlgorithmicTask, s: list[int]) -> tuple[list[int], list[bool]]:
    end = t.alphabet.index("$")
    if len(s) <= 2:
        assert value_of(s) <= 2 ** len(s) - 2
        result = [0] * (len(s) - 1)
    else:
        n, m = operands(s)
        result = little_endian(n * m)
    out = [*result, end] + [0] * (len(s) - 1 - len(result))
    return out, [j <= len(result) for j in range(len(out))]


def port_compute_sqrt(t: AlgorithmicTask, s: list[int]) -> tuple[list[int], None]:
    number = int("".join(map(str, s)), 2)
    assert number >= 1
    return [int(c) for c in f"{math.isqrt(number):b}".zfill(math.ceil(len(s) / 2))], None


PORTS: dict[str, Port] = {
    "parity_check": port_parity_check,
    "even_pairs": port_even_pairs,
    "cycle_navigation": port_cycle_navigation,
    "modular_arithmetic": port_modular_arithmetic,
    "stack_manipulation": port_stack_manipulation,
    "modular_arithmetic_brackets": port_modular_arithmetic_brackets,
    "solve_equation": port_solve_equation,
    "reverse_string": port_reverse_string,
    "duplicate_string": port_duplicate_string,
    "missing_duplicate": port_missing_duplicate,
    "odds_first": port_odds_first,
    "binary_addition": port_binary_addition,
    "bucket_sort": port_bucket_sort,
    "binary_multiplication": port_binary_multiplication,
    "compute_sqrt": port_compute_sqrt,
}

#: the authors' `output_length` per task (1 where they keep the default)
OUTPUT_LENGTH: dict[str, Callable[[int], int]] = {
    **{name: lambda L: 1 for name in PORTS},
    "stack_manipulation": lambda L: L + 1,
    "reverse_string": lambda L: L,
    "duplicate_string": lambda L: 2 * L,
    "odds_first": lambda L: L,
    "binary_addition": lambda L: L + 1,
    "bucket_sort": lambda L: L,
    "binary_multiplication": lambda L: L,
    "compute_sqrt": lambda L: math.ceil(L / 2),
}

#: hand-written (input, output) per task, in the task's symbols ("$" is the terminator of the authors' output 2)
LITERALS: dict[str, list[tuple[str, str]]] = {
    "parity_check": [("1010100", "1"), ("01111", "0"), ("0", "0")],
    "even_pairs": [("001110", "0"), ("0101001", "1"), ("1", "0"), ("10", "1")],
    # the authors' docstring moves 1 -1 0 -1 -1 -> -2 = state 3; their indices 2, 0, 1 are our R, L, S
    "cycle_navigation": [("RLSLL", "3"), ("RRRL", "2"), ("L", "4")],
    "modular_arithmetic": [("1+2*3", "2"), ("1-1-1", "4"), ("0*1+4*3-2", "0"), ("4-3*4", "2"), ("3", "3")],
    "stack_manipulation": [
        ("0 1 1 0 PUSH1 POP POP", "1 1 0 $ 0 0 0 0"),
        ("1 1 0 POP POP POP", "$ 0 0 0 0 0 0"),
        ("1 POP PUSH0 PUSH1", "1 0 $ 0 0"),
        ("1", "1 $"),
    ],
    "modular_arithmetic_brackets": [("((1+2)*-3)", "1"), ("(-4)", "1"), ("(3--4)", "2"), ("2", "2")],
    "solve_equation": [("((x-3)+-1)=4", "3"), ("-x=2", "3"), ("(4+(x))=0", "1"), ("00", "0")],
    "reverse_string": [("011010", "010110")],
    "duplicate_string": [("101", "101101"), ("0", "00")],
    # the authors' docstring 01100210 -> 1 and 1011213 -> 0 (their 2 is `?`, their 3 is `#`)
    "missing_duplicate": [("01100?10", "1"), ("1011?1#", "0"), ("?1", "1"), ("1", "1")],
    # the code, not the paper: 0-indexed odd positions (1-indexed even) first
    "odds_first": [("00110101", "01110100"), ("110", "110")],
    # 5 + 3 = 8: 101 + 11 -> 0001, terminator, padded to L + 1 = 7
    "binary_addition": [("101+11", "0001$00"), ("001+01101", "01011$0000"), ("01", "01$"), ("0", "0$")],
    "bucket_sort": [("10204112", "00111224")],
    # 5 * 3 = 15 -> 1111; 4 * 22 = 88 -> 0001101 (the authors' docstring), padded to L
    "binary_multiplication": [("101*11", "1111$0"), ("001*01101", "0001101$0"), ("10", "0$"), ("0", "$")],
    # 37 -> 6 = 110 (the authors' docstring writes 101); 7 -> 2 = 10 in ceil(3/2) = 2 bits
    "compute_sqrt": [("100101", "110"), ("111", "10"), ("1", "1"), ("0001", "01")],
}

#: hand-written score masks of the tasks with a terminator (the authors' `accuracy_mask`)
LITERAL_SCORED = {
    ("stack_manipulation", "0 1 1 0 PUSH1 POP POP"): [True] * 4 + [False] * 4,
    ("binary_addition", "101+11"): [True] * 5 + [False] * 2,
    ("binary_multiplication", "101*11"): [True] * 5 + [False],
}


def test_every_task_is_registered_as_an_encoder_per_token_task() -> None:
    registered = {n.removeprefix("ruoss.") for n in TRAINING_TASKS.names() if n.startswith("ruoss.")}
    assert set(PORTS) <= registered
    for name in PORTS:
        t = task(name)
        assert (t.style, t.score, t.suite.name) == ("encoder", "per_token", "ruoss")
        assert (t.train_lengths.text(), t.test_lengths.text()) == ("1-40", "41-100")
        assert len(set(t.vocabulary)) == len(t.vocabulary) == t.vocab_size


@pytest.mark.parametrize("name", sorted(LITERALS))
def test_the_port_writes_the_hand_written_answers(name: str) -> None:
    t = task(name)
    for text, expected in LITERALS[name]:
        out, scored = PORTS[name](t, ids(t, text))
        assert out == ids(t, expected), (text, expected)
        if (name, text) in LITERAL_SCORED:
            assert scored == LITERAL_SCORED[name, text]


@pytest.mark.parametrize("name", sorted(PORTS))
def test_generated_rows_follow_the_authors_rule(name: str) -> None:
    t = task(name)
    for length in (1, 2, 3, 12, 41):
        batch = t.generate(length, 200, np.random.default_rng([7, length]))
        width = length - 1 if name == "modular_arithmetic" and length % 2 == 0 else length
        assert batch.inputs.shape == (200, width) and batch.outputs.shape == (200, OUTPUT_LENGTH[name](length))
        for array in (batch.inputs, batch.outputs):
            assert np.issubdtype(array.dtype, np.integer) and array.min() >= 0 and array.max() < len(t.alphabet)
        for i in range(200):
            inputs, outputs = batch.row(i)
            expected, scored = PORTS[name](t, inputs)
            assert outputs == expected, (length, t.render(batch, i))
            if scored is None:
                assert batch.scored is None
            else:
                assert batch.scored is not None and batch.scored[i].tolist() == scored


@pytest.mark.parametrize("name", sorted(PORTS))
def test_generation_is_seeded_by_rng_alone(name: str) -> None:
    t = task(name)
    np.random.seed(3)
    random.seed(3)
    first, second = (t.generate(20, 16, np.random.default_rng(5)) for _ in range(2))
    after = (np.random.random(), random.random())  # numpy's and Python's global generators are left alone
    np.random.seed(3)
    random.seed(3)
    assert after == (np.random.random(), random.random())
    assert np.array_equal(first.inputs, second.inputs) and np.array_equal(first.outputs, second.outputs)
    assert not np.array_equal(first.inputs, t.generate(20, 16, np.random.default_rng(6)).inputs)
    empty = t.generate(9, 0, np.random.default_rng(0))
    assert empty.inputs.shape[0] == empty.outputs.shape[0] == 0
    with pytest.raises(ConfigError, match="lengths start at 1"):
        t.generate(0, 4, np.random.default_rng(0))


def test_options_set_the_alphabet_and_the_rule() -> None:
    m7 = task("modular_arithmetic", modulus=7)
    assert m7.alphabet == ("0", "1", "2", "3", "4", "5", "6", "+", "-", "*", "_")
    assert m7.spec() == "ruoss.modular_arithmetic,modulus=7" and task("modular_arithmetic").alphabet[5] == "+"
    assert port_modular_arithmetic(m7, ids(m7, "6*6+5"))[0] == [6]  # 41 mod 7
    assert m7.vocab_size == 11 + 3
    for name, options in (
        ("modular_arithmetic", {"modulus": 7}),
        ("modular_arithmetic_brackets", {"modulus": 3, "mult": False}),
        ("solve_equation", {"modulus": 7}),
        ("duplicate_string", {"symbols": 3, "duplication": 3}),
        ("odds_first", {"symbols": 4}),
        ("bucket_sort", {"symbols": 2}),
    ):
        t = task(name, **options)
        batch = t.generate(15, 100, np.random.default_rng(1))
        assert batch.inputs.max() < len(t.alphabet) and batch.outputs.max() < len(t.alphabet)
        for i in range(100):
            inputs, outputs = batch.row(i)
            assert outputs == PORTS[name](t, inputs)[0]
    no_mult = task("modular_arithmetic_brackets", modulus=3, mult=False).generate(30, 100, np.random.default_rng(2))
    assert not (no_mult.inputs == 3 + 2).any()  # `*`
    tripled = task("duplicate_string", symbols=3, duplication=3).generate(4, 2, np.random.default_rng(0))
    assert tripled.outputs.shape == (2, 12)
    for name, bad in (
        ("modular_arithmetic", {"modulus": 1}),
        ("solve_equation", {"modulus": True}),
        ("bucket_sort", {"symbols": 0}),
    ):
        with pytest.raises(ConfigError, match="must be an int >="):
            task(name, **bad)


def test_the_authors_sampling_quirks() -> None:
    rng = np.random.default_rng(11)
    # solve_equation: x is the first digit at or after a uniform position of E, cyclically; E = (a op b) at L = 7
    # holds digits at 1 and 3, so x sits at 1 for positions 0, 1, 4 (3/5), not half the time
    equations = task("solve_equation").generate(7, 4000, rng).inputs
    assert ((equations[:, 1] == 9) ^ (equations[:, 3] == 9)).all()  # `x` is 5 + 4
    assert abs((equations[:, 1] == 9).mean() - 0.6) < 0.04
    # binary_addition: the `+` lands uniformly on 1..L-2
    plus = np.argmax(task("binary_addition").generate(6, 4000, rng).inputs == 2, axis=1)
    assert set(Counter(plus.tolist())) == {1, 2, 3, 4} and max(abs(np.bincount(plus)[1:] / 4000 - 0.25)) < 0.04
    # stack_manipulation: the initial stack holds 1..L-1 bits, uniformly
    stacks = np.argmax(task("stack_manipulation").generate(5, 4000, rng).inputs >= 2, axis=1)
    assert max(abs(np.bincount(stacks, minlength=5)[1:] / 4000 - 0.25)) < 0.04
    # modular_arithmetic_brackets: the paper's runs draw `*` too (mult=True); left parts of L = 6 are 1 or 2 long
    brackets = task("modular_arithmetic_brackets").generate(6, 4000, rng).inputs
    assert abs((brackets == 5).mean() * 6 - 1 / 3) < 0.04 and abs((brackets == 7).mean() * 6 - 1 / 3) < 0.04
    assert abs((brackets[:, 1] == 6).mean() - 0.5) < 0.04  # `(-d op d)` (left 2) vs `(d op -d)` (left 1)
    # modular_arithmetic: an even length is cut to the odd one below, as the authors' code does
    assert task("modular_arithmetic").generate(40, 3, rng).inputs.shape == (3, 39)
