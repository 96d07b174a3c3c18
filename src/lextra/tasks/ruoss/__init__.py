"""Ruoss et al. 2023, randomized positional encodings (arXiv 2305.16843): the Chomsky-hierarchy tasks of
Deletang et al. 2023 (arXiv 2207.02098) as the authors' code generates and scores them."""
