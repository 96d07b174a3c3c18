"""One `--lengths` parser (`lextra.validate.parse_lengths`) for every command, with the forms and errors each
command accepted before."""

from __future__ import annotations

import pytest

from lextra.cli import options
from lextra.errors import ConfigError
from lextra.pipelines import checkpoints
from lextra.validate import parse_lengths


def test_comma_lists_keep_their_order_and_repeats() -> None:
    assert parse_lengths("512, 128,,512") == [512, 128, 512]
    assert parse_lengths("1") == [1]


def test_no_lengths_leave_the_callers_defaults() -> None:
    assert parse_lengths(None) is None and parse_lengths("") is None
    assert checkpoints.analysis_lengths(None, 32, (1, 2, 4)) == [32, 64, 128]
    assert checkpoints.analysis_lengths("", 8, (1, 16)) == [8, 128]


def test_distinct_lengths_are_sorted_without_repeats() -> None:
    assert parse_lengths("64,16,64", 2, distinct=True) == [16, 64]
    assert checkpoints.analysis_lengths("64,16,64", 32, (1,)) == [16, 64]


@pytest.mark.parametrize(
    ("text", "minimum", "message"),
    [
        ("1,x", 1, "--lengths takes comma-separated integers, got '1,x'"),
        ("1.5", 1, "--lengths takes comma-separated integers, got '1.5'"),
        (",", 1, "--lengths takes comma-separated integers, got ','"),
        ("8,0", 1, "--lengths must be positive integers, got '8,0'"),
        ("8,-4", 1, "--lengths must be positive integers, got '8,-4'"),
        ("1,8", 2, "--lengths must be integers >= 2, got '1,8'"),
    ],
)
def test_bad_lengths_name_the_option_and_the_form(text: str, minimum: int, message: str) -> None:
    with pytest.raises(ConfigError, match=f"^{message}$"):
        parse_lengths(text, minimum)


def test_analyses_refuse_single_token_lengths() -> None:
    with pytest.raises(ConfigError, match="--lengths must be integers >= 2, got '1,8'"):
        checkpoints.analysis_lengths("1,8", 8, (1,))


def test_the_cli_reads_lengths_through_the_one_parser() -> None:
    assert options.parse_lengths is parse_lengths
