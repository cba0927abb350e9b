"""The long fuzz run: many .om mutations and hypothesis-drawn ONNX models, in worker processes
under a 2 GB address-space limit, counting tracebacks, E19999s, hangs, partial outputs and
leftover temp files.  Bad cases are written as replayable JSON (copy the ones you fixed into
tests/fuzz/corpus/, where tests/test_fuzz.py replays them on every run).

    python tests/fuzz/run_fuzz.py --om 20000 --onnx 2000 --seed 1 --jobs 2 --out /tmp/fuzz

Prints one summary line per kind and exits 1 if any case was bad.  Every result is also
appended to --out/results.jsonl as it arrives, so an interrupted run keeps its figures:

    python tests/fuzz/run_fuzz.py --summarize /tmp/fuzz
"""
from __future__ import annotations

import argparse
import collections
import functools
import json
import multiprocessing
import os
import random
import resource
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(os.path.dirname(HERE)), HERE]

OM_SEEDS = ("mixed", "seed_testmodel", "bert_base", "efficientnet_b4")
ADDRESS_SPACE = 2 << 30


def _init(address_space: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def _om_batch(args) -> list:
    """(index, verdict, edits, seed name) for mutations [start, stop)."""
    import harness
    import om_mutator
    start, stop, base_seed, folder = args
    results = []
    for index in range(start, stop):
        rng = random.Random(base_seed * 1_000_003 + index)
        name = OM_SEEDS[index % len(OM_SEEDS)]
        seed = _seed_om(name, folder)
        edits = om_mutator.draw(rng, seed)
        t0 = time.monotonic()
        try:
            verdict = harness.om_case(om_mutator.apply(seed, edits), os.path.join(folder, "work", str(os.getpid())),
                                      simulate=name != "efficientnet_b4" or index % 4 == 0)
            bad, codes, detail = verdict.bad, verdict.codes, verdict.detail
        except Exception:   # the mutator or the harness itself: still a result, not a dead pool
            bad, codes, detail = "harness", [], traceback.format_exc()
        results.append((index, bad, codes, detail, {"seed": name, "edits": edits}, time.monotonic() - t0))
    return _with_peak(results)


@functools.lru_cache(maxsize=None)
def _seed_om(name: str, folder: str) -> bytes:
    """The seed .om `main` built once for the run (builds are deterministic: every worker
    would build the same bytes, and rebuilding them in each recycled worker cost as much CPU
    as the mutations themselves)."""
    with open(os.path.join(folder, "seeds", name + ".om"), "rb") as f:
        return f.read()


def _peak_mb() -> float:
    """This worker's peak RSS so far (MB); atc runs isolated in a child count their own."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _onnx_batch(args) -> list:
    """Hypothesis draws `count` model specs from its seed; each is compiled and run."""
    from hypothesis import HealthCheck, Phase, given, seed, settings

    import harness
    import onnx_gen
    count, base_seed, folder = args
    results = []

    @seed(base_seed)
    @settings(max_examples=count, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(onnx_gen.specs())
    def one(spec):
        t0 = time.monotonic()
        try:
            verdict = harness.onnx_case(onnx_gen.spec_to_model(spec), os.path.join(folder, "work", str(os.getpid())),
                                        isolate=True)
            bad, codes, detail = verdict.bad, verdict.codes, verdict.detail
        except Exception:
            bad, codes, detail = "harness", [], traceback.format_exc()
        results.append((f"{base_seed}-{len(results)}", bad, codes, detail, spec, time.monotonic() - t0))

    one()
    return _with_peak(results)


def _with_peak(results: list) -> list:
    """Each result with the worker's peak RSS and, for an isolated atc run, the child's
    (resource.RUSAGE_CHILDREN: the largest child this worker waited for)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return [r + (round(max(_peak_mb(), children), 1),) for r in results]


def _record(out: str, kind: str, batch: list) -> None:
    with open(os.path.join(out, "results.jsonl"), "a") as f:
        for index, verdict, codes, detail, case, seconds, peak_mb in batch:
            f.write(json.dumps({"kind": kind, "index": index, "bad": verdict, "codes": codes,
                                "detail": detail if verdict else "", "case": case if verdict else None,
                                "seconds": round(seconds, 2), "peak_rss_mb": peak_mb}, default=str) + "\n")


def _recorded(out: str) -> dict:
    """kind -> result tuples, read back from results.jsonl."""
    found: dict = collections.defaultdict(list)
    with open(os.path.join(out, "results.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            found[r["kind"]].append((r["index"], r["bad"], r["codes"], r["detail"], r["case"], r["seconds"],
                                     r.get("peak_rss_mb", 0.0)))
    return found


def _summarize(kind: str, results: list, out: str) -> dict:
    bad = collections.Counter(r[1] for r in results if r[1])
    codes = collections.Counter(c for r in results for c in set(r[2]))
    crashers = os.path.join(out, "crashers", kind)
    os.makedirs(crashers, exist_ok=True)
    for index, verdict, _, detail, case, *_ in results:
        if verdict:
            with open(os.path.join(crashers, f"{verdict}-{index}.json"), "w") as f:
                json.dump({"verdict": verdict, "detail": detail, "case": case}, f, indent=1, default=str)
    slowest = max(results, key=lambda r: r[5], default=(None,) * 6)
    summary = {"kind": kind, "cases": len(results), "bad": dict(bad), "codes": dict(codes.most_common()),
               "slowest_case_s": round(slowest[5] or 0.0, 2), "slowest_case": slowest[0],
               "peak_rss_mb": max((r[6] for r in results), default=0.0)}
    print(json.dumps(summary))
    return summary


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--om", type=int, default=2000, help=".om mutations")
    p.add_argument("--onnx", type=int, default=200, help="ONNX models")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "atc_fuzz"))
    p.add_argument("--address_space", type=int, default=ADDRESS_SPACE)
    p.add_argument("--summarize", metavar="OUT", help="summarize OUT/results.jsonl of a (possibly interrupted) run")
    args = p.parse_args(argv)
    if args.summarize:
        summaries = [_summarize(kind, results, args.summarize) for kind, results in sorted(_recorded(args.summarize).items())]
        return 1 if any(s["bad"] for s in summaries) else 0
    os.makedirs(args.out, exist_ok=True)
    started, load_before = time.monotonic(), os.getloadavg()[0]
    if args.om:
        import seeds
        for name in OM_SEEDS:
            seeds.om_seed(name, os.path.join(args.out, "seeds"))      # writes seeds/<name>.om
    summaries = []
    with multiprocessing.get_context("spawn").Pool(args.jobs, _init, (args.address_space,), maxtasksperchild=4) as pool:
        chunk = 250
        batches = [(s, min(s + chunk, args.om), args.seed, args.out) for s in range(0, args.om, chunk)]
        om_results = []
        for batch in pool.imap_unordered(_om_batch, batches):
            om_results.extend(batch)
            _record(args.out, "om", batch)
            print(f"om: {len(om_results)}/{args.om} cases, load {os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True)
        # batches of 50 drawn from their own seeds, so results arrive (and are kept) as they go
        sizes = [min(50, args.onnx - start) for start in range(0, args.onnx, 50)]
        onnx_batches = [(n, args.seed * 100 + i, args.out) for i, n in enumerate(sizes)]
        onnx_results = []
        for batch in pool.imap_unordered(_onnx_batch, onnx_batches):
            onnx_results.extend(batch)
            _record(args.out, "onnx", batch)
            print(f"onnx: {len(onnx_results)}/{args.onnx} cases, load {os.getloadavg()[0]:.1f}", file=sys.stderr,
                  flush=True)
    summaries.append(_summarize("om", om_results, args.out))
    summaries.append(_summarize("onnx", onnx_results, args.out))
    print(json.dumps({"seconds": round(time.monotonic() - started), "jobs": args.jobs, "seed": args.seed,
                      "address_space": args.address_space,
                      "load_1min_at_start_end": [round(load_before, 1), round(os.getloadavg()[0], 1)]}))
    return 1 if any(s["bad"] for s in summaries) else 0


if __name__ == "__main__":
    sys.exit(main())
