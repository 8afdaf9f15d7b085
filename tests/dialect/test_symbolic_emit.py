"""A graph with symbolic dims emitted with ``?`` extents (docs/dynamic-shapes.md,
"Symbols in fuel IR"): the symbols survive a print/parse round trip, params
holding extents are ``fuel.extents``, the checked-in FileCheck inputs are the
emission, and the passes' output on the ``?`` IR is, at a binding, their
output on the static emission of the bound graph."""
import pathlib

import pytest

from compiler.dialect import op_params, parse_fuel_module
from compiler.dialect.emit import graph_to_module
from compiler.dialect.symbols import parse_extent
from compiler.dialect.types import SymbolicDims, keep_extents
from compiler.errors import DialectError
from compiler.graph import Graph, Sym
from compiler.graph.symbolic import bind_params, evaluate
from compiler.passes import _fuel
from compiler.testing import run_pipeline_on_text
from runtime.symbols import floor_div
from tests.passes.symbolic_block import GRAPHS, emitted

PASSES = pathlib.Path(__file__).parent.parent / "passes"


@pytest.mark.parametrize("name,path", [("encoder_block", "symbolic_encoder.mlir"),
                                       ("flat_f16", "symbolic_flat.mlir")])
def test_filecheck_inputs_are_the_emission(name, path):
    text = (PASSES / path).read_text()
    ir = "\n".join(l for l in text.splitlines() if l and not l.startswith("//"))
    assert ir == emitted(name).strip()


def _shapes_graph():
    g = Graph()
    s = Sym("s", 1, 16)
    x = g.input("x", ("batch", s, 4), "f32")
    z = g.input("z", (2 * s + 1, 3), "f32")
    y = g.input("y", ("n", 4), "f32")
    flat = x.reshape(-1, 4)                               # [batch*s, 4]
    g.output(flat[1:], name="tail")  # Slice start 1, len batch*s - 1
    g.output(y + g.input("v", ("m", 4), "f32"), name="sum")  # records n == m
    g.output(z.pad(((0, 0), (1, 2))), name="padded")
    g.output(g.add_node("Iota", [], {"len": x.shape[1]}), name="positions")  # len s
    return g


def test_symbols_survive_a_round_trip():
    g = _shapes_graph()
    text = str(graph_to_module(g))
    assert '{fuel.dims = ["2*s + 1", ""], fuel.name = "z"}' in text
    assert "fuel.symbols = {batch = array<i64: 1>, m = array<i64: 1>, n = array<i64: 1>, " \
           "s = array<i64: 1, 16>}" in text
    assert 'fuel.equalities = [["m", "n"]]' in text
    assert '{fuel.dims = ["batch*s - 1", ""]}' in text  # a result's extents
    assert '{fuel.extents = {shape = ["batch*s", ""]}, shape = [-1, 4]}' in text
    assert 'fuel.extents = {len = "batch*s - 1"}' in text
    assert '{fuel.extents = {len = "s"}, len = -1 : i64}' in text
    module = parse_fuel_module(text)
    assert str(module) == text
    ops = {_fuel.mnemonic(o): o for o in _fuel.fuel_ops(module)}
    batch, s = Sym("batch"), Sym("s", 1, 16)
    assert op_params(ops["reshape"])["shape"] == (batch * s, 4)
    assert op_params(ops["slice"])["len"] == batch * s - 1
    dims = SymbolicDims()
    assert dims.shape(ops["slice"].results[0]) == (batch * s - 1, 4)
    assert dims.shape(ops["pad"].results[0]) == (2 * s + 1, 6)
    assert dims.shape(ops["iota"].results[0]) == (s,)
    assert not dims.fresh  # every ? extent named


def test_extents_parse_as_they_print():
    h = Sym("h", 1, 64)
    bounds = {"h": (1, 64), "b": (1, None)}
    for d in (floor_div(h + 1, 2), 3 * floor_div(h + 1, 2) + h, Sym("b") * h - 1, 2 - h):
        assert parse_extent(str(d), bounds) == d
    assert parse_extent("h", bounds).bounds == (1, 64)


@pytest.mark.parametrize("text,match", [
    ("h/2", "is not an int, a symbol"),
    ("len(h)", "is not an int, a symbol"),
    ("h // b", "is not an int, a symbol"),
    ("h + 1.5", "is not an int, a symbol"),
    ("w + 1", "names the symbol 'w', which the function's fuel.symbols does not declare"),
    ("h +", "is not an expression over symbols"),
    ("h\x00", "is not an expression over symbols"),
    ("(" * 5000 + "h" + ")" * 5000, "is not an expression over symbols"),
])
def test_malformed_extents_are_refused(text, match):
    with pytest.raises(DialectError, match=match):
        parse_extent(text, {"h": (1, 64), "b": (1, None)})


def _bound_ops(text, binding):
    """Each fuel op of ``text``: its name, params and result shapes with
    every symbol (and broadcast -1, the input's extent) at ``binding``."""
    module = parse_fuel_module(text)
    dims, out = SymbolicDims(), []
    for op in _fuel.fuel_ops(module):
        params = op_params(op) if _fuel.dialect_op(op) is not None else {}
        if op.name == "fuel.broadcast_to":
            params["shape"] = tuple(keep_extents(params["shape"], dims.shape(op.operands[0])))
        shapes = [tuple(evaluate(d, binding) for d in dims.shape(r)) for r in op.results]
        out.append((op.name, bind_params(params, binding), shapes))
    return out


@pytest.mark.parametrize("pipeline", [
    "builtin.module(fuel-fuse)",
    "builtin.module(fuel-fuse,fuel-decompose{table=primitives_f32})",
    "default",
])
def test_passes_on_the_emission_are_the_static_passes_at_a_binding(pipeline):
    binding = {"batch": 2, "seq": 5}
    g = GRAPHS["encoder_block"]()
    plugins = ("tests.passes.kernel_tables",)
    dynamic = run_pipeline_on_text(str(graph_to_module(g, inline_limit=0)), pipeline,
                                   plugins=plugins)
    static = run_pipeline_on_text(str(graph_to_module(g.bind(binding), inline_limit=0)),
                                  pipeline, plugins=plugins)
    assert "?" in dynamic and "?" not in static
    assert _bound_ops(dynamic, binding) == _bound_ops(static, binding)
