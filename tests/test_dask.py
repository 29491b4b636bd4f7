"""gpumat.dask: dask.array products with each block product on a worker's GPU (skipped without dask)."""

from __future__ import annotations

import numpy as np
import pytest

da = pytest.importorskip("dask.array")

from support import product_error  # noqa: E402

import gpumat as gm  # noqa: E402
from gpumat import dask as gmd  # noqa: E402


def host_product(x, y):
    return x.astype(np.float64) @ y.astype(np.float64)


@pytest.mark.parametrize("chunks", [((5, 7), (7, 3)), ((13, 4), (6, 9)), ((40, 40), (40, 40))])
def test_the_graph_multiplies_blocks_and_sums_over_k(monkeypatch, chunks):
    """CPU: the block product replaced by numpy; checks the blockwise layout, the rechunking of b and
    Dask's K reduction."""
    calls = []

    def fake(x, y):
        calls.append((x.shape, y.shape))
        return host_product(x, y).astype(x.dtype)

    monkeypatch.setattr(gmd, "_gpu_product", fake)
    rng = np.random.default_rng(0)
    a, b = rng.uniform(-1, 1, (37, 29)), rng.uniform(-1, 1, (29, 23))
    A, B = da.from_array(a, chunks=chunks[0]), da.from_array(b, chunks=chunks[1])
    C = gmd.matmul(A, B)
    assert C.shape == (37, 23) and C.dtype == a.dtype
    got = C.compute(scheduler="sync")
    np.testing.assert_allclose(got, a @ b, rtol=1e-12, atol=1e-12)
    assert calls and all(xs[1] == ys[0] for xs, ys in calls)  # every block pair shares its K extent
    assert C.compute(scheduler="sync").tobytes() == got.tobytes()


@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_many_k_blocks_through_every_reduction_level(monkeypatch, dtype):
    """CPU: 9 K blocks with split_every=2 go through the combine step (nested lists) before the
    aggregate; float16 partial products are summed in float32 and rounded once at the end."""
    import dask

    monkeypatch.setattr(
        gmd,
        "_gpu_product",
        lambda x, y: (x.astype(np.float64) @ y.astype(np.float64)).astype(np.float32 if dtype == np.float16 else dtype),
    )
    rng = np.random.default_rng(5)
    a, b = rng.uniform(-1, 1, (24, 90)).astype(dtype), rng.uniform(-1, 1, (90, 17)).astype(dtype)
    with dask.config.set(split_every=2):
        C = gmd.matmul(da.from_array(a, chunks=(8, 10)), da.from_array(b, chunks=(10, 9)))
        got = C.compute(scheduler="sync")
        assert C.compute(scheduler="sync").tobytes() == got.tobytes()
    assert got.dtype == dtype
    ref = host_product(a, b)
    if dtype == np.float16:  # one rounding of a float32 sum: half a float16 unit, plus the float32 sums' error
        bound = np.abs(ref) * 2.0**-11 + a.shape[1] * 2.0**-24 * host_product(np.abs(a), np.abs(b))
        assert np.all(np.abs(got.astype(np.float64) - ref) <= bound)
    else:
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)


def test_argument_checks():
    A = da.ones((4, 5), chunks=2)
    with pytest.raises(ValueError, match="not aligned"):
        gmd.matmul(A, da.ones((4, 5), chunks=2))
    with pytest.raises(TypeError, match="mix dtypes"):
        gmd.matmul(A, da.ones((5, 3), chunks=2, dtype=np.float32))
    with pytest.raises(ValueError, match="2-D"):
        gmd.matmul(da.ones(4, chunks=2), A)


def test_workers_are_bound_to_gpus_by_name(monkeypatch):
    distributed = pytest.importorskip("distributed")
    import gpumat.runtime.devices as drv

    monkeypatch.setattr(drv, "device_count", lambda: 2)
    with (
        distributed.LocalCluster(n_workers=3, threads_per_worker=1, processes=False, dashboard_address=None) as cluster,
        distributed.Client(cluster) as client,
    ):
        workers = client.scheduler_info()["workers"]
        seen = {
            info["name"]: client.submit(gmd._worker_device, workers=[address], pure=False).result()
            for address, info in workers.items()
        }
    assert seen == {0: 0, 1: 1, 2: 0}  # workers 0, 1, 2 on GPUs 0, 1, 0
    assert gmd._worker_device() is None  # outside a worker: the current GPU


@pytest.mark.gpu
def test_on_the_gpu_with_a_local_cluster():
    distributed = pytest.importorskip("distributed")
    rng = np.random.default_rng(1)
    a, b = rng.uniform(-1, 1, (700, 500)).astype(np.float32), rng.uniform(-1, 1, (500, 300)).astype(np.float32)
    with (
        distributed.LocalCluster(
            n_workers=gm.device_count(), threads_per_worker=1, processes=False, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster),
    ):
        got = gmd.matmul(da.from_array(a, chunks=(256, 128)), da.from_array(b, chunks=(128, 128))).compute()
    assert product_error(got, a, b) < 1e-5
