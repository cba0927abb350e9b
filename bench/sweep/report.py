"""Tables of a sweep run: one row per file, per-family and overall totals, the files where a
peer launches fewer kernels, misses grouped by the reason atc printed, and the misses with
no reason.  Writes <cache>/sweep.json (machine-readable) and <cache>/sweep.md."""
from __future__ import annotations

import collections
import json
import os

from bench.sweep.analysis import best_peer, misses_by_reason, pct, totals

PEERS = ("ort", "openvino", "tvm")


def _peer(row, peer) -> str:
    p = row.get("peers", {}).get(peer)
    if not isinstance(p, dict):
        return "-"
    return str(p["kernels_noview"]) if "kernels_noview" in p else "err"


def _compile(row) -> str:
    if not row.get("export_ok"):
        return "export failed"
    return f"{row['compile_s']:.1f}s" if row.get("compile_ok") else f"**{row.get('compile_error', '?')}**"


def one_line(row) -> str:
    if not row.get("export_ok"):
        why = row.get("export_error") or row.get("harness_error", "")
        return f"{row['file']:<44} export FAILED {why[-160:]}"
    if not row.get("compile_ok"):
        return f"{row['file']:<44} compile FAILED {row.get('compile_error')} {row.get('compile_error_text', '')[:140]}"
    return (f"{row['file']:<44} k={row['kernels']:<4} ort={_peer(row, 'ort'):<4} ov={_peer(row, 'openvino'):<4} "
            f"tvm={_peer(row, 'tvm'):<4} mha={row['mha_layers']}/{row['attn_layers']} conv={row['convs_fused']}/"
            f"{row['convs']} fp32={row.get('compare_fp32')} fp16={str(row.get('compare_fp16'))[:8]} {row['seconds']}s")


def file_table(rows) -> list:
    out = ["| file | ONNX nodes | compile | ours | ORT | OpenVINO | TVM | attn → MHA | Conv fused | fp32 | fp16 | peer gap |",
           "|---|---:|---|---:|---:|---:|---:|---:|---:|---|---|---:|"]
    for r in rows:
        ok = r.get("compile_ok")
        bp = best_peer(r)
        gap = f"{bp[0]} -{r['kernels'] - bp[1]}" if ok and bp and bp[1] < r["kernels"] else ""
        attn = f"{r.get('mha_layers', 0)}/{r['attn_layers']}" if ok and r.get("attn_layers") else \
            (f"-/{r['attn_layers']}" if r.get("attn_layers") else "")
        conv = f"{r.get('convs_fused', 0)}/{r['convs']}" if ok and r.get("convs") else \
            (f"-/{r['convs']}" if r.get("convs") else "")
        fp16 = str(r.get("compare_fp16", "")).replace("skipped: reference exceeds fp16", "n/a (range)")
        out.append(f"| {r['file']} | {r.get('onnx_nodes', '')} | {_compile(r)} | {r.get('kernels', '') if ok else ''} | "
                   f"{_peer(r, 'ort')} | {_peer(r, 'openvino')} | {_peer(r, 'tvm')} | {attn} | {conv} | "
                   f"{r.get('compare_fp32', '') if ok else ''} | {fp16 if ok else ''} | {gap} |")
    return out


def family_table(rows) -> list:
    by = collections.OrderedDict()
    for r in rows:
        by.setdefault(r["family"], []).append(r)
    out = ["| family | source | files | compiled | attn → MHA | Conv fused | fp32 PASS | peer fewer (max gap) |",
           "|---|---|---:|---:|---:|---:|---:|---|"]
    for fam, rs in by.items():
        t = totals(rs)
        gaps = [(r["kernels"] - best_peer(r)[1], best_peer(r)[0]) for r in rs
                if r.get("compile_ok") and best_peer(r) and best_peer(r)[1] < r["kernels"]]
        worst = f"{len(gaps)} ({max(gaps)[1]} -{max(gaps)[0]})" if gaps else "0"
        out.append(f"| {fam} | {rs[0]['source']} | {t['files']} | {t.get('compiled', 0)} | "
                   f"{t.get('mha_layers', 0)}/{t.get('attn_layers', 0)} | {t.get('convs_fused', 0)}/{t.get('convs', 0)} | "
                   f"{t.get('compare_fp32_pass', 0)}/{t.get('compare_fp32_run', 0)} | {worst} |")
    return out


def overall(rows) -> list:
    t = totals(rows)
    g = lambda k: t.get(k, 0)  # noqa: E731
    return [
        f"- files: {g('files')}; exported {g('exported')}; compiled {g('compiled')}",
        f"- attention layers → one MHA kernel: {g('mha_layers')}/{g('attn_layers')} ({pct(g('mha_layers'), g('attn_layers'))})"
        f" in compiled files; MHA kernels formed: {g('mha_kernels')}",
        f"- Conv nodes in a fused kernel: {g('convs_fused')}/{g('convs')} ({pct(g('convs_fused'), g('convs'))}) in compiled files",
        f"- --compare fp32: {g('compare_fp32_pass')} PASS of {g('compare_fp32_run')} run; "
        f"fp16: {g('compare_fp16_pass')} PASS of {g('compare_fp16_run')} run",
        f"- files where a peer launches fewer kernels than ours: {g('peer_fewer')} of {g('compiled')} compiled "
        f"(sum of the gaps {g('peer_gap')} kernels)",
    ]


def peer_table(rows) -> list:
    out = ["| file | ours | ORT | OpenVINO | TVM | fewest | gap |", "|---|---:|---:|---:|---:|---|---:|"]
    hits = [(r["kernels"] - best_peer(r)[1], r) for r in rows
            if r.get("compile_ok") and best_peer(r) and best_peer(r)[1] < r["kernels"]]
    for gap, r in sorted(hits, key=lambda x: -x[0]):
        out.append(f"| {r['file']} | {r['kernels']} | {_peer(r, 'ort')} | {_peer(r, 'openvino')} | {_peer(r, 'tvm')} | "
                   f"{best_peer(r)[0]} | {gap} |")
    return out


def reason_table(rows) -> list:
    out = ["| kind | misses | files | reason (pass, NF code, constraint with names/numbers elided) | families | example node |",
           "|---|---:|---:|---|---|---|"]
    for g in misses_by_reason(rows):
        fams = ", ".join(g["families"][:8]) + (" …" if len(g["families"]) > 8 else "")
        ex = g["example"]
        out.append(f"| {g['kind']} | {g['count']} | {len(g['files'])} | {g['key'].replace('|', '/')} "
                   f"({g['source']}) | {fams} | `{ex['file']}`: `{ex['node']}` |")
    return out


def sources(rows) -> list:
    """Who printed the reason for each missed node: its own pass (MHA for attention,
    ConvBNReLU for a conv), another named pass, only autofuse (the named pass said nothing),
    or nobody."""
    count = collections.Counter((m["kind"], m["source"]) for r in rows for m in r.get("misses", []))
    out = ["| kind | own pass | other named pass | autofuse only | none |", "|---|---:|---:|---:|---:|"]
    for kind in ("attention", "conv"):
        out.append(f"| {kind} | " + " | ".join(str(count.get((kind, s), 0))
                                              for s in ("own-pass", "other-pass", "autofuse-only", "none")) + " |")
    return out


def form_table(rows) -> list:
    """Attention layers by their exporter form: how many became one MHA kernel."""
    forms = {}
    for r in rows:
        for form, (ok, missed) in r.get("attn_forms", {}).items():
            f = forms.setdefault(form, {"fused": 0, "missed": 0, "variants": set(), "families": set()})
            f["fused"] += ok
            f["missed"] += missed
            f["variants"].add(r["exporter"] + ("" if r["attn"] == "default" else "/" + r["attn"]))
            f["families"].add(r["family"])
    out = ["| form (Q, K producers \\| ops from Q·Kᵀ to ·V) | layers | MHA | exporter/attn | families |",
           "|---|---:|---:|---|---|"]
    for form, f in sorted(forms.items(), key=lambda kv: -(kv[1]["fused"] + kv[1]["missed"])):
        fams = ", ".join(sorted(f["families"])[:6]) + (" …" if len(f["families"]) > 6 else "")
        out.append(f"| `{form.replace('|', '¦')}` | {f['fused'] + f['missed']} | {f['fused']} | "
                   f"{', '.join(sorted(f['variants']))} | {fams} |")
    return out


def no_reason(rows) -> list:
    out = []
    for r in rows:
        nodes = [m for m in r.get("misses", []) if m["source"] == "none"]
        if nodes:
            by_kind = collections.Counter(m["kind"] for m in nodes)
            out.append(f"- `{r['file']}`: " + ", ".join(f"{n} {k}" for k, n in by_kind.items()) + " — e.g. "
                       + ", ".join(f"`{m['node']}`" for m in nodes[:3]))
    return out or ["- none"]


def failures(rows) -> list:
    out = []
    for r in rows:
        if not r.get("export_ok"):
            out.append(f"- `{r['file']}` export: {(r.get('export_error') or r.get('harness_error', ''))[:300]}")
        elif not r.get("compile_ok"):
            out.append(f"- `{r['file']}` {r.get('compile_error')}: {r.get('compile_error_text', '')[:300]}")
        elif r.get("compare_fp32") != "PASS" or r.get("compare_fp16") not in ("PASS", "skipped: reference exceeds fp16"):
            out.append(f"- `{r['file']}` compare fp32 {r.get('compare_fp32')}: {r.get('compare_fp32_detail', '')[:200]}"
                       f" / fp16 {r.get('compare_fp16')}: {str(r.get('compare_fp16_detail', ''))[:200]}")
        for p in PEERS:
            e = r.get("peers", {}).get(p, {})
            if isinstance(e, dict) and "error" in e:
                out.append(f"- `{r['file']}` peer {p}: {e['error'][:200]}")
    return out or ["- none"]


def crosscheck(rows) -> list:
    """Files where the ONNX-structural attention count differs from the torch model's
    innermost *Attention/*Attn module count (a module may hold several softmaxes, or be
    named otherwise): read the denominators of those files with care."""
    out = [f"- `{r['file']}`: {r['attn_layers']} attention softmaxes in the ONNX, {r['attn_modules']} attention modules"
           for r in rows if r.get("export_ok") and r.get("attn_modules") is not None
           and r.get("attn_layers") is not None and r["attn_modules"] != r["attn_layers"]]
    return out or ["- none"]


def backfill_consumers(cache: str, rows) -> None:
    """Rows measured before misses recorded a conv's consumers: read them from the cached ONNX."""
    for r in rows:
        todo = [m for m in r.get("misses", []) if m["kind"] == "conv" and "consumers" not in m]
        path = os.path.join(cache, "onnx", r["file"] + ".onnx")
        if todo and os.path.exists(path):
            import onnx
            from bench.sweep.analysis import OnnxGraph
            graph = OnnxGraph(onnx.load(path, load_external_data=False).graph)
            for m in todo:
                m["consumers"] = graph.consumer_types(m["node"])


def no_reason_groups(rows) -> list:
    """Missed nodes with no reason, grouped by what reads their output."""
    count, files = collections.Counter(), collections.defaultdict(set)
    for r in rows:
        for m in r.get("misses", []):
            if m["source"] == "none":
                key = (m["kind"], m.get("consumers", "-"), m.get("group", 1) != 1, bool(m.get("dilated")))
                count[key] += 1
                files[key].add(r["family"])
    out = ["| kind | output read by | grouped | dilated | misses | families |", "|---|---|---|---|---:|---|"]
    for key, n in count.most_common():
        kind, cons, grouped, dil = key
        out.append(f"| {kind} | {cons} | {grouped} | {dil} | {n} | {', '.join(sorted(files[key]))} |")
    return out


def write(cache: str, rows: dict) -> int:
    ordered = sorted(rows.values(), key=lambda r: (_family_order(r["family"]), r["file"]))
    backfill_consumers(cache, ordered)
    sections = [("Overall", overall(ordered)), ("Per file", file_table(ordered)), ("Per family", family_table(ordered)),
                ("Files where a peer launches fewer kernels", peer_table(ordered)),
                ("Misses by reason", reason_table(ordered)),
                ("Who printed the reason of each miss", sources(ordered)), ("Attention forms", form_table(ordered)), ("Misses with no reason printed", no_reason_groups(ordered) + [""] + no_reason(ordered)),
                ("Failures (export, compile, compare, peers)", failures(ordered)),
                ("Attention count cross-check", crosscheck(ordered))]
    text = "\n".join(f"#### {title}\n\n" + "\n".join(lines) + "\n" for title, lines in sections)
    with open(os.path.join(cache, "sweep.md"), "w") as f:
        f.write(text)
    with open(os.path.join(cache, "sweep.json"), "w") as f:
        json.dump({"totals": totals(ordered), "misses_by_reason": misses_by_reason(ordered), "rows": ordered}, f, indent=1)
    print(text)
    return 0


def _family_order(name: str) -> int:
    from bench.sweep.models import FAMILIES
    names = [f.name for f in FAMILIES]
    return names.index(name) if name in names else len(names)
