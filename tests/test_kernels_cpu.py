"""The kernel build, checked without a GPU: declarations match the PTX, and ptxas reports no spills."""

import ctypes
import importlib
import random
from pathlib import Path

import pytest
from support import SM90A_MODULES, built_entries, load_script

from gpumat.runtime import kernels

for _module in ("matmul", "transpose", "dot", "sparse", "spmm", "convert", "outofcore"):
    try:
        importlib.import_module(f"gpumat.{_module}")
    except ModuleNotFoundError:
        pass


def build_ptx():
    """build_ptx.py, loaded as a module."""
    return load_script("build_ptx.py", "build_ptx_under_test")


@pytest.fixture(scope="module")
def manifest():
    """The built kernels' manifest; the tests that read it skip, with the reason, when there is none."""
    try:
        return kernels.manifest()
    except FileNotFoundError:
        pytest.skip("the kernels are not built (no manifest.json): `make kernels` builds them")


@pytest.fixture(scope="module")
def entries(manifest):
    return {name: (module, info) for module, found in built_entries().items() for name, info in found.items()}


def compiler(manifest) -> str:
    return f"nvcc {manifest.get('nvcc', manifest['cuda_version'])}"


def module_archs(manifest, module: str) -> list[str]:
    """The archs a module has machine code for: its own list (an arch-specific module), else the build's."""
    return manifest["modules"][module].get("archs", manifest["archs"])


def test_every_declared_kernel_exists_with_the_same_parameter_types(manifest, entries):
    assert kernels.DECLARED, "no kernels declared"
    skipped = manifest.get("skipped", {})
    for name, kernel in kernels.DECLARED.items():
        if kernel.module in skipped:
            assert not any(m == kernel.module for m, _ in entries.values()), kernel.module
            continue  # an arch-specific module this build left out (ARCHS without its base arch)
        assert name in entries, f"{name} is declared in Python but no fatbin exports it"
        module, info = entries[name]
        assert module == kernel.module, f"{name} lives in {module}.cu, declared as {kernel.module}"
        expected = [kernels.PTX_TYPES[c] for c in kernel.signature]
        actual = [
            t.replace("s32", "u32").replace("b32", "u32").replace("b64", "u64").replace("s64", "u64")
            for t in info["params"]
        ]
        assert actual == expected, f"{name}: PTX takes {info['params']}, Python packs {kernel.signature}"


def test_every_exported_kernel_is_used(entries):
    unused = set(entries) - set(kernels.DECLARED)
    assert not unused, f"kernels built but never declared in Python: {sorted(unused)}"


def test_the_kernels_launched_dependent_are_the_ones_whose_code_waits_for_the_grid_before(manifest, entries):
    """A kernel declared waits_for_previous (queued on sm_90 as a programmatic dependent of the launch before
    it) waits in its sm_90 code for the grid before it (griddepcontrol.wait, which build_ptx.py finds in the
    PTX), and a kernel whose code waits is declared so: launched dependent without the wait, a kernel could
    read its operands before the grid writing them had finished."""
    reported = {n: info["follows_previous_grid"] for n, (_, info) in entries.items() if "follows_previous_grid" in info}
    if not reported:
        pytest.skip(f"kernels were built without an sm_90 arch (ARCHS={' '.join(manifest['archs'])})")
    declared = {name: k.waits_for_previous for name, k in kernels.DECLARED.items() if name in reported}
    assert declared == {name: reported[name] for name in declared}
    assert set(declared) == set(reported)
    # every product family, split-K's reductions, the copies, conversions and dot; not the sparse kernels
    waiting = {kernels.DECLARED[name].module for name, waits in declared.items() if waits}
    assert waiting >= {"matmul_splitk", "matmul", "matmul_dmma", "matmul_small", "transpose", "convert", "dot"}, waiting
    assert not waiting & {"spmm", "ozaki"}, waiting


def test_no_spills_or_stack_on_sm90(manifest, entries):
    if "90" not in manifest["archs"]:
        pytest.skip(f"kernels were built without sm_90 (ARCHS={' '.join(manifest['archs'])})")
    hopper = {
        name: next(info["resources"][k] for k in ("sm_90", "sm_90a") if k in info["resources"])
        for name, (module, info) in entries.items()
    }
    spills = {name: r for name, r in hopper.items() if r["spill_stores"] or r["spill_loads"] or r["stack"]}
    # known and bounded (the most of stack, spill stores and spill loads): the 128-register dmma64x128 tile's
    # copy of its loop with a non-identity epilogue spills 24 bytes (the plain product's loop, the one every
    # call without an epilogue runs, does not). The TF32 kernels at their register caps (tf32x3 at 255 for
    # its two accumulator sets, the 2-stage kernel at 128 for two blocks an SM) spill too: hidden until the
    # build read a device function's frame as its caller's, there when their rates were measured, and not
    # removed by one loop or two or by inlining the exact FP32 fallback
    known = {
        "matmul_dmma64x128k16_f64": 24,
        "matmul_tf32_splitsmem_2stage_128x128_f32": 584,
        "matmul_tf32x3_128x128_f32": 32,
        "matmul_tf32x3_splitsmem_128x128_f32": 44,
    }
    spills = {
        name: r
        for name, r in spills.items()
        if not (name in known and max(r["spill_stores"], r["spill_loads"], r["stack"]) <= known[name])
    }
    assert not spills, f"built with {compiler(manifest)}, these kernels spill on sm_90: {spills}"
    for name, r in hopper.items():
        assert r["registers"] > 0, name


def test_fatbins_hold_machine_code_for_every_listed_arch(manifest):
    report = built_entries()
    assert set(report) == set(manifest["modules"]), "the build's report and its manifest list other modules"
    for module, found in report.items():
        for name, info in found.items():
            assert set(info["resources"]) == {f"sm_{a}" for a in module_archs(manifest, module)}, (module, name)


def test_arch_specific_modules_are_built_for_their_arch_alone_or_skipped(manifest):
    """The two modules of the wgmma kernel (cuda/matmul_wgmma_half.cu: 16-bit inputs; matmul_wgmma_kmajor.cu:
    TF32, int8, FP8) declare sm_90a: built (machine code for sm_90a alone) when ARCHS has 90, otherwise
    listed as skipped, and then Python never picks their kernels."""
    from gpumat.matmul.engine import VARIANTS, Problem, Target, built_modules, plan, unavailable

    cuda = Path(__file__).resolve().parents[1] / "cuda"
    declared = {cu.stem for cu in cuda.glob("*.cu") if cu.read_text().startswith("// gpumat-archs: 90a\n")}
    assert declared == SM90A_MODULES
    hopper = Target(90, 132, 227 * 1024, built_modules())
    for module, row in (("matmul_wgmma_half", "wgmma128x256"), ("matmul_wgmma_kmajor", "tf32_wgmma128x256bt")):
        wgmma = VARIANTS[row]
        assert {k.module for k in wgmma.kernels.values()} == {module}
        if "90" in manifest["archs"]:
            assert module_archs(manifest, module) == ["90a"]
            assert module in built_modules() and unavailable(wgmma, hopper) is None
        else:
            assert module in manifest["skipped"] and module not in manifest["modules"]
            assert module not in built_modules() and unavailable(wgmma, hopper) is not None
    if "90" not in manifest["archs"]:
        assert plan(Problem(4096, 4096, 4096, "f16", "f16", "native"), hopper).algorithm == "mma128x128"


def test_code_arch_prefers_machine_code(manifest):
    archs = [int(a) for a in manifest["archs"]]
    for arch in archs:
        assert kernels.code_arch(arch) == f"sm_{arch}"
    assert "PTX" in kernels.code_arch(min(archs) - 5) or min(archs) % 10 != 0


def test_a_gpu_of_a_minor_left_out_runs_its_major_s_machine_code(monkeypatch):
    """The default build has no sm_86 or sm_89 code: those GPUs run sm_80's (a cubin runs on every later minor
    of its major), sm_75 and older-than-built GPUs what they can, a newer major the PTX."""
    default = build_ptx().DEFAULT_ARCHS.split()
    assert default == ["75", "80", "90", "100", "120"]
    monkeypatch.setattr(kernels, "manifest", lambda: {"archs": default})
    assert [kernels.code_arch(a) for a in (80, 86, 87, 89)] == ["sm_80"] * 4
    assert [kernels.code_arch(a) for a in (90, 100, 103, 120, 121)] == ["sm_90", "sm_100", "sm_100", "sm_120", "sm_120"]
    assert kernels.code_arch(130) == "compute_75 PTX (JIT)"


def test_tensor_map_parameters_are_packed_on_64_bytes():
    k = kernels.Kernel.__new__(kernels.Kernel)
    kernels.Kernel.__init__(k, "test", "test_packing_probe_tma", "TTPiiiqi")
    try:
        k._lay_out()  # what the first launch does
        base = k._ptrs[0]
        assert base % 64 == 0
        assert [p - base for p in k._ptrs] == [0, 128, 256, 264, 268, 272, 280, 288]
        k._pack(k._buf, k._base, bytes(range(128)), bytes(128), 1, 2, 3, 4, 5, 6)
        assert k._buf.raw[k._base : k._base + 128] == bytes(range(128))
    finally:
        del kernels.DECLARED["test_packing_probe_tma"]


def test_signature_packing_offsets_follow_c_alignment():
    k = kernels.Kernel.__new__(kernels.Kernel)
    kernels.Kernel.__init__(k, "test", "test_packing_probe", "PiqfiP")
    try:
        k._lay_out()
        base = k._ptrs[0]
        assert [p - base for p in k._ptrs] == [0, 8, 16, 24, 28, 32]
    finally:
        del kernels.DECLARED["test_packing_probe"]


def _packed(ptrs, size_of_last: int) -> bytes:
    """The bytes of a parameter list as the driver reads them: from the first parameter's address to the
    end of the last."""
    return ctypes.string_at(ptrs[0], ptrs[len(ptrs) - 1] + size_of_last - ptrs[0])


def _value(code: str, rng: random.Random):
    return {"P": rng.getrandbits(64), "q": rng.getrandbits(63), "i": rng.getrandbits(31), "f": rng.random()}.get(
        code, rng.random() if code == "d" else rng.randbytes(128)
    )


def test_a_fixed_launch_packs_what_the_kernel_call_packs():
    """For every declared kernel and every split of its parameters into leading ones (packed each call)
    and a fixed tail (packed once), a FixedLaunch hands the driver the same parameter bytes as a Kernel
    call with all the arguments, and packs the leading ones at the same offsets."""
    rng = random.Random(7)
    for kernel in list(kernels.DECLARED.values()):
        sig = kernel.signature
        last = kernels.struct.calcsize("=" + kernels._FORMATS[sig[-1]][0])
        for leading in sorted({0, len(sig), *rng.sample(range(len(sig) + 1), min(3, len(sig) + 1))}):
            args = [_value(c, rng) for c in sig]
            pack = kernel._pack or kernel._lay_out()
            pack(kernel._buf, kernel._base, *args)
            want = _packed(kernel._ptrs, last)
            fixed = kernels.FixedLaunch(kernel, (1, 1, 1), (32, 1, 1), 0, leading, args[leading:])
            fixed._pack(fixed._buf, fixed._base, *args[:leading])
            assert _packed(fixed._ptrs, last) == want, (kernel.name, leading)
            assert fixed.tail == tuple(args[leading:])
    with pytest.raises(ValueError, match="arguments"):
        kernels.FixedLaunch(kernel, (1, 1, 1), (32, 1, 1), 0, 1, ())


def test_arch_marker_and_struct_parameters_are_parsed():
    """build_ptx.py: a module's `// gpumat-archs:` line picks its targets from ARCHS; a by-value struct
    parameter reads as b8[size]."""
    build = build_ptx()
    marked = "// gpumat-archs: 90a\n// float16 ...\n"
    assert build.module_archs(marked, ["80", "90", "100"]) == (["90a"], True)
    assert build.module_archs(marked, ["80", "86"]) == ([], True)
    assert build.module_archs("// no marker\n", ["80", "90"]) == (["80", "90"], False)
    assert build.gencode_flags(["90a"], ptx=False) == ["-gencode=arch=compute_90a,code=sm_90a"]
    ptx = (
        ".visible .entry k(\n\t.param .align 64 .b8 k_param_0[128],\n\t.param .u64 k_param_1,\n"
        "\t.param .u32 k_param_2\n)\n"
    )
    assert build.parse_entries(ptx) == {"k": ["b8[128]", "u64", "u32"]}


def test_ptxas_frames_of_device_functions_are_not_their_callers():
    """build_ptx.py's reading of `ptxas -v`: an entry's spills are its own frame line, and the frame of a
    __noinline__ device function reported after it (zeros, here) does not overwrite them."""
    build = build_ptx()
    report = """ptxas info    : Compiling entry function 'kernel_a' for 'sm_90'
ptxas info    : Function properties for kernel_a
    96 bytes stack frame, 156 bytes spill stores, 584 bytes spill loads
ptxas info    : Used 128 registers, used 1 barriers, 96 bytes cumulative stack size
ptxas info    : Function properties for _ZN6helperEv
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function 'kernel_b' for 'sm_90'
ptxas info    : Function properties for kernel_b
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 8192 bytes smem
"""
    got = build.parse_ptxas(report)
    assert got["kernel_a"]["sm_90"] == {
        "registers": 128,
        "smem": 0,
        "stack": 96,
        "spill_stores": 156,
        "spill_loads": 584,
    }
    assert got["kernel_b"]["sm_90"] == {"registers": 40, "smem": 8192, "stack": 0, "spill_stores": 0, "spill_loads": 0}


def test_a_module_rebuilds_for_the_headers_it_includes_alone(tmp_path):
    """build_ptx.py's key of a module covers its own source and the project headers it includes, directly
    or through another header: the wgmma modules' header is theirs alone, gpumat.cuh every module's that
    includes it; a header edit changes the keys of its includers and no other."""
    build = build_ptx()
    cuda = build.SRC_DIR
    names = {cu.stem: [h.name for h in build.included_headers(cu)] for cu in cuda.glob("*.cu")}
    for module in SM90A_MODULES:
        assert names[module] == ["gpumat.cuh", "matmul_wgmma.cuh"], module
    assert names["transpose"] == ["gpumat.cuh"] and names["dot"] == ["gpumat.cuh"]
    assert all("matmul_wgmma.cuh" not in hs for m, hs in names.items() if m not in SM90A_MODULES)
    # the header reached through another: a scratch tree with a.cu -> outer.cuh -> inner.cuh
    scratch = tmp_path
    (scratch / "inner.cuh").write_text("// inner\n")
    (scratch / "outer.cuh").write_text('#include "inner.cuh"\n#include <stdint.h>\n')
    (scratch / "a.cu").write_text('#include "outer.cuh"\n')
    (scratch / "b.cu").write_text("// no project header\n")
    build.SRC_DIR = scratch
    before = {cu: build.source_key(scratch / cu, ["90"], "13.0") for cu in ("a.cu", "b.cu")}
    assert [h.name for h in build.included_headers(scratch / "a.cu")] == ["inner.cuh", "outer.cuh"]
    (scratch / "inner.cuh").write_text("// inner, edited\n")
    after = {cu: build.source_key(scratch / cu, ["90"], "13.0") for cu in ("a.cu", "b.cu")}
    assert after["a.cu"] != before["a.cu"] and after["b.cu"] == before["b.cu"]


def test_a_pair_row_launches_clusters_of_two_blocks(monkeypatch):
    """A pair row's plan (a 16-bit wgmma tile launched as clusters of two blocks) goes out through
    cuLaunchKernelEx with the cluster-dimension attribute (2, 1, 1), from the cached plan's FixedLaunch and
    from a plain Kernel call alike, on an even grid; a single row's plan through cuLaunchKernel."""
    pytest.importorskip("cuda.bindings.driver")
    from gpumat.matmul.engine import VARIANTS
    from gpumat.runtime.bindings import driver

    calls = []
    monkeypatch.setattr(driver, "cuLaunchKernelEx", lambda config, fn, params, extra: calls.append(config) or (0,))
    monkeypatch.setattr(driver, "cuLaunchKernel", lambda fn, *rest: calls.append(rest) or (0,))

    class Stand:
        arch = 90
        functions = {k.name: 0xF00D for v in VARIANTS.values() for k in v.kernels.values()}

    pair, single = VARIANTS["wgmma128x256pair"], VARIANTS["wgmma128x256"]
    kernel = pair.kernels[("bf16", "bf16")]
    assert kernel is single.kernels[("bf16", "bf16")]  # the same entry point, launched another way
    grid = pair.grid(1000, 1000, 1, 132, 24)
    assert grid == (132, 1, 1) and single.grid(1000, 1000, 1, 132, 24) == (132, 1, 1)
    assert pair.grid(128, 256, 1, 132) == (2, 1, 1)  # one work item: a pair, its second row tile empty
    args = (bytes(128),) * 3 + (0x7F0000000000, 1000, 1000, 1000, 1000, 1000, 1, 24, 10**6, 3)
    # (not as programmatic dependents, which the kernel's declaration would make them: the cluster alone here)
    tail = (1.0, 0.0, 0, 0, 0, 0, 0)
    fixed = kernels.FixedLaunch(kernel, grid, pair.block, pair.smem, len(args), tail, 2, dependent=False)
    fixed(Stand(), 5, *args)
    not_dependent = {"stream": 6, "device": Stand(), "dependent": False}
    kernel(grid, pair.block, *args, *tail, smem=pair.smem, cluster=2, **not_dependent)
    kernel(grid, single.block, *args, *tail, smem=single.smem, **not_dependent)
    (first, second, plain) = calls
    for config, stream in ((first, 5), (second, 6)):
        assert (config.gridDimX, config.blockDimX, config.sharedMemBytes) == (132, 384, pair.smem)
        assert int(config.hStream) == stream and config.numAttrs == 1
        attribute = config.attrs[0]
        assert attribute.id == driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        dims = attribute.value.clusterDim
        assert (dims.x, dims.y, dims.z) == (2, 1, 1)
    assert isinstance(plain, tuple) and plain[:3] == (132, 1, 1)


def test_a_dependent_launch_asks_for_programmatic_serialization_on_sm90_and_later(monkeypatch):
    """Kernel(..., dependent=True) (split-K's reduction after its product): on sm_90 one cuLaunchKernelEx with
    the programmatic-stream-serialization attribute, its configuration made once per geometry and given the
    call's stream; before sm_90 a plain cuLaunchKernel. (cuda.bindings builds the configuration without a GPU.)"""
    pytest.importorskip("cuda.bindings.driver")
    from gpumat.matmul.engine import IDENTITY, REDUCE
    from gpumat.runtime.bindings import driver

    reduce = REDUCE[("f32", "f32")]
    calls = []

    def launch_ex(config, fn, params, extra):
        calls.append(("ex", config, fn))
        return (0,)

    def launch(fn, *rest):
        calls.append(("plain", rest, fn))
        return (0,)

    monkeypatch.setattr(driver, "cuLaunchKernelEx", launch_ex)
    monkeypatch.setattr(driver, "cuLaunchKernel", launch)

    class Stand:
        def __init__(self, arch):
            self.arch, self.functions = arch, {reduce.name: 0xF00D}

    args = (0x7F0000000000, 0x7F1000000000, 64, 64, 64, 4, *IDENTITY)
    hopper = Stand(90)
    for stream in (7, 9):
        reduce((5, 1, 1), (256, 1, 1), *args, stream=stream, device=hopper, dependent=True)
    (kind, first, fn), (kind2, second, _) = calls
    assert kind == kind2 == "ex" and fn == 0xF00D and first is second  # one configuration, reused
    assert (first.gridDimX, first.gridDimY, first.gridDimZ, first.blockDimX, first.sharedMemBytes) == (5, 1, 1, 256, 0)
    assert int(first.hStream) == 9 and first.numAttrs == 1
    attribute = first.attrs[0]
    assert attribute.id == driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    assert attribute.value.programmaticStreamSerializationAllowed == 1
    calls.clear()
    reduce((5, 1, 1), (256, 1, 1), *args, stream=7, device=Stand(80), dependent=True)
    reduce((5, 1, 1), (256, 1, 1), *args, stream=7, device=hopper, dependent=False)  # asked plain
    assert [c[0] for c in calls] == ["plain", "plain"]
    reduce((5, 1, 1), (256, 1, 1), *args, stream=7, device=hopper)  # by default as the kernel is declared
    assert calls[-1][0] == "ex"
    # a FixedLaunch (a cached plan's) decides the same way at each launch, from the device it is given
    calls.clear()
    fixed = kernels.FixedLaunch(reduce, (5, 1, 1), (256, 1, 1), 0, 2, args[2:], dependent=True)
    fixed(hopper, 9, *args[:2])
    fixed(Stand(80), 9, *args[:2])
    assert [c[0] for c in calls] == ["ex", "plain"]
    assert calls[0][1].attrs[0].id == driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    assert int(calls[0][1].hStream) == 9 and calls[0][1].numAttrs == 1
    # a GPU that runs older PTX compiled on the fly (an sm_11x GPU, a build without sm_90) has no wait in
    # the reduction: a plain launch
    monkeypatch.setattr(kernels, "manifest", lambda: {"archs": ["75", "80", "90"]})
    kernels.runs_sm90_code.cache_clear()
    try:
        assert [kernels.runs_sm90_code(a) for a in (80, 90, 100, 110)] == [False, True, False, False]
        calls.clear()
        reduce((5, 1, 1), (256, 1, 1), *args, stream=7, device=Stand(110), dependent=True)
        assert [c[0] for c in calls] == ["plain"]
    finally:
        kernels.runs_sm90_code.cache_clear()
    # only a kernel that waits for the one before it may be launched dependent
    sparse = next(k for k in kernels.DECLARED.values() if k.module == "spmm")
    assert reduce.waits_for_previous and not sparse.waits_for_previous
    with pytest.raises(ValueError, match="does not wait"):
        sparse((1, 1, 1), (128, 1, 1), stream=7, device=hopper, dependent=True)
