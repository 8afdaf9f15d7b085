"""Graph analyses over the arena: reachability, topological order, consumers,
dead-code elimination. Walks start from roots (default: the graph outputs);
orphaned nodes are ignored."""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Optional

from ..errors import CompilerError
from .graph import Graph

if TYPE_CHECKING:
    import networkx as nx

__all__ = ["roots_of", "reachable", "topological_order", "consumers", "dead_nodes",
           "eliminate_dead_code", "to_networkx", "GraphCycleError"]


class GraphCycleError(CompilerError, ValueError):
    """The input edges form a cycle (only possible after ``rewrite_input``)."""


def roots_of(graph: Graph, roots: Optional[Iterable] = None) -> list[int]:
    """Node ids for ``roots`` (ids or handles), default the graph outputs."""
    if roots is None:
        return list(dict.fromkeys(graph.outputs.values()))
    return list(dict.fromkeys(graph._id(r) for r in roots))


def topological_order(graph: Graph, roots: Optional[Iterable] = None) -> list[int]:
    """Every node reachable from ``roots``, producers before consumers, in a
    deterministic order (depth-first, inputs in slot order). Raises
    GraphCycleError if the edges loop."""
    order: list[int] = []
    state: dict[int, int] = {}  # 1 = on the stack, 2 = done
    for root in roots_of(graph, roots):
        if state.get(root) == 2:
            continue
        stack = [(root, 0)]
        state[root] = 1
        while stack:
            nid, slot = stack[-1]
            ins = graph.nodes[nid].inputs
            if slot < len(ins):
                stack[-1] = (nid, slot + 1)
                child = ins[slot]
                s = state.get(child)
                if s == 1:
                    raise GraphCycleError(f"cycle through node %{child} "
                                          f"({graph.nodes[child].op})")
                if s is None:
                    state[child] = 1
                    stack.append((child, 0))
            else:
                stack.pop()
                state[nid] = 2
                order.append(nid)
    return order


def reachable(graph: Graph, roots: Optional[Iterable] = None) -> set[int]:
    """Ids of the nodes that ``roots`` depend on (roots included)."""
    return set(topological_order(graph, roots))


def consumers(graph: Graph, roots: Optional[Iterable] = None) -> dict[int, list[int]]:
    """For each reachable node, the reachable nodes that read it, once per
    input slot (a node that reads x twice appears twice). Graph outputs are
    not consumers; see ``graph.outputs``."""
    order = topological_order(graph, roots)
    out: dict[int, list[int]] = {n: [] for n in order}
    for n in order:
        for i in graph.nodes[n].inputs:
            out[i].append(n)
    return out


def dead_nodes(graph: Graph, roots: Optional[Iterable] = None) -> list[int]:
    """Ids of the nodes no root depends on, ascending."""
    live = reachable(graph, roots)
    return [n.id for n in graph.nodes if n.id not in live]


def eliminate_dead_code(graph: Graph, roots: Optional[Iterable] = None,
                        keep_inputs: bool = True) -> tuple[Graph, dict[int, int]]:
    """A compacted copy of ``graph`` holding only the nodes ``roots`` need
    (plus every declared input when ``keep_inputs``, so the signature is
    unchanged), in topological order. Returns ``(new_graph, old_id -> new_id)``.
    The original graph is not modified."""
    live = set(topological_order(graph, roots))
    if keep_inputs:
        live |= set(graph.inputs.values())
    order = topological_order(graph, sorted(live))
    new = Graph()
    remap: dict[int, int] = {}
    for old in order:
        n = graph.nodes[old]
        nid = len(new.nodes)
        new.nodes.append(type(n)(nid, n.op, tuple(remap[i] for i in n.inputs), dict(n.params),
                                 n.shape, n.dtype, n.name, n.output_types, n.fused))
        remap[old] = nid
        if n.op == "Const":
            new.constants[n.params["name"]] = graph.constants[n.params["name"]]
    new.inputs = {k: remap[v] for k, v in graph.inputs.items() if v in remap}
    new.outputs = {k: remap[v] for k, v in graph.outputs.items() if v in remap}
    new.symbols = dict(graph.symbols)          # docs/dynamic-shapes.md
    new.equalities = list(graph.equalities)
    return new, remap


def to_networkx(graph: Graph, roots: Optional[Iterable] = None) -> "nx.MultiDiGraph":
    """The reachable subgraph as a networkx MultiDiGraph (edge producer ->
    consumer, key = input slot; node attribute ``node`` is the Node)."""
    import networkx as nx  # only here: importing it costs every compile worker ~0.1 s
    g = nx.MultiDiGraph()
    for nid in topological_order(graph, roots):
        node = graph.nodes[nid]
        g.add_node(nid, node=node)
        for slot, i in enumerate(node.inputs):
            g.add_edge(i, nid, key=slot)
    return g
