"""The RULER word list is package data (`lextra/tasks/ruler/words.txt`), identical to the list the module held."""

from __future__ import annotations

import hashlib
import tomllib
from pathlib import Path

from lextra.tasks.ruler import WORDS
from lextra.tasks.ruler.words import WORDS_FILE, load_words

ROOT = Path(__file__).resolve().parents[1]


def test_the_word_list_is_the_one_the_module_held() -> None:
    # the length and checksum of the list as the module's 560-line string gave it
    assert len(WORDS) == 8358 and (WORDS[0], WORDS[-1]) == ("abase", "zealous")
    assert hashlib.sha256(" ".join(WORDS).encode()).hexdigest() == (
        "c780518d69e225d0755b79ccfa9c2df95eb8de446ffc866c9878b25cf18fdc14"
    )
    assert list(WORDS) == sorted(set(WORDS)) and load_words() == WORDS


def test_the_word_file_ships_as_package_data() -> None:
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert WORDS_FILE in package_data["lextra.tasks.ruler"]
    assert (ROOT / "src" / "lextra" / "tasks" / "ruler" / WORDS_FILE).read_text().splitlines() == list(WORDS)
