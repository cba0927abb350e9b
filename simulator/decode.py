"""Generation with a KV cache: a decoder .om run as prefill, then token by token.

Why: an LLM decoder exported with `past_key_values.*` inputs and `present.*` outputs is one
dynamic-shape .om (sequence and cache lengths known only at run time); what a user wants
to see is the prompt's prefill and each decode step, each at its own sizes and simulated
time, and that every step computes what onnxruntime computes.

The inputs are found by name, as transformers' exporters write them: `*past*` inputs are
the cache (their dims the other inputs lack are its length), `*mask*` inputs span cache +
new tokens (ones), `*position*` inputs count from the cache length, any other integer input
takes the tokens.  The k-th present output (`*present*`, in order) feeds the k-th past input
of the next step.  The first output that is not a cache is the logits; the next token is
its argmax at the last position (greedy), taken from onnxruntime's logits when comparing,
so both engines follow one token sequence while each keeps its own cache.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from ge.dynamic import decoder_roles, shapes_at
from ge.errors import AtcError
from ge.ir import Graph
from simulator import runner


@dataclass
class Step:
    """One run of the decoder: the prefill (index 0) or a decode step."""

    index: int
    kind: str                     # "prefill" | "decode"
    new_tokens: int
    cache_length: int             # tokens in the cache before the step
    npu_time_ms: float            # simulated
    input_shapes: dict
    compares: list = field(default_factory=list)   # simulator.compare.OutputCompare per output
    timings: list = field(default_factory=list)    # the step's priced tasks (runner.TaskTiming)
    priced: Optional[Graph] = None                 # the graph at the step's sizes

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.compares)

    def as_dict(self) -> dict:
        return {"step": self.index, "kind": self.kind, "new_tokens": self.new_tokens, "cache_length": self.cache_length,
                "NPU_compute_time_ms": self.npu_time_ms,
                "input_shapes": {k: list(v) for k, v in self.input_shapes.items()},
                **({"compare": [c.as_dict() for c in self.compares], "passed": self.passed} if self.compares else {})}


@dataclass
class Layout:
    """Which inputs and outputs play which part in generation."""

    past: list                    # cache input names, in order
    present: list                 # cache output names, matched to `past` by position
    logits: str
    tokens: list                  # integer inputs that take the tokens
    masks: list
    positions: list
    roles: tuple                  # (cache symbols, sequence symbols, mask symbols)


def _error(reason: str) -> AtcError:
    return AtcError("E10001", f"The model cannot run as a decoder with a KV cache: {reason}",
                    "Export the decoder with past_key_values.* inputs and present.* outputs (transformers' names), "
                    "with dynamic sequence and cache lengths.")


def layout_of(graph: Graph) -> Layout:
    roles = decoder_roles(graph)
    if roles is None:
        raise _error("no input named *past* with a dynamic cache length, or no dynamic sequence input.")
    past = [v.name for v in graph.inputs if "past" in v.name.lower()]
    present = [v.name for v in graph.outputs if "present" in v.name.lower()]
    if len(present) != len(past):
        raise _error(f"{len(past)} past input(s) but {len(present)} present output(s).")
    others = [v for v in graph.outputs if v.name not in present]
    if not others:
        raise _error("no output besides the cache (the logits).")
    rest = [v for v in graph.inputs if v.name not in past]
    masks = [v.name for v in rest if "mask" in v.name.lower()]
    positions = [v.name for v in rest if "position" in v.name.lower()]
    tokens = [v.name for v in rest if v.name not in masks + positions and np.dtype(v.desc.dtype).kind in "iu"]
    unknown = [v.name for v in rest if v.name not in masks + positions + tokens]
    if unknown or not tokens:
        raise _error(f"input(s) {unknown or [v.name for v in rest]} play no known part (tokens, mask, positions).")
    return Layout(past, present, others[0].name, tokens, masks, positions, roles)


def _values(graph: Graph, layout: Layout, batch: int, cache: int, new: int) -> dict:
    cache_syms, seq_syms, mask_syms = layout.roles
    values = {name: batch for name in graph.symbols}
    values.update({s: cache for s in cache_syms})
    values.update({s: new for s in seq_syms})
    values.update({s: cache + new for s in mask_syms})
    return values


def _feeds(graph: Graph, layout: Layout, tokens: np.ndarray, cache: int, caches: Optional[dict]) -> dict:
    batch, new = tokens.shape
    shapes = shapes_at(graph, _values(graph, layout, batch, cache, new))
    by_name = {v.name: v for v in graph.inputs}
    feeds = {}
    for name in layout.tokens:
        feeds[name] = tokens.astype(by_name[name].desc.dtype).reshape(shapes[name])
    for name in layout.masks:
        feeds[name] = np.ones(shapes[name], by_name[name].desc.dtype)
    for name in layout.positions:
        pos = np.arange(cache, cache + new, dtype=by_name[name].desc.dtype)
        feeds[name] = np.broadcast_to(pos, shapes[name]).copy()
    for name in layout.past:
        feeds[name] = caches[name] if caches is not None else np.zeros(shapes[name], by_name[name].desc.dtype)
    return feeds


def generate(session, prompt: np.ndarray, steps: int, onnx_path: str = "") -> list:
    """Prefill `prompt` (int tokens [batch, length]), then `steps` decode steps; with
    `onnx_path`, every step is compared with onnxruntime (simulator.compare's rules)."""
    from simulator.compare import compare_outputs, run_onnxruntime
    model = session.model
    graph = model.graph
    layout = layout_of(graph)
    tokens = np.asarray(prompt)
    if tokens.ndim != 2 or tokens.dtype.kind not in "iu" or tokens.shape[1] < 1:
        raise _error(f"the prompt must be integer tokens [batch, length >= 1], got {tokens.dtype} {list(tokens.shape)}.")
    cache, sim_cache, ref_cache, out = 0, None, None, []
    for index in range(steps + 1):
        feeds = _feeds(graph, layout, tokens, cache, sim_cache)
        result = runner.run(model, feeds, loop=1, warmup_count=0)
        step = Step(index, "prefill" if index == 0 else "decode", tokens.shape[1], cache,
                    result.npu_time_ms["mean"], {k: tuple(np.shape(v)) for k, v in feeds.items()},
                    timings=result.timings, priced=result.priced)
        logits = result.outputs[layout.logits]
        if onnx_path:
            ref_feeds = _feeds(graph, layout, tokens, cache, ref_cache)
            reference = run_onnxruntime(onnx_path, ref_feeds)
            step.compares = compare_outputs(graph, result.outputs, reference, model.loaded.compute_dtypes)
            ref_cache = {p: reference[o] for p, o in zip(layout.past, layout.present)}
            logits = reference[layout.logits] if layout.logits in reference else logits
        out.append(step)
        sim_cache = {p: result.outputs[o] for p, o in zip(layout.past, layout.present)}
        cache += tokens.shape[1]
        tokens = np.asarray(logits)[:, -1].argmax(axis=-1).reshape(-1, 1).astype(tokens.dtype)
    return out


def prompt_tokens(graph: Graph, batch: int, length: int, seed: int = 0) -> np.ndarray:
    """A seeded random prompt whose ids index every embedding table the tokens reach."""
    layout = layout_of(graph)
    value = next(v for v in graph.inputs if v.name == layout.tokens[0])
    high = runner._int_high(value)
    return np.random.default_rng(seed).integers(0, high, size=(batch, length)).astype(np.int64)
