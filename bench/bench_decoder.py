"""Decoder steps on every small decoder export: Llama, Qwen2 and GPT-2, each with torch's
TorchScript and dynamo exporters (tests/exporters.py `export_decoder`: 2 layers, hidden 32,
past_key_values.* inputs and present.* outputs with dynamic batch, sequence and cache lengths).

Each file compiles once (every dynamic dim -1); atc-sim's generation loop
(simulator/decode.py, what `atc-sim --decode_steps` runs) runs a prompt's prefill then N decode
steps, feeding each step's present back as the next past, and compares every step with
onnxruntime.  Prints per export: what fused (and what was checked on symbolic dims), whether
every step passed, the worst step's max abs error of the logits, and the simulated prefill
and per-token times.  The tests run four of the six exports (tests/test_decoder_steps.py);
this runs all six.  Needs the `export` extra.

usage: python bench/bench_decoder.py [--steps 8] [--prompt 6] [--batch 1] [--workdir DIR]
       [--models llama,qwen2,gpt2] [--exporters torchscript,dynamo] [--attn sdpa|eager]
       [--precision force_fp32]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

import numpy as np  # noqa: E402
import onnx  # noqa: E402

import atc_py  # noqa: E402
import exporters  # noqa: E402  (tests/exporters.py)
from simulator import decode  # noqa: E402


def run_one(name: str, exporter: str, args) -> dict:
    tag = f"{name}_{exporter}" + ("" if args.attn == "sdpa" else f"_{args.attn}")
    path = os.path.join(args.workdir, f"{tag}.onnx")
    if not os.path.exists(path):
        t0 = time.perf_counter()
        exporters.export_decoder(name, exporter, path, None if args.attn == "sdpa" else args.attn)
        print(f"  exported {os.path.basename(path)} in {time.perf_counter() - t0:.1f} s", flush=True)
    out = os.path.join(args.workdir, f"{tag}_{args.precision}")
    report = atc_py.compile(path, output=out, soc_version="Ascend910", precision_mode=args.precision,
                            input_shape=exporters.decoder_input_shape(onnx.load(path)))
    session = atc_py.InferSession(out + ".om")
    prompt = decode.prompt_tokens(session.model.graph, args.batch, args.prompt)
    steps = decode.generate(session, prompt, args.steps, path)
    worst = max((c.max_abs_error for s in steps for c in s.compares if c.name.startswith("logits")), default=float("nan"))
    fused = {p["pattern"]: p["effect"] for p in report["patterns"] if p["effect"]}
    return {"model": f"{name}/{exporter}", "kernels": f"{report['kernels_before']} -> {report['kernels_after']}",
            "fused": fused, "symbolic": report["dynamic"].get("symbolic_matches", {}),
            "passed": all(s.passed for s in steps) and all(s.compares for s in steps),
            "steps": len(steps), "worst": worst, "prefill_us": steps[0].npu_time_ms * 1e3,
            "decode_us": statistics.median(s.npu_time_ms for s in steps[1:]) * 1e3 if len(steps) > 1 else 0.0}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=6, help="prompt length (tokens)")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--models", default=",".join(exporters.DECODERS))
    parser.add_argument("--exporters", default=",".join(exporters.EXPORTERS))
    parser.add_argument("--attn", default="sdpa", choices=("sdpa", "eager"),
                        help="transformers' attention implementation (sdpa: its default)")
    parser.add_argument("--precision", default="force_fp32")
    parser.add_argument("--workdir", default=None, help="keep exports and .om files here (default: a temp dir)")
    args = parser.parse_args(argv)
    args.workdir = args.workdir or tempfile.mkdtemp(prefix="bench_decoder_")
    os.makedirs(args.workdir, exist_ok=True)
    rows = []
    for name in args.models.split(","):
        for exporter in args.exporters.split(","):
            print(f"{name}/{exporter} ...", flush=True)
            rows.append(run_one(name, exporter, args))
    print(f"\nprompt {args.batch}x{args.prompt}, prefill + {args.steps} decode steps, {args.precision}, "
          f"attention {args.attn}, Ascend910 (simulated times)\n")
    print("| export | kernels | fused | checked on symbols | every step matches ORT | worst logits max abs "
          "| prefill µs | per-token µs (median) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        fused = ", ".join(f"{k} {v}" for k, v in r["fused"].items()) or "-"
        symbolic = ", ".join(f"{k} {v}" for k, v in r["symbolic"].items()) or "-"
        print(f"| {r['model']} | {r['kernels']} | {fused} | {symbolic} | "
              f"{'yes' if r['passed'] else 'NO'} ({r['steps']} steps) | {r['worst']:.2e} | "
              f"{r['prefill_us']:.1f} | {r['decode_us']:.1f} |")
    return 0 if all(r["passed"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
