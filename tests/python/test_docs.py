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


ENGINES = DOC.parent / "engines.md"


@pytest.mark.skipif(not ENGINES.exists(), reason="needs docs/engines.md (the source tree)")
def test_engines_md_shows_the_patches_as_they_are():
    """docs/engines.md's diffs are docs/patches/*.patch, the files
    tools/engine-tests checks against the engines' wheels, word for word."""
    text = ENGINES.read_text()
    blocks = re.findall(r"```diff\n(.*?)```", text, re.S)
    patches = sorted((DOC.parent / "patches").glob("*.patch"))
    assert patches, "docs/patches/ holds the engines' patches"
    for p in patches:
        assert p.name in text, f"docs/engines.md names {p.name}"
        assert p.read_text() in blocks, f"docs/engines.md shows {p.name} as it is"
