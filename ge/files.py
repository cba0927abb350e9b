"""Reading and writing files so that no input can block or exhaust memory, and no output ever
replaces what is not ours or is left half-written.  atc and atc-sim both go through here.

Inputs (`open_input`, `read_input`): regular files only.  A FIFO, device, socket or folder is
refused before a byte is read (the file is opened with O_NONBLOCK, so even a FIFO swapped in
after the check cannot block), and the size is checked against a limit before reading.

Outputs (`Outputs`): one transaction per run.  Each file is written to a temp file beside its
target, named `.<name>.atc-tmp-<pid>-<random>`; only when every file of the run is complete
are they renamed into place (`commit`, with SIGTERM/SIGINT held off for the renames).  Any
failure -- an exception, or SIGTERM/SIGINT under `cleanup_on_signals` -- removes the temp
files and the folders the run created.  A target that exists and is not a regular file
(device, FIFO, socket, folder) is refused.  A temp file left by a run that was SIGKILLed is
recognisable by its name and swept the next time a run writes into that folder, once its
process is gone.
"""
from __future__ import annotations

import contextlib
import errno
import json
import mmap
import os
import re
import secrets
import signal
import stat
import threading
import weakref
from typing import BinaryIO, Optional

from ge.errors import AtcError

_TMP_MARK = ".atc-tmp-"
_TMP_NAME = re.compile(r"^\..*\.atc-tmp-(\d+)-[0-9a-f]{8}$")
_NAME_ROOM = 100          # characters of the target's name kept in its temp file's name
_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "a file"
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


# --------------------------------------------------------------------------- inputs

def check_input(path: str, param: str, missing_code: str = "E10001") -> os.stat_result:
    """The path must name an existing regular file (symlinks followed); returns its stat."""
    if not path:
        raise AtcError("E10004", f"Value for {param} is empty.", f"Pass {param}=<file>.")
    try:
        st = os.stat(path)
    except (OSError, ValueError) as exc:   # ValueError: a NUL in the path
        reason = "the file does not exist" if isinstance(exc, FileNotFoundError) else \
            f"it cannot be read ({getattr(exc, 'strerror', None) or exc})"
        raise AtcError(missing_code, f"Value [{path}] for parameter [{param}] is invalid. Reason: {reason}.",
                       f"Check the path given to {param}.") from None
    if not stat.S_ISREG(st.st_mode):
        raise AtcError("E13026", f"Input path [{path}] for parameter [{param}] is invalid. Reason: it is "
                       f"{_kind(st.st_mode)}, not a regular file.", f"Give {param} a regular file.")
    return st


def open_input(path: str, param: str, max_bytes: Optional[int] = None,
               missing_code: str = "E10001") -> BinaryIO:
    """Open a regular file for reading after checking its size against `max_bytes`
    (E13015 when larger; an empty file is the format parser's to judge).  The caller closes it."""
    check_input(path, param, missing_code)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise AtcError("E13001", f"Failed to open file [{path}] ({param}). Reason: {exc.strerror}.",
                       "Check the file's permissions.") from None
    try:
        st = os.fstat(fd)   # what was opened, not what was checked: the path may have changed
        if not stat.S_ISREG(st.st_mode):
            raise AtcError("E13026", f"Input path [{path}] for parameter [{param}] is invalid. Reason: it is "
                           f"{_kind(st.st_mode)}, not a regular file.", f"Give {param} a regular file.")
        if max_bytes is not None and st.st_size > max_bytes:
            raise AtcError("E13015", f"File [{path}] ({param}) has a size of {st.st_size} bytes, which is out "
                           f"of the valid range (0, {max_bytes}].", "Check that it is the right file.")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_input(path: str, param: str, max_bytes: Optional[int] = None, missing_code: str = "E10001") -> bytes:
    """The bytes of a regular file of at most `max_bytes` (read no further than its size at open)."""
    with open_input(path, param, max_bytes, missing_code) as f:
        size = os.fstat(f.fileno()).st_size
        try:
            data = f.read(size)
        except OSError as exc:
            raise AtcError("E13003", f"Failed to read file [{path}] ({param}). Reason: {exc.strerror}.",
                           "Check the file.") from None
    return data


class MappedFile:
    """A regular file mapped read-only: its bytes are read by the kernel as they are used,
    shared with the page cache and never copied into this process (weights of any size).

    `view(offset, length)` checks the range against the size the file had when mapped, so a
    range read from a file can never reach past the map.  `release()` drops the pages this
    process has touched (they stay in the page cache; touching them again reads them back),
    so memory-mapped weights do not pile up in the resident set as a run walks over them.
    The map stays valid while any view of it lives; the file must not be truncated
    meanwhile (as for every memory-mapped reader)."""

    def __init__(self, path: str, f: BinaryIO):
        self.path = path
        self.size = os.fstat(f.fileno()).st_size
        self._map = mmap.mmap(f.fileno(), self.size, access=mmap.ACCESS_READ) if self.size else None
        self.buffer = memoryview(self._map) if self._map is not None else memoryview(b"")
        if self._map is not None:
            _MAPS.add(self._map)   # the map lives as long as a view of it does, this object or not

    def view(self, offset: int, length: int) -> memoryview:
        if offset < 0 or length < 0 or offset + length > self.size:
            raise ValueError(f"range [{offset}, {offset + length}) is outside the {self.size}-byte file {self.path}")
        return self.buffer[offset:offset + length]

    def release(self, offset: int = 0, length: Optional[int] = None) -> None:
        """Drop the touched pages of the file's bytes [offset, offset + length) (all of it by default)."""
        if self._map is not None:
            start = max(0, offset) // mmap.PAGESIZE * mmap.PAGESIZE
            end = self.size if length is None else min(self.size, offset + length)
            if end > start:
                _release(self._map, start, end - start)


_MAPS: "weakref.WeakSet[mmap.mmap]" = weakref.WeakSet()


def _release(mapped: mmap.mmap, start: int = 0, length: Optional[int] = None) -> None:
    """madvise(DONTNEED) on [start, start + length) of the map (to its end when length is None)."""
    if hasattr(mapped, "madvise") and hasattr(mmap, "MADV_DONTNEED"):
        with contextlib.suppress(OSError, ValueError):   # ValueError: closed meanwhile
            if length is None:
                mapped.madvise(mmap.MADV_DONTNEED, start)
            else:
                mapped.madvise(mmap.MADV_DONTNEED, start, length)


def map_of(buffer) -> Optional[mmap.mmap]:
    """The memory map at the bottom of `buffer`'s chain of views (memoryview.obj, ndarray.base),
    or None when it is not mapped memory."""
    for _ in range(64):                   # a chain of views is short; never loop forever
        if isinstance(buffer, mmap.mmap):
            return buffer
        buffer = buffer.obj if isinstance(buffer, memoryview) else getattr(buffer, "base", None)
        if buffer is None:
            return None
    return None


def maps_of(buffer) -> list:
    """The memory maps `buffer`'s bytes come from: its own (`map_of`), or, for a chunk
    computed from other arrays (a deferred constant's block: it names them in `sources`),
    theirs."""
    mapped = map_of(buffer)
    if mapped is not None:
        return [mapped]
    for _ in range(64):
        sources = getattr(buffer, "sources", None)
        if sources:
            return [m for m in map(map_of, sources) if m is not None]
        buffer = buffer.obj if isinstance(buffer, memoryview) else getattr(buffer, "base", None)
        if buffer is None:
            return []
    return []


def release_maps(maps) -> None:
    """Drop the touched pages of these maps (see `map_of`)."""
    for mapped in maps:
        _release(mapped)


def release_mapped() -> None:
    """Drop the touched pages of every file this process still has mapped (see
    MappedFile.release): called between stages and while an .om is streamed out."""
    for mapped in list(_MAPS):
        _release(mapped)


def map_input(path: str, param: str, max_bytes: Optional[int] = None, missing_code: str = "E10001") -> MappedFile:
    """Map a regular file read-only after the same checks as `open_input` (a FIFO or device
    is refused, the size checked against `max_bytes`)."""
    with open_input(path, param, max_bytes, missing_code) as f:
        try:
            return MappedFile(path, f)
        except (OSError, ValueError) as exc:
            raise AtcError("E13003", f"Failed to map file [{path}] ({param}) into memory. Reason: "
                           f"{getattr(exc, 'strerror', None) or exc}.",
                           "Check the file, and the address space this process may use (ulimit -v).") from None


# --------------------------------------------------------------------------- outputs

def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def sweep_leftovers(folder: str) -> list:
    """Remove temp files of earlier runs in `folder` whose process is gone (a SIGKILL leaves
    them); returns what was removed.  Only our own regular files with our name pattern."""
    removed = []
    try:
        names = os.listdir(folder or ".")
    except OSError:
        return removed
    for name in names:
        match = _TMP_NAME.match(name)
        if not match or int(match.group(1)) == os.getpid() or _pid_alive(int(match.group(1))):
            continue
        path = os.path.join(folder, name)
        try:
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
                os.unlink(path)
                removed.append(path)
        except OSError:
            pass
    return removed


def write_failed(path: str, exc: OSError) -> AtcError:
    """An OS error while writing an output, as the user-facing error it is."""
    return AtcError("E13004", f"Failed to write file [{path}]. Reason: {exc.strerror or exc}.",
                    "Check that the output folder exists, is writable and has free space.")


class Outputs:
    """The output files of one run: all of them, or none (see the module docstring).

    Use as a context manager: a clean exit commits, an exception rolls back."""

    def __init__(self):
        self._staged: list = []      # (temp path, target path), in write order
        self._made: list = []        # folders this run created, outermost first
        self._swept: set = set()
        self._done = False
        _LIVE.add(self)

    # -- paths --

    def target(self, path: str, param: str) -> str:
        """Check an output path and return where the file will go: not a folder (E10022),
        not a device/FIFO/socket (E13004), in an existing (or created) folder (E10001)."""
        if not path:
            raise AtcError("E10004", f"Value for {param} is empty.", f"Pass {param}=<file>.")
        if "\0" in path:
            shown = path.replace("\0", "\\0")
            raise AtcError("E10001", f"Value [{shown}] for parameter [{param}] is invalid. "
                           "Reason: it contains a NUL character, which no file path can hold.", "Fix the path.")
        real = os.path.realpath(path) if os.path.islink(path) else os.path.abspath(path)
        if path.endswith(("/", os.sep)) or os.path.isdir(real):
            raise AtcError("E10022", f"Value [{path}] for parameter [{param}] is invalid. Reason: it is a "
                           "directory; give a file path.", f"Add the file name to {param}.")
        try:
            st = os.lstat(real)
        except FileNotFoundError:
            st = None
        except OSError as exc:   # a name too long, a path through a file
            raise write_failed(real, exc) from None
        if st is not None and not stat.S_ISREG(st.st_mode):
            raise AtcError("E13004", f"Failed to write file [{path}] ({param}). Reason: it is {_kind(st.st_mode)}; "
                           "only a regular file is ever replaced.", f"Give {param} a regular file path.")
        if len(os.fsencode(os.path.basename(real))) > 255:
            raise write_failed(real, OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG), real))
        if not os.path.isdir(os.path.dirname(real)):
            raise AtcError("E10001", f"Value [{path}] for parameter [{param}] is invalid. Reason: the folder "
                           f"[{os.path.dirname(real)}] does not exist.", "Create the output folder first.")
        return real

    def make_folder(self, path: str, param: str) -> str:
        """Create `path` (and its missing parents), remembered so a rollback removes them."""
        real = os.path.abspath(path)
        missing, folder = [], real
        while not os.path.lexists(folder):
            missing.append(folder)
            parent = os.path.dirname(folder)
            if parent == folder:
                break
            folder = parent
        for folder in reversed(missing):
            try:
                self._made.append(folder)
                os.mkdir(folder)
            except OSError as exc:
                self._made.pop()
                raise write_failed(folder, exc) from None
        if not os.path.isdir(real):
            st = os.lstat(real)
            raise AtcError("E13004", f"Failed to write into [{path}] ({param}). Reason: it is {_kind(st.st_mode)}, "
                           "not a folder.", f"Give {param} a folder.")
        return real

    # -- writing --

    @contextlib.contextmanager
    def open(self, path: str, param: str, text: bool = False):
        """A file object writing the output `path`; the file appears only at commit."""
        target = self.target(path, param)
        folder = os.path.dirname(target)
        if folder not in self._swept:
            self._swept.add(folder)
            sweep_leftovers(folder)
        if any(t == target for _, t in self._staged):
            raise ValueError(f"output {target} written twice in one run")
        tmp = os.path.join(folder, f".{os.path.basename(target)[:_NAME_ROOM]}{_TMP_MARK}{os.getpid()}-"
                                   f"{secrets.token_hex(4)}")
        self._staged.append((tmp, target))   # before creating it, so a signal cannot leak it
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            with os.fdopen(fd, "w" if text else "wb", **({"encoding": "utf-8", "newline": "\n"} if text else {})) as f:
                yield f
        except OSError as exc:
            raise write_failed(target, exc) from None

    def write_bytes(self, path: str, data: bytes, param: str) -> str:
        with self.open(path, param) as f:
            f.write(data)
        return path

    def write_json(self, path: str, content, param: str, sort_keys: bool = False) -> str:
        """JSON; `sort_keys` when the content's key order is not ours to fix (protobuf maps)."""
        with self.open(path, param, text=True) as f:
            json.dump(content, f, indent=2, sort_keys=sort_keys)
            f.write("\n")
        return path

    # -- ending --

    def commit(self) -> None:
        """Rename every temp file into place.  SIGTERM/SIGINT wait until the renames are done,
        so a signal never leaves half of a run's files renamed."""
        if self._done:
            return
        held = _hold_signals()
        try:
            for tmp, target in self._staged:
                try:
                    st = os.lstat(target)
                except FileNotFoundError:
                    st = None
                if st is not None and not stat.S_ISREG(st.st_mode):   # appeared since target()
                    raise AtcError("E13004", f"Failed to write file [{target}]. Reason: it is now "
                                   f"{_kind(st.st_mode)}; only a regular file is ever replaced.",
                                   "Remove it or give another output path.")
                try:
                    os.replace(tmp, target)
                except OSError as exc:
                    raise write_failed(target, exc) from None
            self._done = True
            _LIVE.discard(self)
        finally:
            _release_signals(held)
            if not self._done:
                self.rollback()

    def rollback(self) -> None:
        """Remove every temp file and every folder this run created (if still empty)."""
        for tmp, _ in self._staged:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        for folder in reversed(self._made):
            with contextlib.suppress(OSError):
                os.rmdir(folder)
        self._staged, self._made, self._done = [], [], True
        _LIVE.discard(self)

    def __enter__(self) -> "Outputs":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.rollback()


# --------------------------------------------------------------------------- signals

_LIVE: set = set()            # transactions not yet committed or rolled back


class Terminated(BaseException):
    """SIGTERM arrived: unwinds like KeyboardInterrupt, so every `Outputs` rolls back."""


def _on_sigterm(signum, frame):
    raise Terminated()


def _hold_signals():
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})


def _release_signals(held) -> None:
    if held is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


@contextlib.contextmanager
def cleanup_on_signals():
    """While inside, SIGTERM raises `Terminated` (SIGINT raises KeyboardInterrupt as usual), so
    temp files are removed on the way out.  A no-op outside the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        for out in list(_LIVE):   # whatever an interrupted run left staged
            out.rollback()
