"""Conv2D (fused id 6) as one kernel: 2-D cross-correlation, NCHW / FCHW.

Inputs x ``[N,Cin,H,W]``, w ``[Cout,Cin/g,Kh,Kw]``, optional bias ``[Cout]``,
with ``residual`` the skip ``[N,Cout,Ho,Wo]``. Params ``stride`` (sh, sw),
``padding`` (ph, pw), ``groups``, ``dilation`` (dh, dw).

* zero padding: ``linalg.fill`` + ``tensor.insert_slice`` of x;
* groups = 1 with f32/f64: the named ``linalg.conv_2d_nchw_fchw`` (strides,
  dilations as attributes);
* otherwise (groups > 1, or f16/bf16 accumulated in f32): one
  ``linalg.generic`` over the grouped views x ``[N,G,Cin/g,Hp,Wp]``,
  w ``[G,Cout/g,Cin/g,Kh,Kw]``, loops (n, g, o, oh, ow | c, kh, kw);
* bias add, the skip's add, the epilogue (``clamp_min`` / ``clamp_max``,
  ``silu`` or ``gelu``) and the rounding to the storage dtype in one
  elementwise generic (on cpu's direct path: in the crop that copies the
  accumulator out; on the pointwise and stem paths: in the register tiles).

Accumulation runs over (c, kh, kw) in order, in f32 (f64 for f64 inputs).
"""
from __future__ import annotations

from compiler.errors import LoweringError
from compiler.mlir import arith, ir, linalg, math, tensor

from .core import (PARALLEL, REDUCTION, Lowering, Scalar, affine_map, dims, empty, expand,
                   fill, collapse, from_compute, generic, identity_map, index, insert_at, lowers,
                   rtt, slice_at, to_compute)
from .fused_norm import _for
from .layout import extract_slice, insert_slice


def _pair(v, what) -> tuple[int, int]:
    v = tuple(int(x) for x in v)
    if len(v) != 2:
        raise LoweringError(f"Conv2D: {what} must be an (h, w) pair, got {v}")
    return v


@lowers("Conv2D")
def _conv2d(lw: Lowering, cpu: bool = False):
    from compiler.registry.ops.conv2d import split_operands
    ops = lw.operands
    res = bool(lw.params.get("residual"))
    if len(ops) not in (2 + res, 3 + res):
        raise LoweringError(f"Conv2D takes {2 + res} or {3 + res} operands (x, w, [bias]"
                            f"{', residual' if res else ''}), got {len(ops)}")
    x, w, bias, skip = split_operands(ops, lw.params)
    # the batch may be a run-time extent (``batch_dims``), taken by the
    # kernels whose images are an ``scf.for``; the image size too, taken by
    # the spatial kernel (``conv_spatial``)
    batch = rtt(x).is_dynamic_dim(0) if rtt(x).rank == 4 else False
    spatial = rtt(x).rank == 4 and (rtt(x).is_dynamic_dim(2) or rtt(x).is_dynamic_dim(3))
    for v in ops:
        t = rtt(v)
        free = range(4) if spatial and (v is x or v is skip) else \
            range(int(batch and (v is x or v is skip)))
        if any(t.is_dynamic_dim(i) for i in range(t.rank) if i not in free):
            raise LoweringError(f"Conv2D is lowered with static shapes but for x's (and the "
                                f"skip's) batch and image size, got {v.type}")
    if spatial:
        return _spatial(lw, x, w, bias, skip, cpu)
    if lw.params.get("winograd"):   # w: the transformed kernels [16, Cout, Cin]
        s = Scalar.compute(lw.in_dtypes[0])
        if not cpu or s.ty != lw.out_elt:
            raise LoweringError(f"Conv2D winograd (transformed weights {w.type}): only the cpu "
                                f"f32 kernel computes it")
        from .conv_winograd import winograd
        return winograd(x, w, bias, s, lw.out_elt, _pair(lw.param("padding"), "padding"),
                        _activation_of(lw.params), skip)
    n, cin, h, wd = rtt(x).shape
    if batch:
        n = dims(x)[0]
    cout, cpg, kh, kw = rtt(w).shape
    sh, sw = _pair(lw.param("stride"), "stride")
    ph, pw = _pair(lw.param("padding"), "padding")
    dh, dw = _pair(lw.params.get("dilation", (1, 1)), "dilation")
    g = int(lw.param("groups"))
    if g < 1 or cin % g or cout % g or cpg * g != cin:
        raise LoweringError(f"Conv2D: groups={g} must divide Cin={cin} and Cout={cout} "
                            f"with w's axis 1 = Cin/groups (got {cpg})")
    hp, wp = h + 2 * ph, wd + 2 * pw
    ho, wo = (hp - dh * (kh - 1) - 1) // sh + 1, (wp - dw * (kw - 1) - 1) // sw + 1
    if min(sh, sw, dh, dw) < 1 or ho < 1 or wo < 1:
        raise LoweringError(f"Conv2D: stride {sh, sw} / dilation {dh, dw} / kernel {kh}x{kw} "
                            f"give an empty output for the padded input {hp}x{wp}")
    elt = lw.out_elt
    s = Scalar.compute(lw.in_dtypes[0])
    act = _activation(s, lw.params)
    dwise = g == cin == cout
    if cpu and s.ty == elt and pointwise(g, (sh, sw), (kh, kw), (ph, pw)) and (
            bias is not None or act is not None or skip is not None):
        return _pointwise(x, w, bias, s, elt, act, skip)
    if cpu and s.ty == elt and stem(g, cin, (sh, sw), (kh, kw), (dh, dw)):
        return _stem(x, w, bias, s, elt, (n, cin, h, wd), (cout, kh, kw), (ph, pw), (sh, sw),
                     (ho, wo), act, skip)
    if cpu and s.ty == elt and (direct(g, (sh, sw), (kh, kw), (ph, pw), (dh, dw))
                                or dwise and direct_depthwise((sh, sw), (dh, dw))):
        return _direct(x, w, bias, s, elt, (n, cin, h, wd), (cout, kh, kw), (ph, pw), (dh, dw),
                       (sh, sw), (ho, wo), depthwise=dwise, act=act, skip=skip)
    if batch:
        raise LoweringError(
            f"Conv2D {x.type} (groups={g}, stride {(sh, sw)}, dilation {(dh, dw)}): a run-time "
            f"batch needs the cpu direct kernel (batch_dims); compile it for a static batch")
    if ph or pw:
        x = insert_slice(x, fill(s.const(0) if s.ty == elt else _zero(elt),
                                 empty([n, cin, hp, wp], elt)), [0, 0, ph, pw])
    out_shape = [n, cout, ho, wo]
    if g == 1 and s.ty == elt:
        y = linalg.conv_2d_nchw_fchw(x, w, outs=[fill(s.const(0), empty(out_shape, elt))],
                                     strides=[sh, sw], dilations=[dh, dw])
    else:
        opg = cout // g
        xg = expand(x, [n, g, cpg, hp, wp], [[0], [1, 2], [3], [4]])
        wg = expand(w, [g, opg, cpg, kh, kw], [[0, 1], [2], [3], [4]])
        # Loops n g o oh | c kh kw | ow: the output column innermost, so each
        # (c, kh, kw) tap is one pass of vector FMAs along an output row (x read
        # at stride sw, the tap's weight broadcast, the row's partial sums in
        # L1). With the reductions innermost (the natural order) every output
        # was a scalar 9-term dot product: depthwise 3x3 x144 at 56^2 took
        # 1.36 ms, 4.4x onnxruntime.
        d = [ir.AffineDimExpr.get(i) for i in range(8)]   # n g o oh c kh kw ow
        row = d[3] * sh + d[5] * dh
        col = d[7] * sw + d[6] * dw
        acc = generic(
            [xg, wg], [fill(s.const(0), empty([n, g, opg, ho, wo], s.ty))],
            [affine_map(8, [0, 1, 4, row, col]), affine_map(8, [1, 2, 4, 5, 6]),
             affine_map(8, [0, 1, 2, 3, 7])],
            [PARALLEL] * 4 + [REDUCTION] * 3 + [PARALLEL],
            lambda a, b, c: s.add(c, s.mul(to_compute(a, s), to_compute(b, s))))[0]
        y = collapse(acc, [[0], [1, 2], [3], [4]])
    if bias is None and act is None and skip is None and rtt(y).element_type == elt:
        return y
    return _epilogue(y, bias, s, act, empty(out_shape, elt), None, skip,
                     lambda v: to_compute(v, s), lambda v: from_compute(v, elt))


def _spatial(lw: Lowering, x, w, bias, skip, cpu: bool):
    """A Conv2D with a run-time image size (``batch_dims``: the classes
    ``spatial_class`` admits): the cpu kernel of ``conv_spatial``."""
    from compiler.registry.ops.conv2d import is_depthwise
    from .conv_spatial import direct_spatial
    cout, cpg, kh, kw = rtt(w).shape
    cin = rtt(x).shape[1]
    g = int(lw.param("groups"))
    stride = _pair(lw.param("stride"), "stride")
    dil = _pair(lw.params.get("dilation", (1, 1)), "dilation")
    pad = _pair(lw.param("padding"), "padding")
    s = Scalar.compute(lw.in_dtypes[0])
    if not cpu or s.ty != lw.out_elt or not spatial_class(
            g, cin, cout, stride, (kh, kw), pad, dil, lw.params):
        raise LoweringError(
            f"Conv2D {x.type} (groups={g}, stride {stride}, dilation {dil}, kernel {kh}x{kw}): "
            f"a run-time image size needs the cpu spatial kernel (``spatial_class``); compile "
            f"it for a static image size")
    return direct_spatial(x, w, bias, s, lw.out_elt, (cout, kh, kw), pad, dil, stride,
                          _activation_of(lw.params), skip, g == cin == cout and g > 1)


def _activation_of(params):
    """The clamp epilogue as a function of the ``Scalar`` it computes in."""
    if params.get("clamp_min") is None and params.get("clamp_max") is None:
        return None
    return lambda s: _activation(s, params)


def spatial_class(groups: int, cin: int, cout: int, stride, kernel, padding, dilation,
                  params) -> bool:
    """Whether the cpu kernel takes this Conv2D's image size at run time
    (``conv_spatial``): the direct classes (``direct``: groups 1, stride 1,
    or 2 without dilation; ``direct_depthwise``), a stem (``stem``, stride
    2) and a pointwise conv (``pointwise``), with no epilogue but the clamp
    (silu and gelu: per image size)."""
    depthwise = groups == cin == cout and groups > 1
    if params.get("silu") or params.get("gelu"):
        return False
    return direct(groups, stride, kernel, padding, dilation) or \
        stem(groups, cin, stride, kernel, dilation) and tuple(stride) == (2, 2) or \
        pointwise(groups, stride, kernel, padding) or \
        depthwise and direct_depthwise(stride, dilation)


@lowers("Conv2D", platform="cpu")
def _conv2d_cpu(lw: Lowering):
    """On cpu, a groups-1 Conv2D of the ``direct`` class is computed directly
    (``_direct``)."""
    return _conv2d(lw, cpu=True)


def _activation(s, params):
    """The epilogue as a function of one computed value (None: none): the
    clamp, with the ``Clamp`` primitive's semantics (``minimumf`` /
    ``maximumf``: a NaN stays NaN), silu (``_silu``: within 4 ulp of the
    recipe's ``Mul(y, Sigmoid(y))``), or gelu, as ``GeluErf`` does."""
    if params.get("silu"):
        return lambda v: _silu(s, v)
    if params.get("gelu"):
        from .elementwise import _gelu_erf
        return lambda v: _gelu_erf(s, v)
    lo, hi = params.get("clamp_min"), params.get("clamp_max")
    if lo is None and hi is None:
        return None

    def act(v):
        if lo is not None:
            v = s.max(v, s.saturated_const(lo))
        return v if hi is None else s.min(v, s.saturated_const(hi))
    return act


#: SiLU (``_silu``): exp(-v) for v in [-88, 88] as 2^-k * e^-r, k = round(v
#: log2 e) (by the 1.5 * 2^23 shifter, whose bits hold k), r = v - k ln2 (ln2
#: in two parts, |r| <= ln2/2), e^-r by a degree-5 polynomial whose r^2..r^5
#: coefficients were fitted here to the relative error of e^r on |r| <= ln2/2
#: (Lawson's iteration; 1.1e-7 with f32 coefficients).
_LOG2E, _LN2_HI, _LN2_LO = 1.4426950408889634, 0.693359375, -2.12194440e-4
_SHIFTER, _SHIFTER_BITS = 12582912.0, 0x4B400000
_EXP5 = (0.4999924302101135, 0.16667111217975616, 0.04188902676105499, 0.008312862366437912)
_SILU_LIMIT = 88.0


def _silu(s, v):
    """``v * sigmoid(v)`` for the conv epilogue. f32 (and f16/bf16, computed
    in f32): ``v * (1 / (1 + exp(-v)))`` with a cheaper exp than the general
    one: v clamped to [-88, 88] first, where 2^-k is one exponent field (no
    overflow or denormal scaling) and 1 + exp(-v) is finite, so the division
    is marked ``arcp``/``ninf`` and LLVM computes it as a reciprocal estimate
    and one Newton step (AVX-512 ``vrcp14ps``, AVX2 ``vrcpps``) instead of a
    ``vdivps``: about 20 vector ops per vector instead of 30, within 4 ulp
    (3 on AVX2; ``tests/codegen/test_conv_epilogue.py``). Below v = -88 the sigmoid is 0
    (true silu there is below 6.1e-37 in magnitude; the recipe's exp overflows
    from -88.7), so -inf gives NaN as ``Mul(y, Sigmoid(y))`` does; NaN stays
    NaN (ordered compares), +inf gives +inf. f64: the recipe's formula."""
    if not isinstance(s.ty, ir.F32Type):
        from .elementwise import _sigmoid
        return s.mul(v, _sigmoid(s, v))
    c = s.const
    i32 = ir.IntegerType.get_signless(32)
    low = s.cmp("lt", v, c(-_SILU_LIMIT))
    vc = arith.select(low, c(-_SILU_LIMIT), v)
    vc = arith.select(s.cmp("gt", vc, c(_SILU_LIMIT)), c(_SILU_LIMIT), vc)
    t = math.fma(vc, c(_LOG2E), c(_SHIFTER))                     # k in t's low bits
    k = arith.subf(t, c(_SHIFTER))
    r = math.fma(arith.negf(k), c(_LN2_HI), vc)
    r = math.fma(arith.negf(k), c(_LN2_LO), r)                    # v = k ln2 + r
    q = c(-_EXP5[3])                                              # e^-r: odd terms negated
    for i, cf in enumerate(reversed(_EXP5[:3])):
        q = math.fma(q, r, c(-cf if i % 2 else cf))
    q = math.fma(q, arith.mulf(r, r), arith.negf(r))              # e^-r - 1
    two = arith.bitcast(s.ty, arith.shli(                         # 2^-k: bits (127 - k) << 23
        arith.subi(arith.constant(i32, _SHIFTER_BITS + 127), arith.bitcast(i32, t)),
        arith.constant(i32, 23)))
    d = s.add(c(1.0), math.fma(q, two, two))                      # 1 + e^-v, finite
    recip = arith.DivFOp(c(1.0), d, fastmath=ir.Attribute.parse("#arith.fastmath<ninf,arcp>"))
    return s.mul(v, arith.select(low, c(0.0), recip.result))


def pointwise(groups: int, stride, kernel, padding) -> bool:
    """Whether this Conv2D is a pointwise one (1x1, stride 1, unpadded,
    groups 1): on cpu a matmul with its bias and clamp in the register tiles
    (``_pointwise``)."""
    return (groups == 1 and tuple(kernel) == (1, 1) and tuple(stride) == (1, 1)
            and tuple(padding) == (0, 0))


#: Pixels per image that are a multiple of this (every register tile's
#: width, ``strategy._EPILOGUE_TILES``: 16 f32, 8 f64 columns) run under the
#: matmul-epilogue schedule; others as one row under the stem's
#: (``_pointwise_row``).
POINTWISE_COLUMNS = 16
#: A pointwise conv of at least this many input channels marks its contraction
#: ``family.LONG_K_ATTR`` (MobileNet's projections: 96 or 144 -> 24 at 28^2),
#: where the cpu strategy may pick other register tiles than for the short
#: contractions of the expansions (``strategy._LONG_K_TILES``).
POINTWISE_LONG_K = 64


def _pointwise(x, w, bias, s, elt, act, skip=None):
    """``out[n] = act(w @ x[n] + bias)`` for each image: x ``[N,Cin,H*W]``,
    w ``[Cout,Cin]``. The contraction (``CONTRACT_ATTR``) starts from zeros,
    and the element-wise generic after it (``EPILOGUE_ATTR``: the bias add,
    the clamp) is where the cpu strategy (``transforms.matmul.epilogue_script``)
    tiles and fuses them: each output tile is computed in registers and
    stored once, where the recipe's MatMul kernel zero-filled the output,
    read and wrote it per block of K, and a second kernel added the bias and
    clamped. (A conv with neither has no epilogue to mark: the generic path.)"""
    from compiler.codegen.family import CONTRACT_ATTR, EPILOGUE_ATTR, LONG_K_ATTR
    h, wd = rtt(x).shape[2:]
    if (h * wd) % POINTWISE_COLUMNS:
        return _pointwise_row(x, w, bias, s, elt, act, skip)
    cout, cin = rtt(w).shape[:2]
    xs = collapse(x, [[0], [1], [2, 3]])
    ws = collapse(w, [[0], [1, 2, 3]])
    n = dims(x)[0]  # a run-time batch (``batch_dims``) stays one
    shape = [n, cout, h * wd]
    acc = generic([ws, xs], [fill(s.const(0), empty(shape, elt))],
                  [affine_map(4, [1, 3]), affine_map(4, [0, 3, 2]), affine_map(4, [0, 1, 2])],
                  [PARALLEL] * 3 + [REDUCTION], lambda a, b, c: s.add(c, s.mul(a, b)))[0]
    acc.owner.attributes[CONTRACT_ATTR] = ir.UnitAttr.get()
    if cin >= POINTWISE_LONG_K:
        acc.owner.attributes[LONG_K_ATTR] = ir.UnitAttr.get()
    if skip is not None:
        skip = collapse(skip, [[0], [1], [2, 3]])
    y = _epilogue(acc, bias, s, act, empty(shape, elt), EPILOGUE_ATTR, skip)
    return expand(y, [n, cout, h, wd], [[0], [1], [2, 3]])


def _pointwise_row(x, w, bias, s, elt, act, skip=None):
    """``_pointwise`` for H*W not a multiple of ``POINTWISE_COLUMNS``: each
    image one row ``[Cin, 1, H*W]`` under the stem's schedule (``_stem``:
    the contraction over (n, co, 0, p | c, 0, 0), ``STEM_ATTR``), whose
    partial last column tile is peeled to its static width. Under
    ``epilogue_script`` that tile ran masked, its accumulator in memory and
    x read by a transposing masked load: MobileNetV2's 32->192 at 14^2,
    batch 8, one x86-64-v3 thread, 0.42 ms; 0.29 as the recipe's MatMul and
    bias/clamp kernel; 0.23 here (AVX-512 0.27, 0.34, 0.24)."""
    from compiler.codegen.family import CONTRACT_ATTR, STEM_ATTR
    h, wd = rtt(x).shape[2:]
    cout = rtt(w).shape[0]
    n = dims(x)[0]
    row = lambda v: expand(collapse(v, [[0], [1], [2, 3]]), [n, rtt(v).shape[1], 1, h * wd],
                           [[0], [1], [2, 3]])
    d = [ir.AffineDimExpr.get(k) for k in range(7)]   # n co oy ox | c ky kx
    zero = fill(s.const(0), empty([n, cout, 1, h * wd], elt))
    zero.owner.attributes[STEM_ATTR] = ir.UnitAttr.get()
    acc = generic([row(x), w], [zero],
                  [affine_map(7, [0, 4, d[2] + d[5], d[3] + d[6]]), affine_map(7, [1, 4, 5, 6]),
                   affine_map(7, [0, 1, 2, 3])],
                  [PARALLEL] * 4 + [REDUCTION] * 3, lambda a, b, o: s.add(o, s.mul(a, b)))[0]
    acc.owner.attributes[CONTRACT_ATTR] = ir.UnitAttr.get()
    # (the result is copied out: a collapse then an expand of the row is
    # not a view the entry writes through; a projecting output map did not
    # vectorize)
    y = _epilogue(acc, bias, s, act, empty([n, cout, 1, h * wd], elt), STEM_ATTR,
                  None if skip is None else row(skip))
    return expand(collapse(y, [[0], [1], [2, 3]]), [n, cout, h, wd], [[0], [1], [2, 3]])


def _epilogue(acc, bias, s, act, init, mark, skip=None, widen=None, narrow=None,
              acc_map=None):
    """``act(acc + bias + skip)`` (the bias along axis 1, the skip of the
    output's shape; any may be None) into ``init``: the element-wise generic
    after a contraction, marked ``mark`` for the strategy that fuses them
    (``_pointwise``, ``_stem``; the direct kernel's crop reads ``acc``
    through ``acc_map``). ``widen`` / ``narrow``: to and from the compute
    type (f16/bf16 on the generic path)."""
    r = rtt(init).rank
    ins = [acc] + [v for v in (bias, skip) if v is not None]
    maps = [acc_map or identity_map(r)] + [affine_map(r, [1])] * (bias is not None) \
        + [identity_map(r)] * (skip is not None)
    widen = widen or (lambda v: v)

    def finish(v, *rest):
        v, rest = widen(v), [widen(u) for u in rest[:-1]]
        for u in rest:   # the bias, then the skip: the recipe's order
            v = s.add(v, u)
        v = v if act is None else act(v)
        return v if narrow is None else narrow(v)

    y = generic(ins, [init], maps + [identity_map(r)], [PARALLEL] * r, finish)[0]
    if mark is not None:
        y.owner.attributes[mark] = ir.UnitAttr.get()
    return y


def serves_pointwise(params, types) -> bool:
    """Whether the fused kernel takes this pointwise Conv2D (``_pointwise``):
    it has a bias or a clamp to fuse, Cout is a multiple of 8 (the register
    tiles' rows: a partial row tile runs masked, several times slower), and
    its images have more pixels than ``FEW_PIXELS`` and at least min(Cout, 64)
    (fewer: the recipe's one matmul over the batch's columns side by side
    keeps its vectors full), or else one image (a static batch of 1). That
    image the recipe ran as a copy to channels-last, a matmul and a bias /
    activation kernel (with a SiLU, a copy back to NCHW as well): 7^2 convs,
    one znver4 thread, x86-64-v3, the layer's thread time min
    (docs/architecture.md "Convolutions on CPU"): 80->320 + SiLU 0.100 ->
    0.046 ms, 64->384 + clamp 0.046 -> 0.040. (At batch 8 the recipe's
    matmul per image was as fast or 2-6% faster with a clamp or a skip.)
    While ``save`` samples a symbolic image (``conv2d.one_form``): at every
    size."""
    from compiler.registry.ops.conv2d import one_form
    out = _out_shape(params, types)
    pixels = out[2] * out[3]
    epilogue = len(types) > 2 or params.get("silu") or params.get("gelu") \
        or params.get("clamp_min") is not None \
        or params.get("clamp_max") is not None
    one_image = isinstance(out[0], int) and out[0] == 1
    return (epilogue and out[1] % 8 == 0 and (one_form(params) or (
        pixels > FEW_PIXELS and (pixels >= min(out[1], 64) or one_image))))


def _out_shape(params, types):
    from compiler.registry import default_registry
    return default_registry()["Conv2D"].infer(list(types), params).shape


def direct(groups: int, stride, kernel, padding, dilation=(1, 1)) -> bool:
    """Whether the cpu kernel computes this Conv2D directly on the flat padded
    input (``_direct``): groups = 1 with stride 1, or stride 2 without
    dilation; not a 1x1 unpadded stride-1 kernel (the recipe multiplies x
    itself) nor patches (kernel = stride: the recipe's one transposing copy),
    except a conv1d's pairs (1x2 stride 2: wav2vec2's last two layers, whose
    GELU the direct kernel's crop applies; 128->128 at 49 columns, batch 8,
    one znver4 thread, x86-64-v3, with its GELU: 0.21 -> 0.18 ms, at 99
    columns 0.40 -> 0.39; the recipe's pad, im2col, matmul, copy and GELU
    kernel were five steps in the model)."""
    stride, kernel = tuple(stride), tuple(kernel)
    if groups != 1 or kernel == stride and kernel not in ((1, 1), (1, 2)):
        return False
    if stride == (1, 1):
        return not (kernel == (1, 1) and tuple(padding) == (0, 0))
    return direct_depthwise(stride, dilation)


#: A groups-1 conv with at most this many output pixels per image (and fewer
#: than its output channels) takes the recipe: its images' pixels become the
#: rows of one matmul (``registry/ops/conv2d.py``). The direct kernel computed
#: such an image in half-empty vectors: 3x3 256->256 at 2x2, batch 8, one
#: znver4 core, 1.16 ms direct vs 0.54 ms; 128->128 at 4x4 0.74 vs 0.65 ms
#: (batch 1: 0.16 vs 0.17 at 2x2, 0.093 vs 0.063 at 4x4).
FEW_PIXELS = 16


def few_pixels(params, types) -> bool:
    """Whether a Conv2D's output has few pixels per image (``FEW_PIXELS``)."""
    out = _out_shape(params, types)
    pixels = out[2] * out[3]
    return pixels <= FEW_PIXELS and pixels < min(out[1], 64)


def batch_dims(types, params) -> tuple | None:
    """The run-time extents of a Conv2D kernel (``codegen/fused.py:
    DYNAMIC_FUSED``): x's and the output's batch, when the cpu kernel computes
    it directly (an ``scf.for`` over the images, each image's code
    specialised on the channels, the spatial size and the weights) or as a
    pointwise matmul (the images its outermost parallel loop); None (static)
    for the other classes. Where the graph's image size is symbolic
    (``image_at_run_time``, set by ``Graph.bind``), the classes
    ``spatial_class`` admits take x's, the skip's and the output's height and
    width at run time too (``conv_spatial``): one kernel per weight shape."""
    from compiler.registry.ops.conv2d import is_depthwise, kernels_shape, split_operands
    from runtime.dtype import DType
    x, w = types[0].shape, types[1].shape
    if len(x) != 4:
        return None
    g, stride = params["groups"], params["stride"]
    dil = params.get("dilation", (1, 1))
    w = kernels_shape(w, params)   # (a winograd w: 3x3 kernels, the direct class's batch)
    # (``stem``: a conv1d front end's; its loop over the images is the 2-D stem's)
    if not (direct(g, stride, w[2:], params["padding"], dil)
            or stem(g, x[1], stride, w[2:], dil)
            or is_depthwise(types, params) and direct_depthwise(stride, dil)
            or pointwise(g, stride, w[2:], params["padding"])):
        return None
    # x, the skip (the residual) and the output have the batch, and with
    # the spatial kernel (``spatial_class``) the image size
    image = bool(params.get("image_at_run_time")) and types[0].dtype in (DType.F32, DType.F64) \
        and spatial_class(g, x[1], w[0], stride, w[2:], params["padding"], dil, params)
    dyn = (True, False, image, image)
    skip = split_operands(range(len(types)), params)[3]
    return (dyn,) + tuple(dyn if i == skip else (False,) * len(t.shape)
                          for i, t in enumerate(types[1:], 1)) + (dyn,)


def direct_depthwise(stride, dilation=(1, 1)) -> bool:
    """Whether the cpu kernel computes this depthwise Conv2D (groups = Cin =
    Cout) directly, a block of channels at a time (``_direct``): stride 1, or stride 2
    without dilation (the strides ``direct`` takes for groups = 1 too)."""
    stride = tuple(stride)
    return stride == (1, 1) or max(stride) <= 2 and tuple(dilation) == (1, 1)


def _direct(x, w, bias, s, elt, xshape, wshape, pad, dil, stride, oshape, depthwise=False,
            act=None, skip=None):
    """On cpu, one image at a time (an ``scf.for``), and for a depthwise conv
    (``depthwise``: w ``[C,1,Kh,Kw]``) one block of its channels at a time
    (``_Geometry.channel_block``): the block's planes (a few KiB) stay in L1
    between being written and read, instead of a padded copy of the whole
    image passing through memory. The temporaries (``_Geometry.scratch``)
    are allocated once and carried through the loops, so an iteration
    neither allocates nor clears them again. ``act``: the clamp or silu
    epilogue (``_activation``), applied by the crop, which adds the skip
    (``skip``, the residual) before it."""
    (n, cin, h, wd), (cout, kh, kw), (ho, wo) = xshape, wshape, oshape
    geo = _Geometry(pad, dil, stride, (kh, kw), (h, wd), (ho, wo), depthwise)
    k = geo.channel_block(cin, _bytes(elt)) if depthwise else cin
    scratch0 = geo.scratch(s, elt, k, k if depthwise else cout)

    def image(i, out, *scratch):
        if not depthwise:
            y, scratch = _planes(slice_at(x, [i], [1, cin, h, wd]), w, bias, s, elt, geo,
                                 scratch, out, [i], act, skip)
            return [y, *scratch]

        def channels(b, out, *scratch):
            c = arith.muli(b, index(k))
            y, scratch = _planes(slice_at(x, [i, c], [1, k, h, wd]),
                                 slice_at(w, [c], [k, 1, kh, kw]),
                                 None if bias is None else slice_at(bias, [c], [k]), s, elt, geo,
                                 scratch, out, [i, c], act, skip)
            return [y, *scratch]
        return _for(cin // k, [out, *scratch], channels)

    return _for(n, [empty([n, cout, ho, wo], elt), *scratch0], image)[0]


def _split_phases(xp, bufs, g, phases, s, stacked=False) -> list:
    """Each stride phase's plane of the padded image ``xp`` ``[1, C, rows*sh,
    Wq*sw]``, written into ``bufs`` (one per phase with taps): for every
    channel and phase row, the padded row is read in contiguous vectors of
    ``_SPLIT`` elements and, with sw = 2, ``vector.deinterleave``d into its
    two column phases. (As a copy from a view of stride 2 it was scalar
    code: LLVM unrolls such a row and cannot vectorize the strided loads.)
    ``stacked``: ``bufs`` is one tensor ``[1, C*P, rows, Wq]`` holding the P
    phases of each channel in turn (``_stem``)."""
    from compiler.mlir import vector
    cin, width = rtt(xp).shape[1], g.wq * g.sw
    elt = rtt(xp).element_type
    which = {(ry, rx): k for k, (ry, rx, _, _) in enumerate(phases)}
    pad = s.const(0)
    row_of = ir.AffineMap.get_minor_identity(4, 1)
    # whole phase columns per read; a larger stride: 16 columns of each phase
    split = _SPLIT // g.sw * g.sw if g.sw <= 2 else _PIXEL_BLOCK * g.sw
    whole, rest = divmod(width, split)

    def channel(c, *bufs):
        def piece(ry, y, q, at, n, bufs):   # the n columns from at (an index) of row y
            v = vector.TransferReadOp(ir.VectorType.get([n], elt), xp,
                                      [index(0), c, y, at], row_of, pad, [True]).result
            at_q = arith.divui(at, index(g.sw)) if g.sw > 1 else at
            for rx, part in enumerate(_column_phases(v, n, g.sw)):
                k = which.get((ry, rx))
                if k is None:
                    continue
                # stacked: phase k of channel c is channel c*P + k of bufs[0]
                j, ch = (0, arith.addi(arith.muli(c, index(len(phases))), index(k))) \
                    if stacked else (k, c)
                bufs[j] = vector.TransferWriteOp(bufs[j].type, part, bufs[j],
                                                 [index(0), ch, q, at_q], row_of, [True]).result
            return bufs

        def row(q, *bufs):
            bufs = list(bufs)
            for ry in range(g.sh):
                if not any((ry, rx) in which for rx in range(g.sw)):
                    continue
                y = arith.addi(arith.muli(q, index(g.sh)), index(ry))
                if whole > _SPLIT_UNROLLED:   # a long row (a conv1d): a loop of reads
                    bufs = _for(whole, bufs, lambda i, *b: piece(
                        ry, y, q, arith.muli(i, index(split)), split, list(b)))
                else:
                    for i in range(whole):
                        bufs = piece(ry, y, q, index(i * split), split, bufs)
                if rest:
                    bufs = piece(ry, y, q, index(whole * split), rest, bufs)
            return bufs
        return _for(g.rows, list(bufs), row)

    return _for(cin, list(bufs), channel)


def _column_phases(v, n: int, sw: int) -> list:
    """The ``sw`` column phases of the row piece ``v`` of ``n`` elements
    (``n`` a multiple of ``sw``): part rx holds elements rx, rx + sw, ...
    (``vector.deinterleave`` for sw = 2, a shuffle for a larger stride)."""
    from compiler.mlir import vector
    if sw == 1:
        return [v]
    if sw == 2:
        return list(vector.DeinterleaveOp(v).results)
    return [vector.shuffle(v, v, list(range(rx, n, sw))) for rx in range(sw)]


def _scatter_rows(x, bufs, g, phases, stacked=False) -> list:
    """The zero-padded image ``x`` ``[1, C, H, W]`` split into its stride
    phases without a padded copy: each input row is read in contiguous
    vectors of up to ``_SPLIT`` elements and, with sw = 2,
    ``vector.deinterleave``d into its even and odd columns; each part is
    written where the padding puts it in its phase's plane (``bufs``, one
    per phase with taps, ``[1, C, rows, Wq]``, zeroed once: the padding is
    never written). With stride 1 the one phase is the padded plane. The
    rows of phase row ry are one ``scf.for`` over the input rows that land
    there. Returns the planes."""
    from compiler.mlir import vector
    cin, elt = rtt(x).shape[1], rtt(x).element_type
    which = {(ry, rx): k for k, (ry, rx, _, _) in enumerate(phases)}
    pad = arith.constant(elt, 0.0)
    row_of = ir.AffineMap.get_minor_identity(4, 1)
    even = g.wd - g.wd % g.sw      # columns deinterleaved; an odd last one alone
    pieces = [(at, min(_SPLIT, even - at)) for at in range(0, even, _SPLIT)]
    if even < g.wd:
        pieces.append((even, 1))

    # a long row (a conv1d's): its whole pieces are a loop, not straight-line code
    looped = len(pieces) > _SPLIT_UNROLLED and pieces[0][1] == _SPLIT
    whole = sum(1 for _, n in pieces if n == _SPLIT) if looped else 0

    def write(bufs, c, q, ry, j, v, base=None):
        """``v`` (input columns j, j + sw, ...; plus ``base``, an index that
        is a multiple of ``_SPLIT``, where given) into its phase's row q."""
        col = j + g.pw
        k = which.get((ry, col % g.sw))
        if k is not None:
            at = index(col // g.sw) if base is None else \
                arith.addi(arith.divui(base, index(g.sw)), index(col // g.sw))
            # stacked: phase k of channel c is channel c*P + k of bufs[0]
            j, ch = (0, arith.addi(arith.muli(c, index(len(phases))), index(k))) \
                if stacked else (k, c)
            bufs[j] = vector.TransferWriteOp(bufs[j].type, v, bufs[j],
                                             [index(0), ch, q, at], row_of, [True]).result

    def piece(bufs, c, q, r, ry, at, n, base=None):
        """The n input columns from at (plus ``base``) of row r into phase row q."""
        start = index(at) if base is None else arith.addi(base, index(at))
        v = vector.TransferReadOp(ir.VectorType.get([n], elt), x,
                                  [index(0), c, r, start], row_of, pad, [True]).result
        parts = [v] if g.sw == 1 or n == 1 else list(vector.DeinterleaveOp(v).results)
        for d, part in enumerate(parts):
            write(bufs, c, q, ry, at + d, part, base)
        return bufs

    def channel(c, *bufs):
        out = list(bufs)
        for ry in range(g.sh):
            if not any((ry, rx) in which for rx in range(g.sw)):
                continue
            # input rows r = q*sh + ry - ph with 0 <= r < H
            q0 = -(-(g.ph - ry) // g.sh)
            q1 = (g.h - 1 + g.ph - ry) // g.sh
            if q1 < q0:
                continue

            def row(i, *bufs, ry=ry, q0=q0):
                bufs = list(bufs)
                q = arith.addi(i, index(q0))
                r = arith.addi(arith.muli(q, index(g.sh)), index(ry - g.ph))
                if whole:
                    bufs = _for(whole, bufs, lambda i, *b: piece(
                        list(b), c, q, r, ry, 0, _SPLIT, arith.muli(i, index(_SPLIT))))
                for at, n in pieces[whole:]:
                    bufs = piece(bufs, c, q, r, ry, at, n)
                return bufs
            out = _for(q1 - q0 + 1, out, row)
        return out

    return _for(cin, list(bufs), channel)


#: Elements of a padded row read at once by ``_split_phases`` (even: a stride
#: of 2 splits each read in two).
_SPLIT = 64
#: At most this many reads of a row are straight-line code; more are a loop
#: (a conv1d's 8000-column row as 134 unrolled reads took LLVM 100 s).
_SPLIT_UNROLLED = 8


class _Geometry:
    """The flat-plane geometry of a direct convolution (see ``_planes``)."""

    def __init__(self, pad, dil, stride, kernel, in_hw, out_hw, depthwise, stem=False):
        (self.ph, self.pw), (self.dh, self.dw), (self.sh, self.sw) = pad, dil, stride
        (self.kh, self.kw), (self.h, self.wd), (self.ho, self.wo) = kernel, in_hw, out_hw
        self.depthwise = depthwise
        # a strided conv has no padded copy: ``_scatter_rows`` writes each
        # input row into its stride phases' planes, zeroed once
        self.strided = (self.sh, self.sw) != (1, 1)
        hp, wp = self.h + 2 * self.ph, self.wd + 2 * self.pw
        self.hq, self.wq = -(-hp // self.sh), -(-wp // self.sw)
        # a depthwise plane (with a stride, each phase's) whose rows pad to
        # whole vectors at little cost has that pitch, and its pixels are
        # exactly Ho such rows (``DW_PITCH_ATTR``): the cpu schedule computes
        # blocks of rows
        self.pitch = _dw_pitch(self.wq) if depthwise else None
        if self.pitch:
            self.wq = self.pitch
        # pixels computed: Ho full-width rows, rounded up to whole 16-pixel
        # vectors (32 for a depthwise conv, whose 1 x nr1 tiles are 32 or 64
        # pixels: a peeled 48-pixel remainder became shuffles), or fewer to a
        # power of two (a register tile's remainder of 24 pixels was a <24 x
        # float> that LLVM broke into shuffles and spills: 3.6 GFLOP/s at a 4x4
        # output, 42 as 32 pixels)
        block = 2 * _PIXEL_BLOCK if depthwise else _PIXEL_BLOCK
        npix = self.ho * self.wq
        self.npix = (npix if self.pitch else -(-npix // block) * block if npix > block
                     else 1 << (npix - 1).bit_length())
        reach = (self.kh - 1) // self.sh * self.dh * self.wq + (self.kw - 1) // self.sw * self.dw
        self.rows = max(self.hq + 1, -(-(self.npix + reach) // self.wq))
        # a strided groups-1 conv whose every stride phase holds taps, and whose
        # output rows the schedule's ``direct_rows`` cannot take (8-lane
        # vectors of a row pass the phase's width), has its phases stacked
        # per channel and one generic over all Kh x Kw taps (``_planes``)
        self.stacked = (self.strided and not depthwise and not stem
                        and self.kh >= self.sh and self.kw >= self.sw
                        and -(-self.wo // 8) * 8 > self.wq)

    def channel_block(self, channels: int, elt_bytes: int) -> int:
        """How many channels a depthwise conv computes per iteration: the
        largest divisor of ``channels`` whose phase planes and accumulators
        fit in ``_DW_BLOCK_BYTES`` (at least 1). A small plane's channels
        are scattered a block at a time before the first is read (one 7^2
        plane read right after its rows were written waited on the stores),
        and the block shares the iteration's work."""
        per = (len(list(self.phases())) * self.rows * self.wq + self.npix) * elt_bytes
        fit = max(1, _DW_BLOCK_BYTES // per)
        return max(d for d in range(1, min(fit, channels) + 1) if channels % d == 0)

    def phases(self):
        """(ry, rx, taps down, taps across) of each stride phase with taps."""
        for ry in range(self.sh):
            for rx in range(self.sw):
                nqy, nqx = len(range(ry, self.kh, self.sh)), len(range(rx, self.kw, self.sw))
                if nqy and nqx:
                    yield ry, rx, nqy, nqx

    def scratch(self, s, elt, planes: int, cout: int) -> list:
        """The temporaries of ``_planes``: the zero-padded input (zeroed
        here, once: every use overwrites the same interior) and the
        accumulator (stride 1). A depthwise conv has no
        padded input: the accumulator and each phase's plane (the padded
        plane for stride 1), zeroed here (``_scatter_rows`` writes the same
        interior for every channel). So has a strided groups-1 conv: its
        phases' planes, written from x by ``_scatter_rows`` (a padded copy
        split into phases afterwards had moved the image twice: conv1d k3 s2
        128->128 at 1600, one thread, 1.12-1.14 -> 1.04-1.06 ms)."""
        if self.stacked:
            nph = self.sh * self.sw
            return [empty([1, cout, self.npix], elt),
                    fill(s.const(0), empty([1, planes * nph, self.rows, self.wq], elt))]
        if self.depthwise or self.strided:
            return [empty([1, cout, self.npix], elt)] + [
                fill(s.const(0), empty([1, planes, self.rows, self.wq], elt))
                for _ in self.phases()]
        xp = fill(s.const(0), empty([1, planes, self.rows, self.wq], elt))
        return [xp, empty([1, cout, self.npix], elt)]


def _planes(xi, w, bias, s, elt, geo, scratch, out, at, act=None, skip=None):
    """The direct convolution of one image ``xi`` ``[1, C, H, W]`` with w
    ``[Co, C, Kh, Kw]``, into ``out`` at ``at``; returns (out, the scratch
    tensors ``_Geometry.scratch`` to carry to the next use). The zero-padded
    image is split into its stride phases (``_scatter_rows``, no padded copy) (phase (ry, rx) holds the pixels
    ``(qy*sh + ry, qx*sw + rx)``; stride 1: the one phase is the padded
    image) and each phase is flattened per channel, ``[C, (Hq+1)*Wq]`` (one
    extra zero row keeps the last tap's run inside the plane). The output
    is computed as Ho full-width rows of Wq pixels: the tap (qy, qx) of
    phase (ry, rx) (the kernel tap (qy*sh + ry, qx*sw + rx); with stride 1
    and a dilation, the tap (ky, kx) at offset (ky*dh, kx*dw)) reads element
    ``p + qy*Wq + qx`` of the phase's plane for output pixel p: a
    unit-stride run. One generic per phase with taps, marked
    ``DIRECT_CONV_ATTR``, over (n, co, p | c, qy, qx) accumulates ``out[n,
    co, p] += plane[n, c, p + qy*Wq + qx] * w[co, c, qy*sh + ry, qx*sw +
    rx]``; the accumulator starts as the bias. The first Wo columns of each
    row are the image's output (one copy, ``CROP_ATTR``, which adds the skip
    ``skip`` at ``at`` and applies the clamp epilogue ``act``). A depthwise block (``geo.depthwise``) has no
    padded copy (``_scatter_rows`` fills the phase planes), its generics read
    plane co for output channel co, and its accumulator starts at zero: the
    crop adds the bias. A strided groups-1 conv has no padded copy either:
    ``_scatter_rows`` writes x's rows into the phases' planes; where its
    output rows are too narrow for ``direct_rows`` (``_Geometry.stacked``)
    the phases of channel c are channels ``c*P + ry*sw + rx`` of one plane
    and one generic over (n, co, p | c, ky, kx) reads tap (ky, kx) at
    channel ``c*P + (ky mod sh)*sw + kx mod sw``, element ``p + (ky floordiv
    sh)*Wq + kx floordiv sw``: every tap of a channel in one pass over the
    accumulator tile (one pass per phase, of 1 to 4 taps, had spent its
    time on the input channels' loop: 3x3 s2 128->256 at 28^2, one thread,
    1.78-1.80 -> 1.48-1.49 ms). The cpu strategy
    ``conv_strategy`` register-tiles each generic (``transforms/conv.py``)."""
    from compiler.codegen.family import (CROP_ATTR, DIRECT_CONV_ATTR, DIRECT_ROWS_ATTR,
                                         DIRECT_STACKED_ATTR, DW_PITCH_ATTR)
    g = geo
    cin, cout = rtt(xi).shape[1], rtt(w).shape[0]
    if g.depthwise or g.strided:
        xp, (acc, *phase_bufs) = None, scratch
    else:
        xp, acc, *phase_bufs = scratch
        xp = insert_slice(xi, xp, [0, 0, g.ph, g.pw])
    if bias is None or g.depthwise:   # depthwise: the crop adds the bias
        acc = fill(s.const(0), acc)
    else:
        acc = generic([bias], [acc], [affine_map(3, [1]), identity_map(3)], [PARALLEL] * 3,
                      lambda b, _o: b)[0]
    d = [ir.AffineDimExpr.get(k) for k in range(6)]   # n co p | c qy qx
    phases = list(g.phases())
    planes = _scatter_rows(xi, phase_bufs, g, phases, g.stacked) \
        if g.depthwise or g.strided else []
    if g.stacked:   # one generic: tap (ky, kx) reads phase (ky mod sh, kx mod sw)
        c = ir.AffineConstantExpr.get
        ch = d[3] * len(phases) + ir.AffineModExpr.get(d[4], c(g.sh)) * g.sw \
            + ir.AffineModExpr.get(d[5], c(g.sw))
        tap = d[2] + ir.AffineFloorDivExpr.get(d[4], c(g.sh)) * g.wq \
            + ir.AffineFloorDivExpr.get(d[5], c(g.sw))
        acc = generic([collapse(planes[0], [[0], [1], [2, 3]]), w], [acc],
                      [affine_map(6, [0, ch, tap]), affine_map(6, [1, 3, 4, 5]),
                       affine_map(6, [0, 1, 2])],
                      [PARALLEL] * 3 + [REDUCTION] * 3,
                      lambda a, b, o: s.add(o, s.mul(a, b)))[0]
        acc.owner.attributes[DIRECT_CONV_ATTR] = ir.UnitAttr.get()
        acc.owner.attributes[DIRECT_STACKED_ATTR] = ir.UnitAttr.get()
        phases = []
    for k, (ry, rx, nqy, nqx) in enumerate(phases):
        if g.sh == g.sw == 1 and not g.depthwise:
            plane, wt = xp, w
        else:
            plane = planes[k]
            wsize = [cout, rtt(w).shape[1], nqy, nqx]
            wt = tensor.ExtractSliceOp(
                ir.RankedTensorType.get(wsize, elt), w, [], [], [],
                [0, 0, ry, rx], wsize, [1, 1, g.sh, g.sw]).result
        flat = collapse(plane, [[0], [1], [2, 3]])
        tap = d[2] + d[4] * (g.dh * g.wq) + d[5] * g.dw
        # depthwise: output channel co reads plane co (c has extent 1)
        acc = generic([flat, wt], [acc],
                      [affine_map(6, [0, 1 if g.depthwise else 3, tap]),
                       affine_map(6, [1, 3, 4, 5]),
                       affine_map(6, [0, 1, 2])],
                      [PARALLEL] * 3 + [REDUCTION] * 3,
                      lambda a, b, c: s.add(c, s.mul(a, b)))[0]
        acc.owner.attributes[DIRECT_CONV_ATTR] = ir.UnitAttr.get()
        if g.pitch:
            acc.owner.attributes[DW_PITCH_ATTR] = ir.IntegerAttr.get(
                ir.IntegerType.get_signless(64), g.pitch)
        else:   # (a depthwise stride-2 phase too: its plane is a stride-1 one of its taps)
            acc.owner.attributes[DIRECT_ROWS_ATTR] = ir.DenseI64ArrayAttr.get(
                [g.wq, g.ho, g.wo])
    # the first Wo columns of each row (all of them when Wq = Wo), read
    # through the copy's map, not a view: the schedule hoists the
    # accumulator tiles only out of a buffer that no view aliases
    e = [ir.AffineDimExpr.get(k) for k in range(4)]
    sizes = [1, cout, g.ho, g.wo]
    y = _epilogue(acc, bias if g.depthwise else None, s, act, slice_at(out, at, sizes),
                  CROP_ATTR, None if skip is None else slice_at(skip, at, sizes),
                  acc_map=affine_map(4, [0, 1, e[2] * g.wq + e[3]]))
    return insert_at(y, out, at), [acc, *planes] if xp is None else [xp, acc, *planes]


#: A strided groups-1 conv with at most this many input channels is a stem
#: (``stem``): the first conv of an image net, Cin = 3 (RGB), 1 (grey) or 4.
STEM_CHANNELS = 4


def stem(groups: int, cin: int, stride, kernel, dilation=(1, 1)) -> bool:
    """Whether the cpu kernel computes this Conv2D as a stem (``_stem``):
    groups 1, at most ``STEM_CHANNELS`` input channels, stride 2 without
    dilation, and a kernel of at least 2 taps each way that is not the stride
    (a patch conv), so that every stride phase holds taps; or a conv1d front
    end (one row) with a column stride above 2 and more taps than the stride
    (wav2vec2's 1->512 k10 s5; the recipe had multiplied its im2col: 1->128
    at 8000, batch 8, one thread, x86-64-v3 1.24 -> 0.91 ms, AVX-512 0.99 ->
    0.92)."""
    stride, kernel = tuple(stride), tuple(kernel)
    if groups != 1 or cin > STEM_CHANNELS or tuple(dilation) != (1, 1):
        return False
    if stride == (2, 2):
        return min(kernel) >= 2 and kernel != (2, 2)
    # a conv1d front end (a Conv2D over [N, C, 1, W]): one row, stride s > 2
    # (2 is the direct kernel's), a kernel of more than s taps
    return stride[0] == kernel[0] == 1 and 2 < stride[1] < kernel[1]


def _stem(x, w, bias, s, elt, xshape, wshape, pad, stride, oshape, act, skip=None):
    """A stem (``stem``: few input channels, stride 2) as one contraction
    over all its taps whose bias and activation run in its register tiles.
    Per image, the zero-padded image is split into its stride phases, stacked
    into one tensor ``[1, Cin*P, rows, Wq]`` (phase k = ry*sw + rx of channel
    c is channel c*P + k); the contraction (``CONTRACT_ATTR``) over (n, co,
    oy, ox | c, ky, kx) reads the tap (ky, kx) of output pixel (oy, ox) at
    ``planes[n, c*P + (ky mod sh)*sw + kx mod sw, oy + ky floordiv sh, ox +
    kx floordiv sw]`` and the weight ``w[co, c, ky, kx]`` in place, and the
    element-wise generic after it (``STEM_ATTR``: bias, activation) writes
    the image's output. The cpu strategy ``conv-stem``
    (``transforms/stem.py: stem_scripts``) tiles the epilogue mr channels x
    nr columns, fuses the contraction into the tile and keeps the tile's
    accumulators in registers over its Cin*Kh*Kw taps: the output is
    written once. (The stride-2 direct kernel, ``_planes``, accumulated each
    phase's few taps, 3 x 4 or fewer, in a pass of its own over a full-width
    accumulator in memory, which a bias pass filled and a crop copied out.)"""
    from compiler.codegen.family import CONTRACT_ATTR, STEM_ATTR
    (n, cin, h, wd), (cout, kh, kw), (ho, wo) = xshape, wshape, oshape
    g = _Geometry(pad, (1, 1), stride, (kh, kw), (h, wd), (ho, wo), False, stem=True)
    g.rows = g.hq   # taps read phase rows oy + ky floordiv sh < Hq (no flat runs here)
    phases = list(g.phases())
    nph = len(phases)   # sh*sw: every phase holds taps (``stem``)
    xp0 = fill(s.const(0), empty([1, cin, g.rows * g.sh, g.wq * g.sw], elt))
    planes0 = empty([1, cin * nph, g.rows, g.wq], elt)
    d = [ir.AffineDimExpr.get(k) for k in range(7)]   # n co oy ox | c ky kx
    c = ir.AffineConstantExpr.get
    ch = d[4] * nph + ir.AffineModExpr.get(d[5], c(g.sh)) * g.sw \
        + ir.AffineModExpr.get(d[6], c(g.sw))
    row = d[2] + ir.AffineFloorDivExpr.get(d[5], c(g.sh))
    col = d[3] + ir.AffineFloorDivExpr.get(d[6], c(g.sw))
    size = [1, cout, ho, wo]

    def columns(planes, dest, skip_i, c0, cw):
        """Output columns [c0, c0 + cw) of one image: the contraction and
        its epilogue, written into ``dest`` (the image's output)."""
        part = [1, cout, ho, cw]
        if cw != wo:
            planes = extract_slice(planes, [0, 0, 0, c0],
                                   [1, cin * nph, g.rows, cw + (kw - 1) // g.sw])
            skip_i = None if skip_i is None else extract_slice(skip_i, [0, 0, 0, c0], part)
        zero = fill(s.const(0), empty(part, elt))
        zero.owner.attributes[STEM_ATTR] = ir.UnitAttr.get()   # vectorized in the tile
        acc = generic([planes, w], [zero],
                      [affine_map(7, [0, ch, row, col]), affine_map(7, [1, 4, 5, 6]),
                       affine_map(7, [0, 1, 2, 3])],
                      [PARALLEL] * 4 + [REDUCTION] * 3,
                      lambda a, b, o: s.add(o, s.mul(a, b)))[0]
        acc.owner.attributes[CONTRACT_ATTR] = ir.UnitAttr.get()
        init = dest if cw == wo else extract_slice(dest, [0, 0, 0, c0], part)
        y = _epilogue(acc, bias, s, act, init, STEM_ATTR, skip_i)
        return y if cw == wo else insert_slice(y, dest, [0, 0, 0, c0])

    def image(i, out, xp, planes):
        xp = insert_slice(slice_at(x, [i], [1, cin, h, wd]), xp, [0, 0, g.ph, g.pw])
        planes, = _split_phases(xp, [planes], g, phases, s, stacked=True)
        y = slice_at(out, [i], size)
        skip_i = None if skip is None else slice_at(skip, [i], size)
        for c0, cw in _stem_column_blocks(wo):
            y = columns(planes, y, skip_i, c0, cw)
        return [insert_at(y, out, [i]), xp, planes]

    return _for(n, [empty([n, cout, ho, wo], elt), xp0, planes0], image)[0]


#: The direct convolution computes a multiple of this many pixels per image.
_PIXEL_BLOCK = 16


def _stem_column_blocks(wo: int) -> list[tuple[int, int]]:
    """The (first column, width) blocks of a stem's output rows: all of
    them, or, where the last register tile (``_PIXEL_BLOCK`` columns wide,
    the stem tiles' widest ``nr``) would be partial and not a power of two
    wide, the whole tiles and then the last ``_PIXEL_BLOCK`` columns as a
    block of their own, which recomputes a few columns of the one before
    (the same taps in the same order: the same bits). The partial tile's
    vectors (``vector<6x1x15xf32>`` for wav2vec2's 1599 columns) became
    scalar code with spilled accumulators: 1->128 k10 s5 at 8000, batch 8,
    one znver4 thread, x86-64-v3, the conv alone 0.69-0.71 -> 0.61-0.69 ms
    (docs/architecture.md, stems)."""
    rest = wo % _PIXEL_BLOCK
    if wo <= _PIXEL_BLOCK or rest & (rest - 1) == 0:
        return [(0, wo)]
    return [(0, wo - rest), (wo - _PIXEL_BLOCK, _PIXEL_BLOCK)]


#: The bytes a depthwise conv's channel block (planes and accumulators) may
#: take (``_Geometry.channel_block``). MobileNetV2 batch 8, one znver4 core,
#: A/B against one channel at a time: 3x3 x384 at 7^2 0.85x (blocks of 6);
#: with 16 KiB the 14^2 and 28^2 layers were 4-16% slower (blocks of 8, 2).
_DW_BLOCK_BYTES = 4 * 1024


#: The row pitch of a depthwise plane is its padded width (with a stride, its
#: phases' width) rounded up to a multiple of ``_DW_ROW`` elements (a 512-bit
#: f32 vector) when that adds at most ``_DW_ROW_WASTE`` of the pixels (56 + 2
#: -> 64, 28 + 2 -> 32; stride 2: (56 + 2) / 2 -> 32, (28 + 2) / 2 -> 16; not
#: 7 + 2 -> 16 nor (14 + 2) / 2 -> 16): ``_Geometry.pitch``.
_DW_ROW, _DW_ROW_WASTE = 16, 0.15


def _dw_pitch(wp: int) -> int | None:
    pitch = -(-wp // _DW_ROW) * _DW_ROW
    return pitch if pitch <= wp * (1 + _DW_ROW_WASTE) else None


def _bytes(elt: "ir.Type") -> int:
    return ir.FloatType(elt).width // 8


def _zero(elt: "ir.Type") -> "ir.Value":
    return arith.constant(elt, 0.0)


# -- kernel params mapping (the mlir-cpu-fused family, compiler/codegen/fused.py) --
def _register_kernel() -> None:
    from compiler.codegen.fused import CONV2D, fused_kernel
    from compiler.registry import default_registry
    from runtime import params as P
    from runtime.dtype import DType

    def back(p, types):
        return {"stride": tuple(p.stride), "padding": tuple(p.padding), "groups": p.groups,
                "dilation": tuple(p.dilation), "clamp_min": p.clamp_min, "clamp_max": p.clamp_max,
                "silu": True if p.silu else None, "gelu": True if p.gelu else None,
                "residual": True if p.residual else None,
                "image_at_run_time": True if p.image_at_run_time else None,
                "winograd": True if p.winograd else None}

    from compiler.registry.ops.conv2d import is_depthwise, kernels_shape, one_form, whole_image

    # The ``direct`` groups-1 convs and the stride-1/2 depthwise ones run here
    # (``_direct``); other groups-1 convs take the recipe (im2col + the tiled,
    # threaded MatMul kernel), and so does a depthwise conv of another stride
    # (its taps' Mul/Add chain, one elementwise kernel).
    def serves(params, types):
        if params.get("winograd"):   # (``fuel-prepack-weights`` made it for this kernel)
            return True
        if params.get("gelu") and types[0].dtype != DType.F32:
            # f64 erf has no vector expansion (a libm call per element): the
            # GeluErf stays a kernel of its own
            return False
        if pointwise(params["groups"], params["stride"], types[1].shape[2:], params["padding"]):
            return serves_pointwise(params, types)
        if params["groups"] == 1 and tuple(params["stride"]) != (2, 2) and stem(
                1, types[0].shape[1], params["stride"], types[1].shape[2:], params["dilation"]):
            # a conv1d stem, its GeluErf in the register tiles (f32 only, as
            # above): 1->128 k10 s5 at 8000, one znver4 thread, fastest calls,
            # two kernels -> one: batch 8 x86-64-v3 1.77 -> 1.73-1.75 ms,
            # AVX-512 1.17-1.18 -> 1.16-1.17 (its 4 x 16 erf tiles,
            # strategy._STEM_ERF_TILES); batch 1 0.227 -> 0.220, 0.152 ->
            # 0.152 (docs/architecture.md "Convolutions on CPU")
            return True
        if params["groups"] == 1:
            return direct(1, params["stride"], types[1].shape[2:], params["padding"],
                          params["dilation"]) and (one_form(params) or (
                              not few_pixels(params, types) and not whole_image(types, params)))
        if is_depthwise(types, params):
            return direct_depthwise(params["stride"], params["dilation"])
        return True

    @fused_kernel("Conv2D", precision=CONV2D, dtypes=(DType.F32, DType.F64),
                  from_params=back, keys=lambda t: [(t,) * 3, (t,) * 4, (t,) * 5], serves=serves)
    def _conv_params(params, types):
        out = default_registry()["Conv2D"].infer(list(types), params)
        return P.Conv2D(tuple(types[0].shape), kernels_shape(types[1].shape, params),
                        tuple(out.shape),
                        tuple(params["stride"]), tuple(params["padding"]),
                        tuple(params["dilation"]), params["groups"],
                        params.get("clamp_min"), params.get("clamp_max"),
                        bool(params.get("silu", False)), bool(params.get("gelu", False)),
                        bool(params.get("residual", False)),
                        bool(params.get("image_at_run_time", False)),
                        bool(params.get("winograd", False)))


_register_kernel()
