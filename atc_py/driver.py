"""What each `--mode` does.  Files are written only after everything succeeded."""
from __future__ import annotations

import os

from atc_py.options import AtcOptions
from ge.errors import AtcError
from ge.files import Outputs


def run(options: AtcOptions):
    """Do what --mode asks; --mode=0 returns (CompileResult, FusionReport), the others None."""
    return {"0": generate_om, "1": om_to_json, "3": pre_check, "6": display_model_info}[options.mode](options)


def generate_om(options: AtcOptions, log=None, progress=None):
    """Compile, price the report, then write the .om and its companions as one set of
    outputs: if any write fails, nothing of this run is left behind.  `progress` (a
    ge.progress.Progress; atc gives its terminal display) is told each stage.  Returns
    (CompileResult, FusionReport)."""
    from ge.progress import Progress, use_progress

    with use_progress(progress or Progress()) as shown:
        return _generate_om(options, log, shown)


# While the .om is streamed out, the weights it has read are dropped from memory this often.
_RELEASE_EVERY_BYTES = 32 << 20


def _generate_om(options: AtcOptions, log, progress):
    from atc_py import log as atc_log
    from atc_py import report
    from atc_py.compiler import compile_model

    log = log or atc_log.Logger.from_options(options)
    if options.gears is not None:
        return generate_gear_om(options, log, progress)
    result = compile_model(options)
    progress.close()                        # stdout's lines start on a clean line
    for warning in result.warnings:
        log.warning(str(warning))
    for huawei, ours in sorted(result.switches.mapped.items()):
        log.info(f"--fusion_switch_file: Huawei pass [{huawei}] is taken as [{ours}].")
    progress.stage("Pricing the fusion report")
    fusion_report = report.build_report(result, options.soc_version, options.precision_mode,
                                        options.super_kernel_scope, options.small_channel)
    progress.close()
    report.print_report(fusion_report, log)
    with Outputs() as out:
        _write_om(out, options, result.partitions, len(result.graph.nodes), progress)
        report.write_companions(result, options, log, out)
    return result, fusion_report


def _write_om(out: Outputs, options: AtcOptions, partitions, ops: int, progress) -> None:
    """Stream the .om into `out` (the weights go from where they live to the file, never
    copied), telling `progress` and dropping the pages of the mapped files it has written
    from (only those: a model can have thousands of external data files)."""
    from ge.files import maps_of, release_mapped, release_maps
    from om_format.container import stream_om

    released = [0]
    touched: dict = {}                      # id -> map written from since the last release

    def wrote(chunk) -> None:
        for mapped in maps_of(chunk):
            touched[id(mapped)] = mapped

    def written(done: int, total: int) -> None:
        progress.update(done, total)
        if done - released[0] >= _RELEASE_EVERY_BYTES:
            release_maps(touched.values())
            touched.clear()
            released[0] = done

    out.make_folder(os.path.dirname(os.path.abspath(options.om_path)), "--output")
    progress.stage(f"Writing {options.om_path}")
    with out.open(options.om_path, "--output") as f:
        stream_om(f, partitions.as_dict(), name=os.path.basename(options.output), ops=ops,
                  platform_version=options.soc_version, is_dynamic=partitions.dynamic, on_bytes=written,
                  on_chunk=wrote)
    release_mapped()
    progress.close()


def generate_gear_om(options: AtcOptions, log, progress=None):
    """A gear model: every gear compiled, fused and reported on its own shapes; one .om
    holding them all.  Returns (GearedCompileResult, [FusionReport per gear])."""
    from atc_py import report
    from atc_py.compiler import compile_gears
    from ge.progress import Progress

    progress = progress or Progress()
    geared = compile_gears(options)
    progress.close()
    for warning in geared.warnings:
        log.warning(str(warning))
    for huawei, ours in sorted(geared.switches.mapped.items()):
        log.info(f"--fusion_switch_file: Huawei pass [{huawei}] is taken as [{ours}].")
    reports = []
    for index, result in enumerate(geared.gears):
        fusion_report = report.build_report(result, options.soc_version, options.precision_mode,
                                            options.super_kernel_scope, options.small_channel)
        log.ge(report.gear_title(geared.spec, index))
        report.print_report(fusion_report, log)
        reports.append(fusion_report)
    with Outputs() as out:
        _write_om(out, options, geared.partitions, geared.op_count, progress)
        report.write_gear_companions(geared, options, log, out)
    return geared, reports


def om_to_json(options: AtcOptions) -> None:
    from atc_py.om_json import om_to_dict

    with Outputs() as out:
        out.target(options.json, "--json")   # refuse a bad path before reading the model
        # sorted keys: protobuf map order differs between processes
        out.write_json(options.json, om_to_dict(options.om), "--json", sort_keys=True)


def pre_check(options: AtcOptions) -> None:
    from atc_py.precheck import check_model

    with Outputs() as out:
        out.target(options.check_report, "--check_report")
        report, ok = check_model(options)
        out.write_json(options.check_report, report, "--check_report")
    print(f"Pre-check report written to {options.check_report}: "
          f"{report['summary']['supported']} of {report['summary']['total']} nodes supported.")
    if not ok:
        raise AtcError("E16002", f"Pre-check failed: {report['summary']['unsupported']} unsupported node(s), graph check "
                       f"{report['summary']['graph']['result']}; see {options.check_report}.",
                       "Replace the unsupported ops or fix what the graph check reports.")


def display_model_info(options: AtcOptions) -> None:
    from atc_py.om_json import model_info

    print(model_info(options.om))
