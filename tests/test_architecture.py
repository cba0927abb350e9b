"""Dependencies flow one way, and ARCHITECTURE.md's picture is the rule the code obeys.

Every import in every module of the project (top-level and inside functions: a lazy import
is still a dependency) is parsed with `ast`.  A package may import only packages on lower
layers; packages on one layer never import each other; no module imports itself through a
chain of other modules (no import cycle, lazy or not).  The layers are read from the picture
in ARCHITECTURE.md ("## Dependencies"), so the picture cannot drift from the code.
"""
from __future__ import annotations

import ast
import os
import re

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("om_format", "ge", "codegen", "fusion_passes", "simulator", "atc_py", "cli")


def _layers_from_picture() -> list:
    """[[package, ...] per layer], bottom layer first, from ARCHITECTURE.md's picture."""
    with open(os.path.join(REPO, "ARCHITECTURE.md"), encoding="utf-8") as f:
        text = f.read()
    section = text.split("## Dependencies", 1)[1]
    block = section.split("```", 2)[1]
    layers = []
    for line in block.splitlines():
        names = line.split("  ")[0].strip()
        if not names or names.startswith("↓"):
            continue
        layers.append([n.strip().removesuffix(".py") for n in names.split("|")])
    return layers[::-1]


def _module_files() -> dict:
    """module name -> path, for every module of the project's packages."""
    files = {"cli": os.path.join(REPO, "cli.py")}
    for package in PACKAGES[:-1]:
        for root, _, names in os.walk(os.path.join(REPO, package)):
            for name in names:
                if name.endswith(".py"):
                    rel = os.path.relpath(os.path.join(root, name), REPO)[:-3].replace(os.sep, ".")
                    files[rel.removesuffix(".__init__")] = os.path.join(root, name)
    return files


def _imports(path: str, modules: dict) -> set:
    """The project modules `path` imports (the most specific module each import names)."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            targets = [f"{node.module}.{alias.name}" for alias in node.names] + [node.module]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target:
                found.add(target)
                if isinstance(node, ast.ImportFrom):
                    break      # `from a import b`: b when it is a module, else a
    return found


def _package(module: str) -> str:
    return module.split(".")[0]


def _graph() -> dict:
    modules = _module_files()
    return {name: _imports(path, modules) - {name} for name, path in modules.items()}


def test_picture_names_every_package_once():
    named = [p for layer in _layers_from_picture() for p in layer]
    assert sorted(named) == sorted(PACKAGES), named


def test_every_import_runs_down_the_layers():
    level = {p: i for i, layer in enumerate(_layers_from_picture()) for p in layer}
    wrong = []
    for module, targets in sorted(_graph().items()):
        for target in sorted(targets):
            src, dst = _package(module), _package(target)
            if src != dst and level[dst] >= level[src]:
                wrong.append(f"{module} imports {target} ({src} may only import packages below it)")
    assert not wrong, "imports that run the wrong way:\n" + "\n".join(wrong)


def test_no_import_cycle_between_packages_or_modules():
    graph = _graph()
    packages = {}
    for module, targets in graph.items():
        packages.setdefault(_package(module), set()).update(_package(t) for t in targets)
    for kind, edges in (("package", {p: t - {p} for p, t in packages.items()}), ("module", graph)):
        cycle = _find_cycle(edges)
        assert cycle is None, f"{kind} import cycle: {' -> '.join(cycle)}"


def _find_cycle(edges: dict):
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(edges):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


# Distributions whose import name differs from the distribution name.
_IMPORT_NAME = {"protobuf": "google.protobuf", "google-re2": "re2"}


def test_every_declared_dependency_is_imported():
    """setup.cfg's install_requires lists only what the code imports (no dependency unused)."""
    import configparser
    config = configparser.ConfigParser()
    config.read(os.path.join(REPO, "setup.cfg"))
    declared = [re.split(r"[<>=!~\[; ]", line.strip())[0]
                for line in config["options"]["install_requires"].splitlines() if line.strip()]
    imported = set()
    for path in _module_files().values():
        with open(path, encoding="utf-8") as f:
            for node in ast.walk(ast.parse(f.read(), path)):
                if isinstance(node, ast.Import):
                    imported.update(alias.name for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    imported.add(node.module)
    for dist in declared:
        name = _IMPORT_NAME.get(dist, dist.replace("-", "_"))
        assert any(m == name or m.startswith(name + ".") for m in imported), f"{dist} is declared but never imported"


def test_the_checker_sees_a_wrong_way_import(tmp_path):
    """The parser catches lazy imports too (a test that could not fail would prove nothing)."""
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from atc_py.report import build_report\n")
    modules = _module_files()
    assert _imports(str(source), modules) == {"atc_py.report"}
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_no_assert_guards_an_invariant_in_project_code():
    """`python -O` strips `assert`: an invariant the code relies on raises InternalError."""
    offenders = []
    for module, path in sorted(_module_files().items()):
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename=path)
        offenders += [f"{module}:{node.lineno}" for node in ast.walk(tree) if isinstance(node, ast.Assert)]
    assert not offenders, "assert in project code (use ge.errors.InternalError): " + ", ".join(offenders)


def test_passes_sharing_the_subgraph_builder_do_not_import_each_other():
    """The kernel sub-graph builder three passes share lives in its own module, so none of
    them depends on another pass's file (a change to one pass cannot break the others)."""
    graph = _graph()
    users = {m for m, targets in graph.items() if "fusion_passes.subgraph" in targets}
    assert {"fusion_passes.quant_attention", "fusion_passes.quant_attention_projection",
            "fusion_passes.layer_norm_quant"} <= users, users
    for module in sorted(users):
        assert not graph[module] & (users - {module}), f"{module} imports {graph[module] & users}"
