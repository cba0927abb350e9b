"""The one error the file-format layer raises.

Why its own type: om_format sits below every other package (it knows bytes, not ATC's
error codes), so it cannot raise `ge.errors.AtcError`.  The readers above it turn an
`OmFormatError` into ATC's E10003 with the cause chained (`ge.errors.om_format_error`).
"""
from __future__ import annotations


class OmFormatError(Exception):
    """The bytes are not a valid .om file (or part of one).  `solution` is an optional hint
    more specific than "regenerate the file"."""

    def __init__(self, message: str, solution: str = ""):
        super().__init__(message)
        self.message = message
        self.solution = solution
