"""The import graph: layers import downward only.

Every import in ``compiler/`` and ``runtime/`` is read from the source (also
the ones inside functions, which a lazy import would otherwise hide), and
reduced to the layer it crosses into (``compiler.<layer>`` or ``runtime``).
"""
import ast
import collections
import functools
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


@functools.lru_cache(maxsize=None)   # read once per session (the tests only read it)
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


def _codegen_imports():
    """(module path under compiler/codegen, the compiler.codegen.* modules it
    imports) for every file of the codegen layer."""
    base = ROOT / "compiler" / "codegen"
    for path in base.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        package = ".".join(parts[:-1] if parts[-1] != "__init__" else parts[:-1])
        if parts[-1] == "__init__":
            package = ".".join(parts[:-1])
        yield path.relative_to(base), {m for m in _imports(path, package)
                                       if m.startswith("compiler.codegen.")}


def _kind_packages() -> set[str]:
    base = ROOT / "compiler" / "codegen"
    return {p.parent.name for p in base.glob("*/__init__.py")} - {"common", "lowering"}


def test_target_codegen_packages_import_no_other_target_and_neutral_code_none():
    """codegen/<kind>/ (cpu, cuda) may use the target-neutral codegen
    (codegen/*.py, lowering/, common/) but never another kind's package; the
    target-neutral modules import no kind's package (a CUDA kernel must not
    claim, or be built from, the CPU's helpers)."""
    kinds = _kind_packages()
    assert {"cpu", "cuda"} <= kinds
    bad = []
    for rel, imported in _codegen_imports():
        own = rel.parts[0] if len(rel.parts) > 1 and rel.parts[0] in kinds else None
        for m in imported:
            kind = m.split(".")[2]
            if kind in kinds and kind != own:
                bad.append(f"compiler/codegen/{rel.as_posix()} imports {m}")
    assert bad == [], bad
