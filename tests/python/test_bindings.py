"""The ctypes structs against include/rssm.h: a C compiler reports sizeof and
every field's offset, which must be ctypes' own (skipped where there is no
compiler or no header, as in an installed package without the sources)."""

import ctypes
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import rssm
from rssm import _lib

HEADER = Path(__file__).resolve().parents[2] / "include" / "rssm.h"
STRUCTS = {"rssm_model": _lib.RssmModel, "rssm_error": _lib.RssmError,
           "rssm_layer_desc": _lib.RssmLayerDesc, "rssm_layer_tensors": _lib.RssmLayerTensors}


def c_compiler():
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")


@pytest.mark.skipif(not HEADER.exists() or not c_compiler(), reason="needs include/rssm.h and a C compiler")
def test_struct_layout_matches_the_header(tmp_path):
    lines = ["#include <rssm.h>", "#include <stddef.h>", "#include <stdio.h>", "int main(void) {"]
    for cname, py in STRUCTS.items():
        lines.append(f'printf("{cname} sizeof %zu\\n", sizeof({cname}));')
        for field, _ in py._fields_:
            lines.append(f'printf("{cname} {field} %zu\\n", offsetof({cname}, {field}));')
    lines += ["return 0;", "}"]
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines))
    exe = tmp_path / "layout"
    subprocess.run([c_compiler(), "-std=c11", f"-I{HEADER.parent}", str(src), "-o", str(exe)], check=True)
    c = {}
    for line in subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.splitlines():
        s, f, n = line.split()
        c[(s, f)] = int(n)
    for cname, py in STRUCTS.items():
        assert ctypes.sizeof(py) == c[(cname, "sizeof")], cname
        for field, _ in py._fields_:
            assert getattr(py, field).offset == c[(cname, field)], f"{cname}.{field}"
    # and no field of the C struct is missing here: the sizes would differ, except for trailing padding


@pytest.mark.skipif(not HEADER.exists(), reason="needs include/rssm.h")
def test_enums_match_the_header():
    text = HEADER.read_text()
    for table, prefix in ((_lib.GATE_KINDS, "RSSM_GATE_"), (_lib.DTYPES, "RSSM_DTYPE_")):
        for name, value in table.items():
            cname = prefix + {"fp32": "F32", "fp16": "F16", "bf16": "BF16"}.get(name, name.upper())
            assert re.search(rf"\b{cname} = {value}\b", text), cname
    for name, value in _lib.GATE_MODES.items():
        assert re.search(rf"\bRSSM_GATE_{name.upper()} = {value}\b", text), name


def test_version_is_the_libraries():
    assert rssm.__version__ == _lib.version_string()
    if HEADER.exists():
        parts = [re.search(rf"#define RSSM_VERSION_{p} (\d+)", HEADER.read_text()).group(1)
                 for p in ("MAJOR", "MINOR", "PATCH")]
        assert rssm.__version__ == ".".join(parts)


def test_status_names_come_from_rssm():
    assert _lib.status_name(1) == "invalid argument"
    assert _lib.lib().rssm_dtype_name(2).decode() == "bf16"
