"""The sweep: export every family with both torch exporters (and, for attention models, each
attention implementation), compile with atc, compare, count the peers' kernels, record every
miss with the reason atc printed.  Resumable: finished files are rows in results.jsonl and
are skipped on the next run (--redo to measure them again; exports are cached separately).
It measures the checkout it runs from, whatever atc_py the venv has installed: every stage
and the venv's `atc`/`atc-sim` get this checkout first on PYTHONPATH (ours.checkout_env).

usage (from the repository root, in the sweep venv, see bench/requirements-sweep.txt):
    nice -n 10 python -m bench.sweep [--family a,b] [--exporter torchscript|dynamo]
        [--attn sdpa,eager,default] [--skip-peers] [--peers-from DIR] [--jobs 1] [--cache /work/cache/sweep]
    python -m bench.sweep --report          # tables from results.jsonl, no measuring
"""
from __future__ import annotations

import argparse
import hashlib
import collections
import concurrent.futures
import json
import os
import re
import sys
import threading
import time

from bench.sweep import analysis, ours
from bench.sweep.models import BY_NAME, EXPORTERS, FAMILIES

ROOT = ours.CHECKOUT
DEFAULT_CACHE = "/work/cache/sweep"
PEER_NAMES = ("ort", "openvino", "tvm")
_lock = threading.Lock()


def specs(families, exporters, attns):
    for family in FAMILIES:
        if families and family.name not in families:
            continue
        for exporter in EXPORTERS:
            if exporters and exporter not in exporters:
                continue
            for attn in family.attn_impls:
                if attns and attn not in attns:
                    continue
                yield family, exporter, attn


def file_id(family, exporter, attn) -> str:
    return f"{family.name}.{exporter}" + ("" if attn == "default" else f".{attn}")


def python_stage(module: str, args, timeout: float) -> dict:
    """Run `python -m bench.sweep.<module> args`; its last stdout line is JSON."""
    result = ours.run([sys.executable, "-m", f"bench.sweep.{module}", *args], timeout, cwd=ROOT)
    if result["rc"] == 0:
        try:
            return dict(json.loads(result["out"].strip().splitlines()[-1]), seconds=result["seconds"])
        except (ValueError, IndexError):
            pass
    lines = [line.strip() for line in result["out"].strip().splitlines() if line.strip()]
    errors = [line for line in lines if re.search(r"\w*(Error|Exception)\b", line)]
    tail = ([errors[-1]] if errors else []) + lines[-2:]
    return {"error": f"rc={result['rc']}: " + " | ".join(tail)[-600:], "seconds": result["seconds"]}


def export_file(family, exporter, attn, cache: str, timeout: float) -> tuple:
    fid = file_id(family, exporter, attn)
    path = os.path.join(cache, "onnx", fid + ".onnx")
    meta_path = path[:-5] + ".export.json"
    if os.path.exists(meta_path):
        with open(meta_path) as f:
            meta = json.load(f)
        if "error" in meta or os.path.exists(path):
            return path, meta
    os.makedirs(os.path.dirname(path), exist_ok=True)
    meta = python_stage("export", [family.name, exporter, attn, path], timeout)
    with open(meta_path, "w") as f:
        json.dump(meta, f)
    return path, meta


def measure(family, exporter, attn, args) -> dict:
    fid = file_id(family, exporter, attn)
    start = time.time()
    row = {"file": fid, "family": family.name, "source": family.source, "category": family.category,
           "exporter": exporter, "attn": attn}
    path, meta = export_file(family, exporter, attn, args.cache, args.export_timeout)
    row["export_ok"] = "error" not in meta
    row["export_s"] = meta.get("export_s")
    row["attn_modules"] = meta.get("attn_modules")
    if not row["export_ok"]:
        row["export_error"] = meta["error"]
        return dict(row, compile_ok=False, seconds=round(time.time() - start, 1))

    import onnx
    graph = analysis.OnnxGraph(onnx.load(path, load_external_data=False).graph)
    attention = graph.attention_softmaxes()
    convs = graph.convs()
    row.update(onnx_nodes=len(graph.nodes), attn_layers=len(attention), convs=len(convs),
               onnx_sha256=file_sha256(path))

    work = os.path.join(args.cache, "work", fid)
    os.makedirs(work, exist_ok=True)
    base = os.path.join(work, "model")
    compiled = ours.atc_compile(path, base, "force_fp16", args.timeout, debug_dir=os.path.join(work, "dfx"))
    with open(base + ".atc.log", "w") as f:
        f.write(compiled["log"])
    row.update(compile_ok=compiled["ok"], compile_s=compiled["seconds"])
    if not compiled["ok"]:
        row.update(compile_error=compiled["error"], compile_error_text=compiled["error_text"])
    else:
        tasks = ours.om_tasks(base + ".om", args.timeout)
        row.update(_fusion_facts(graph, tasks, attention, convs, compiled["log"],
                                 ours.dfx_misses(os.path.join(work, "dfx"))))
        row.update(_compare(path, base, work, args))
    reused = reused_peers(args.peers_from, fid, path) if args.peers_from else None
    if reused:
        row["peers"], row["peers_from"] = reused, args.peers_from
    elif not args.skip_peers:
        row["peers"] = {p: python_stage("peers", [p, path], args.timeout) for p in PEER_NAMES}
    row["seconds"] = round(time.time() - start, 1)
    return row


def reused_peers(cache: str, fid: str, onnx_path: str):
    """The peers' counts of `fid` measured in another sweep folder, when they were measured on
    the same ONNX bytes: the peers never see atc_py, so a re-run of our side need not pay for
    them again.  Same bytes = the row records the file's sha256 and it matches (rows without
    one are not reused)."""
    row = load_rows(cache).get(fid)
    if not row or not row.get("peers") or row.get("onnx_sha256") != file_sha256(onnx_path):
        return None
    return row["peers"]


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fusion_facts(graph, tasks, attention, convs, log_text, dfx) -> dict:
    covered = analysis.coverage(tasks)
    types = collections.Counter(t["op_type"] for t in tasks)
    misses = analysis.parse_misses(log_text)
    _attach_op_names(misses, dfx)
    facts = {"kernels": len(tasks), "kernel_types": dict(types.most_common()),
             "mha_kernels": sum(1 for t in tasks if analysis.is_mha(t)),
             "miss_lines": len(misses), "dfx_files": len(dfx), "missed": []}
    mha_layers, missed, forms = 0, [], {}
    for layer in attention:
        tally = forms.setdefault(layer["form"], [0, 0])   # [fused, missed]
        if analysis.is_mha(covered.get(layer["softmax"])):
            mha_layers += 1
            tally[0] += 1
            continue
        tally[1] += 1
        about = analysis.misses_about(layer["softmax"], misses, (layer["qk"], layer["pv"]))
        missed.append(dict(analysis.classify(about, "Attention", layer["softmax"]),
                           kind="attention", node=layer["softmax"], form=layer["form"], all_reasons=sorted({f"{m['pass']} {m['code']}" for m in about})))
    convs_fused, conv_kernels = 0, collections.Counter()
    for conv in convs:
        task = covered.get(conv["name"])
        conv_kernels[task["op_type"] if task else "not in any task"] += 1
        if analysis.fused(task):
            convs_fused += 1
            continue
        about = analysis.misses_about(conv["name"], misses)
        missed.append(dict(analysis.classify(about, "Conv", conv["name"]), kind="conv",
                           node=conv["name"],
                           group=conv["group"], dilated=conv["dilated"], in_task=task is not None,
                           consumers=graph.consumer_types(conv["name"]),
                           all_reasons=sorted({f"{m['pass']} {m['code']}" for m in about})))
    facts.update(mha_layers=mha_layers, convs_fused=convs_fused, conv_kernels=dict(conv_kernels), misses=missed,
                 attn_forms=forms)
    return facts


def _attach_op_names(misses, dfx) -> None:
    by_key = collections.defaultdict(list)
    for d in dfx:
        by_key[(d.get("pass"), d.get("anchor"), d.get("error_code"))].append(d.get("op_names", []))
    for miss in misses:
        names = by_key.get((miss["pass"], miss["anchor"], miss["code"]))
        miss["op_names"] = names.pop(0) if names else []


def _compare(path, base, work, args) -> dict:
    out = {}
    fp32 = ours.atc_compile(path, base + "_fp32", "force_fp32", args.timeout)
    if not fp32["ok"]:
        return {"compare_fp32": f"COMPILE {fp32['error']}", "compare_fp16": "not run"}
    result = ours.compare(base + "_fp32.om", path, os.path.join(work, "out32"), args.timeout)
    out.update(compare_fp32=result["verdict"], compare_fp32_detail=result["detail"], compare_fp32_s=result["seconds"])
    if result["verdict"] in ("PASS", "FAIL") and not ours.outputs_fit_fp16(os.path.join(work, "out32")):
        out["compare_fp16"] = "skipped: reference exceeds fp16"
        return out
    result = ours.compare(base + ".om", path, os.path.join(work, "out16"), args.timeout)
    out.update(compare_fp16=result["verdict"], compare_fp16_detail=result["detail"])
    return out


def load_rows(cache: str) -> dict:
    rows = {}
    path = os.path.join(cache, "results.jsonl")
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                if line.strip():
                    row = json.loads(line)
                    rows[row["file"]] = row      # the last measurement of a file wins
    return rows


def append_row(cache: str, row: dict) -> None:
    with _lock, open(os.path.join(cache, "results.jsonl"), "a") as f:
        f.write(json.dumps(row, sort_keys=True) + "\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="atc_py fusion sweep over torchvision/timm/transformers exports")
    parser.add_argument("--family", default="", help="comma-separated family names (default: all)")
    parser.add_argument("--exporter", default="", help="torchscript,dynamo (default: both)")
    parser.add_argument("--attn", default="", help="sdpa,eager,default (default: all a family has)")
    parser.add_argument("--skip-peers", action="store_true")
    parser.add_argument("--peers-from", default="", help="another sweep folder: reuse its peer counts of the same ONNX bytes")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--cache", default=DEFAULT_CACHE)
    parser.add_argument("--timeout", type=float, default=300, help="seconds per stage (compile, compare, each peer)")
    parser.add_argument("--export-timeout", type=float, default=600)
    parser.add_argument("--redo", action="store_true", help="measure files that already have a row")
    parser.add_argument("--nice", type=int, default=10)
    parser.add_argument("--report", action="store_true", help="only print the tables of results.jsonl")
    parser.add_argument("--list", action="store_true", help="list the families")
    args = parser.parse_args(argv)
    if args.list:
        for f in FAMILIES:
            print(f"{f.name:32} {f.source:13} {f.category:16} {','.join(f.attn_impls)}")
        return 0
    os.makedirs(args.cache, exist_ok=True)
    from bench.sweep import report
    if args.report:
        return report.write(args.cache, load_rows(args.cache))
    unknown = [n for n in filter(None, args.family.split(",")) if n not in BY_NAME]
    if unknown:
        parser.error(f"unknown families {unknown}; --list shows them")
    if args.nice:
        os.nice(args.nice)
    done = load_rows(args.cache)
    todo = [s for s in specs(set(filter(None, args.family.split(","))), set(filter(None, args.exporter.split(","))),
                             set(filter(None, args.attn.split(","))))
            if args.redo or file_id(*s) not in done]
    print(f"{len(todo)} files to measure ({len(done)} already in {args.cache}/results.jsonl)", flush=True)

    def one(spec):
        try:
            row = measure(*spec, args)
        except Exception as err:   # a harness failure on one file is a row, not the end of the sweep
            family, exporter, attn = spec
            row = {"file": file_id(*spec), "family": family.name, "source": family.source,
                   "category": family.category, "exporter": exporter, "attn": attn,
                   "export_ok": False, "compile_ok": False, "harness_error": f"{type(err).__name__}: {err}"[:400]}
        append_row(args.cache, row)
        print(report.one_line(row), flush=True)

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        list(pool.map(one, todo))
    return report.write(args.cache, load_rows(args.cache))


if __name__ == "__main__":
    sys.exit(main())
