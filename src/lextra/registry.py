"""A small name -> class registry with introspected options, used for schemes, masks and retrieval tasks."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from lextra.errors import ConfigError

T = TypeVar("T")


@dataclass(frozen=True)
class Option:
    """One settable option of a registered class: its name, default and annotation."""

    name: str
    default: Any
    annotation: str


class Registry(Generic[T]):
    """Maps names to classes; `build` validates keyword options against the class signature."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._classes: dict[str, type[T]] = {}

    def register(self, name: str) -> Callable[[type[T]], type[T]]:
        def add(cls: type[T]) -> type[T]:
            if name in self._classes:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            cls.name = name  # type: ignore[attr-defined]
            self._classes[name] = cls
            return cls

        return add

    def names(self) -> list[str]:
        return list(self._classes)

    def get(self, name: str) -> type[T]:
        try:
            return self._classes[name]
        except KeyError:
            known = ", ".join(self._classes)
            raise ConfigError(f"unknown {self.kind} {name!r}; known {self.kind}s: {known}") from None

    def options(self, name: str) -> list[Option]:
        """The keyword-only options of a class's constructor, with defaults (its settable knobs)."""
        signature = inspect.signature(self.get(name).__init__)
        return [
            Option(p.name, p.default, _annotation_text(p.annotation))
            for p in signature.parameters.values()
            if p.kind is inspect.Parameter.KEYWORD_ONLY
        ]

    def check_options(self, name: str, options: dict[str, Any]) -> None:
        valid = {o.name for o in self.options(name)}
        unknown = sorted(set(options) - valid)
        if unknown:
            listing = ", ".join(sorted(valid)) or "none"
            raise ConfigError(
                f"{self.kind} {name!r} has no option {', '.join(map(repr, unknown))}; its options: {listing}"
            )


def _annotation_text(annotation: Any) -> str:
    if annotation is inspect.Parameter.empty:
        return ""
    return annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
