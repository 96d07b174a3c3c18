"""The layers import one way: the library never imports the CLI, each layer uses only the layers below it (public
names only), and neither packages nor modules import each other in a cycle."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

import lextra

ROOT = Path(lextra.__file__).parent

#: top-level components by layer, lowest first; a component imports only from its own or lower layers
LAYERS = [
    {"errors", "io", "registry", "serialize", "validate", "devices", "tensorboard"},
    {"positions"},
    {"attention"},
    {"model", "data", "compile"},
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


def _imports(path: Path) -> list[tuple[str, list[str], bool]]:
    """(module imported, names taken from it, whether at module level) for every `lextra` import in the file."""
    tree = ast.parse(path.read_text())
    top = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("lextra"):
            found.append((node.module, [a.name for a in node.names], id(node) in top))
        elif isinstance(node, ast.Import):
            found += [(a.name, [], id(node) in top) for a in node.names if a.name.startswith("lextra")]
    return found


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
    offenders = []
    for module, path in MODULES.items():
        own = _component(module)
        for target, names, _ in _imports(path):
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
