"""ATC's gears: `--dynamic_batch_size`, `--dynamic_image_size`, `--dynamic_dims`.

A gear ("profile" in ATC's messages) is one set of values for the `-1` dims of
`--input_shape`; the .om holds one compiled subgraph per gear and the runtime picks one per
inference (codegen/multi_batch.py lays it out as GE's multi-batch pass does).

Validation follows GE's own checks, in GE's order and with its codes (docs/FORMATS.md,
"Gears", has the sources): the flags exclude each other and --input_shape_range (E10009);
--input_shape is required (E10004) with -1 dims and no ranges (E10040); the batch flag
allows -1 on the batch axis only (E10018, E10031, E10012), the image flag on H and W of a
4-D NCHW/NHWC input only (E10019, E10020), the dims flag needs --input_format=ND, inputs of
rank 1-4, and as many values per gear as -1s (E10001, E10003); then every flag: 2-100 gears
(E10035, E10036), the same count of values in each (E10037), positive (E10038), no
duplicates (E10039).  Bad characters are E10003 as in GE.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from codegen.multi_batch import FLAG_OF_TYPE, fill_gear
from ge.errors import AtcError

GEAR_FLAGS = tuple(FLAG_OF_TYPE.values())
DYNAMIC_TYPE = {flag: kind for kind, flag in FLAG_OF_TYPE.items()}
MIN_GEARS, MAX_GEARS = 2, 100
ND_RANKS = (1, 4)            # GE: "Dim num must within [1, 4] when set dynamic_dims"
_EXCLUSIVE = ("E10009", "--dynamic_batch_size, --dynamic_image_size, --input_shape_range, and --dynamic_dims are "
              "mutually exclusive.")
_GEAR_FLAGS_TEXT = "--dynamic_batch_size, --dynamic_image_size, or --dynamic_dims"


@dataclass(frozen=True)
class GearSpec:
    """What the gear flag asks for: the flag, its gears (one tuple of values each, in the
    order given), and the inputs of --input_shape in the order given, with their -1 dims."""

    flag: str
    gears: tuple                 # ((v, ...), ...)
    inputs: tuple                # ((name, (d, ..., -1, ...)), ...) in --input_shape order

    @property
    def dynamic_type(self) -> int:
        return DYNAMIC_TYPE[self.flag]

    @property
    def text(self) -> str:
        """The gears as the flag writes them."""
        sep = "," if self.flag == "dynamic_batch_size" else ";"
        return sep.join(",".join(str(v) for v in gear) for gear in self.gears)

    def shapes(self, index: int) -> dict:
        """{input name: dims} of gear `index`: its values fill the -1s in --input_shape order."""
        return fill_gear(self.dynamic_type, list(self.inputs), self.gears[index])

    def input_shape(self, index: int) -> str:
        """--input_shape text with gear `index` filled in."""
        return ";".join(f"{name}:{','.join(str(d) for d in dims)}" for name, dims in self.shapes(index).items())

    def dynamic_inputs(self) -> list:
        return [name for name, dims in self.inputs if -1 in dims]

    def largest(self, name: str) -> int:
        """GE's choice for the root graph's Data node: the gear whose dims of this input hold
        the most elements (the first such gear on a tie)."""
        sizes = [math.prod(self.shapes(i)[name]) for i in range(len(self.gears))]
        return sizes.index(max(sizes))


def _digits_only(text: str, flag: str, allowed: str, reason: str) -> None:
    if any(not (c.isascii() and c.isdigit()) and c not in allowed for c in text):
        raise AtcError("E10003", f"Value [{text}] for parameter [--{flag}] is invalid. Reason: {reason}",
                       f"Write the gears as ATC documents them, e.g. --{flag}=\"{_EXAMPLES[flag]}\".")


_EXAMPLES = {"dynamic_batch_size": "1,2,4,8", "dynamic_image_size": "224,224;448,448",
             "dynamic_dims": "1,128;4,128;8,256"}


def _split_gears(text: str, flag: str) -> list:
    """The flag's text as lists of ints, GE's way: batch sizes split by ',' (empty entries
    skipped), image sizes and dims by ';' (a trailing ';' dropped) then ','."""
    if flag == "dynamic_batch_size":
        _digits_only(text, flag, ", ", 'It can only contains digit, ",", " "')
        return [[int(v)] for v in text.split(",") if v.strip()]
    text = text.rstrip(";")
    if flag == "dynamic_image_size":
        _digits_only(text, flag, ",; ", 'It can only contains digit, ",", " " and ";"')
        gears = []
        for part in text.split(";"):
            values = part.split(",")
            if len(values) != 2 or not all(v.strip() for v in values):
                raise AtcError("E10020", f"Value [{text}] for parameter --dynamic_image_size is invalid.",
                               'The value must be formatted as "imagesize1_height,imagesize1_width;'
                               'imagesize2_height,imagesize2_width". Make sure that each profile has two dimensions.')
            gears.append([int(v) for v in values])
        return gears
    if not text:
        raise AtcError("E10001", "Value [] for parameter [--dynamic_dims] is invalid. Reason: dynamic_dims can not "
                       "be empty", 'Write the gears, e.g. --dynamic_dims="1,128;4,128".')
    gears = []
    for part in text.split(";"):
        values = part.split(",")
        for v in values:
            if not v or not all(c.isascii() and c.isdigit() for c in v):
                raise AtcError("E10001", f"Value [{v}] for parameter [--dynamic_dims's parameter] is invalid. "
                               "Reason: must be positive integer",
                               'Write the gears as integers, e.g. --dynamic_dims="1,128;4,128".')
        gears.append([int(v) for v in values])
    return gears


def _check_gear_list(gears: list) -> None:
    """GE's CheckDynamicParams, common to the three flags."""
    if len(gears) < MIN_GEARS:
        raise AtcError("E10035", f"{_GEAR_FLAGS_TEXT} has {len(gears)} profiles, which is less than the minimum "
                       f"{MIN_GEARS}.", f"Ensure that the number of profiles configured in {_GEAR_FLAGS_TEXT} is "
                       "at least the minimum.")
    if len(gears) > MAX_GEARS:
        raise AtcError("E10036", f"{_GEAR_FLAGS_TEXT} has {len(gears)} profiles, which is greater than the maximum "
                       f"{MAX_GEARS}.", f"Ensure that the number of profiles configured in {_GEAR_FLAGS_TEXT} is "
                       "at most the maximum.")
    for gear in gears:
        if len(gear) != len(gears[0]):
            raise AtcError("E10037", f"The profiles configured in {_GEAR_FLAGS_TEXT} have inconsistent dimension "
                           f"counts. A profile has {len(gears[0])} dimensions while another has {len(gear)} "
                           "dimensions.", f"Ensure that the profiles configured in {_GEAR_FLAGS_TEXT} have the "
                           "same dimension count.")
        for value in gear:
            if value <= 0:
                raise AtcError("E10038", f"Dimension size {value} is invalid. The value must be greater than 0.",
                               f"Set the shape values of each profile to positive in {_GEAR_FLAGS_TEXT}.")
    if len({tuple(g) for g in gears}) != len(gears):
        seen, twice = set(), None
        for gear in gears:
            if tuple(gear) in seen:
                twice = gear
                break
            seen.add(tuple(gear))
        raise AtcError("E10039", f"The {_GEAR_FLAGS_TEXT} argument have duplicate profiles ({','.join(map(str, twice))} "
                       "is given twice).", f"Check that the profiles configured in {_GEAR_FLAGS_TEXT} are unique.")


def _check_batch_inputs(inputs: list) -> None:
    dynamic = 0
    for name, dims in inputs:
        if not dims:
            raise AtcError("E10012", "--dynamic_batch_size is included, but the dimension count of the "
                           "dynamic-shape input configured in --input_shape is less than 1.",
                           "Set the batch axis of the dynamic-shape input in --input_shape to -1.")
        for axis, d in enumerate(dims):
            if d == -1 and axis != 0:
                raise AtcError("E10018", f"Value {d} for shape {axis} is invalid. When --dynamic_batch_size is "
                               f"included, only batch size N can be -1 in --input_shape (input [{name}]: "
                               f"{','.join(map(str, dims))}).", "Try again with a valid --input_shape argument. Make "
                               "sure that non-batch size axes are not -1.")
        dynamic += dims[0] == -1
    if not dynamic:
        raise AtcError("E10031", "--dynamic_batch_size is included, but none of the nodes specified in "
                       "--input_shape has a batch size equaling -1.",
                       "Set the batch axis of the dynamic-shape input in --input_shape to -1.")


def _check_image_inputs(inputs: list, input_format: str) -> None:
    message = "When --dynamic_image_size is included, only the height and width axes can be -1 in --input_shape."
    solution = ("Try again with a valid --input_shape argument (and --input_format NCHW or NHWC). Make sure that axes "
                "other than height and width are not -1.")
    hw = {"NCHW": (2, 3), "NHWC": (1, 2)}.get(input_format)
    dynamic = 0
    for name, dims in inputs:
        if -1 not in dims:
            continue
        if hw is None or len(dims) != 4 or [a for a, d in enumerate(dims) if d == -1] != list(hw):
            raise AtcError("E10019", f"{message} Input [{name}]: {','.join(map(str, dims))} ({input_format}).",
                           solution)
        dynamic += 1
    if not dynamic:
        raise AtcError("E10019", message, solution)


def _check_dims_inputs(inputs: list, input_format: str) -> int:
    if input_format != "ND":
        raise AtcError("E10001", f"Value [{input_format}] for parameter [--input_format] is invalid. Reason: "
                       "input_format must be ND when set dynamic_dims", "Add --input_format=ND.")
    for name, dims in inputs:
        if not ND_RANKS[0] <= len(dims) <= ND_RANKS[1]:
            raise AtcError("E10001", f"Value [{len(dims)}] for parameter [--input_shape's dim] is invalid. Reason: "
                           f"Dim num must within [{ND_RANKS[0]}, {ND_RANKS[1]}] when set dynamic_dims (input "
                           f"[{name}]).", "Give --dynamic_dims inputs of rank 1 to 4.")
    count = sum(d == -1 for _, dims in inputs for d in dims)
    if not count:
        raise AtcError("E10001", "Value [0] for parameter [--input_shape's dynamic dim num] is invalid. Reason: at "
                       "least one dim should be -1 when set dynamic_dims", "Mark the dynamic dims with -1.")
    return count


def parse_gears(options) -> "GearSpec | None":
    """The gear flag of `options` validated (None when no gear flag is given)."""
    given = [f for f in GEAR_FLAGS if getattr(options, f, "")]
    if len(given) + bool(getattr(options, "input_shape_range", "")) > 1:
        raise AtcError(*_EXCLUSIVE, "In dynamic shape scenarios, include only one of these options in your command "
                       "line.")
    if not given:
        return None
    flag = given[0]
    text = getattr(options, flag)
    if not options.input_shape:
        raise AtcError("E10004", "Value for --input_shape is empty.",
                       f"--{flag} needs --input_shape with -1 for the dynamic dims, e.g. "
                       '--input_shape="input:-1,3,224,224".')
    if "~" in options.input_shape:
        raise AtcError("E10040", f"As the {_GEAR_FLAGS_TEXT} argument is included, the corresponding nodes specified "
                       "in --input_shape must have -1 axes and cannot have '~'.",
                       "Set the dynamic axes in --input_shape to -1 (ranges are --input_shape_range, without gears).")
    from ge.onnx_import import parse_input_shape
    inputs = list(parse_input_shape(options.input_shape).items())
    if flag == "dynamic_batch_size":
        _check_batch_inputs(inputs)
        gears = _split_gears(text, flag)
    elif flag == "dynamic_image_size":
        _check_image_inputs(inputs, options.input_format)
        gears = _split_gears(text, flag)
    else:
        count = _check_dims_inputs(inputs, options.input_format)
        gears = _split_gears(text, flag)
        if len(gears) > MAX_GEARS:
            _check_gear_list(gears)
        for gear in gears:
            if len(gear) != count:
                raise AtcError("E10003", f"Value [{text}] for parameter [--dynamic_dims] is invalid. Reason: Each gear "
                               "setting needs to be consistent with the number of -1 in the inputshape "
                               f"({count} -1 dim(s); a gear has {len(gear)} value(s)).",
                               "Give each gear one value per -1 of --input_shape, in order.")
    _check_gear_list(gears)
    return GearSpec(flag, tuple(tuple(g) for g in gears), tuple((n, tuple(d)) for n, d in inputs))
