"""The first-use build of the compiled torch extension (rssm._ext_build), in
the parts that need no torch, with the compiler step made up: which
compiler is taken, what the cache folder's name depends on, what loading
does when the extension is absent, and the build itself: one process at a
time however many start together, one line said by the one that builds,
nothing left behind by one that fails. test_torch_ext.py runs the real
build where torch is installed."""

import multiprocessing
import os
import stat
import time
from pathlib import Path

import pytest

from rssm import _ext_build


def fake_program(folder: Path, name: str) -> Path:
    p = folder / name
    p.write_text("#!/bin/sh\nexit 0\n")
    p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return p


def test_compiler_is_cxx_else_cpp(tmp_path: Path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    cpp = fake_program(bin_dir, "c++")
    path = str(bin_dir)
    assert _ext_build.compiler({"PATH": path}) == [str(cpp)]
    gxx = fake_program(bin_dir, "g++-12")
    assert _ext_build.compiler({"PATH": path, "CXX": "g++-12"}) == [str(gxx)]
    # a launcher and its compiler, as a shell splits them
    ccache = fake_program(bin_dir, "ccache")
    assert _ext_build.compiler({"PATH": path, "CXX": "ccache g++-12 -w"}) == [str(ccache), "g++-12", "-w"]
    assert _ext_build.compiler({"PATH": path, "CXX": str(gxx)}) == [str(gxx)]


def test_no_compiler(tmp_path: Path):
    assert _ext_build.compiler({"PATH": str(tmp_path)}) is None  # no c++ there
    assert _ext_build.compiler({"PATH": os.environ.get("PATH", ""), "CXX": "/nonexistent/g++"}) is None
    assert _ext_build.compiler({"PATH": os.environ.get("PATH", ""), "CXX": "'unclosed"}) is None


def test_decide():
    d = _ext_build.decide
    assert d("auto", True, False) == "load"
    assert d("auto", False, True) == "build"
    assert d("build", False, True) == "build"
    # the Python implementations only without a compiler, or when off
    assert d("auto", False, False) == "no-compiler"
    assert d("off", True, True) == "off"
    assert d("never", True, True) == "bad-mode"


def test_cache_key(tmp_path: Path):
    src, hdr = tmp_path / "ext.cpp", tmp_path / "rssm.h"
    src.write_text("int f();")
    hdr.write_text("#define X 1")
    parts = ("2.11.0+cu130", "abc123", "13.0", "True")
    key = _ext_build.cache_key(parts, (src, hdr))
    assert key == _ext_build.cache_key(list(parts), [src, hdr]) and len(key) == 12
    # another torch (version, build, CUDA), another source or header: another folder
    for i in range(len(parts)):
        other = list(parts)
        other[i] += "x"
        assert _ext_build.cache_key(other, (src, hdr)) != key
    hdr.write_text("#define X 2")
    assert _ext_build.cache_key(parts, (src, hdr)) != key
    assert _ext_build.cache_key(parts, (src, None)) != _ext_build.cache_key(parts, (src, hdr))


def test_build_once_says_one_line_and_builds_once(tmp_path: Path):
    target = tmp_path / "cache" / "torch-x-key" / "ext.so"
    lines, compiles = [], []

    def compile_to(out: Path):
        compiles.append(out)
        assert out.parent == target.parent and out != target
        out.write_bytes(b"library")

    assert _ext_build.build_once(target, compile_to, "building", tell=lines.append) == target
    assert target.read_bytes() == b"library"
    assert lines == ["building"] and len(compiles) == 1
    assert not compiles[0].exists()  # moved into place, not copied
    # there now: nothing said, nothing compiled; --force builds again
    assert _ext_build.build_once(target, compile_to, "building", tell=lines.append) == target
    assert lines == ["building"] and len(compiles) == 1
    _ext_build.build_once(target, compile_to, "building", force=True, tell=lines.append)
    assert len(compiles) == 2


def test_failed_build_leaves_nothing(tmp_path: Path):
    target = tmp_path / "key" / "ext.so"

    def broken(out: Path):
        out.write_bytes(b"half")
        raise RuntimeError("c++ exited with 1")

    with pytest.raises(RuntimeError, match="exited with 1"):
        _ext_build.build_once(target, broken, "building", tell=lambda s: None)
    assert sorted(p.name for p in target.parent.iterdir()) == [".lock"]
    # the lock was released: the next build goes ahead
    _ext_build.build_once(target, lambda out: out.write_bytes(b"ok"), "building", tell=lambda s: None)
    assert target.read_bytes() == b"ok"


def _rank(target: str, log: str, barrier) -> None:
    """One of several processes that start together (an engine's ranks):
    each asks for the library; the compiler step takes a second and notes
    that it ran. What each process says goes to `log`."""
    barrier.wait()

    def slow_compile(out: Path):
        with open(log, "a") as f:
            f.write(f"compile {os.getpid()}\n")
        time.sleep(1.0)
        out.write_bytes(b"library")

    def tell(line: str):
        with open(log, "a") as f:
            f.write(f"say {os.getpid()} {line}\n")

    got = _ext_build.build_once(Path(target), slow_compile, "building", tell=tell)
    assert got.read_bytes() == b"library"


def test_processes_that_start_together_build_once(tmp_path: Path):
    target, log = tmp_path / "key" / "ext.so", tmp_path / "log"
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(3)
    procs = [ctx.Process(target=_rank, args=(str(target), str(log), barrier)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    lines = log.read_text().splitlines()
    assert sum(ln.startswith("compile") for ln in lines) == 1, lines
    said = [ln for ln in lines if ln.startswith("say")]
    assert sum(ln.endswith(" building") for ln in said) == 1, lines
    # every other process said once that it waited, and nothing else
    assert sum("waiting for another process" in ln for ln in said) == 2, lines
    assert len({ln.split()[1] for ln in said}) == 3, lines
