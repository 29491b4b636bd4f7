"""The kernel build, checked without a GPU: declarations match the PTX, and ptxas reports no spills."""
import importlib

import pytest

from gpumat import _kernels

for _module in ("matmul", "transpose", "dot", "sparse", "convert"):
    try:
        importlib.import_module(f"gpumat.{_module}")
    except ModuleNotFoundError:
        pass

MANIFEST = _kernels.manifest()
ENTRIES = {name: (module, info) for module, m in MANIFEST["modules"].items() for name, info in m["entries"].items()}


def test_every_declared_kernel_exists_with_the_same_parameter_types():
    assert _kernels.DECLARED, "no kernels declared"
    for name, kernel in _kernels.DECLARED.items():
        assert name in ENTRIES, f"{name} is declared in Python but no fatbin exports it"
        module, info = ENTRIES[name]
        assert module == kernel.module, f"{name} lives in {module}.cu, declared as {kernel.module}"
        expected = [_kernels.PTX_TYPES[c] for c in kernel.signature]
        actual = [t.replace("s32", "u32").replace("b32", "u32").replace("b64", "u64").replace("s64", "u64")
                  for t in info["params"]]
        assert actual == expected, f"{name}: PTX takes {info['params']}, Python packs {kernel.signature}"


def test_every_exported_kernel_is_used():
    unused = set(ENTRIES) - set(_kernels.DECLARED)
    assert not unused, f"kernels built but never declared in Python: {sorted(unused)}"


@pytest.mark.skipif("90" not in MANIFEST["archs"], reason="kernels were built without sm_90")
def test_no_spills_or_stack_on_sm90():
    for name, (module, info) in ENTRIES.items():
        res = info["resources"]["sm_90"]
        assert res["spill_stores"] == 0 and res["spill_loads"] == 0, f"{name} spills on sm_90: {res}"
        assert res["registers"] > 0


def test_fatbins_hold_machine_code_for_every_listed_arch():
    for module, m in MANIFEST["modules"].items():
        for name, info in m["entries"].items():
            assert set(info["resources"]) == {f"sm_{a}" for a in MANIFEST["archs"]}, (module, name)


def test_code_arch_prefers_machine_code():
    archs = [int(a) for a in MANIFEST["archs"]]
    for arch in archs:
        assert _kernels.code_arch(arch) == f"sm_{arch}"
    assert "PTX" in _kernels.code_arch(min(archs) - 5) or min(archs) % 10 != 0


def test_signature_packing_offsets_follow_c_alignment():
    k = _kernels.Kernel.__new__(_kernels.Kernel)
    _kernels.Kernel.__init__(k, "test", "test_packing_probe", "PiqfiP")
    try:
        base = k._ptrs[0]
        assert [p - base for p in k._ptrs] == [0, 8, 16, 24, 28, 32]
    finally:
        del _kernels.DECLARED["test_packing_probe"]
