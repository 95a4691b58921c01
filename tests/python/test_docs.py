"""docs/python.md's NumPy decode loop runs as written."""

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "python.md"


@pytest.mark.skipif(not DOC.exists(), reason="needs docs/python.md (the source tree)")
def test_numpy_example_runs(capsys):
    text = DOC.read_text()
    m = re.search(r"this block runs as a test.*?```python\n(.*?)```", text, re.S)
    assert m, "the example marked 'this block runs as a test' is in docs/python.md"
    exec(compile(m.group(1), str(DOC), "exec"), {})
    # it says what it did: a reader who runs it sees a result, not silence
    assert re.search(r"slot 5, layer 0: \|state\| = [0-9.]+", capsys.readouterr().out)
