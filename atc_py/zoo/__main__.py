"""`python -m atc_py.zoo NAME --output DIR [--small]` writes DIR/NAME.onnx; `--list` names them.

Why a CLI: benches and users fetch zoo models as files, the way they would export them.
Mistakes print ATC-style messages and exit 2 (argparse's usage-error code), no traceback.
"""
from __future__ import annotations

import argparse
import sys

from ge.errors import AtcError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m atc_py.zoo",
                                description="Write a zoo model as an ONNX file.")
    p.add_argument("name", nargs="?", help="model name (see --list)")
    p.add_argument("--output", "-o", metavar="DIR", help="directory to write NAME.onnx into")
    p.add_argument("--small", action="store_true", help="the tiny test configuration")
    p.add_argument("--list", action="store_true", help="print the model names, one per line")
    return p


def main(argv=None) -> int:
    from atc_py import zoo

    parser = _parser()
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(zoo.MODELS))
        return 0
    if not args.name:
        parser.error("a model name is required (or --list)")
    if not args.output:
        parser.error("--output DIR is required")
    try:
        path = zoo.save(args.name, args.output, small=args.small)
    except AtcError as err:
        print(err.render(), file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
