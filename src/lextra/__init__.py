"""lextra: Transformer length extrapolation toolkit."""

__version__ = "0.1.0"
