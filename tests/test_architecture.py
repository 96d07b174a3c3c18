"""The layers import one way: the library never imports the CLI, each layer uses only the layers below it (public
names only), and neither packages nor modules import each other in a cycle; no function is over 60 lines without a
reason in its docstring."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

import lextra

ROOT = Path(lextra.__file__).parent

#: top-level components by layer, lowest first; a component imports only from its own or lower layers
LAYERS = [
    {"errors", "io", "locks", "registry", "serialize", "validate", "devices", "tensorboard"},
    {"positions"},
    {"attention"},
    {"model", "kv_cache", "layer_inputs", "data", "compile", "tasks"},
    {"train"},
    {"analysis"},
    {"extend"},
    {"methods", "hf"},
    {"evaluate"},
    {"reporting"},
    {"pipelines"},
    {"cli", "__main__"},
]
RANK = {component: rank for rank, layer in enumerate(LAYERS) for component in layer}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _fill_lists(tree: ast.AST) -> list[ast.AST]:
    """The registration lists of a module: a `Registry(..., modules=(...))` argument or a constant named
    `*_MODULES`: the modules they name register into this one (they import it), so they are not its imports."""
    found: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "Registry":
            found += [k.value for k in node.keywords if k.arg == "modules"]
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id.endswith("_MODULES") for t in targets) and node.value is not None:
                found.append(node.value)
    return found


def _module_string(node: ast.AST) -> str | None:
    """The lextra module a string constant names (`"lextra.evaluate.ruler"`), or None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        text = node.value
        if text == "lextra" or (text.startswith("lextra.") and all(p.isidentifier() for p in text.split("."))):
            return text
    return None


def _imports(path: Path) -> list[tuple[str, list[str], bool]]:
    """(module imported, names taken from it, whether at module level) for every `lextra` import in the file:
    import statements, `import_module("lextra...")` / `__import__` calls and any other string naming a lextra
    module (a name imported later by a variable), except the registration lists (`_fill_lists`)."""
    return _imports_of(ast.parse(path.read_text()))


def _imports_of(tree: ast.Module) -> list[tuple[str, list[str], bool]]:
    top = {id(node) for node in tree.body}
    registering = {id(n) for fill in _fill_lists(tree) for n in ast.walk(fill)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("lextra"):
            found.append((node.module, [a.name for a in node.names], id(node) in top))
        elif isinstance(node, ast.Import):
            found += [(a.name, [], id(node) in top) for a in node.names if a.name.startswith("lextra")]
        elif id(node) not in registering and (name := _module_string(node)):
            found.append((name, [], False))
    return found


def _registrations(path: Path) -> list[str]:
    """The modules a file's registration lists name."""
    tree = ast.parse(path.read_text())
    return [name for fill in _fill_lists(tree) for n in ast.walk(fill) if (name := _module_string(n))]


MODULES = {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _component(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_every_component_has_a_layer() -> None:
    components = {_component(m) for m in MODULES} - {""}
    assert components <= set(RANK), f"place {sorted(components - set(RANK))} in LAYERS"


def test_the_library_never_imports_the_cli() -> None:
    offenders = [
        f"{module} imports {target}"
        for module, path in MODULES.items()
        if _component(module) not in ("cli", "__main__")
        for target, _, _ in _imports(path)
        if target == "lextra.cli" or target.startswith("lextra.cli.")
    ]
    assert not offenders, offenders


def test_imports_point_down_the_layers() -> None:
    """Imports, and the modules a registry's registration list names (it imports them on first lookup), point
    down the layers: a registry is filled by modules of its own or a lower layer."""
    offenders = []
    for module, path in MODULES.items():
        own = _component(module)
        for target, names, _ in [*_imports(path), *((name, [], False) for name in _registrations(path))]:
            other = _component(target) or (names[0] if names else "")
            if other in RANK and own in RANK and RANK[other] > RANK[own]:
                offenders.append(f"{module} ({own}) imports {target} ({other}, a higher layer)")
    assert not offenders, "\n".join(offenders)


def test_no_module_takes_another_modules_private_names() -> None:
    offenders = [
        f"{module} imports {name} from {target}"
        for module, path in MODULES.items()
        for target, names, _ in _imports(path)
        for name in names
        if name.startswith("_") and target != module
    ]
    assert not offenders, offenders


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of `graph` as a list of nodes, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


@pytest.mark.parametrize("level", ["component", "module"])
def test_no_import_cycles(level: str) -> None:
    graph: dict[str, set[str]] = defaultdict(set)
    for module, path in MODULES.items():
        for target, names, _ in _imports(path):
            if level == "component":
                a, b = _component(module), _component(target)
                if a and b and a != b:
                    graph[a].add(b)
            else:
                # `from package import module` names a module; otherwise the target module itself
                targets = [f"{target}.{n}" for n in names if f"{target}.{n}" in MODULES] or [target]
                for t in targets:
                    if t in MODULES and t != module and not module.startswith(t + "."):
                        graph[module].add(t)
    assert _cycle(graph) is None, f"import cycle: {' -> '.join(_cycle(graph) or [])}"


def test_the_cycle_finder_finds_cycles() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_string_imports_are_imports() -> None:
    """`import_module("lextra...")` and strings naming a module count as imports; a registration list does not."""
    tree = ast.parse(
        "import importlib\n"
        "def f():\n    importlib.import_module('lextra.evaluate.ruler')\n"
        "LATER = ('lextra.train', 'not.lextra', 'lextra has spaces')\n"
        "REG = Registry('kind', modules=('lextra.positions.rotary',))\n"
        "FILL_MODULES = ('lextra.cli.train',)\n"
    )
    assert sorted(target for target, _, _ in _imports_of(tree)) == ["lextra.evaluate.ruler", "lextra.train"]


def test_registration_lists_name_modules_that_register_into_them() -> None:
    """Each module a registry fills itself from imports the registry's module (so the edge points down)."""
    offenders = []
    for module, path in MODULES.items():
        for name in _registrations(path):
            if name not in MODULES:
                offenders.append(f"{module} names {name}, which does not exist")
            elif not any(
                target == module or module in (f"{target}.{n}" for n in names)
                for target, names, _ in _imports(MODULES[name])
            ):
                offenders.append(f"{module} names {name}, which does not import it")
    assert not offenders, offenders


#: the longest function (signature, docstring and body) without "Over 60 lines: <reason>" in its docstring
MAX_FUNCTION_LINES = 60
LONG_REASON = "Over 60 lines:"


def _long_functions(tree: ast.AST) -> list[tuple[str, int, int]]:
    """(name, first line, lines) of each function or method in `tree` over `MAX_FUNCTION_LINES` whose docstring
    gives no reason (`LONG_REASON`)."""
    return [
        (node.name, node.lineno, node.end_lineno - node.lineno + 1)
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
        and LONG_REASON not in (ast.get_docstring(node) or "")
    ]


def test_no_function_is_over_60_lines_without_a_reason_in_its_docstring() -> None:
    offenders = [
        f"{path.relative_to(ROOT.parent)}:{line} {name} is {lines} lines; split it by job, or say why not in its "
        f'docstring ("{LONG_REASON} <reason>")'
        for path in MODULES.values()
        for name, line, lines in _long_functions(ast.parse(path.read_text()))
    ]
    assert not offenders, "\n".join(offenders)


def test_the_length_check_finds_long_functions_and_reads_reasons() -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES - 1))
    code = f"def fits():\n{body}def too_long():\n{body}    return 0\nclass C:\n    async def method(self):\n"
    code += "".join(f"        x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    reasoned = f'def reasoned():\n    """Over 60 lines: one table."""\n{body}    return 0\n'
    assert [(name, lines) for name, _, lines in _long_functions(ast.parse(code + reasoned))] == [
        ("too_long", MAX_FUNCTION_LINES + 1),
        ("method", MAX_FUNCTION_LINES + 1),
    ]
