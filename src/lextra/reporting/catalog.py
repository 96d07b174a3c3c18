"""Human-readable listing of every registered position scheme, mask, training-free extension method and retrieval
task with its options (`lextra list`)."""

from __future__ import annotations

from lextra.attention.masks import MASKS
from lextra.evaluate.retrieval.tasks import TASKS
from lextra.evaluate.ruler import RULER_TASKS
from lextra.extend import EXTENSIONS
from lextra.positions import SCHEMES
from lextra.registry import Option, Registry


def _options_text(options: list[Option]) -> str:
    if not options:
        return "no options"
    return ", ".join(f"{o.name}={o.default!r}" for o in options)


def _section(title: str, registry: Registry, extra: dict[str, str] | None = None) -> list[str]:
    lines = [title]
    width = max(len(n) for n in registry.names())
    for name in registry.names():
        cls = registry.get(name)
        options = _options_text(registry.options(name))
        if extra and name in extra:
            options = extra[name]
        lines.append(f"  {name:<{width}}  {cls.summary}")
        lines.append(f"  {'':<{width}}    options: {options}")
    return lines


def catalog_text() -> str:
    """The text `lextra list` prints."""
    mask_defaults = {
        "window": "width (default L_tr); spec 'window:W'",
        "bca": "block (default L_tr/2); spec 'bca:B'",
    }
    lines = _section("position schemes (--scheme NAME, options as --scheme-option KEY=VALUE):", SCHEMES)
    lines.append("")
    lines += _section("masks (--mask SPEC):", MASKS, mask_defaults)
    lines.append("")
    extension_options = {
        name: ", ".join(
            f"{o.name}={EXTENSIONS.get(name).derived_defaults.get(o.name, repr(o.default))}"
            if o.default is None
            else f"{o.name}={o.default!r}"
            for o in EXTENSIONS.options(name)
        )
        for name in EXTENSIONS.names()
    }
    lines += _section(
        "training-free extension methods of rotary models, L = the training length (--extend NAME[:KEY=VALUE,...]):",
        EXTENSIONS,
        extension_options,
    )
    lines.append("")
    lines += _section("retrieval tasks (lextra retrieval ... --task NAME):", TASKS)
    lines.append("")
    lines += _section("RULER tasks (lextra ruler ... --tasks NAME,...):", RULER_TASKS)
    return "\n".join(lines)
