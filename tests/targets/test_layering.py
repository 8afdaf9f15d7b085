"""The import graph: layers import downward only.

Every import in ``compiler/`` and ``runtime/`` is read from the source (also
the ones inside functions, which a lazy import would otherwise hide), and
reduced to the layer it crosses into (``compiler.<layer>`` or ``runtime``).
"""
import ast
import collections
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _imports(path: Path, package: str):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            yield target
            yield from (f"{target}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names)


def _layer(module: str):
    parts = module.split(".")
    if parts[0] == "runtime":
        return "runtime"
    if parts[0] == "compiler" and len(parts) > 1:
        return parts[1]
    return None


def layer_graph() -> dict[str, set[str]]:
    graph = collections.defaultdict(set)
    for top in ("compiler", "runtime"):
        for path in (ROOT / top).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
                package = ".".join(parts)
            else:
                package = ".".join(parts[:-1])
            src = _layer(".".join(parts))
            for imported in _imports(path, package):
                dst = _layer(imported)
                if src and dst and dst != src:
                    graph[src].add(dst)
    return graph


def _cycles(graph) -> list[list[str]]:
    """Strongly connected components with more than one layer (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in list(graph):
        if v not in index:
            visit(v)
    return out


def test_the_graph_reader_sees_real_edges():
    g = layer_graph()
    assert "plan" in g["driver"] and "dialect" in g["plan"] and "runtime" in g["codegen"]


def test_runtime_never_imports_the_compiler():
    assert layer_graph()["runtime"] == set()


def test_no_import_cycles_between_layers():
    assert _cycles(layer_graph()) == []


def test_codegen_plan_and_passes_stay_in_their_lanes():
    g = layer_graph()
    assert not {"plan", "driver", "passes"} & g["codegen"], g["codegen"]
    assert not {"codegen", "passes", "driver"} & g["plan"], g["plan"]
    assert not {"plan", "driver"} & g["passes"], g["passes"]


def test_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
