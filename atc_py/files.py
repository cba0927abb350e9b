"""Writing output files so that a failure never leaves half a file behind."""
from __future__ import annotations

import json
import os

from ge.errors import AtcError


def write_json_atomic(path: str, content) -> None:
    """Write JSON through a temp file in the same folder, then rename it into place."""
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(content, f, indent=2)
            f.write("\n")
        os.replace(tmp, path)
    except OSError as exc:
        raise cannot_write(exc) from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def cannot_write(exc: OSError) -> AtcError:
    """An OS error while writing an output, as the user-facing error it is."""
    where = exc.filename or "an output file"
    return AtcError("E10001", f"Cannot write [{where}]: {exc.strerror or exc}.",
                    "Check that the output folder exists, is writable and has free space.")
