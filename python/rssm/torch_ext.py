"""The compiled torch extension (csrc/torch_ext.cpp): the CPU and CUDA
kernels of rssm::replayssm_decode in C++, so that an eager call goes from
torch's dispatcher to rssm_layer_run with no Python on the way
(docs/python.md, "The compiled torch extension").

A torch extension is tied to the torch it was compiled against (its C++
ABI), so it is not in the wheel: the first time rssm registers its torch
ops under a torch it has no build for, it builds it there, against that
torch (a C++ compiler and torch's headers; about 10 s, one line on stderr
while it does, one process at a time: rssm._ext_build), into a folder
named by what it depends on (torch's version and build, the source,
rssm.h), and loads it from there then and after. `python -m rssm.torch_ext
build` does the same ahead of time (a container image's build step).
Only where no compiler is found, a build fails, or RSSM_TORCH_EXT=off, the
ops run their Python implementations (ctypes), which do the same, slower;
rssm.torch_extension_status() says which, and why.
"""

from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path

import torch

from . import _ext_build, _lib, _prepared, _torch_ops

NAME = "rssm_torch_ext"
_HERE = Path(__file__).resolve().parent
SOURCE = _HERE / "csrc" / "torch_ext.cpp"

status = "not loaded"   # what torch_extension_status() says
loaded: ctypes.CDLL | None = None


def _header_dir() -> Path | None:
    """rssm.h: installed in the package by a wheel (CMakeLists.txt), or the
    repository's include/ beside python/."""
    for d in (_HERE / "include", _HERE.parent.parent / "include"):
        if (d / "rssm.h").is_file():
            return d
    return None


def _cuda_include() -> Path | None:
    """CUDA's headers (cuda_runtime_api.h, which torch's c10/cuda headers
    include): the toolkit's, else the ones pip's nvidia packages carry."""
    roots = [os.environ.get(v) for v in ("CUDA_HOME", "CUDA_PATH")] + ["/usr/local/cuda"]
    dirs = [Path(r) / "include" for r in roots if r]
    for site in map(Path, sys.path):
        dirs += [site / "nvidia" / "cu13" / "include", site / "nvidia" / "cuda_runtime" / "include"]
    return next((d for d in dirs if (d / "cuda_runtime_api.h").is_file()), None)


def _with_cuda() -> bool:
    return torch.version.cuda is not None and (Path(torch.__file__).parent / "lib" / "libc10_cuda.so").is_file()


def build_dir() -> Path:
    """Where the extension for this torch and these sources lives:
    $RSSM_TORCH_EXT_DIR, else ~/.cache/rssm/torch_ext (XDG_CACHE_HOME), in a
    folder per torch build and source."""
    header = _header_dir()
    key = _ext_build.cache_key((torch.__version__, torch.version.git_version, str(torch.version.cuda), str(_with_cuda())),
                               (SOURCE, header / "rssm.h" if header else None))
    root = os.environ.get("RSSM_TORCH_EXT_DIR") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") \
        / "rssm" / "torch_ext"
    return Path(root) / f"torch-{torch.__version__}-{key}"


def library_file() -> Path:
    return build_dir() / f"{NAME}.so"


def _cpp_extension():
    """torch.utils.cpp_extension, imported without the warning a torch with
    CUDA logs where no CUDA runtime is found (a machine without a GPU):
    a first-use build says one line."""
    import logging

    log = logging.getLogger("torch.utils.cpp_extension")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        from torch.utils import cpp_extension
    finally:
        log.setLevel(level)
    return cpp_extension


def _cxx_std() -> str:
    """The C++ standard torch's own extension builder compiles with, which
    its headers need: c++17 up to torch 2.11 at least, c++20 in later ones
    (whose headers use <compare>, concepts and std::bit_width)."""
    import inspect

    return "c++20" if "-std=c++20" in inspect.getsource(_cpp_extension()) else "c++17"


def _compile(cxx: list, out: Path, verbose: bool) -> None:
    """One compiler command for the one source, so no ninja is needed; its
    output is kept unless it fails (then its last lines are the error), so
    that a build says one line."""
    import subprocess

    cpp_extension = _cpp_extension()
    header = _header_dir()
    if header is None:
        raise RuntimeError(f"rssm.h is neither in {_HERE / 'include'} nor in the repository's include/")
    includes = cpp_extension.include_paths()
    if not any((Path(d) / "torch" / "extension.h").is_file() for d in includes):
        raise RuntimeError(f"torch's C++ headers (torch/extension.h) are not in {includes}")
    flags = ["-O2", f"-std={_cxx_std()}", "-fPIC", "-shared", f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
             f"-I{header}"] + [f"-I{d}" for d in includes]
    libs = ["-lc10", "-ltorch_cpu", "-ltorch"]
    if _with_cuda():
        # Only torch's current-stream call needs CUDA, through its headers
        # (cudaStream_t): nothing is compiled by nvcc.
        inc = _cuda_include()
        if inc is None:
            raise RuntimeError(f"torch has CUDA {torch.version.cuda}, but no cuda_runtime_api.h was found "
                               "(set CUDA_HOME to the CUDA toolkit)")
        flags += ["-DRSSM_TORCH_CUDA", f"-I{inc}"]
        libs += ["-lc10_cuda"]
    cmd = [*cxx, *flags, str(SOURCE), "-o", str(out), f"-L{Path(torch.__file__).parent / 'lib'}", *libs]
    if verbose:
        print(" ".join(cmd), flush=True)
    done = subprocess.run(cmd, capture_output=not verbose, text=True)
    if done.returncode != 0:
        tail = " | ".join((done.stderr or "").strip().splitlines()[-3:])
        raise RuntimeError(f"{cxx[0]} exited with {done.returncode}" + (f": {tail}" if tail else ""))


def build(verbose: bool = False, force: bool = False) -> Path:
    """Compiles the extension against this torch (about 10 s on two cores)
    with $CXX (default c++) into its cache folder, unless it is there
    (`force`: again), one process at a time (rssm._ext_build.build_once);
    returns the library's path. Raises where it cannot (no compiler,
    no torch headers, no CUDA headers for a torch with CUDA, a compiler
    error)."""
    cxx = _ext_build.compiler()
    if cxx is None:
        raise RuntimeError(f"no C++ compiler found ({os.environ.get('CXX') or 'c++'}; set CXX)")
    target = library_file()
    line = (f"rssm: building the torch extension for torch {torch.__version__} (once per torch build, "
            f"about 10 s): {target}")
    return _ext_build.build_once(target, lambda out: _compile(cxx, out, verbose), line, force=force)


def load() -> bool:
    """Loads the extension, building it first where it is absent and a
    compiler is found, and binds it to the librssm the package loaded; True
    when its kernels are registered. Sets `status`."""
    global status, loaded
    mode = os.environ.get("RSSM_TORCH_EXT", "auto").lower()
    path = library_file()
    what = _ext_build.decide(mode, path.is_file(), _ext_build.compiler() is not None)
    python_path = "the torch ops run their Python implementations (ctypes)"
    if what == "bad-mode":
        status = f"off (RSSM_TORCH_EXT={mode!r}: expected auto, build or off): {python_path}"
        return False
    if what == "off":
        status = f"off (RSSM_TORCH_EXT=off): {python_path}"
        return False
    if what == "no-compiler":
        status = (f"not built for torch {torch.__version__}, and no C++ compiler was found to build it "
                  f"({os.environ.get('CXX') or 'c++'}): {python_path}; install one (or set CXX), or build it "
                  "with `python -m rssm.torch_ext build` where one is, against the same torch")
        return False
    if what == "build":
        try:
            path = build()
        except Exception as e:  # noqa: BLE001 (any failure of the build: the Python path still works)
            status = f"build failed ({type(e).__name__}: {e}): {python_path}"
            _ext_build.say(f"rssm: the torch extension's {status}")
            return False
    lib_path = str(_lib.library_path())
    _lib.lib()  # loaded first: the extension binds to this very library
    torch.ops.load_library(str(path))
    loaded = ctypes.CDLL(str(path))
    msg = ctypes.create_string_buffer(512)
    if loaded.rssm_torch_ext_bind(lib_path.encode(), msg, len(msg)):
        raise ImportError(f"rssm: {path}: {msg.value.decode(errors='replace')}")
    _prepared.on_clear.append(loaded.rssm_torch_ext_forget)
    kernels = "CPU and CUDA" if _with_cuda() else "CPU"
    status = f"loaded: {path} ({kernels} kernels of rssm::replayssm_decode, replayssm_materialise, replayssm_advance)"
    return True


def register() -> bool:
    """Registers rssm's torch ops (rssm._torch_ops defines them) with this
    extension's kernels where it loads (load(): built first where absent),
    else with their Python implementations; once. False where this torch
    has no torch.library.register_fake (torch < 2.4): then the entry points
    call rssm directly."""
    if not _torch_ops.finished:
        _torch_ops.finish(_torch_ops.available() and load())
    return _torch_ops.available()


def describe() -> str:
    """rssm.torch_extension_status(): registers the ops (register()), then
    says which kernels run them, and why."""
    if not register():
        return "unavailable: this torch has no torch.library.register_fake (torch < 2.4)"
    return status


def counts() -> dict:
    """The extension's calls that found their plan, those that took the
    Python path, the plans it keeps, and those of each op (decode,
    materialise, advance)."""
    c = (ctypes.c_uint64 * 5)()
    loaded.rssm_torch_ext_counts(c)
    return dict(hits=c[0], misses=c[1], plans=c[2] + c[3] + c[4], decode=c[2], materialise=c[3], advance=c[4])


def main(argv=None) -> int:
    """python -m rssm.torch_ext [build|status]: builds the extension for
    this torch (when absent; --force: again), as rssm does on first use,
    then says what rssm loads."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m rssm.torch_ext", description=main.__doc__)
    ap.add_argument("command", choices=("build", "status"), nargs="?", default="status")
    ap.add_argument("--force", action="store_true", help="build even where a build exists")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    if args.command == "build":
        build(verbose=args.verbose, force=args.force)
    print(describe())
    return 0


if __name__ == "__main__":
    # Run as `python -m rssm.torch_ext`, this file is __main__, a second
    # copy of the module: the package's own (rssm.torch_ext) is the one whose
    # extension the ops load, so it runs the command.
    from rssm.torch_ext import main as package_main

    sys.exit(package_main())
