"""What the extension module exports (python/src/module.map): Python's entry point and the plug-in allocators' C
entry points, nothing else. With every C++ symbol exported, a toolchain that links libstdc++ statically (the lent
GPU machines' GCC) gave the system libstdc++ torch loads later copies to bind to: `import pvmm; import torch`
died of SIGSEGV."""

from __future__ import annotations

import shutil
import subprocess

import pytest

import pvmm
from pvmm import _pvmm

EXPECTED = {"PyInit__pvmm", "pvmm_torch_alloc", "pvmm_torch_free", "pvmm_cupy_malloc", "pvmm_cupy_free"}


def defined_dynamic_symbols(path: str) -> set[str]:
    out = subprocess.run(["nm", "-D", "--defined-only", path], check=True, capture_output=True, text=True).stdout
    return {line.split()[-1] for line in out.splitlines() if len(line.split()) == 3}


def test_the_module_exports_its_entry_point_and_the_allocators_c_entry_points_only() -> None:
    if shutil.which("nm") is None:
        pytest.fail("nm (binutils) is not installed: tools/setup.sh installs it")
    exported = defined_dynamic_symbols(str(_pvmm.__file__))
    assert exported == EXPECTED, ("extra", sorted(exported - EXPECTED)[:20], "missing", sorted(EXPECTED - exported))
    assert pvmm.BACKEND  # the module loaded
