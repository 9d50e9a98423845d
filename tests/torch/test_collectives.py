"""Correctness of every collective of the chorus backend, against Gloo.

One multi-process run per world size (1, 2, 3, 4) creates the chorus default
group, then for each family of operations a fresh chorus group and a fresh
Gloo group over the same ranks, runs every case with identical inputs on both
(deterministic per rank and case), and compares: exactly for integers, MIN/MAX,
PRODUCT and data movement, within TOL for floating SUM/AVG.  Where Gloo of
torch 1.13 lacks the op or dtype the reference is computed locally from all
ranks' inputs (see GLOO_DTYPES).  Every rooted op runs with every root; ops
with an in-place form run in place and out of place; non-contiguous tensors
(strided and transposed views, offset views) must give the results of
contiguous ones and leave the memory around the view alone.

The run's results are shared by the parametrized tests (one per family and
world size), so a failure names its family, and the processes start once per
world size.
"""

import datetime
import functools
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_mp  # noqa: E402

torch_mp.require_backend()

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from torch_mp import compare, compare_lists, stable_seed  # noqa: E402

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int8, torch.uint8, torch.int32, torch.int64]
ALL_DTYPES = FLOATS + INTS + [torch.bool]
HALF = (torch.float16, torch.bfloat16)

# What Gloo in torch 1.13 does (probed op by op, dtype by dtype, on 2 ranks):
# every collective refuses bfloat16 and bool ("Invalid scalar type");
# ReduceOp.AVG is refused ("Cannot use ReduceOp.AVG with Gloo"); reduce_scatter,
# _reduce_scatter_base, all_to_all (list form) and _all_gather_base are not
# implemented.  In those cases the expected result is computed locally from
# the known inputs of all ranks instead (every such place says so).  Gloo
# also reads and writes non-contiguous tensors as if they were contiguous
# (wrong results, memory beside the view overwritten) and gets an in-place
# all_to_all_single wrong, so Gloo always runs on contiguous copies of the
# same values and never in place; the in-place expectations are the
# out-of-place results.
GLOO_DTYPES = (torch.float32, torch.float64, torch.float16, torch.int8, torch.uint8,
               torch.int32, torch.int64)


def gloo_has(dtype, op=None):
    return dtype in GLOO_DTYPES and op != "AVG"


OPS = {
    "SUM": dist.ReduceOp.SUM,
    "PRODUCT": dist.ReduceOp.PRODUCT,
    "MIN": dist.ReduceOp.MIN,
    "MAX": dist.ReduceOp.MAX,
    "AVG": dist.ReduceOp.AVG,
    "BAND": dist.ReduceOp.BAND,
    "BOR": dist.ReduceOp.BOR,
    "BXOR": dist.ReduceOp.BXOR,
}


def ops_for(dtype):
    """Reductions tested per dtype.  AVG only on floating types (what an
    integer average rounds to is not defined by torch); bool only bitwise."""
    if dtype == torch.bool:
        return ["BAND", "BOR", "BXOR"]
    if dtype.is_floating_point:
        return ["SUM", "PRODUCT", "MIN", "MAX", "AVG"]
    return ["SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"]


def kind_for(op):
    return {"SUM": "sum", "AVG": "sum", "PRODUCT": "prod"}.get(op, "any")


# Tolerances (rtol, atol) of floating SUM and AVG, whose order of additions
# differs between implementations.  Everything else is compared exactly:
# integers, MIN/MAX, PRODUCT (inputs in {-2,-1,1,2}: exact products) and all
# data movement.
TOL = {
    torch.float32: (1e-5, 1e-5),
    torch.float64: (1e-12, 1e-12),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (1e-2, 1e-2),
}


def tol_for(op, dtype):
    if op in ("SUM", "AVG") and dtype.is_floating_point:
        return TOL[dtype]
    return None


def gen(kind, dtype, shape, seed):
    """Deterministic input.  kind: "sum" (small values: integer sums of 4 ranks
    cannot overflow; fp16/bf16 multiples of 1/4 in [-2, 2], whose sums are
    exact), "prod" (values in {-2,-1,1,2}, {1,2} for uint8), "any" (the whole
    range of integer types, normal floats)."""
    g = torch.Generator().manual_seed(seed)
    shape = tuple(shape)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if kind == "prod":
        choices = torch.tensor([1, 2] if dtype == torch.uint8 else [-2, -1, 1, 2])
        return choices[torch.randint(0, len(choices), shape, generator=g)].to(dtype)
    if dtype.is_floating_point:
        if dtype in HALF:
            return (torch.randint(-8, 9, shape, generator=g).double() / 4).to(dtype)
        return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    if kind == "sum":
        lo, hi = {torch.int8: (-20, 20), torch.uint8: (0, 60),
                  torch.int32: (-10**6, 10**6), torch.int64: (-10**12, 10**12)}[dtype]
    else:
        info = torch.iinfo(dtype)
        lo, hi = info.min, info.max
    return torch.randint(lo, hi, shape, generator=g, dtype=torch.int64).to(dtype)


def ref_reduce(vals, op, dtype):
    """The reduction of vals (one tensor per rank), computed locally."""
    if op in ("SUM", "AVG"):
        if dtype.is_floating_point:
            acc = torch.stack([v.double() for v in vals]).sum(0)
            if op == "AVG":
                acc = acc / len(vals)
            return acc.to(dtype)
        return torch.stack([v.long() for v in vals]).sum(0).to(dtype)
    if op == "PRODUCT":
        if dtype.is_floating_point:
            return torch.stack([v.double() for v in vals]).prod(0).to(dtype)
        return torch.stack([v.long() for v in vals]).prod(0).to(dtype)
    if op == "MIN":
        return torch.stack(vals).amin(0)
    if op == "MAX":
        return torch.stack(vals).amax(0)
    fn = {"BAND": torch.bitwise_and, "BOR": torch.bitwise_or,
          "BXOR": torch.bitwise_xor}[op]
    return functools.reduce(fn, vals)


SENTINEL = 77
FILL = 55


class Buf:
    """A tensor with given values in a given memory layout.

    layout: "contig"; "strided" (every other column of a wider base, the
    columns between hold a sentinel that must survive); "transposed" (.t() of
    a contiguous tensor: column-major); "offset" (contiguous, at a storage
    offset inside a larger buffer with sentinels on both sides)."""

    def __init__(self, values, layout="contig"):
        self.layout = layout
        self.guards = []
        dt = values.dtype
        self.sentinel = True if dt == torch.bool else SENTINEL
        if values.dim() != 2 and layout != "contig":
            raise ValueError("layouts other than contig need 2-d values")
        if layout == "contig":
            self.t = values.clone()
        elif layout == "strided":
            r, c = values.shape
            base = torch.full((r, 2 * c), self.sentinel, dtype=dt)
            base[:, 0::2] = values
            self.t = base[:, 0::2]
            self.guards = [base[:, 1::2]]
        elif layout == "transposed":
            self.t = values.t().contiguous().t()
        elif layout == "offset":
            n = values.numel()
            flat = torch.full((n + 10,), self.sentinel, dtype=dt)
            flat[3:3 + n] = values.reshape(-1)
            self.t = flat[3:3 + n].view(values.shape)
            self.guards = [flat[:3], flat[3 + n:]]
        else:
            raise ValueError(layout)

    @classmethod
    def filled(cls, shape, dtype, layout="contig"):
        v = torch.full(tuple(shape), False if dtype == torch.bool else FILL, dtype=dtype)
        return cls(v, layout)

    def guard_msg(self):
        for g in self.guards:
            if g.numel() and not bool((g == self.sentinel).all()):
                return "elements outside the %s view were overwritten" % self.layout
        return None

    def value(self):
        return self.t.contiguous()


# ---------------------------------------------------------------------------
# The worker: families of cases
# ---------------------------------------------------------------------------

# (shape, layouts) every elementwise case runs with; one shape of each size
# class, the non-contiguous layouts on the bigger ones.
SHAPES = [
    ((1, 1), ["contig"]),
    ((3, 5), ["contig", "offset"]),
    ((64, 33), ["contig", "strided", "transposed"]),
]
# Rooted ops run every root, so fewer shapes.
ROOTED_SHAPES = [((3, 5), ["contig", "offset"]), ((64, 33), ["strided", "transposed"])]
# > 1 MiB of float32: past the small-message paths (recursive doubling,
# eager sends, one chunk) into the pipelined/striped ones.
LARGE = (512, 640)

FAMILY_TIMEOUT_S = 45
# TORCH_CHORUS_TEST_VERBOSE=1: every case is logged to the rank's stdout (shown
# in the failure report of a run that crashes or hangs).
VERBOSE = bool(os.environ.get("TORCH_CHORUS_TEST_VERBOSE"))


class Case:
    """State of one family's run inside a worker."""

    def __init__(self, ctx, F, ch, gl):
        self.rank = ctx.rank
        self.ws = ctx.world_size
        self.F = F
        self.ch = ch  # the chorus group under test
        self.gl = gl  # the Gloo group over the same ranks
        self.where = ""
        self.log = ctx.log
        self.key = "%s_%d" % (F.family, ctx.world_size)  # same on every rank

    def at(self, label):
        self.where = label
        if VERBOSE:
            self.log("case", label)

    def inputs(self, kind, dtype, shape, *key):
        """Every rank's input for a case: [rank] -> tensor."""
        return [gen(kind, dtype, shape, stable_seed(*(key + (str(dtype), shape, r))))
                for r in range(self.ws)]

    def cmp(self, label, got, exp, tol=None):
        """got: Buf or tensor."""
        msg = None
        if isinstance(got, Buf):
            msg = got.guard_msg()
            got = got.value()
        msg = msg or compare(got, exp, tol)
        return self.F.check(label, msg is None, msg)


def bitwise_refused(C, label, op, call):
    """Runs call(); True where a bitwise reduction was refused.

    The contract has bitwise reductions for all_reduce (and reduce); elsewhere
    (reduce_scatter, _reduce_scatter_base, all_reduce_coalesced) a clear
    RuntimeError naming them is accepted instead of a result."""
    if op not in ("BAND", "BOR", "BXOR"):
        call()
        return False
    try:
        call()
        return False
    except RuntimeError as e:
        ok = re.search(r"bitwise|band|bor|bxor", str(e), re.I) is not None
        C.F.check(label + " (bitwise refused)", ok, "unclear refusal: %s" % e)
        return True


def fam_all_reduce(C):
    for dtype in ALL_DTYPES:
        for op in ops_for(dtype):
            shapes = list(SHAPES)
            if op in ("SUM", "MAX") and dtype in (torch.float32, torch.bfloat16,
                                                  torch.int32):
                shapes.append((LARGE, ["contig", "strided"]))
            for shape, layouts in shapes:
                label = "all_reduce %s %s %s" % (op, dtype, shape)
                C.at(label)
                vals = C.inputs(kind_for(op), dtype, shape, "all_reduce", op)
                if gloo_has(dtype, op):
                    exp = vals[C.rank].clone()
                    dist.all_reduce(exp, op=OPS[op], group=C.gl)
                else:  # Gloo lacks dtype or op: local reference
                    exp = ref_reduce(vals, op, dtype)
                for layout in layouts:
                    C.at(label + " " + layout)
                    b = Buf(vals[C.rank], layout)
                    dist.all_reduce(b.t, op=OPS[op], group=C.ch)
                    C.cmp(label + " " + layout, b, exp, tol_for(op, dtype))


def fam_broadcast(C):
    for dtype in ALL_DTYPES:
        shapes = list(SHAPES)
        if dtype == torch.float32:
            shapes.append((LARGE, ["contig", "transposed"]))
        for shape, layouts in shapes:
            for root in range(C.ws):
                label = "broadcast %s %s root=%d" % (dtype, shape, root)
                C.at(label)
                vals = C.inputs("any", dtype, shape, "broadcast", root)
                if gloo_has(dtype):
                    exp = vals[C.rank].clone()
                    dist.broadcast(exp, root, group=C.gl)
                else:  # Gloo lacks dtype: the root's input
                    exp = vals[root]
                for layout in layouts:
                    C.at(label + " " + layout)
                    b = Buf(vals[C.rank], layout)
                    dist.broadcast(b.t, root, group=C.ch)
                    C.cmp(label + " " + layout, b, exp)


def fam_reduce(C):
    for dtype in ALL_DTYPES:
        for op in ops_for(dtype):
            for shape, layouts in ROOTED_SHAPES:
                for root in range(C.ws):
                    label = "reduce %s %s %s root=%d" % (op, dtype, shape, root)
                    C.at(label)
                    vals = C.inputs(kind_for(op), dtype, shape, "reduce", op, root)
                    if gloo_has(dtype, op):
                        exp = vals[C.rank].clone()
                        dist.reduce(exp, root, op=OPS[op], group=C.gl)
                    else:  # Gloo lacks dtype or op: local reference
                        exp = ref_reduce(vals, op, dtype)
                    for layout in layouts:
                        C.at(label + " " + layout)
                        b = Buf(vals[C.rank], layout)
                        dist.reduce(b.t, root, op=OPS[op], group=C.ch)
                        if C.rank == root:
                            C.cmp(label + " " + layout, b, exp, tol_for(op, dtype))
                        else:  # non-root: result unspecified, memory around it not
                            m = b.guard_msg()
                            C.F.check(label + " " + layout + " (non-root)", m is None, m)


def fam_all_gather(C):
    for dtype in ALL_DTYPES:
        shapes = list(SHAPES)
        if dtype == torch.float32:
            shapes.append((LARGE, ["contig"]))
        for shape, layouts in shapes:
            label = "all_gather %s %s" % (dtype, shape)
            C.at(label)
            vals = C.inputs("any", dtype, shape, "all_gather")
            if gloo_has(dtype):
                exp = [torch.empty_like(vals[0]) for _ in range(C.ws)]
                dist.all_gather(exp, vals[C.rank].clone(), group=C.gl)
            else:  # Gloo lacks dtype: every rank's input
                exp = vals
            for layout in layouts:
                for inplace in (False, True):
                    lab = "%s %s %s" % (label, layout, "in-place" if inplace else
                                        "out-of-place")
                    C.at(lab)
                    outs = [Buf.filled(shape, dtype, layout) for _ in range(C.ws)]
                    if inplace:  # the input is this rank's slot of the output
                        outs[C.rank] = Buf(vals[C.rank], layout)
                        inp = outs[C.rank].t
                    else:  # input and outputs in different layouts
                        other = {"contig": "offset", "strided": "transposed",
                                 "transposed": "strided", "offset": "contig"}[layout]
                        if len(shape) != 2 or min(shape) == 1:
                            other = "contig" if layout != "contig" else "offset"
                        ib = Buf(vals[C.rank], other)
                        inp = ib.t
                    dist.all_gather([o.t for o in outs], inp, group=C.ch)
                    for j, o in enumerate(outs):
                        C.cmp("%s [%d]" % (lab, j), o, exp[j])
                    if not inplace:
                        C.cmp(lab + " input untouched", ib, vals[C.rank])


def fam_all_gather_base(C):
    # Gloo has no _all_gather_base: the reference is the concatenation of all
    # ranks' inputs, computed locally.
    for dtype in ALL_DTYPES:
        shapes = [(1, 1), (3, 5), (64, 33)] + ([LARGE] if dtype == torch.float32 else [])
        for shape in shapes:
            r, c = shape
            vals = C.inputs("any", dtype, shape, "_all_gather_base")
            exp = torch.cat(vals, 0)
            for variant in ("out-of-place", "in-place", "strided input"):
                lab = "_all_gather_base %s %s %s" % (dtype, shape, variant)
                C.at(lab)
                out = Buf.filled((C.ws * r, c), dtype).t
                if variant == "in-place":
                    out[C.rank * r:(C.rank + 1) * r] = vals[C.rank]
                    inp = out[C.rank * r:(C.rank + 1) * r]
                elif variant == "strided input":
                    inp = Buf(vals[C.rank], "strided").t
                else:
                    inp = vals[C.rank].clone()
                dist._all_gather_base(out, inp, group=C.ch)
                C.cmp(lab, out, exp)


def _coalesced_shapes():
    return [(3, 5), (7,), (2, 2, 2), (1,)]


def fam_all_gather_coalesced(C):
    for dtype in ALL_DTYPES:
        label = "all_gather_coalesced %s" % dtype
        C.at(label)
        shapes = _coalesced_shapes()
        vals = [C.inputs("any", dtype, s, "all_gather_coalesced", i)
                for i, s in enumerate(shapes)]  # [tensor i][rank]
        mine = [v[C.rank] for v in vals]
        if gloo_has(dtype):
            exp = [[torch.empty_like(t) for t in mine] for _ in range(C.ws)]
            dist.all_gather_coalesced(exp, [t.clone() for t in mine], group=C.gl)
        else:  # Gloo lacks dtype: every rank's inputs
            exp = [[v[j] for v in vals] for j in range(C.ws)]
        outs = [[Buf.filled(t.shape, dtype).t for t in mine] for _ in range(C.ws)]
        dist.all_gather_coalesced(outs, [t.clone() for t in mine], group=C.ch)
        m = compare_lists(outs, exp)
        C.F.check(label, m is None, m)
        # A non-contiguous input among them.
        C.at(label + " strided input")
        inputs = [t.clone() for t in mine]
        sb = Buf(mine[0], "strided")
        inputs[0] = sb.t
        outs = [[Buf.filled(t.shape, dtype).t for t in mine] for _ in range(C.ws)]
        dist.all_gather_coalesced(outs, inputs, group=C.ch)
        m = compare_lists(outs, exp)
        C.F.check(label + " strided input", m is None, m)


def fam_all_reduce_coalesced(C):
    for dtype in ALL_DTYPES:
        for op in (["BAND", "BXOR"] if dtype == torch.bool else ["SUM", "MAX"]):
            label = "all_reduce_coalesced %s %s" % (op, dtype)
            C.at(label)
            shapes = _coalesced_shapes()
            vals = [C.inputs(kind_for(op), dtype, s, "all_reduce_coalesced", op, i)
                    for i, s in enumerate(shapes)]
            mine = [v[C.rank] for v in vals]
            if gloo_has(dtype, op):
                exp = [t.clone() for t in mine]
                dist.all_reduce_coalesced(exp, op=OPS[op], group=C.gl)
            else:  # Gloo lacks dtype: local reference
                exp = [ref_reduce(v, op, dtype) for v in vals]
            got = [t.clone() for t in mine]
            if bitwise_refused(C, label, op, lambda: dist.all_reduce_coalesced(
                    got, op=OPS[op], group=C.ch)):
                continue
            m = compare_lists(got, exp, tol_for(op, dtype))
            C.F.check(label, m is None, m)
            C.at(label + " strided member")
            sb = Buf(mine[0], "strided")
            got = [sb.t] + [t.clone() for t in mine[1:]]
            dist.all_reduce_coalesced(got, op=OPS[op], group=C.ch)
            m = sb.guard_msg() or compare_lists(got, exp, tol_for(op, dtype))
            C.F.check(label + " strided member", m is None, m)


def fam_gather(C):
    for dtype in ALL_DTYPES:
        for shape, layouts in ROOTED_SHAPES:
            for root in range(C.ws):
                label = "gather %s %s root=%d" % (dtype, shape, root)
                C.at(label)
                vals = C.inputs("any", dtype, shape, "gather", root)
                if gloo_has(dtype):
                    glist = ([torch.empty_like(vals[0]) for _ in range(C.ws)]
                             if C.rank == root else None)
                    dist.gather(vals[C.rank].clone(), glist, dst=root, group=C.gl)
                    exp = glist
                else:  # Gloo lacks dtype: every rank's input
                    exp = vals
                for layout in layouts:
                    for inplace in (False, True):
                        lab = "%s %s %s" % (label, layout,
                                            "in-place" if inplace else "out-of-place")
                        C.at(lab)
                        ib = Buf(vals[C.rank], layout)
                        outs = None
                        if C.rank == root:
                            outs = [Buf.filled(shape, dtype, layout) for _ in range(C.ws)]
                            if inplace:  # the root's input is its own slot
                                outs[root] = ib
                        dist.gather(ib.t, [o.t for o in outs] if outs else None,
                                    dst=root, group=C.ch)
                        if C.rank == root:
                            for j, o in enumerate(outs):
                                C.cmp("%s [%d]" % (lab, j), o, exp[j])
                        else:
                            C.cmp(lab + " input untouched", ib, vals[C.rank])


def fam_scatter(C):
    for dtype in ALL_DTYPES:
        for shape, layouts in ROOTED_SHAPES:
            for root in range(C.ws):
                label = "scatter %s %s root=%d" % (dtype, shape, root)
                C.at(label)
                chunks = C.inputs("any", dtype, shape, "scatter", root)  # [dest]
                if gloo_has(dtype):
                    exp = torch.empty_like(chunks[0])
                    dist.scatter(exp, [c.clone() for c in chunks] if C.rank == root
                                 else None, src=root, group=C.gl)
                else:  # Gloo lacks dtype: the root's chunk for this rank
                    exp = chunks[C.rank]
                for layout in layouts:
                    for inplace in (False, True):
                        lab = "%s %s %s" % (label, layout,
                                            "in-place" if inplace else "out-of-place")
                        C.at(lab)
                        out = Buf.filled(shape, dtype, layout)
                        ins = None
                        if C.rank == root:
                            ins = [Buf(c, layout) for c in chunks]
                            if inplace:  # the root's output is its own chunk
                                out = ins[root]
                        dist.scatter(out.t, [b.t for b in ins] if ins else None,
                                     src=root, group=C.ch)
                        C.cmp(lab, out, exp)


def fam_reduce_scatter(C):
    # Gloo has no reduce_scatter: local reference from all ranks' inputs.
    for dtype in ALL_DTYPES:
        for op in ops_for(dtype):
            shapes = list(SHAPES)
            if op == "SUM" and dtype == torch.float32:
                shapes.append((LARGE, ["contig"]))
            for shape, layouts in shapes:
                label = "reduce_scatter %s %s %s" % (op, dtype, shape)
                C.at(label)
                # vals[j][r]: rank r's input for destination j
                vals = [C.inputs(kind_for(op), dtype, shape, "reduce_scatter", op, j)
                        for j in range(C.ws)]
                exp = ref_reduce(vals[C.rank], op, dtype)
                for layout in layouts:
                    for inplace in (False, True):
                        lab = "%s %s %s" % (label, layout,
                                            "in-place" if inplace else "out-of-place")
                        C.at(lab)
                        ins = [Buf(vals[j][C.rank], layout) for j in range(C.ws)]
                        out = ins[C.rank] if inplace else Buf.filled(shape, dtype, layout)
                        if bitwise_refused(C, lab, op, lambda: dist.reduce_scatter(
                                out.t, [b.t for b in ins], op=OPS[op], group=C.ch)):
                            continue
                        C.cmp(lab, out, exp, tol_for(op, dtype))


def fam_reduce_scatter_base(C):
    # Gloo has no _reduce_scatter_base: local reference.
    for dtype in ALL_DTYPES:
        for op in ops_for(dtype):
            shapes = [(1, 1), (3, 5), (64, 33)]
            if op == "SUM" and dtype == torch.float32:
                shapes.append(LARGE)
            for shape in shapes:
                r, c = shape
                vals = [C.inputs(kind_for(op), dtype, shape, "_reduce_scatter_base", op, j)
                        for j in range(C.ws)]
                exp = ref_reduce(vals[C.rank], op, dtype)
                for inplace in (False, True):
                    lab = "_reduce_scatter_base %s %s %s %s" % (
                        op, dtype, shape, "in-place" if inplace else "out-of-place")
                    C.at(lab)
                    inp = torch.cat([vals[j][C.rank] for j in range(C.ws)], 0)
                    if inplace:
                        out = inp[C.rank * r:(C.rank + 1) * r]
                    else:
                        out = Buf.filled(shape, dtype).t
                    if bitwise_refused(C, lab, op, lambda: dist._reduce_scatter_base(
                            out, inp, op=OPS[op], group=C.ch)):
                        continue
                    C.cmp(lab, out.contiguous(), exp, tol_for(op, dtype))


def fam_all_to_all(C):
    # Gloo has no all_to_all (list form): local reference.
    for dtype in ALL_DTYPES:
        for shape, layouts in SHAPES:
            label = "all_to_all %s %s" % (dtype, shape)
            # vals[j][r]: what rank r sends to rank j
            vals = [C.inputs("any", dtype, shape, "all_to_all", j) for j in range(C.ws)]
            for layout in layouts:
                lab = label + " " + layout
                C.at(lab)
                ins = [Buf(vals[j][C.rank], layout) for j in range(C.ws)]
                outs = [Buf.filled(shape, dtype, layout) for _ in range(C.ws)]
                dist.all_to_all([o.t for o in outs], [b.t for b in ins], group=C.ch)
                for j in range(C.ws):
                    C.cmp("%s [%d]" % (lab, j), outs[j], vals[C.rank][j])
        # Uneven: rank r sends rows(r, j) rows to rank j, some of them 0.
        lab = "all_to_all %s uneven" % dtype
        C.at(lab)

        def rows(src, dst):
            return (src + 2 * dst + 1) % 4

        ins = [gen("any", dtype, (rows(C.rank, j), 3),
                   stable_seed("a2a uneven", dtype, C.rank, j)) for j in range(C.ws)]
        exp = [gen("any", dtype, (rows(j, C.rank), 3),
                   stable_seed("a2a uneven", dtype, j, C.rank)) for j in range(C.ws)]
        outs = [Buf.filled((rows(j, C.rank), 3), dtype).t for j in range(C.ws)]
        dist.all_to_all(outs, ins, group=C.ch)
        m = compare_lists(outs, exp)
        C.F.check(lab, m is None, m)


def fam_all_to_all_single(C):
    for dtype in ALL_DTYPES:
        shapes = [((C.ws * 1, 1), ["contig"]), ((C.ws * 3, 5), ["contig", "offset"]),
                  ((C.ws * 16, 33), ["contig", "strided", "transposed"])]
        if dtype == torch.float32:
            shapes.append(((C.ws * 128, 640), ["contig"]))
        for shape, layouts in shapes:
            k = shape[0] // C.ws
            label = "all_to_all_single %s %s" % (dtype, shape)
            C.at(label)
            vals = C.inputs("any", dtype, shape, "all_to_all_single")
            if gloo_has(dtype):
                exp = torch.empty_like(vals[0])
                dist.all_to_all_single(exp, vals[C.rank].clone(), group=C.gl)
            else:  # Gloo lacks dtype: local reference
                exp = torch.cat([vals[j][C.rank * k:(C.rank + 1) * k]
                                 for j in range(C.ws)], 0)
            for layout in layouts:
                lab = label + " " + layout
                C.at(lab)
                ib = Buf(vals[C.rank], layout)
                ob = Buf.filled(shape, dtype, layout)
                dist.all_to_all_single(ob.t, ib.t, group=C.ch)
                C.cmp(lab, ob, exp)
                C.cmp(lab + " input untouched", ib, vals[C.rank])
            # In place: the output is the input.  (Gloo not asked: the
            # expected result is the same as out of place.)
            lab = label + " in-place"
            C.at(lab)
            b = Buf(vals[C.rank], "contig")
            dist.all_to_all_single(b.t, b.t, group=C.ch)
            C.cmp(lab, b, exp)
        # Uneven split sizes (some 0), along dim 0.
        for c in (1, 7):
            def rows(src, dst):
                return (src + 2 * dst + 1) % 4

            label = "all_to_all_single %s uneven splits cols=%d" % (dtype, c)
            C.at(label)
            ins_all = [torch.cat([gen("any", dtype, (rows(r, j), c),
                                      stable_seed("a2as uneven", dtype, c, r, j))
                                  for j in range(C.ws)], 0) for r in range(C.ws)]
            in_splits = [rows(C.rank, j) for j in range(C.ws)]
            out_splits = [rows(j, C.rank) for j in range(C.ws)]
            offs = [sum(rows(j, d) for d in range(C.rank)) for j in range(C.ws)]
            local = torch.cat([ins_all[j][offs[j]:offs[j] + rows(j, C.rank)]
                               for j in range(C.ws)], 0)
            if gloo_has(dtype):
                exp = torch.empty((sum(out_splits), c), dtype=dtype)
                dist.all_to_all_single(exp, ins_all[C.rank].clone(), out_splits,
                                       in_splits, group=C.gl)
            else:  # Gloo lacks dtype: local reference
                exp = local
            for layout in (["contig", "strided"] if c > 1 else ["contig"]):
                lab = label + " " + layout
                C.at(lab)
                ob = Buf.filled((sum(out_splits), c), dtype, layout)
                ib = Buf(ins_all[C.rank], layout)
                dist.all_to_all_single(ob.t, ib.t, out_splits, in_splits, group=C.ch)
                C.cmp(lab, ob, exp)


def fam_barrier(C):
    for i in range(5):
        C.at("barrier %d" % i)
        dist.barrier(group=C.ch)
    C.at("barrier async")
    w = dist.barrier(group=C.ch, async_op=True)
    w.wait()
    C.F.check("barrier async is_completed", w.is_completed())
    # A barrier orders: what every rank wrote to the store before it is seen
    # by every rank after it.
    C.at("barrier orders")
    store = dist.distributed_c10d._get_default_store()
    key = "barrier_probe_" + C.key
    store.add(key, 1)
    dist.barrier(group=C.ch)
    n = store.add(key, 0)
    C.F.check("barrier orders", n == C.ws,
              "%d of %d ranks had checked in before the barrier returned" % (n, C.ws))


def fam_work(C):
    """Work objects of async ops: wait, wait(timeout), is_completed,
    is_success, exception, get_future (value: the list of output tensors, the
    same structure Gloo returns)."""
    F = C.F
    td = datetime.timedelta(seconds=30)
    vals = C.inputs("sum", torch.float32, (4, 6), "work")
    exp = ref_reduce(vals, "SUM", torch.float32)
    tol = TOL[torch.float32]
    C.at("work all_reduce")
    t = vals[C.rank].clone()
    w = dist.all_reduce(t, group=C.ch, async_op=True)
    r = w.wait()
    F.check("work.wait() returns True", r is True, "returned %r" % (r,))
    m = compare(t, exp, tol)
    F.check("work all_reduce result", m is None, m)
    F.check("work.is_completed() after wait", w.is_completed() is True)
    F.check("work.is_success() after wait", w.is_success() is True)
    r = w.wait(td)
    F.check("work.wait(timeout) after completion returns True", r is True,
            "returned %r" % (r,))
    try:
        e = w.exception()
        F.check("work.exception() of a successful work is None", e is None, repr(e))
    except TypeError as te:
        # torch 1.13's binding cannot convert std::exception_ptr to Python for
        # any backend (Gloo too); that is torch's, not the backend's.
        F.check("work.exception() of a successful work", "exception_ptr" in str(te),
                "TypeError: %s" % te)
    fut = w.get_future()
    v = fut.wait()
    m = compare_lists(v, [exp], tol)
    F.check("work.get_future().wait() of all_reduce is [output]", m is None, m)
    F.check("future.done() after wait", fut.done())

    C.at("work wait(timeout) before completion")
    t = vals[C.rank].clone()
    w = dist.all_reduce(t, group=C.ch, async_op=True)
    r = w.wait(td)
    F.check("work.wait(timeout) returns True", r is True, "returned %r" % (r,))
    m = compare(t, exp, tol)
    F.check("work.wait(timeout) result", m is None, m)

    C.at("work future then")
    t = vals[C.rank].clone()
    w = dist.all_reduce(t, group=C.ch, async_op=True)
    f2 = w.get_future().then(lambda f: f.value()[0] * 2)
    m = compare(f2.wait(), exp * 2, tol)
    F.check("future.then() of an all_reduce", m is None, m)

    C.at("work future wait without work.wait")
    t = vals[C.rank].clone()
    w = dist.all_reduce(t, group=C.ch, async_op=True)
    m = compare_lists(w.get_future().wait(), [exp], tol)
    F.check("get_future().wait() alone completes the all_reduce", m is None, m)
    w.wait()

    # The caller may drop its references to an async op's input tensors (and
    # to the input list) right after the call: the Work keeps what it needs
    # alive (Gloo's works hold their tensors; NCCL records them on its stream).
    for name in ("all_gather", "all_gather noncontig", "gather", "scatter",
                 "all_to_all_single", "reduce_scatter"):
        C.at("work with dropped inputs: " + name)
        big = (256, 33)  # larger than what malloc keeps in its small bins
        vals = C.inputs("any", torch.float32, big, "dropped", name)
        root = 0
        works, expect = [], []
        for rep in range(3):
            if name.startswith("all_gather"):
                outs = [torch.zeros(big) for _ in range(C.ws)]
                src = vals[C.rank].clone()
                if name.endswith("noncontig"):
                    src = Buf(src, "strided").t
                works.append(dist.all_gather(outs, src, group=C.ch, async_op=True))
                expect.append((outs, vals))
            elif name == "gather":
                outs = [torch.zeros(big) for _ in range(C.ws)] if C.rank == root else None
                works.append(dist.gather(vals[C.rank].clone(), outs, dst=root,
                                         group=C.ch, async_op=True))
                expect.append((outs, vals) if outs is not None else None)
            elif name == "scatter":
                o = torch.zeros(big)
                works.append(dist.scatter(
                    o, [v.clone() for v in vals] if C.rank == root else None,
                    src=root, group=C.ch, async_op=True))
                expect.append(([o], [vals[C.rank]]))
            elif name == "all_to_all_single":
                o = torch.zeros((C.ws * 8, 33))
                inp = torch.arange(C.ws * 8 * 33, dtype=torch.float32).view(
                    C.ws * 8, 33) + 1000 * C.rank
                exp_a2a = torch.cat([torch.arange(C.ws * 8 * 33, dtype=torch.float32)
                                     .view(C.ws * 8, 33)[C.rank * 8:(C.rank + 1) * 8]
                                     + 1000 * j for j in range(C.ws)], 0)
                works.append(dist.all_to_all_single(o, inp, group=C.ch, async_op=True))
                del inp
                expect.append(([o], [exp_a2a]))
            else:
                o = torch.zeros(big)
                works.append(dist.reduce_scatter(
                    o, [vals[j].clone() for j in range(C.ws)], group=C.ch,
                    async_op=True))
                expect.append(([o], [vals[C.rank] * C.ws]))
            src = None  # noqa: F841 - the caller's last reference goes
            # malloc hands the freed memory to the next allocations
            scribble = [torch.full(big, -1.0) for _ in range(4)]
            del scribble
        for w in works:
            w.wait()
        for i, e in enumerate(expect):
            if e is None:
                continue
            m = compare_lists(e[0], e[1], tol)
            F.check("work with dropped inputs: %s #%d" % (name, i), m is None, m)


def _future_cases(C, group, keep, dtype=torch.float32):
    """(name, work) of async ops on group, same inputs on every call; every
    tensor handed to an op is kept alive in keep."""
    shape = (3, 4)
    vals = C.inputs("any", dtype, shape, "futures")
    root = C.ws - 1

    def k(x):
        keep.append(x)
        return x

    out = []
    t = k(vals[C.rank].clone())
    out.append(("all_reduce", dist.all_reduce(t, group=group, async_op=True)))
    t = k(vals[C.rank].clone())
    out.append(("broadcast", dist.broadcast(t, root, group=group, async_op=True)))
    t = k(vals[C.rank].clone())
    out.append(("reduce", dist.reduce(t, root, group=group, async_op=True)))
    outs = k([torch.zeros(shape) for _ in range(C.ws)])
    out.append(("all_gather", dist.all_gather(outs, k(vals[C.rank].clone()),
                                              group=group, async_op=True)))
    outs = k([torch.zeros(shape) for _ in range(C.ws)]) if C.rank == root else None
    out.append(("gather", dist.gather(k(vals[C.rank].clone()), outs, dst=root,
                                      group=group, async_op=True)))
    o = k(torch.zeros(shape))
    out.append(("scatter", dist.scatter(o, k([v.clone() for v in vals])
                                        if C.rank == root else None, src=root,
                                        group=group, async_op=True)))
    o = k(torch.zeros((C.ws * 2, 3)))
    i = k(torch.arange(C.ws * 6, dtype=torch.float32).view(C.ws * 2, 3) + 100 * C.rank)
    out.append(("all_to_all_single", dist.all_to_all_single(o, i, group=group,
                                                            async_op=True)))
    return out


def fam_futures(C):
    """get_future() values of every op Gloo has, against Gloo's.  Only ranks
    whose output the op defines compare it (reduce: the root)."""
    keep = []
    gl_cases = _future_cases(C, C.gl, keep)
    gl_vals = {}
    for name, w in gl_cases:
        w.wait()
        gl_vals[name] = w.get_future().wait()
    for name, w in _future_cases(C, C.ch, keep):
        C.at("futures " + name)
        w.wait()
        v = w.get_future().wait()
        exp = gl_vals[name]
        if name == "reduce" and C.rank != C.ws - 1:
            ok = isinstance(v, list) and len(v) == len(exp)
            C.F.check("future value of reduce (non-root): list of %d" % len(exp), ok,
                      "got %r" % (v,))
            continue
        tol = TOL[torch.float32] if name in ("all_reduce", "reduce") else None
        m = compare_lists(v, exp, tol)
        C.F.check("future value of %s matches Gloo's" % name, m is None, m)


FAMILIES = {
    "all_reduce": fam_all_reduce,
    "broadcast": fam_broadcast,
    "reduce": fam_reduce,
    "all_gather": fam_all_gather,
    "_all_gather_base": fam_all_gather_base,
    "all_gather_coalesced": fam_all_gather_coalesced,
    "all_reduce_coalesced": fam_all_reduce_coalesced,
    "gather": fam_gather,
    "scatter": fam_scatter,
    "reduce_scatter": fam_reduce_scatter,
    "_reduce_scatter_base": fam_reduce_scatter_base,
    "all_to_all": fam_all_to_all,
    "all_to_all_single": fam_all_to_all_single,
    "barrier": fam_barrier,
    "work": fam_work,
    "futures": fam_futures,
}


def _w_collectives(ctx):
    import time
    import warnings

    warnings.filterwarnings("ignore")  # the *_coalesced deprecation warnings
    td = datetime.timedelta(seconds=FAMILY_TIMEOUT_S)
    for fam in ctx.kwargs["families"]:
        t0 = time.time()
        F = torch_mp.Failures(ctx.rank, ctx.world_size)
        F.set_family(fam)
        ctx.log("family", fam)
        # Fresh groups per family, so that a family that fails on some rank
        # (its peers then time out) leaves the next one a working group.
        ch = dist.new_group(backend=ctx.backend, timeout=td)
        gl = dist.new_group(backend="gloo", timeout=td)
        C = Case(ctx, F, ch, gl)
        try:
            FAMILIES[fam](C)
            C.at("closing barrier")
            dist.barrier(group=ch)
        except Exception as e:  # noqa: BLE001 - recorded, the next family goes on
            F.aborted[fam] = "rank %d at %r: %s: %s" % (ctx.rank, C.where,
                                                         type(e).__name__, e)
            ctx.log("family", fam, "aborted:", F.aborted[fam])
        out = F.result()
        out["family"] = fam
        out["seconds"] = time.time() - t0
        ctx.report(out)  # reaches the parent even if a later family crashes
    return "done"


# ---------------------------------------------------------------------------
# The tests
# ---------------------------------------------------------------------------

WORLD_SIZES = [1, 2, 3, 4]
_RUNS = {}


def _run(ws):
    """Runs every family on ws ranks; returns ({family: (checks, failures)},
    {family: why the run died in it}, [problems of the processes' exit]).
    A run that crashes or hangs in a family is started again with the
    families after it, so one crash does not hide the rest."""
    if ws in _RUNS:
        return _RUNS[ws]
    merged, crashed, exit_problems = {}, {}, []
    remaining = list(FAMILIES)
    launches = 0
    while remaining:
        launches += 1
        if launches > 4:
            for f in remaining:
                crashed[f] = "not run: the runs before crashed too often"
            break
        results = torch_mp.launch(_w_collectives, ws, kwargs={"families": remaining},
                                  pg_timeout=60, deadline=240 + 60 * ws,
                                  kill_on_death=3)
        per_rank = [{p["family"]: p for p in r.partials} for r in results]
        done = [f for f in remaining if all(f in pr for pr in per_rank)]
        merged.update(torch_mp.merge_family_results(
            [pr[f] for pr in per_rank for f in done]))
        for f in done:
            merged.setdefault(f, (0, []))
        clean = all(r.status == "ok" for r in results)
        if not clean:
            left = [f for f in remaining if f not in done]
            culprit = left[0] if left else None
            why = torch_mp.describe_all(results)
            if culprit is None:
                exit_problems.append(why)
                break
            crashed[culprit] = why
            remaining = left[1:]
            continue
        for r in results:
            if r.hung_at_exit or r.teardown_error or r.exitcode not in (0, None):
                exit_problems.append(r.describe())
        remaining = [f for f in remaining if f not in done]
        if remaining:  # every rank returned without doing them: a bug here
            crashed[remaining[0]] = "the worker returned before this family"
            remaining = remaining[1:]
    _RUNS[ws] = (merged, crashed, exit_problems)
    return _RUNS[ws]


def _ids(v):
    return "ws%d" % v if isinstance(v, int) else str(v)


@pytest.mark.parametrize("ws,family", [(ws, fam) for ws in WORLD_SIZES
                                       for fam in FAMILIES], ids=_ids)
def test_collective(ws, family):
    merged, crashed, _ = _run(ws)
    if family in crashed:
        pytest.fail("the run on %d ranks crashed or hung in %s:\n%s" % (
            ws, family, crashed[family]), pytrace=False)
    count, fails = merged.get(family, (0, []))
    if fails:
        pytest.fail("%s on %d ranks: %d of %d checks failed:\n%s" % (
            family, ws, len(fails), count, torch_mp.format_failures(fails)),
            pytrace=False)
    assert count > 0, "no %s checks ran" % family


@pytest.mark.parametrize("ws", WORLD_SIZES, ids=_ids)
def test_processes_exit_cleanly(ws):
    """After the collectives, destroy_process_group and interpreter exit
    return promptly and without error on every rank."""
    _, _, exit_problems = _run(ws)
    assert not exit_problems, "\n".join(exit_problems)
