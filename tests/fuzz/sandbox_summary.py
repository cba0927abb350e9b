"""Summarize an ATC_SANDBOX_LOG file: how many sandboxed runs (2 GB address space, 30 s), by
verdict, and the worst peak memory and time -- the figures RELIABILITY.md quotes.

    ATC_SANDBOX_LOG=/tmp/sb.jsonl python -m pytest -q tests/test_hardening_*.py
    python tests/fuzz/sandbox_summary.py /tmp/sb.jsonl
"""
from __future__ import annotations

import collections
import json
import sys


def main(path: str) -> int:
    with open(path) as f:
        runs = [json.loads(line) for line in f if line.strip()]
    verdicts = collections.Counter(r["verdict"] for r in runs)
    worst_rss = max(runs, key=lambda r: r["max_rss_mb"])
    slowest = max(runs, key=lambda r: r["seconds"])
    print(json.dumps({"runs": len(runs), "verdicts": dict(verdicts),
                      "codes": dict(collections.Counter(c for r in runs for c in r["codes"]).most_common()),
                      "max_rss_mb": worst_rss["max_rss_mb"], "max_rss_case": worst_rss["args"][:3],
                      "slowest_s": slowest["seconds"], "slowest_case": slowest["args"][:3]}, indent=1))
    bad = [r for r in runs if r["verdict"] not in ("ok", "coded", "compare")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
