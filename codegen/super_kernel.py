"""SuperKernel planning: which consecutive kernel tasks are launched as one super kernel.

`--super_kernel_scope` takes `all` (the whole static graph), comma-separated node-name
prefixes (like TorchAir's `super_kernel(scope)` blocks, which name a module path), or
`re:<regex>` (RE2 syntax, linear-time matching).  A task is in a scope when its node name or one of the ONNX nodes it covers
matches; each maximal run of consecutive tasks in the same scope with at least two kernels
becomes one super kernel.  The simulator prices a super kernel as one launch plus a
full-core sync between sub-kernels minus the early-start/ICache-preload overlap
(`simulator.cost_model.price_super_kernel`).
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

import re2

from ge.errors import invalid_param
from ge.ir import Node


def _compile(scope: str):
    """The regex of `re:<regex>`, compiled by RE2: matching takes time linear in the name
    whatever the pattern (Python's re backtracks for minutes on `^(a+)+$` against a long
    name), and RE2 refuses patterns whose automaton would exceed its memory bound.  RE2
    syntax is Python's without backreferences and lookaround."""
    options = re2.Options()
    options.log_errors = False    # the error is ours to report, not RE2's to print
    try:
        return re2.compile(scope[3:], options)
    except re2.error as exc:
        reason = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else exc
        raise invalid_param(scope, "--super_kernel_scope", f"the regex does not compile under RE2 ({reason}); "
                            "backreferences and lookaround are not supported.",
                            "Use all, name prefixes separated by ',', or re:<regex> in RE2 syntax.") from None


def scope_matcher(scope: str) -> Optional[Callable[[str], Optional[str]]]:
    """Parse the option into name -> scope key (None when the name is outside every scope)."""
    scope = (scope or "").strip()
    if not scope:
        return None
    if scope == "all":
        return lambda name: "all"
    if scope.startswith("re:"):
        pattern = _compile(scope)
        return lambda name: "re" if pattern.search(name) else None
    prefixes = [p.strip() for p in scope.split(",") if p.strip()]
    if not prefixes:
        raise invalid_param(scope, "--super_kernel_scope", "no scope given.",
                            "Use all, name prefixes separated by ',', or re:<regex>.")
    return lambda name: next((p for p in prefixes if name.startswith(p)), None)


def plan(tasks: Sequence[Node], scope: str) -> list:
    """Groups (lists of node names, in task order) that become super kernels."""
    match = scope_matcher(scope)
    if match is None:
        return []
    groups, run, run_key = [], [], None
    for node in tasks:
        key = next((k for k in (match(n) for n in [node.name, *node.origin]) if k), None)
        if key is not None and key == run_key:
            run.append(node.name)
            continue
        if len(run) >= 2:
            groups.append(run)
        run, run_key = ([node.name], key) if key is not None else ([], None)
    if len(run) >= 2:
        groups.append(run)
    return groups
