"""The kernel build, checked without a GPU: declarations match the PTX, and ptxas reports no spills."""
import importlib

import pytest

from gpumat import _kernels

for _module in ("matmul", "transpose", "dot", "sparse", "spmm", "convert", "outofcore"):
    try:
        importlib.import_module(f"gpumat.{_module}")
    except ModuleNotFoundError:
        pass


@pytest.fixture(scope="module")
def manifest():
    """The built kernels' manifest; the tests that read it skip, with the reason, when there is none."""
    try:
        return _kernels.manifest()
    except FileNotFoundError:
        pytest.skip("the kernels are not built (no manifest.json): `make kernels` builds them")


@pytest.fixture(scope="module")
def entries(manifest):
    return {name: (module, info) for module, m in manifest["modules"].items() for name, info in m["entries"].items()}


def compiler(manifest) -> str:
    return f"nvcc {manifest.get('nvcc', manifest['cuda_version'])}"


def test_every_declared_kernel_exists_with_the_same_parameter_types(entries):
    assert _kernels.DECLARED, "no kernels declared"
    for name, kernel in _kernels.DECLARED.items():
        assert name in entries, f"{name} is declared in Python but no fatbin exports it"
        module, info = entries[name]
        assert module == kernel.module, f"{name} lives in {module}.cu, declared as {kernel.module}"
        expected = [_kernels.PTX_TYPES[c] for c in kernel.signature]
        actual = [t.replace("s32", "u32").replace("b32", "u32").replace("b64", "u64").replace("s64", "u64")
                  for t in info["params"]]
        assert actual == expected, f"{name}: PTX takes {info['params']}, Python packs {kernel.signature}"


def test_every_exported_kernel_is_used(entries):
    unused = set(entries) - set(_kernels.DECLARED)
    assert not unused, f"kernels built but never declared in Python: {sorted(unused)}"


def test_no_spills_or_stack_on_sm90(manifest, entries):
    if "90" not in manifest["archs"]:
        pytest.skip(f"kernels were built without sm_90 (ARCHS={' '.join(manifest['archs'])})")
    spills = {name: info["resources"]["sm_90"] for name, (module, info) in entries.items()
              if info["resources"]["sm_90"]["spill_stores"] or info["resources"]["sm_90"]["spill_loads"]}
    assert not spills, f"built with {compiler(manifest)}, these kernels spill on sm_90: {spills}"
    for name, (module, info) in entries.items():
        assert info["resources"]["sm_90"]["registers"] > 0, name


def test_fatbins_hold_machine_code_for_every_listed_arch(manifest):
    for module, m in manifest["modules"].items():
        for name, info in m["entries"].items():
            assert set(info["resources"]) == {f"sm_{a}" for a in manifest["archs"]}, (module, name)


def test_code_arch_prefers_machine_code(manifest):
    archs = [int(a) for a in manifest["archs"]]
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
