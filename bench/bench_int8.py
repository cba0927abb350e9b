"""Int8 bench: ResNet-50, MobileNetV2 and BERT-base quantized three ways (onnxruntime's
quantize_static in QDQ and QOperator format after quant_pre_process, and an AMCT-style deploy
model), each compiled for one chip next to the fp16 build of its float model.

Per model and form: kernels launched, int8 kernels, simulated latency and fps (the cost
model, batch 1), `--compare` of the .om against onnxruntime on the quantized model (the
int8 rule of simulator/COMPARE.md, float kernels in fp16 and in fp32; the worst output with
onnxruntime's own spread and, for fp16, the drift of onnxruntime with the .om's fp16
roundings), and the accuracy
against the float original on seeded inputs as `atc-sim --accuracy` measures it: top-1
agreement (classifiers) and the cosine similarity of every output, with the simulator
running the int8 .om and onnxruntime the float ONNX.  Everything is measured in this one run; calibration and test
inputs are seeded (atc_py/zoo/int8.py).

usage: python bench/bench_int8.py [--soc Ascend310P3] [--models resnet50,mobilenet_v2,bert_base]
                                  [--forms qdq,qoperator,amct] [--calibration 8] [--samples 8]
                                  [--workdir DIR] [--reuse]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import onnx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from atc_py import zoo  # noqa: E402
from atc_py.compiler import compile_model  # noqa: E402
from atc_py.options import AtcOptions  # noqa: E402
from atc_py.report import build_report  # noqa: E402
from atc_py.zoo.int8 import calibration_feeds, quantize  # noqa: E402
from om_format.container import write_om  # noqa: E402

INT8_KERNELS = ("QuantConvBNReluFusionOp", "QuantMatMulBiasActFusionOp", "QuantMultiHeadAttentionFusionOp")


def build(path: str, out: str, soc: str, precision: str):
    options = AtcOptions(model=path, framework="5", output=out, soc_version=soc, precision_mode=precision)
    options.validate()
    result = compile_model(options)
    write_om(options.om_path, result.partitions.as_dict(), name=os.path.basename(out), ops=len(result.graph.nodes),
             platform_version=soc)
    return options.om_path, result, build_report(result, soc, precision)


def int8_kernels(graph) -> int:
    """Launched kernels that run an int8 cube (alone or as an autofused group's anchor)."""
    return sum(1 for n in graph.nodes if n.op_type in INT8_KERNELS or n.attrs.get("anchor") in INT8_KERNELS)


def compare(om_path: str, onnx_path: str, feeds: dict) -> str:
    from simulator import runner
    from simulator.compare import compare_with_onnx
    model = runner.load_model(om_path)
    result = runner.run(model, feeds, loop=1, warmup_count=0)
    checks = compare_with_onnx(onnx_path, model.graph, feeds, result.outputs, model.loaded.compute_dtypes)
    verdict = "PASS" if all(c.passed for c in checks) else "FAIL"
    worst = max(checks, key=lambda c: c.max_rel_error)
    spread = "" if not worst.reference_spread else \
        f", onnxruntime's own spread {worst.reference_spread['max_abs_error']:.3g}"
    if worst.fp16_reference_spread:
        spread += f", fp16-rounded reference's drift {worst.fp16_reference_spread['max_abs_error']:.3g}"
    return (f"{verdict} (worst {worst.name}: max_abs {worst.max_abs_error:.3g}, max_rel {worst.max_rel_error:.3g}, "
            f"{worst.precision}{spread})")


def accuracy(om_path: str, float_path: str, samples: list) -> str:
    """What `atc-sim --accuracy` reports (simulator/accuracy.py): top-1 agreement of a
    classifier's logits, else the mean cosine similarity, of the int8 .om vs the float ONNX."""
    from simulator import runner
    from simulator.accuracy import accuracy_against
    model = runner.load_model(om_path)
    outputs = [runner.run(model, feeds, loop=1, warmup_count=0).outputs for feeds in samples]
    parts = []
    for a in accuracy_against(float_path, model.graph, samples, outputs):
        top1 = f"top-1 {a.top1_agree}/{a.top1_total}, " if a.top1_total else ""
        parts.append(f"{a.name} {top1}cosine {a.cosine_mean:.4f} (worst {a.cosine_min:.4f})")
    return "; ".join(parts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--soc", default="Ascend310P3")
    parser.add_argument("--models", default="resnet50,mobilenet_v2,bert_base")
    parser.add_argument("--forms", default="qdq,qoperator,amct")
    parser.add_argument("--calibration", type=int, default=8)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--workdir", default="")
    parser.add_argument("--reuse", action="store_true", help="keep the float and quantized ONNX files already in "
                        "--workdir (they come from the same seeded flow) instead of exporting and quantizing again")
    args = parser.parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix="atc_int8_")
    print(f"soc {args.soc}, calibration {args.calibration} seeded inputs, accuracy over {args.samples}, "
          f"workdir {workdir}", flush=True)
    print(f"{'model':<14}{'build':<11}{'kernels':>8}{'int8':>6}{'latency us':>12}{'fps':>9}{'vs fp16':>9}"
          f"{'compile s':>10}  compare fp16 | fp32; accuracy vs float", flush=True)
    for name in args.models.split(","):
        float_path = os.path.join(workdir, f"{name}.onnx")
        if not (args.reuse and os.path.exists(float_path)):
            float_path = zoo.save(name, workdir)
        model = onnx.load(float_path)
        _, _, fp16 = build(float_path, os.path.join(workdir, f"{name}_fp16"), args.soc, "force_fp16")
        print(f"{name:<14}{'fp16':<11}{fp16.kernels_after:>8}{0:>6}{fp16.time_after_us:>12.1f}"
              f"{1e6 / fp16.time_after_us:>9.0f}{1.0:>8.2f}x", flush=True)
        calibration = calibration_feeds(model, args.calibration, seed=0)
        samples = calibration_feeds(model, args.samples, seed=1000)
        for form in args.forms.split(","):
            q_path = os.path.join(workdir, f"{name}_{form}.onnx")
            if not (args.reuse and os.path.exists(q_path)):
                onnx.save(quantize(model, form, calibration), q_path)
            start = time.perf_counter()
            om16, result, report = build(q_path, os.path.join(workdir, f"{name}_{form}"), args.soc, "force_fp16")
            seconds = time.perf_counter() - start
            om32, _, _ = build(q_path, os.path.join(workdir, f"{name}_{form}_fp32"), args.soc, "force_fp32")
            checks = f"{compare(om16, q_path, samples[0])} | {compare(om32, q_path, samples[0])}"
            print(f"{'':<14}{form:<11}{report.kernels_after:>8}{int8_kernels(result.graph):>6}"
                  f"{report.time_after_us:>12.1f}{1e6 / report.time_after_us:>9.0f}"
                  f"{fp16.time_after_us / report.time_after_us:>8.2f}x{seconds:>10.1f}  {checks}; "
                  f"{accuracy(om16, float_path, samples)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
