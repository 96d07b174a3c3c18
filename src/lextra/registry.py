"""Name -> class registries with declared, typed options, and the one spec grammar they all parse.

A spec is `name[:positional][,key=value...]` (`window:256`, `yarn:4,beta_fast=16`). The options are the class's
keyword-only constructor parameters (or its `spec_options()`), typed by their annotations; `positional` names the
option a bare value fills, `resolve_options(options, **context)` fills defaults derived from the context and
`derived_defaults` describes them. Plugins (`.py` files or modules) are imported by `load_plugins`.
"""

from __future__ import annotations

import importlib
import inspect
import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from lextra.errors import ConfigError

T = TypeVar("T")
_REQUIRED = inspect.Parameter.empty


@dataclass(frozen=True)
class Option:
    """One settable option of a registered class: its name, default (`Option.REQUIRED` when none) and annotation."""

    name: str
    default: Any
    annotation: str
    #: how the default is derived from the context when it is not given (e.g. "L_tr / 2"), or ""
    derived: str = ""

    REQUIRED = _REQUIRED

    @property
    def required(self) -> bool:
        return self.default is _REQUIRED and not self.derived

    def default_text(self) -> str:
        """The default as `lextra list` shows it: the derivation, the value, or "required"."""
        if self.derived:
            return self.derived
        if self.default is _REQUIRED:
            return "required"
        return repr(self.default)


@dataclass(frozen=True)
class Spec:
    """A parsed spec: the name, the bare positional value (or None) and the `key=value` options, as text."""

    name: str
    positional: str | None = None
    options: dict[str, str] = field(default_factory=dict)


_OPEN, _CLOSE = "[({", "])}"


def split_top_level(text: str, separators: str = ",") -> list[str]:
    """Split at any of `separators` outside brackets, parentheses, braces and quotes."""
    items, depth, start, quote = [], 0, 0, ""
    for i, char in enumerate(text):
        if quote:
            quote = "" if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char in _OPEN:
            depth += 1
        elif char in _CLOSE:
            depth -= 1
            if depth < 0:
                raise ConfigError(f"{text!r}: a closing ')', ']' or '}}' without its opening one")
        elif char in separators and depth == 0:
            items.append(text[start:i])
            start = i + 1
    if depth:
        raise ConfigError(f"{text!r}: an opening '(', '[' or '{{' without its closing one")
    items.append(text[start:])
    return items


def _is_option(item: str) -> bool:
    """Whether a list item is a `key=value` option (of the spec before it) rather than a spec of its own."""
    key, eq, _ = item.partition("=")
    return bool(eq) and key.strip().isidentifier()


def split_specs(values: str | Iterable[str], kind: str = "spec") -> list[str]:
    """Specs separated by `;` or by commas (a `key=value` item belongs to the spec before it):
    `rope,base=500000,alibi` -> [`rope,base=500000`, `alibi`]; a list of strings concatenates theirs."""
    texts = [values] if isinstance(values, str) else list(values)
    specs: list[str] = []
    for text in texts:
        for group in split_top_level(text, ";"):
            current: list[str] = []
            for item in (i.strip() for i in split_top_level(group)):
                if not item:
                    continue
                if _is_option(item):
                    if not current:
                        word = kind.split()[-1]
                        raise ConfigError(
                            f"{kind} list {text!r}: option {item!r} comes before any {word}; "
                            f"write {word.upper()},{item}"
                        )
                    current.append(item)
                    continue
                if current:
                    specs.append(",".join(current))
                current = [item]
            if current:
                specs.append(",".join(current))
    return specs


def split_compound(text: str) -> list[str]:
    """The specs of a compound joined by `+` (`rope+window:64`)."""
    return [part.strip() for part in split_top_level(text, "+")]


def parse_spec(text: str, kind: str = "spec") -> Spec:
    """`name[:positional][,key=value...]` -> Spec; an item after ':' that holds '=' is an option."""
    if not isinstance(text, str):
        raise ConfigError(f"{kind}: expected a spec string such as 'name:value,key=value', got {text!r}")
    text = text.strip()
    cut = min((i for i in (text.find(":"), text.find(",")) if i >= 0), default=len(text))
    name, sep, rest = text[:cut].strip(), text[cut : cut + 1], text[cut + 1 :]
    if not name:
        raise ConfigError(f"{kind} spec {text!r} has no name; the grammar is name[:positional][,key=value...]")
    positional: str | None = None
    options: dict[str, str] = {}
    items = split_top_level(rest) if sep else []
    for index, item in enumerate(items):
        item = item.strip()
        if index == 0 and sep == ":" and "=" not in item:
            if not item:
                raise ConfigError(f"{kind} spec {text!r}: nothing after ':'; the grammar is name[:positional]...")
            positional = item
            continue
        _add_option(options, item, f"{kind} spec {text!r}")
    return Spec(name, positional, options)


def _add_option(options: dict[str, str], item: str, where: str) -> None:
    key, eq, value = (part.strip() for part in item.partition("="))
    if not eq or not key or not value:
        raise ConfigError(f"{where}: expected key=value, got {item!r}")
    if key in options:
        raise ConfigError(f"{where} sets {key!r} twice")
    options[key] = value


def parse_options(items: Iterable[str], kind: str = "spec") -> dict[str, str]:
    """`key=value` texts given one by one (a repeated `--scheme-option`) -> raw options; the last value wins."""
    options: dict[str, str] = {}
    for item in items:
        key, eq, value = (part.strip() for part in item.partition("="))
        if not (eq and key and value):
            raise ConfigError(f"{kind} option {item!r} must look like KEY=VALUE")
        options.pop(key, None)
        options[key] = value
    return options


def format_spec(name: str, options: Mapping[str, Any]) -> str:
    """The spec text of `name` with these options: `window,width=64` (inverse of parse + convert)."""
    items = [f"{key}={_value_text(value)}" for key, value in options.items()]
    return ",".join([name, *items])


def _value_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_value_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    return str(value)


# ---------------------------------------------------------------- values by annotation

_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def _type_words(annotation: str) -> tuple[set[str], bool]:
    """The alternatives of an annotation text ("int | None" -> {"int"}, optional)."""
    parts = {p.strip() for p in annotation.split("|")}
    optional = "None" in parts
    return parts - {"None"}, optional


def type_name(annotation: str) -> str:
    """A reader's name of an annotation: "an integer", "a number", "true or false", "a list of numbers", ..."""
    words, optional = _type_words(annotation)
    if words == {"bool"}:
        text = "true or false"
    elif words == {"int"}:
        text = "an integer"
    elif words & {"float", "int"} and words <= {"float", "int"}:
        text = "a number"
    elif any(w.startswith(("tuple", "list")) and "str" in w for w in words):
        text = "names joined by + such as a+b"
    elif any(w.startswith(("tuple", "list")) for w in words):
        text = "a list of numbers such as [1,2]"
    elif words == {"str"}:
        text = "a string"
    else:
        text = "a value (JSON or text)"
    return f"{text} or none" if optional else text


def convert_value(raw: str, annotation: str) -> Any:
    """A spec value read by its annotation (bool, int, float, str, tuples / lists of numbers, optional);
    ValueError when it does not fit. Unannotated values are read as JSON when they parse, else as text."""
    text = raw.strip()
    words, optional = _type_words(annotation)
    if optional and text.lower() in ("none", "null"):
        return None
    if words == {"bool"}:
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise ValueError(text)
    if words == {"int"}:
        return int(text)
    if words & {"float", "int"} and words <= {"float", "int"}:
        value = float(text)
        if not math.isfinite(value):
            raise ValueError(text)
        return value
    if any(w.startswith(("tuple", "list")) for w in words):
        inner = text[1:-1] if text[:1] in "[(" and text[-1:] in "])" else text
        if any("str" in w for w in words):  # names: `q_proj+v_proj` or `[q_proj,v_proj]`
            names = [v.strip().strip("\"'") for v in inner.replace("+", ",").split(",") if v.strip()]
            return names if any(w.startswith("list") for w in words) else tuple(names)
        values = tuple(float(v) for v in inner.replace(";", ",").split(",") if v.strip())
        return list(values) if any(w.startswith("list") for w in words) else values
    if words == {"str"}:
        return text
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


# ---------------------------------------------------------------- the registry


class Registry(Generic[T]):
    """Names (and aliases) to classes; parses specs into typed options; `modules` register on the first lookup."""

    def __init__(self, kind: str, modules: Iterable[str] = ()) -> None:
        self.kind = kind
        self._classes: dict[str, type[T]] = {}
        self._aliases: dict[str, str] = {}
        self._modules = tuple(modules)
        self._filled = not self._modules
        self._listeners: list[Callable[[str, type[T]], None]] = []

    # --- registration -----------------------------------------------------------------------------
    def register(self, name: str, *, aliases: Iterable[str] = ()) -> Callable[[type[T]], type[T]]:
        """Class decorator: register under `name` (and `aliases`, accepted by lookups, not listed)."""

        def add(cls: type[T]) -> type[T]:
            if inspect.isabstract(cls):
                missing = ", ".join(sorted(getattr(cls, "__abstractmethods__", ())))
                raise TypeError(f"{self.kind} {name!r} leaves {missing} undefined; define it to register the class")
            for key in (name, *aliases):
                if key in self._classes or key in self._aliases:
                    raise ValueError(f"{self.kind} {key!r} is registered twice")
            cls.name = name  # type: ignore[attr-defined]  # T declares no `name`: every registered class gets one here
            self._classes[name] = cls
            self._aliases.update({alias: name for alias in aliases})
            for listener in self._listeners:
                listener(name, cls)
            return cls

        return add

    def on_register(self, listener: Callable[[str, type[T]], None]) -> None:
        """Call `listener(name, cls)` for every class registered so far and later."""
        self._listeners.append(listener)
        for name, cls in list(self._classes.items()):
            listener(name, cls)

    def fill(self) -> None:
        """Import the modules that register the built-in classes (once; re-entrant while they import)."""
        if self._filled:
            return
        self._filled = True
        for module in self._modules:
            importlib.import_module(module)

    # --- lookup -----------------------------------------------------------------------------------
    def names(self) -> list[str]:
        self.fill()
        return list(self._classes)

    def aliases(self) -> dict[str, str]:
        """Alias -> the registered name it stands for (`pi` -> `linear`)."""
        self.fill()
        return dict(self._aliases)

    def canonical(self, name: str) -> str:
        """The registered name of `name` or of its alias (ConfigError listing the known names otherwise)."""
        self.fill()
        name = self._aliases.get(name, name)
        if name not in self._classes:
            known = ", ".join(self._classes)
            raise ConfigError(
                f"unknown {self.kind} {name!r}; known {self.kind}s: {known} (one a plugin registers? pass "
                f"`lextra --plugin FILE` or set {PLUGINS_ENV}=FILE)"
            )
        return name

    def __contains__(self, name: object) -> bool:
        self.fill()
        return name in self._classes or name in self._aliases

    def get(self, name: str) -> type[T]:
        return self._classes[self.canonical(name)]

    # --- options ----------------------------------------------------------------------------------
    def options(self, name: str) -> list[Option]:
        """The class's `spec_options()`, else its constructor's keyword-only parameters."""
        cls = self.get(name)
        derived: dict[str, str] = getattr(cls, "derived_defaults", {}) or {}
        declared = getattr(cls, "spec_options", None)
        if declared is not None:
            return [Option(o.name, o.default, o.annotation, o.derived or derived.get(o.name, "")) for o in declared()]
        return constructor_options(cls, derived)

    def positional(self, name: str) -> str | None:
        """The option a bare positional value fills (the class's `positional`), or None."""
        return getattr(self.get(name), "positional", None)

    def _listing(self, name: str) -> str:
        return ", ".join(o.name for o in self.options(name)) or "none"

    def check_options(self, name: str, options: Mapping[str, Any]) -> None:
        """Refuse options the class does not declare, listing the ones it has."""
        valid = {o.name for o in self.options(name)}
        unknown = sorted(set(options) - valid)
        if unknown:
            raise ConfigError(
                f"{self.kind} {self.canonical(name)!r} has no option {', '.join(map(repr, unknown))}; "
                f"its options: {self._listing(name)}"
            )

    def parse(self, spec: str | Spec) -> tuple[str, dict[str, Any]]:
        """A spec -> (registered name, typed options), refusing what does not fit with a ConfigError."""
        parsed = spec if isinstance(spec, Spec) else parse_spec(spec, self.kind)
        name = self.canonical(parsed.name)
        raw = dict(parsed.options)
        if parsed.positional is not None:
            target = self.positional(name)
            if target is None:
                raise ConfigError(
                    f"{self.kind} {name!r} takes no positional value, got {parsed.positional!r}; "
                    f"set options as {name},key=value (its options: {self._listing(name)})"
                )
            if target in raw:
                raise ConfigError(f"{self.kind} {name!r}: {target} is given twice (as ':' value and as {target}=)")
            raw = {target: parsed.positional, **raw}
        self.check_options(name, raw)
        kinds = {o.name: o.annotation for o in self.options(name)}
        return name, {key: self.convert(name, key, value, kinds[key]) for key, value in raw.items()}

    def convert(self, name: str, key: str, raw: Any, annotation: str) -> Any:
        """One option value from text by its annotation; non-text values pass unchanged."""
        if not isinstance(raw, str):
            return raw
        try:
            return convert_value(raw, annotation)
        except ValueError:
            raise ConfigError(
                f"{self.kind} {name!r}: {key} takes {type_name(annotation)} ({annotation}), got {raw!r}; "
                f"its options: {self._listing(name)}"
            ) from None

    def resolve(self, spec: str | Spec, context: Mapping[str, Any] | None = None, **overrides: Any) -> tuple:
        """(class, options): the spec's options, `overrides` on top, then the class's `resolve_options`."""
        name, options = self.parse(spec)
        self.check_options(name, overrides)
        options.update(overrides)
        cls = self.get(name)
        hook = getattr(cls, "resolve_options", None)
        if hook is not None:
            options = hook(dict(options), **dict(context or {}))
        return cls, options

    def build(self, spec: str | Spec, *args: Any, context: Mapping[str, Any] | None = None, **overrides: Any) -> T:
        """`cls(*args, **options)` for the spec (see `resolve`)."""
        cls, options = self.resolve(spec, context, **overrides)
        return cls(*args, **options)

    # --- description ------------------------------------------------------------------------------
    def usage(self, name: str) -> str:
        """The spec syntax of one class: `window[:WIDTH][,key=value...]`, `causal`."""
        return self._head(name) + ("[,key=value...]" if self.options(name) else "")

    def _head(self, name: str) -> str:
        positional = self.positional(name)
        return f"{name}[:{positional.upper()}]" if positional else name

    def describe(self, name: str) -> str:
        """One class's options with their defaults, as `lextra list` shows them: `width=L_tr`, "no options"."""
        options = self.options(name)
        if not options:
            return "no options"
        return ", ".join(f"{o.name}={o.default_text()}" for o in options)

    def types_text(self, name: str) -> str:
        """One class's option types: `width: int, log_scale: bool` ("" without options)."""
        return ", ".join(f"{o.name}: {o.annotation or 'any'}" for o in self.options(name))

    def help_text(self, *, limit: int | None = None) -> str:
        """The registered names with their positional, for a CLI help line: `causal, window[:W], bca[:B], full`."""
        parts = [self._head(name) for name in self.names()]
        if limit is not None and len(parts) > limit:
            parts = [*parts[:limit], "..."]
        return ", ".join(parts)


def constructor_options(cls: type, derived: Mapping[str, str] | None = None) -> list[Option]:
    """A class's keyword-only constructor parameters as options (default, annotation, derivation text)."""
    signature = inspect.signature(cls.__init__)  # type: ignore[misc]
    return [
        Option(p.name, p.default, _annotation_text(p.annotation), (derived or {}).get(p.name, ""))
        for p in signature.parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    ]


def _annotation_text(annotation: Any) -> str:
    if annotation is inspect.Parameter.empty:
        return ""
    return annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))


# ---------------------------------------------------------------- plugins

#: the environment variable naming plugin files or modules, comma-separated, that `lextra` imports before parsing
PLUGINS_ENV = "LEXTRA_PLUGINS"
_LOADED_PLUGINS: dict[str, Any] = {}
_ENV_PLUGINS = {"loaded": False}


def load_env_plugins() -> None:
    """Import the plugins `LEXTRA_PLUGINS` names, once per process."""
    if _ENV_PLUGINS["loaded"]:
        return
    _ENV_PLUGINS["loaded"] = True
    import os

    load_plugins(os.environ.get(PLUGINS_ENV, ""))


def loaded_plugins() -> list[str]:
    """The plugins imported so far (files by their resolved path, modules by name)."""
    return list(_LOADED_PLUGINS)


def load_plugins(plugins: str | Iterable[str]) -> list[Any]:
    """Import plugin modules (`.py` paths or dotted names, comma-separated or a list), each once."""
    import importlib.util
    import sys
    import zlib
    from pathlib import Path

    items = plugins.split(",") if isinstance(plugins, str) else list(plugins)
    modules = []
    for item in (i.strip() for i in items):
        if not item:
            continue
        path = Path(item).expanduser()
        is_file = item.endswith(".py") or path.is_file()
        key = str(path.resolve()) if is_file else item
        if key in _LOADED_PLUGINS:
            modules.append(_LOADED_PLUGINS[key])
            continue
        if is_file:
            if not path.is_file():
                raise ConfigError(f"plugin {item!r}: no such file; give a .py file or an importable module name")
            name = f"lextra_plugin_{path.stem}_{zlib.crc32(key.encode()):08x}"
            spec = importlib.util.spec_from_file_location(name, path)
            if spec is None or spec.loader is None:
                raise ConfigError(f"plugin {item!r}: {path} is not a Python file; give a .py file")
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            try:
                spec.loader.exec_module(module)
            except Exception:
                del sys.modules[name]
                raise
        else:
            try:
                module = importlib.import_module(item)
            except ModuleNotFoundError as err:
                raise ConfigError(f"plugin {item!r}: cannot import it ({err}); check the name or PYTHONPATH") from None
        _LOADED_PLUGINS[key] = module
        modules.append(module)
    return modules
