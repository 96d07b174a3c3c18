"""Kazemnejad et al. 2023, positional encoding and length generalization (arXiv 2305.19466): the decoder tasks."""
