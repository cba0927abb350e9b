"""`--compare x.onnx`: the simulator's outputs against onnxruntime on the same inputs.

Why: the simulator is how users check that a compiled .om computes what their ONNX model
computes.  The reference is onnxruntime with every graph optimization off and one thread,
so it is the plain ONNX semantics.  Tolerances and their reasoning: simulator/COMPARE.md.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Optional

import numpy as np

from ge.errors import AtcError
from ge.files import check_input
from ge.ir import Graph, Value

_ORT_FLOATS = {"tensor(float)": np.dtype(np.float32), "tensor(float16)": np.dtype(np.float16),
               "tensor(double)": np.dtype(np.float64)}
# Allowed max |sim - ref| / max(1, max |ref|), by the lowest precision a kernel on the
# output's path computes in (COMPARE.md derives the numbers).
TOLERANCE = {"fp32": 1e-4, "fp16": 2e-2, "int8-fp16": 1e-1}
# Outputs of an int8 model whose float kernels run in float16: besides the bound above, the
# output must point the same way as the reference (cosine similarity, as Huawei's accuracy
# comparison tools report it).
INT8_FP16_MIN_COSINE = 0.999
# Int8 outputs of deep models: two correct executions of the same quantized graph drift apart
# (a float rounding flips a requantization by one step, and the step travels and multiplies
# through the layers).  onnxruntime's optimized execution against its plain one measures that
# drift on the model and input at hand, and so does onnxruntime with the .om's float16 roundings
# written in (`fp16_rounded_model`) against its float32 run; the simulator may drift from the
# plain reference by at most this factor of the larger one (COMPARE.md, "Int8 models").
SPREAD_FACTOR = 2.0
# Integer/bool outputs downstream of an fp16 kernel (a comparison after fp16 arithmetic):
# the fraction of elements allowed to differ, because a decision flips when its operands sit
# within one fp16 rounding of the threshold.  Downstream of fp32 kernels they must match.
DECISION_FLIP_FRACTION = 1e-3


def _compare_error(value, reason: str, flag: str = "--compare") -> AtcError:
    wanted = "the float .onnx model the .om was quantized from" if flag == "--accuracy" else \
        "the .onnx model the .om was compiled from"
    return AtcError("E10001", f"Value [{value}] for parameter [{flag}] is invalid. Reason: {reason}",
                    f"Pass {wanted}.")


def run_onnxruntime(onnx_path: str, feeds: dict, optimized: bool = False, flag: str = "--compare",
                    model=None) -> dict:
    """Outputs of `onnx_path` in onnxruntime (ORT_DISABLE_ALL, 1 thread), by output name.
    `optimized`: with ORT_ENABLE_ALL instead, where onnxruntime turns QDQ node groups into
    its own integer kernels (QLinearConv, QLinearMatMul, QGemm, ...): a second, equally
    valid execution of a quantized model (see `reference_spread`).  `model`: a ModelProto to
    run instead of the file's reference model (the float16-rounded one)."""
    import onnxruntime as ort

    check_input(onnx_path, flag)          # a regular file: a FIFO would block onnxruntime
    options = ort.SessionOptions()
    options.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimized
                                        else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    try:
        source = reference_model(onnx_path) if model is None else model.SerializeToString()
        session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise _compare_error(onnx_path, f"onnxruntime cannot load it: {exc}", flag)
    wanted = [i.name for i in session.get_inputs()]
    missing = [n for n in wanted if n not in feeds]
    if missing:
        raise _compare_error(onnx_path, f"it needs inputs {missing} that the .om does not have.", flag)
    names = [o.name for o in session.get_outputs()]
    # --input_fp16_nodes: the .om takes float16 where the ONNX model takes float32; the same
    # values go to onnxruntime in the dtype it declares.
    declared = {i.name: _ORT_FLOATS.get(i.type) for i in session.get_inputs()}
    ort_feeds = {n: feeds[n].astype(declared[n]) if declared[n] is not None and feeds[n].dtype != declared[n]
                 and feeds[n].dtype.kind == "f" else feeds[n] for n in wanted}
    try:
        results = session.run(names, ort_feeds)
    except Exception as exc:
        raise _compare_error(onnx_path, f"onnxruntime failed to run it on the .om's inputs: {exc}", flag)
    return dict(zip(names, results))


def fp16_rounded_model(model, graph: Graph, compute_dtypes: dict):
    """`model` with the float16 roundings of the .om's float16 kernels, or None when no kernel
    computes in float16: every float32 tensor such a kernel writes is rounded to float16 (Cast
    to float16 and back) for all its readers, and every float32 tensor it reads is rounded for
    the ONNX nodes of that kernel (its `origin`) only -- a float32 kernel reading a graph input
    sees it unrounded, as in the simulator.  Run in onnxruntime, it is a second execution of
    the model with the .om's float16 roundings at the same tensors and onnxruntime's own
    kernels in between: how far it lies from the float32 reference is the drift those
    roundings cause on this model and input (`fp16_reference_spread`, COMPARE.md "Int8
    models").  Tensors inside a fused kernel have no name in the .om and are not rounded.
    ONNX nodes are matched to the kernels' origins by the names the importer gave them
    (`node_names`: an unnamed node's is made from its op type and position), and the model
    returned carries those names."""
    import onnx
    from onnx import TensorProto, helper

    from ge.onnx_import import node_names, normalize_opset

    written, read = set(), {}          # tensor names; ONNX node name -> tensor names it reads rounded
    for node in graph.nodes:
        if np.dtype(compute_dtypes.get(node.name, np.float32)) != np.float16:
            continue
        written.update(v.name for v in node.outputs if v is not None and np.dtype(v.desc.dtype) == np.float32)
        inputs = {v.name for v in node.inputs if v is not None and np.dtype(v.desc.dtype) == np.float32}
        for origin in node.origin:
            read.setdefault(origin, set()).update(inputs)
    model = normalize_opset(model)     # the graph the importer read, node for node
    names = node_names(model.graph)
    produced = {o for n in model.graph.node for o in n.output if o}
    sources = {t.name for t in model.graph.initializer} | {i.name for i in model.graph.input}
    written &= produced
    known = produced | sources
    copies = {t for n, name in zip(model.graph.node, names) if name in read for t in n.input
              if t in read[name] and t not in written and t in known}
    if not written and not copies:
        return None

    def rounding(source: str, half: str, target: str) -> list:
        return [helper.make_node("Cast", [source], [half], to=TensorProto.FLOAT16, name=half),
                helper.make_node("Cast", [half], [target], to=TensorProto.FLOAT, name=target)]

    out = onnx.ModelProto()
    out.CopyFrom(model)
    nodes = [c for t in sorted(copies - produced) for c in rounding(t, f"{t}__fp16", f"{t}__fp16_rounded")]
    for original, node_name in zip(out.graph.node, names):
        node = onnx.NodeProto()
        node.CopyFrom(original)
        node.name = node_name
        for i, name in enumerate(node.input):
            if name in copies and name in read.get(node_name, ()):
                node.input[i] = f"{name}__fp16_rounded"
        after = []
        for i, name in enumerate(node.output):
            if name in written:       # the producer writes a raw tensor; the rounded one keeps the name
                node.output[i] = f"{name}__fp32"
                after += rounding(node.output[i], f"{name}__fp16", name)
            elif name in copies:
                after += rounding(name, f"{name}__fp16", f"{name}__fp16_rounded")
        nodes += [node] + after       # right after the producer: the order stays topological
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    return out


def reference_model(onnx_path: str):
    """What onnxruntime runs: the file itself, or -- for an AMCT deploy model, whose
    AscendQuant/AscendDequant/AscendAntiQuant onnxruntime does not have -- the same model with
    those ops and its int8 Conv/Gemm/MatMul written as standard ONNX (simulator/amct_reference.py).
    Which one is decided from the nodes alone: external weights are not read for it."""
    import onnx
    from simulator.amct_reference import has_amct_ops
    if not has_amct_ops(onnx.load(onnx_path, load_external_data=False)):
        return onnx_path
    return reference_proto(onnx_path).SerializeToString()


def reference_proto(onnx_path: str):
    """The ModelProto `reference_model` runs (AMCT ops written as standard ONNX)."""
    import onnx
    from simulator.amct_reference import has_amct_ops, to_standard_onnx
    from ge.onnx_import import named_as_imported
    model = onnx.load(onnx_path)
    # the rewrite moves nodes: each keeps the name the .om knows it by (fp16_rounded_model)
    return to_standard_onnx(named_as_imported(model)) if has_amct_ops(model) else model


def precision_class(graph: Graph, value: Value, compute_dtypes: dict) -> str:
    """"fp16" if any kernel on the path to `value` computes in float16 or runs a
    high_performance approximation, or the output itself is float16 (--output_type=FP16),
    else "fp32".  (A float16 input, --input_fp16_nodes, reaches
    onnxruntime as the same values in float32: no rounding between the two.)"""
    fp16 = np.dtype(value.desc.dtype) == np.float16
    int8 = False
    seen, stack = set(), [value]
    while stack:
        v = stack.pop()
        node = v.producer if v is not None else None
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        fp16 = fp16 or np.dtype(compute_dtypes.get(node.name, np.float32)) == np.float16
        fp16 = fp16 or node.attrs.get("op_impl_mode") == "high_performance"    # an approximation (tanh-GELU, ...)
        int8 = int8 or _quantized(node)
        stack.extend(node.inputs)
    if int8:
        return "int8-fp16" if fp16 else "int8"
    return "fp16" if fp16 else "fp32"


QUANTIZED_OPS = frozenset({
    "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "QLinearConv", "QLinearMatMul",
    "MatMulInteger", "ConvInteger", "QGemm", "QLinearAdd", "QLinearMul", "QLinearGlobalAveragePool",
    "QLinearSoftmax", "QLinearSigmoid", "QLinearLeakyRelu", "AscendQuant", "AscendDequant", "AscendAntiQuant",
    "QuantConvBNReluFusionOp", "QuantMatMulBiasActFusionOp", "QuantMultiHeadAttentionFusionOp"})


def _quantized(node) -> bool:
    """A kernel of the int8 path: a quantized op, an int8 cube op (AMCT's int8 Conv/Gemm/
    MatMul), or an autofused group holding one.  (A uint8 image into AIPP is not one.)"""
    if node.op_type in QUANTIZED_OPS or QUANTIZED_OPS.intersection(node.attrs.get("member_ops", ()) or ()):
        return True
    return node.op_type in ("Conv", "MatMul", "Gemm") and bool(node.inputs) and _is_8bit(node.inputs[0])


def _is_8bit(value: Value) -> bool:
    dtype = np.dtype(value.desc.dtype)
    return dtype.kind in "iu" and dtype.itemsize == 1


def quantization_step(value: Value) -> float:
    """The step of an output's last requantization: 1 for an int8/uint8 output, the scale of
    the DequantizeLinear / AscendAntiQuant that makes it (also inside a fused kernel's
    epilogue or an autofused group), else 0 (a float computed after the int8 kernels)."""
    if _is_8bit(value):
        return 1.0
    node = value.producer
    return 0.0 if node is None else _step_of(node.op_type, node.attrs)


def _step_of(op_type: str, attrs: dict) -> float:
    if op_type == "DequantizeLinear":
        return float(np.max(np.asarray(attrs.get("x_scale", 0.0), np.float64)))
    if op_type == "AscendAntiQuant":
        scale = float(attrs.get("scale", 0.0))
        return scale * scale if int(attrs.get("sqrt_mode", 0)) else scale
    inner = attrs.get("epilogue", attrs.get("subgraph"))
    if isinstance(inner, str):
        from codegen.fused.autofused import decode_subgraph
        sub = decode_subgraph(inner)
        ref = sub.outputs[0] if sub.outputs else None
        if ref is not None and ref[0] == "o":
            op_type, op_attrs, _, _ = sub.ops[ref[1]]
            return _step_of(op_type, op_attrs)
    return 0.0


@dataclass
class OutputCompare:
    name: str
    reference_name: str
    dtype: str
    precision: str             # "fp32" | "fp16" | "exact" | "exact-after-fp16" | "int8" | "int8-fp16"
    tolerance: float           # allowed max_abs_error / scale (0 for exact; a mismatch
                               # fraction for exact-after-fp16)
    scale: float               # max(1, max |reference|)
    max_abs_error: float
    max_rel_error: float       # max_abs_error / max |reference|
    passed: bool
    note: str = ""
    mismatch_fraction: float = 0.0   # integer/bool outputs: elements that differ / all
    step: float = 0.0                # int8 outputs: the quantization step of the output
    cosine: Optional[float] = None   # int8 outputs: cosine similarity to the reference
    reference_spread: Optional[dict] = None   # int8 outputs: onnxruntime optimized vs plain
    fp16_reference_spread: Optional[dict] = None   # int8 outputs of fp16 float kernels: onnxruntime
                                                   # with the .om's fp16 roundings vs plain
    bound: str = ""                  # int8 outputs passed by a measured drift: "spread" | "fp16 drift"
    fp32_rerun: Optional[dict] = None   # "fp16 drift": the same graph with its float kernels in
                                        # float32, judged by the int8 rule

    @property
    def result(self) -> str:
        return "PASS" if self.passed else "FAIL"

    def as_dict(self) -> dict:
        return {**asdict(self), "result": self.result}

    def describe(self) -> str:
        """One line: the error measure this output is judged by, its bound and the result."""
        if self.precision.startswith("exact"):
            measure = f"mismatch_fraction = {self.mismatch_fraction:.6g}, tolerance = {self.tolerance:g}"
        else:
            measure = (f"max_abs_error = {self.max_abs_error:.6g}, max_rel_error = {self.max_rel_error:.6g}, "
                       f"tolerance = {self.tolerance:g} x {self.scale:.6g}")
        label = f"{self.precision}, step {self.step:.6g}" if self.step else self.precision
        if self.cosine is not None:
            measure += f", cosine = {self.cosine:.6f}"
        return f"{measure} ({label}) {self.result}{' (' + self.note + ')' if self.note else ''}"


def _cast_like(ref: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The reference as --output_type casts it: float -> integer truncates toward zero,
    clipped to the type's range (numpy's own out-of-range cast is undefined)."""
    info = np.iinfo(dtype)
    with np.errstate(invalid="ignore"):
        return np.clip(np.trunc(np.nan_to_num(ref.astype(np.float64))), info.min, info.max).astype(dtype)


@dataclass
class Spread:
    """How far onnxruntime's optimized execution of a quantized model lies from its plain one."""
    max_abs_error: float
    cosine: float

    @classmethod
    def between(cls, optimized: np.ndarray, plain: np.ndarray) -> Optional["Spread"]:
        if tuple(optimized.shape) != tuple(plain.shape) or optimized.dtype.kind not in "fiu":
            return None
        a, b = optimized.astype(np.float64).ravel(), plain.astype(np.float64).ravel()
        finite = np.isfinite(a) & np.isfinite(b)
        if not finite.any():
            return None
        return cls(float(np.max(np.abs(a[finite] - b[finite]))), _cosine(a[finite], b[finite]))


def _cosine(g: np.ndarray, r: np.ndarray) -> float:
    norm = float(np.linalg.norm(g) * np.linalg.norm(r))
    return float(np.dot(g, r) / norm) if norm > 0 else float(np.array_equal(g, r))


def _compare_int8(name: str, ref_name: str, got: np.ndarray, ref: np.ndarray, precision: str,
                  step: float, spread: Optional[Spread] = None,
                  fp16_spread: Optional[Spread] = None) -> OutputCompare:
    """Outputs of int8 kernels (COMPARE.md): within one quantization step of their own when
    every float kernel on the path runs in float32; otherwise (float16 float kernels, or a
    float output with no step of its own, e.g. the last Gemm's logits) within 10% of the
    output's magnitude (plus a step) and a cosine similarity of at least 0.999.  Either bound
    widens to SPREAD_FACTOR x onnxruntime's own spread (optimized vs plain execution) where
    that is larger: the model's depth, not the kernels, sets how far correct executions drift.
    With float16 float kernels, `fp16_spread` (onnxruntime with the .om's float16 roundings
    against its plain run) is a second measured drift; the larger of the two is used."""
    base = dict(name=name, reference_name=ref_name, dtype=str(ref.dtype), precision=precision)
    if tuple(got.shape) != tuple(ref.shape):
        return OutputCompare(**base, tolerance=0.0, scale=0.0, max_abs_error=float("inf"), max_rel_error=float("inf"),
                             passed=False, note=f"shape {list(got.shape)} != reference {list(ref.shape)}")
    g, r = got.astype(np.float64).ravel(), ref.astype(np.float64).ravel()
    finite = np.isfinite(r) & np.isfinite(g)
    max_abs = float(np.max(np.abs(g[finite] - r[finite]))) if finite.any() else 0.0
    peak = float(np.max(np.abs(r[finite]))) if finite.any() else 0.0
    scale = max(1.0, peak)
    cosine = _cosine(g[finite], r[finite])
    same_special = bool(np.array_equal(np.isfinite(g), np.isfinite(r)))
    notes = [] if same_special else ["NaN/inf positions differ from the reference"]
    if precision == "int8" and step > 0:
        tol, min_cosine = (step + TOLERANCE["fp32"] * scale) / scale, -1.0
    else:       # float16 float kernels, or a float computed after the int8 kernels (no step of its own)
        tol, min_cosine = TOLERANCE["int8-fp16"] + step / scale, INT8_FP16_MIN_COSINE
    drifts = [(s, label) for s, label in ((spread, "onnxruntime's own spread"),
                                          (fp16_spread if precision == "int8-fp16" else None,
                                           "the fp16-rounded reference's drift")) if s is not None]
    bound = ""
    if drifts and (max_abs > tol * scale or cosine < min_cosine):
        drift, label = max(drifts, key=lambda d: d[0].max_abs_error)
        widened = SPREAD_FACTOR * drift.max_abs_error / scale
        if widened > tol:
            tol = widened
            notes.append(f"bound {SPREAD_FACTOR:g} x {label}")
        bound = "fp16 drift" if drift is fp16_spread else "spread"
        # the direction still counts: 1 - cosine grows with the square of the deviation, so
        # SPREAD_FACTOR x the drift allows SPREAD_FACTOR**2 x its cosine deficit
        min_cosine = min(INT8_FP16_MIN_COSINE, 1.0 - SPREAD_FACTOR ** 2 * (1.0 - drift.cosine))
    passed = same_special and max_abs <= tol * scale and cosine >= min_cosine
    if cosine < min_cosine:
        notes.append(f"cosine similarity {cosine:.6f} < {min_cosine:.6f}")
    return OutputCompare(**base, tolerance=tol, scale=scale, max_abs_error=max_abs,
                         max_rel_error=max_abs / peak if peak > 0 else 0.0, passed=passed, note="; ".join(notes),
                         step=step, cosine=cosine,
                         reference_spread=None if spread is None else asdict(spread),
                         fp16_reference_spread=None if fp16_spread is None else asdict(fp16_spread),
                         bound=bound)


def compare_one(name: str, ref_name: str, got: np.ndarray, ref: np.ndarray, precision: str,
                step: float = 0.0, spread: Optional[Spread] = None,
                fp16_spread: Optional[Spread] = None) -> OutputCompare:
    """Error of one output; NaN/inf must sit where the reference has them.  An integer output
    of a float reference (--output_type=UINT8 ...) is compared with the reference cast the
    same way, to within one step (a value next to an integer can round either side of it)."""
    if ref.dtype.kind == "f" and (got.dtype.kind in "iu"):
        cast = _cast_like(ref, got.dtype)
        g, r = got.astype(np.float64), cast.astype(np.float64)
        max_abs = float(np.max(np.abs(g - r))) if r.size else 0.0
        peak = float(np.max(np.abs(r))) if r.size else 0.0
        tol = max(1.0, TOLERANCE[precision] * max(1.0, peak))
        ok = tuple(got.shape) == tuple(ref.shape) and max_abs <= tol
        return OutputCompare(name=name, reference_name=ref_name, dtype=str(got.dtype), precision=f"cast-{precision}",
                             tolerance=tol, scale=1.0, max_abs_error=max_abs,
                             max_rel_error=max_abs / peak if peak > 0 else 0.0, passed=ok,
                             note="" if ok else "the integer output differs by more than one step")
    if ref.dtype.kind in "OUS" or got.dtype.kind in "OUS":     # strings: equal or not
        same = tuple(got.shape) == tuple(ref.shape)
        differ = int(np.count_nonzero(got.astype(str) != ref.astype(str))) if same else got.size
        return OutputCompare(name=name, reference_name=ref_name, dtype="string", precision="exact", tolerance=0.0,
                             scale=1.0, max_abs_error=0.0 if same and not differ else float("inf"),
                             max_rel_error=0.0, passed=same and not differ,
                             mismatch_fraction=differ / max(got.size, 1),
                             note="" if same else f"shape {list(got.shape)} != reference {list(ref.shape)}")
    if precision.startswith("int8"):
        return _compare_int8(name, ref_name, got, ref, precision, step, spread, fp16_spread)
    exact = ref.dtype == np.bool_ or np.issubdtype(ref.dtype, np.integer)
    if exact:
        label = "exact-after-fp16" if precision == "fp16" else "exact"
        tol = DECISION_FLIP_FRACTION if precision == "fp16" else 0.0
    else:
        label, tol = precision, TOLERANCE[precision]
    base = dict(name=name, reference_name=ref_name, dtype=str(ref.dtype), precision=label, tolerance=tol)
    if tuple(got.shape) != tuple(ref.shape):
        return OutputCompare(**base, scale=0.0, max_abs_error=float("inf"), max_rel_error=float("inf"),
                             passed=False, note=f"shape {list(got.shape)} != reference {list(ref.shape)}")
    g, r = got.astype(np.float64), ref.astype(np.float64)
    finite = np.isfinite(r)
    same_special = bool(np.array_equal(np.isnan(g), np.isnan(r)) and
                        np.array_equal(g[~finite & ~np.isnan(r)], r[~finite & ~np.isnan(r)]))
    diff = np.abs(g[finite] - r[finite]) if r.size else np.zeros(0)
    max_abs = float(np.max(diff)) if diff.size else 0.0
    if np.isnan(max_abs):
        max_abs = float("inf")
    peak = float(np.max(np.abs(r[finite]))) if finite.any() else 0.0
    scale = max(1.0, peak)
    max_rel = max_abs / peak if peak > 0 else (0.0 if max_abs == 0 else float("inf"))
    mismatch = float(np.count_nonzero(g != r)) / r.size if exact and r.size else 0.0
    if exact:
        passed = same_special and mismatch <= tol
    else:
        passed = same_special and max_abs <= tol * scale
    note = "" if same_special else "NaN/inf positions differ from the reference"
    return OutputCompare(**base, scale=scale, max_abs_error=max_abs, max_rel_error=max_rel,
                         passed=passed, note=note, mismatch_fraction=mismatch)


def compare_outputs(graph: Graph, outputs: dict, reference: dict, compute_dtypes: dict,
                    optimized_reference: Optional[dict] = None, fp16_reference: Optional[dict] = None) -> list:
    """One `OutputCompare` per .om output, matched to the ONNX outputs by name, else by position.
    `optimized_reference`: onnxruntime's ORT_ENABLE_ALL outputs, for the int8 outputs' spread;
    `fp16_reference`: onnxruntime on the float16-rounded model (`fp16_rounded_model`)."""
    results = []
    for value, ref_name, precision in _matched(graph, reference, compute_dtypes):
        plain = np.asarray(reference[ref_name])
        spread = fp16_spread = None
        if optimized_reference is not None and ref_name in optimized_reference:
            spread = Spread.between(np.asarray(optimized_reference[ref_name]), plain)
        if fp16_reference is not None and ref_name in fp16_reference:
            fp16_spread = Spread.between(np.asarray(fp16_reference[ref_name]), plain)
        results.append(compare_one(value.name, ref_name, np.asarray(outputs[value.name]), plain, precision,
                                   quantization_step(value), spread, fp16_spread))
    return results


def _matched(graph: Graph, reference: dict, compute_dtypes: dict) -> list:
    """(.om output, reference name, precision class) for every .om output."""
    ref_names = list(reference)
    matched = []
    for i, value in enumerate(graph.outputs):
        ref_name = value.name if value.name in reference else (ref_names[i] if i < len(ref_names) else None)
        if ref_name is None:
            raise _compare_error("onnx", f"the .om output [{value.name}] has no ONNX output to compare with.")
        matched.append((value, ref_name, precision_class(graph, value, compute_dtypes)))
    return matched


def onnx_feeds(graph: Graph, feeds: dict) -> dict:
    """What the ONNX model takes for the .om's feeds: a raw image an Aipp op reads goes through
    the same preprocessing, in float32 (codegen/aipp.py), before onnxruntime."""
    from codegen.aipp import OP_TYPE, preprocess
    out = dict(feeds)
    for value in graph.inputs:
        aipp = [node for node, _ in value.uses if node.op_type == OP_TYPE]
        if aipp and value.name in feeds:
            model_input = aipp[0].outputs[0]
            out[value.name] = preprocess(feeds[value.name], aipp[0].attrs, round_fp16=False).astype(
                model_input.desc.dtype)
    return out


def compare_with_onnx(onnx_path: str, graph: Graph, feeds: dict, outputs: dict,
                      compute_dtypes: dict, reference: Optional[dict] = None) -> list:
    ort_feeds = onnx_feeds(graph, feeds)
    reference = reference if reference is not None else run_onnxruntime(onnx_path, ort_feeds)
    optimized = rounded = None
    precisions = {p for _, _, p in _matched(graph, reference, compute_dtypes)}
    if any(p.startswith("int8") for p in precisions):
        optimized = run_onnxruntime(onnx_path, ort_feeds, optimized=True)
    if "int8-fp16" in precisions:
        model = fp16_rounded_model(reference_proto(onnx_path), graph, compute_dtypes)
        if model is not None and model.ByteSize() < 2 ** 31 - 1:    # beyond, protobuf cannot serialize it
            rounded = run_onnxruntime(onnx_path, ort_feeds, model=model)
    results = compare_outputs(graph, outputs, reference, compute_dtypes, optimized, rounded)
    drifted = [r for r in results if r.passed and r.bound == "fp16 drift"]
    if drifted:
        _confirm_int8_kernels(drifted, graph, feeds, compute_dtypes, reference, optimized)
    return results


def _confirm_int8_kernels(checks: list, graph: Graph, feeds: dict, compute_dtypes: dict, reference: dict,
                          optimized: Optional[dict]) -> None:
    """An output passed only within twice the fp16 drift must also pass the `int8` rule when
    the same graph runs with its float kernels in float32: the drift rule bounds what fp16
    does to the model, this run checks the int8 kernels themselves (every int8 tensor as
    onnxruntime computes it), so a kernel error smaller than the drift still fails."""
    from simulator.executor import run_graph

    def float32_kernels(node):
        dtype = compute_dtypes.get(node.name)
        return np.dtype(np.float32) if dtype is not None and np.dtype(dtype) == np.float16 else dtype

    try:
        rerun = run_graph(graph, feeds, float32_kernels)
    except AtcError as exc:
        rerun, reason = None, f"it cannot run with its float kernels in float32 ({exc})"
    for check in checks:
        if rerun is not None:
            ref = np.asarray(reference[check.reference_name])
            spread = None
            if optimized is not None and check.reference_name in optimized:
                spread = Spread.between(np.asarray(optimized[check.reference_name]), ref)
            fp32 = compare_one(check.name, check.reference_name, np.asarray(rerun[check.name]), ref, "int8",
                               check.step, spread)
            check.fp32_rerun = {"max_abs_error": fp32.max_abs_error, "tolerance": fp32.tolerance,
                                "scale": fp32.scale, "result": fp32.result}
            if fp32.passed:
                continue
            reason = f"with its float kernels in float32 the int8 rule fails: {fp32.describe()}"
        check.passed = False
        check.note = f"{check.note}; {reason}"
