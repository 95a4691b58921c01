"""The first-use build of the compiled torch extension (rssm.torch_ext), in
the parts that need no torch, so that tests/python/test_ext_build.py holds
them to their rules on a machine without it: which compiler, what the cache
is keyed by, what rssm does when the extension is absent, and the build
itself, one process at a time, with one line said (docs/python.md, "The
compiled torch extension").
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shlex
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Callable, Iterable, Mapping

MODES = ("auto", "build", "off")


def say(line: str) -> None:
    """One line on stderr: an engine's stdout stays its own."""
    sys.stderr.write(line.rstrip("\n") + "\n")
    sys.stderr.flush()


def compiler(env: Mapping[str, str] = os.environ) -> list[str] | None:
    """The C++ compiler command: $CXX, split as a shell would (`ccache g++`),
    else `c++`; None where its program is not found (then the torch ops run
    their Python implementations)."""
    try:
        words = shlex.split(env.get("CXX") or "c++")
    except ValueError:
        return None
    exe = shutil.which(words[0], path=env.get("PATH")) if words else None
    return [exe, *words[1:]] if exe else None


def cache_key(parts: Iterable[str], files: Iterable[Path | None]) -> str:
    """The hash that names a build's folder: over what the library depends
    on (torch's version and build, whether it has CUDA: `parts`) and the
    bytes of the files compiled into it (`files`; None for one that is
    absent), so that another torch or another rssm finds no stale build."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() + b"\0")
    for f in files:
        h.update(f.read_bytes() if f else b"")
    return h.hexdigest()[:12]


def decide(mode: str, built: bool, have_compiler: bool) -> str:
    """What loading does, given RSSM_TORCH_EXT (`mode`), whether the library
    is in its cache folder and whether a compiler was found: "load",
    "build" (then load), "off", "no-compiler" (the Python implementations)
    or "bad-mode" (a value other than auto, build and off)."""
    if mode not in MODES:
        return "bad-mode"
    if mode == "off":
        return "off"
    if built:
        return "load"
    return "build" if have_compiler else "no-compiler"


def build_once(target: Path, compile_to: Callable[[Path], None], building: str,
               force: bool = False, tell: Callable[[str], None] = say) -> Path:
    """`target`, compiled by compile_to(path) into a temporary file beside it
    and moved into place whole, unless it is there already (`force`:
    again). Under an exclusive lock on a file beside it, so that processes
    that start together (an engine's ranks) build it once: the first says
    `building` (one line) and compiles, each other says once that it waits
    and then loads what the first built. A build that fails leaves nothing
    at `target` and releases the lock (the lock is the process's own, so
    one that dies releases it too)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            tell(f"rssm: waiting for another process's build of the torch extension ({target.parent})")
            fcntl.flock(lock, fcntl.LOCK_EX)
            force = False  # what the other process built is this one's
        try:
            if target.is_file() and not force:
                return target
            tell(building)
            fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".so")
            os.close(fd)
            try:
                compile_to(Path(tmp))
                os.replace(tmp, target)  # whole or not at all, for processes that load it meanwhile
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return target
