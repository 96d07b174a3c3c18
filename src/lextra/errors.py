"""User-facing errors: each names the problem and the fix, and the CLI prints it in one line (exit 2)."""


class LextraError(ValueError):
    """A mistake in the user's input (config, options, lengths, paths, files)."""


class ConfigError(LextraError):
    """An invalid scheme, mask, model or training configuration."""


class LengthError(LextraError):
    """An input longer than a component supports (e.g. a learned position table)."""


class CheckpointError(LextraError):
    """A missing, corrupt or incompatible checkpoint."""


class DataError(LextraError):
    """A missing or empty corpus, or an unreadable data file."""
