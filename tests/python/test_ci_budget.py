"""tools/ci-budget, what .ci/run holds tools/test to (docs/testing.md): on a
made-up build folder, a test over half its limit or a run over the wall
budget fails it, and one within passes."""

import subprocess
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[2] / "tools" / "ci-budget"


def _build(tmp_path: Path, times: dict, limits: dict) -> Path:
    b = tmp_path / "build"
    (b / "Testing" / "Temporary").mkdir(parents=True)
    (b / "tests").mkdir()
    log = ["Start testing: Dec 03 16:35 UTC", "-" * 58]
    for i, (name, t) in enumerate(times.items(), 1):
        log += [f"{i}/{len(times)} Test: {name}", "Command: ...", "Output:", "----",
                '<end of output>', f"Test time = {t:7.2f} sec", "-" * 58, 'Test Passed.']
    (b / "Testing" / "Temporary" / "LastTest.log").write_text("\n".join(log) + "\n")
    props = "".join(f'set_tests_properties([=[{n}]=] PROPERTIES  LABELS "unit" TIMEOUT "{lim}" '
                    f'_BACKTRACE_TRIPLES "x;1;add_test")\n' for n, lim in limits.items())
    (b / "tests" / "CTestTestfile.cmake").write_text(props)
    return b


def _run(*args):
    return subprocess.run([sys.executable, str(TOOL), *map(str, args)], capture_output=True, text=True)


@pytest.mark.skipif(not TOOL.exists(), reason="needs the source tree")
def test_budget(tmp_path):
    b = _build(tmp_path, {"conform_gdn": 700.0, "model": 1.0, "nolimit": 10.0}, {"conform_gdn": 1500, "model": 60})
    r = _run("--wall", 900, b)
    assert r.returncode == 0, r.stderr
    assert "build/conform_gdn 700/1500 s (47%)" in r.stdout and "wall 900 s of 1200 s" in r.stdout
    r = _run("--wall", 1300, b)
    assert r.returncode == 1 and "the run took 1300 s, more than 1200 s" in r.stderr
    b2 = _build(tmp_path / "b", {"conform_kda": 800.0}, {"conform_kda": 1500})
    r = _run(b, b2)
    assert r.returncode == 1 and "conform_kda took 800 s of its 1500 s limit (53% > 50%)" in r.stderr
    assert _run(tmp_path / "missing").returncode == 2
