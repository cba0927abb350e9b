"""The sweep's pure-Python parts: attention layers and convs in an ONNX graph, atc's miss
lines, which kernel covers which ONNX node, and the totals.  No torch, no peers.

Attention layer (ONNX-structural, whatever the exporter or attention implementation): a
Softmax whose input comes from a MatMul/Einsum of two non-constant tensors (Q·Kᵀ) and whose
output reaches a MatMul/Einsum with a non-constant other operand (·V), each within a few
elementwise/view hops (scale, mask, bias, casts, the SDPA NaN guard, head reshapes).  A
classifier's Softmax (after a weight GEMM) is not one.
"""
from __future__ import annotations

import collections
import re
from typing import Dict, Iterable, List, Optional

PASS_THROUGH = {"Add", "Sub", "Mul", "Div", "Where", "Cast", "Reshape", "Transpose", "Expand", "Squeeze",
                "Unsqueeze", "Sqrt", "Max", "Min", "Clip", "Neg", "IsNaN", "IsInf", "Not", "And", "Or",
                "Dropout", "Identity", "Flatten", "Slice", "Concat", "Split", "Gather", "Tanh", "Abs"}
PRODUCTS = {"MatMul", "Einsum"}
HOPS = 8

# "[DEBUG] [GE] fusion miss NF2003 UnsupportedAttribute: pass P, anchor A, ops [...]: constraint; tensors {...}"
MISS_LINE = re.compile(r"fusion miss (NF\d{4}) (\w+): pass (\w+), anchor (.+?), ops \[(.*?)\]: (.*?)(?:; tensors \{.*)?$")


class OnnxGraph:
    """Producer/consumer maps of an ONNX GraphProto (top level; subgraphs are not descended)."""

    def __init__(self, graph):
        self.nodes = list(graph.node)
        self.constant = {i.name for i in graph.initializer}
        self.producer = {}
        self.consumers = collections.defaultdict(list)
        for node in self.nodes:
            if node.op_type == "Constant":
                self.constant.update(node.output)
            for out in node.output:
                self.producer[out] = node
            for inp in node.input:
                if inp:
                    self.consumers[inp].append(node)

    def dynamic(self, value: str) -> bool:
        return bool(value) and value not in self.constant

    def _is_product(self, node) -> bool:
        ins = [i for i in node.input if i]
        return node.op_type in PRODUCTS and len(ins) >= 2 and all(self.dynamic(i) for i in ins)

    def reaches_product_upstream(self, value: str) -> Optional[str]:
        frontier, seen = [(value, 0)], set()
        while frontier:
            name, depth = frontier.pop(0)
            node = self.producer.get(name)
            if node is None or node.name in seen or depth > HOPS:
                continue
            seen.add(node.name)
            if self._is_product(node):
                return node.name
            if node.op_type in PASS_THROUGH:
                frontier += [(i, depth + 1) for i in node.input if self.dynamic(i)]
        return None

    def reaches_product_downstream(self, value: str) -> Optional[str]:
        frontier, seen = [(value, 0)], set()
        while frontier:
            name, depth = frontier.pop(0)
            for node in self.consumers.get(name, []):
                if node.name in seen or depth > HOPS:
                    continue
                seen.add(node.name)
                if self._is_product(node):
                    return node.name
                if node.op_type in PASS_THROUGH:
                    frontier += [(o, depth + 1) for o in node.output]
        return None

    def attention_softmaxes(self) -> List[dict]:
        """One entry per attention layer: its Softmax, the two products around it and the
        op types in between (its exporter form, e.g. `Q:Mul<Transpose K:Mul<Transpose |
        MatMul>Add>Softmax>IsNaN..>MatMul`)."""
        found = []
        for node in self.nodes:
            if node.op_type != "Softmax":
                continue
            qk = self.reaches_product_upstream(node.input[0])
            pv = self.reaches_product_downstream(node.output[0]) if qk else None
            if qk and pv:
                found.append({"softmax": node.name, "qk": qk, "pv": pv, "form": self.form(qk, node, pv)})
        return found

    def form(self, qk: str, softmax, pv: str) -> str:
        by_name = {n.name: n for n in self.nodes}
        operands = []
        for label, value in zip("QK", by_name[qk].input):
            chain, cur = [], self.producer.get(value)
            while cur is not None and len(chain) < 3 and cur.op_type in PASS_THROUGH:
                chain.append(cur.op_type)
                cur = next((self.producer.get(i) for i in cur.input if self.dynamic(i)), None)
            operands.append(f"{label}:{'<'.join(chain) or '-'}")
        between = [n.op_type for n in self.nodes if n.name in self._between(by_name[qk], softmax)]
        after = [n.op_type for n in self.nodes if n.name in self._between(softmax, by_name[pv])]
        return (" ".join(operands) + f" | {by_name[qk].op_type}>" + ">".join(between + ["Softmax"] + after)
                + f">{by_name[pv].op_type}")

    def _between(self, first, last) -> set:
        """Names of nodes on a path first -> last (exclusive), through pass-through ops."""
        down, frontier = set(), list(first.output)
        while frontier:
            for node in self.consumers.get(frontier.pop(), []):
                if node.name not in down and node.op_type in PASS_THROUGH and len(down) < 64:
                    down.add(node.name)
                    frontier += list(node.output)
        up, frontier = set(), [i for i in last.input if i]
        while frontier:
            node = self.producer.get(frontier.pop())
            if node is not None and node.name in down and node.name not in up:
                up.add(node.name)
                frontier += [i for i in node.input if i]
        return up

    def consumer_types(self, node_name: str) -> str:
        """The op types reading a node's first output, each once (`Concat`, `Add+Conv`, `graph output`)."""
        node = next((n for n in self.nodes if n.name == node_name), None)
        if node is None:
            return "?"
        types = collections.Counter(c.op_type for c in self.consumers.get(node.output[0], []))
        return "+".join(sorted(types)) or "graph output"

    def convs(self) -> List[dict]:
        out = []
        for node in self.nodes:
            if node.op_type == "Conv":
                attrs = {a.name: a for a in node.attribute}
                group = attrs["group"].i if "group" in attrs else 1
                dil = list(attrs["dilations"].ints) if "dilations" in attrs else []
                out.append({"name": node.name, "group": group, "dilated": any(d != 1 for d in dil)})
        return out


def parse_misses(log_text: str) -> List[dict]:
    """Every `fusion miss` line atc printed under --log=debug."""
    misses = []
    for line in log_text.splitlines():
        m = MISS_LINE.search(line)
        if m:
            code, reason, pass_name, anchor, ops, constraint = m.groups()
            misses.append({"code": code, "reason": reason, "pass": pass_name, "anchor": anchor,
                           "op_types": [t.strip(" '\"") for t in ops.split(",") if t.strip()],
                           "constraint": constraint, "line": line.strip()})
    return misses


def misses_about(name: str, misses: Iterable[dict], extra_names: Iterable[str] = ()) -> List[dict]:
    """Misses that name this node: as anchor, in the debug dump's op list, or in the text."""
    names = [name, *extra_names]
    hits = []
    for miss in misses:
        if miss["anchor"] in names or any(n in miss.get("op_names", ()) for n in names) \
                or any(_mentions(miss["line"], n) for n in names):
            hits.append(miss)
    return hits


def _mentions(text: str, name: str) -> bool:
    for m in re.finditer(re.escape(name), text):
        end = m.end()
        if end == len(text) or not (text[end].isalnum() or text[end] in "_./"):
            return True
    return False


def normalized(constraint: str) -> str:
    """A miss's constraint without node names and numbers, to group like misses."""
    text = re.sub(r"\b(\w+) (/|node_|val_|onnx::)[^\s:;,)]*", r"\1 <node>", constraint)
    text = re.sub(r"(?<![A-Za-z])[/][\w./:-]+", "<node>", text)
    text = re.sub(r"\b[A-Za-z][\w.]*_\d+\b", "<node>", text)    # dynamo value names: getitem_3, convNd_7
    text = re.sub(r"-?\d+(\.\d+)?(e-?\d+)?", "N", text)
    text = re.sub(r"\[[N, ]*\]", "[..]", text)
    return text[:160]


def classify(node_misses: List[dict], own_pass: str, anchor: str = "") -> dict:
    """Which reason a missed node got: its own passes' (a pass whose name contains own_pass,
    e.g. "Conv" or "Attention") if any, else another named pass's, else autofuse's, else none."""
    own = [m for m in node_misses if own_pass in m["pass"]]
    named = [m for m in node_misses if m["pass"] != "AutoFusePass"]
    # autofuse's own line about the node (anchored on it) before lines that only mention it
    autofuse = sorted((m for m in node_misses if m["pass"] == "AutoFusePass"), key=lambda m: m["anchor"] != anchor)
    chosen = (own or named or autofuse or [None])[0]
    source = "own-pass" if own else "other-pass" if named else "autofuse-only" if autofuse else "none"
    if chosen is None:
        return {"source": source, "code": "", "pass": "", "reason": "", "key": "NO REASON PRINTED", "line": ""}
    return {"source": source, "code": chosen["code"], "pass": chosen["pass"], "reason": chosen["reason"],
            "key": f"{chosen['pass']} {chosen['code']} {chosen['reason']}: {normalized(chosen['constraint'])}",
            "line": chosen["line"][:600]}


def coverage(tasks: List[dict]) -> Dict[str, dict]:
    """ONNX node name -> the task (kernel) whose provenance covers it."""
    covered = {}
    for task in tasks:
        for origin in task.get("origin_op_names") or [task.get("op_name", "")]:
            covered[origin] = task
    return covered


PLAIN_CONV = "Conv2D"       # the .om's GE type of a plain Conv kernel


def fused(task: Optional[dict]) -> bool:
    """A kernel made by a fusion pass or covering more than one ONNX node, and not a plain
    conv kernel: a Conv2D task may stand for more than one ONNX node when the canonical
    stage folded a view into the conv (Wav2Vec2's first conv before its GroupNorm), yet it
    runs the conv alone.  (Task op types are the .om's GE names, so the type alone does not
    tell a canonical op from a fused one.)"""
    return task is not None and task.get("op_type") != PLAIN_CONV and \
        (bool(task.get("fusion_pass")) or len(task.get("origin_op_names") or []) > 1)


def is_mha(task: Optional[dict]) -> bool:
    """An attention kernel, or an autofused kernel built around one (it took the attention
    output's elementwise tail, e.g. LeViT's Hardswish, into the same launch)."""
    return task is not None and ("Attention" in task.get("op_type", "") or "Attention" in task.get("anchor", ""))


# ------------------------------------------------------------------ totals

def pct(a: int, b: int) -> str:
    return f"{100.0 * a / b:.1f}%" if b else "-"


def best_peer(row: dict) -> Optional[tuple]:
    """(peer, its kernels without views) of the peer with the fewest, or None."""
    counts = [(p, row["peers"][p]["kernels_noview"]) for p in ("ort", "openvino", "tvm")
              if isinstance(row.get("peers", {}).get(p), dict) and "kernels_noview" in row["peers"][p]]
    return min(counts, key=lambda pc: pc[1]) if counts else None


def totals(rows: List[dict]) -> dict:
    t = collections.Counter()
    for r in rows:
        t["files"] += 1
        t["exported"] += bool(r.get("export_ok"))
        t["compiled"] += bool(r.get("compile_ok"))
        t["attn_layers"] += r.get("attn_layers", 0) if r.get("compile_ok") else 0
        t["mha_layers"] += r.get("mha_layers", 0)
        t["mha_kernels"] += r.get("mha_kernels", 0)
        t["convs"] += r.get("convs", 0) if r.get("compile_ok") else 0
        t["convs_fused"] += r.get("convs_fused", 0)
        t["compare_fp32_pass"] += r.get("compare_fp32") == "PASS"
        t["compare_fp32_run"] += r.get("compare_fp32") in ("PASS", "FAIL")
        t["compare_fp16_pass"] += r.get("compare_fp16") == "PASS"
        t["compare_fp16_run"] += r.get("compare_fp16") in ("PASS", "FAIL")
        bp = best_peer(r)
        if r.get("compile_ok") and bp and bp[1] < r["kernels"]:
            t["peer_fewer"] += 1
            t["peer_gap"] += r["kernels"] - bp[1]
    return dict(t)


def _key(miss: dict) -> str:
    """The grouping key, re-derived from the printed line so a newer normalization applies
    to stored runs too."""
    parsed = parse_misses(miss.get("line", ""))
    if not parsed:
        return miss["key"]
    m = parsed[0]
    return f"{m['pass']} {m['code']} {m['reason']}: {normalized(m['constraint'])}"


def misses_by_reason(rows: List[dict]) -> List[dict]:
    groups = {}
    for r in rows:
        for miss in r.get("misses", []):
            key = (miss["kind"], _key(miss))
            g = groups.setdefault(key, {"kind": miss["kind"], "key": key[1], "source": miss["source"],
                                        "count": 0, "files": set(), "families": set(), "example": None})
            g["count"] += 1
            g["files"].add(r["file"])
            g["families"].add(r["family"])
            if g["example"] is None:
                g["example"] = {"file": r["file"], "node": miss["node"], "line": miss["line"]}
    out = sorted(groups.values(), key=lambda g: (g["kind"], -g["count"]))
    for g in out:
        g["files"], g["families"] = sorted(g["files"]), sorted(g["families"])
    return out
