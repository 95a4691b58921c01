"""tools/layers (docs/design.md §10) finds a circle where there is one, in C
and in Python, and passes a folder layered one way."""

import subprocess
import sys
from pathlib import Path

import pytest

LAYERS = Path(__file__).resolve().parents[2] / "tools" / "layers"


def run(folder):
    return subprocess.run([sys.executable, str(LAYERS), "--graph", str(folder)], capture_output=True, text=True)


@pytest.mark.skipif(not LAYERS.exists(), reason="needs tools/layers (the source tree)")
def test_c_circle_and_one_way(tmp_path):
    (tmp_path / "x.h").write_text("int a_one(void);\nint b_two(void);\n")
    (tmp_path / "a.c").write_text('#include "x.h"\nint a_one(void) { return 1; }\n')
    (tmp_path / "b.c").write_text('#include "x.h"\nint b_two(void) { return a_one() + 1; }\n')
    r = run(tmp_path)
    assert r.returncode == 0 and "one way" in r.stdout, r.stdout
    assert "b.c <- needs x.h, a.c" in r.stdout, r.stdout
    (tmp_path / "a.c").write_text('#include "x.h"\nint a_one(void) { return b_two() - 1; }\n')
    r = run(tmp_path)
    assert r.returncode == 1 and "CIRCLE: a.c <-> b.c" in r.stdout, r.stdout


@pytest.mark.skipif(not LAYERS.exists(), reason="needs tools/layers (the source tree)")
def test_python_circle_inside_a_function(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from . import low, high\n")
    (pkg / "low.py").write_text("X = 1\n")
    (pkg / "high.py").write_text("from .low import X\n")
    assert run(pkg).returncode == 0
    (pkg / "low.py").write_text("def f():\n    from . import high\n    return high\n")
    r = run(pkg)
    assert r.returncode == 1 and "high.py <-> low.py" in r.stdout, r.stdout
    # a program's own block is not the module's
    (pkg / "low.py").write_text("X = 1\nif __name__ == '__main__':\n    from pkg import high\n")
    assert run(pkg).returncode == 0
