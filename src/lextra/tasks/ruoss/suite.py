"""The suite record of Ruoss et al.'s tasks, shared by each task's file."""

from __future__ import annotations

from lextra.tasks.base import LengthRange, Suite

RUOSS = Suite(
    name="ruoss",
    paper="Ruoss et al. 2023, Randomized Positional Encodings Boost Length Generalization (arXiv 2305.16843)",
    code="google-deepmind/randomized_positional_encodings (tasks: google-deepmind/neural_networks_chomsky_hierarchy)",
    notes="encoder, 5 layers, width 64, 8 heads; lengths 1-40 in training (one length per batch), 41-500 at test",
)
#: the authors' training range and the test range lextra uses by default (their example averages 41..100)
TRAIN = LengthRange(1, 40)
TEST = LengthRange(41, 100)
