"""What each `--mode` does.  Files are written only after everything succeeded."""
from __future__ import annotations

import os

from atc_py.files import cannot_write, write_json_atomic
from atc_py.options import AtcOptions
from ge.errors import AtcError


def run(options: AtcOptions) -> None:
    {"0": generate_om, "1": om_to_json, "3": pre_check, "6": display_model_info}[options.mode](options)


def _ensure_parent(path: str, param: str) -> None:
    """An output file path must be given, not be a folder, and have an existing folder."""
    if not path:
        raise AtcError("E10004", f"Value for {param} is empty.", f"Pass {param}=<file>.")
    if path.endswith(("/", os.sep)) or os.path.isdir(path):
        raise AtcError("E10022", f"Value [{path}] for parameter [{param}] is invalid. Reason: it is a directory; "
                       "give a file path.", f"For example {param}=out/result.json.")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise AtcError("E10001", f"Value [{path}] for parameter [{param}] is invalid. Reason: the folder "
                       f"[{parent}] does not exist.", "Create the output folder first.")


def generate_om(options: AtcOptions) -> None:
    """Compile, price the report, then write the .om and its companions; if any write fails,
    nothing of this run is left behind."""
    from atc_py import log as atc_log
    from atc_py import report
    from atc_py.compiler import compile_model
    from om_format.container import write_om

    log = atc_log.Logger.from_options(options)
    result = compile_model(options)
    for warning in result.switches.warnings:
        log.warning(warning)
    fusion_report = report.build_report(result, options.soc_version, options.precision_mode,
                                        options.super_kernel_scope)
    report.print_report(fusion_report, log)
    created = _missing_folders(os.path.dirname(os.path.abspath(options.om_path)))
    try:
        for folder in created:
            os.mkdir(folder)
        write_om(options.om_path, result.partitions.as_dict(), name=os.path.basename(options.output),
                 ops=len(result.graph.nodes), platform_version=options.soc_version)
        report.write_companions(result, options, log)
    except (OSError, AtcError) as exc:   # companions raise AtcError (write_json_atomic)
        if os.path.exists(options.om_path):
            os.unlink(options.om_path)
        for folder in reversed(created):        # only the folders this run made, if still empty
            if os.path.isdir(folder) and not os.listdir(folder):
                os.rmdir(folder)
        raise cannot_write(exc) if isinstance(exc, OSError) else exc


def _missing_folders(folder: str) -> list:
    """The folders that must be created for `folder` to exist, outermost first."""
    missing = []
    while folder and not os.path.exists(folder):
        missing.append(folder)
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    return list(reversed(missing))


def om_to_json(options: AtcOptions) -> None:
    from atc_py.om_json import om_to_dict

    _ensure_parent(options.json, "--json")
    content = om_to_dict(options.om)
    write_json_atomic(options.json, content)


def pre_check(options: AtcOptions) -> None:
    from atc_py.precheck import check_model

    _ensure_parent(options.check_report, "--check_report")
    report, ok = check_model(options)
    write_json_atomic(options.check_report, report)
    print(f"Pre-check report written to {options.check_report}: "
          f"{report['summary']['supported']} of {report['summary']['total']} nodes supported.")
    if not ok:
        raise AtcError("E16002", f"Pre-check failed: {report['summary']['unsupported']} unsupported node(s), graph check "
                       f"{report['summary']['graph']['result']}; see {options.check_report}.",
                       "Replace the unsupported ops or fix what the graph check reports.")


def display_model_info(options: AtcOptions) -> None:
    from atc_py.om_json import model_info

    print(model_info(options.om))
