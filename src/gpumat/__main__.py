"""`python -m gpumat info | demo | bench <op>`: the command-line face of gpumat."""

from __future__ import annotations

import argparse
import importlib
import sys

from .runtime.errors import NoDeviceError

BENCHES = ("matmul", "gemm", "transpose", "dot", "spmm", "transfers", "latency", "outofcore", "multigpu", "dask")
LONG_BENCHES = ("sweep", "bmm", "emulated", "int8", "fp8")  # named only: not part of `bench all`
ALL_DTYPES_BENCHES = ("bmm",)  # the benches that take --dtype all (each dtype in turn)


def cmd_info(args) -> int:
    import gpumat as gm

    from .runtime import kernels as _kernels

    dev = gm.device()
    print(f"device        {dev.name}")
    print(
        f"compute cap.  {dev.compute_capability[0]}.{dev.compute_capability[1]}  ({dev.sm_count} SMs, "
        f"L2 {dev.l2_bytes / 2**20:.0f} MiB, {dev.max_smem_optin // 1024} KiB shared memory per block)"
    )
    print(f"memory        {dev.total_memory / 2**30:.1f} GiB")
    print(
        f"driver        CUDA {dev.driver_version_str}; kernels built with CUDA {_kernels.manifest()['cuda_version']} "
        f"for sm_{', sm_'.join(_kernels.manifest()['archs'])}"
    )
    print(f"running code  {_kernels.code_arch(dev.arch)}")
    _import_operations()
    failed = 0
    for name, kernel in sorted(_kernels.DECLARED.items()):
        try:
            kernel.function()
            status = "loaded"
        except Exception as exc:  # report every kernel, then fail once at the end
            status, failed = f"FAILED: {exc}", failed + 1
        print(f"  {kernel.module:>10}.{name:<32} {status}")
    return 1 if failed else 0


def _import_operations() -> None:
    """Import every operation module so each kernel it declares is registered."""
    for module in ("matmul", "transpose", "dot", "sparse", "spmm", "convert", "outofcore"):
        try:
            importlib.import_module(f"gpumat.{module}")
        except ModuleNotFoundError:
            pass


def cmd_demo(args) -> int:
    from ._demo import run_demos

    return run_demos()


def cmd_bench(args) -> int:
    from .runtime.devices import device

    device()  # the GPU first: the anchors (CuPy) would otherwise fail on their own, less clearly
    ops = BENCHES if args.op == "all" else (args.op,)
    for op in ops:
        module = importlib.import_module(f"gpumat._bench.{op}")
        module.run(args)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpumat", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="the GPU, the driver and which kernels load").set_defaults(fn=cmd_info)
    sub.add_parser("demo", help="the documents' worked examples, checked against numpy").set_defaults(fn=cmd_demo)
    bench = sub.add_parser("bench", help="each variant against NVIDIA's libraries, same process, same inputs")
    bench.add_argument(
        "op",
        choices=(*BENCHES, *LONG_BENCHES, "all"),
        help="one bench, or all of them but the long ones (sweep: matmul shapes against cuBLAS; bmm: batched "
        "products against torch.bmm; emulated: precision fp64_int8 and fp32_int8 against cuBLAS DGEMM and SGEMM, "
        "with accuracy; int8: int8 products against torch._int_mm; fp8: FP8 products against torch._scaled_mm), "
        "which run only by name",
    )
    bench.add_argument("--quick", action="store_true", help="fewer sizes and repeats (a smoke run)")
    bench.add_argument(
        "--precision",
        nargs="?",
        const=True,
        default=False,
        choices=(True, "float32", "tf32x3", "tf32"),
        help="matmul: the tensor-core precisions (tf32x3, tf32) against cuBLAS FP32 and TF32, with accuracy; "
        "sweep, bmm: the float32 mode to run (float32, tf32x3 or tf32)",
    )
    bench.add_argument(
        "--dtype",
        choices=("float32", "float64", "float16", "bfloat16", "all"),
        default="float32",
        help="matmul: another dtype against cuBLAS in that dtype (CuPy; PyTorch for bfloat16); sweep, bmm: the "
        "dtype to run; bmm also takes all (float16, bfloat16, float32, float32 at tf32, float64 in turn, a JSON each)",
    )
    bench.add_argument(
        "--classes",
        action="append",
        help="sweep: a shape class to run (repeat it for more: --classes square --classes 'few tokens'), written "
        "as a part, not the file the docs read",
    )
    bench.set_defaults(fn=cmd_bench)
    args = parser.parse_args(argv)
    if getattr(args, "classes", None) and args.op != "sweep":
        bench.error("--classes is for bench sweep")
    if getattr(args, "dtype", None) == "all" and args.op not in ALL_DTYPES_BENCHES:
        bench.error(f"--dtype all is for bench {', '.join(ALL_DTYPES_BENCHES)}; give bench {args.op} one dtype")
    try:
        return args.fn(args)
    except NoDeviceError as exc:
        print(f"gpumat: no usable NVIDIA GPU: {exc.message}", file=sys.stderr)
        return 2
    except FileNotFoundError as exc:
        print(f"gpumat: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
