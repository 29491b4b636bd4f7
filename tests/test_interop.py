"""Zero-copy exchange with CuPy, PyTorch and JAX: the CUDA array interface and DLPack, both ways."""

from __future__ import annotations

import ctypes
import gc

import numpy as np
import pytest
from support import FAKE_DEVICE, busy, fake_matrix, product_error, random

import gpumat as gm
from gpumat import _interop

gpu = pytest.mark.gpu


# -------------------------------------------------------------------------------------------------
# CPU: the structures, built over fake pointers
# -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["float8_e4m3fn", "float8_e5m2"])
def test_fp8_leaves_with_dlpack_1_1_s_codes_in_the_version_the_consumer_reads(fmt):
    """FP8's codes are DLPack 1.1's: a consumer of 1.1 or newer gets a 1.1 capsule, one asking for 1.0 a 1.0
    capsule with the same codes (PyTorch 2.11 asks for 1.0 and reads them; tests/test_fp8_gpu.py)."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    m = fake_matrix(4, 6, ptr=0x7F0000002000, dtype=np.dtype(getattr(ml_dtypes, fmt)))
    for asked, written in (((1, 3), (1, 1)), ((1, 0), (1, 0))):
        cap = _interop.export_dlpack(m, max_version=asked)
        address = _interop._api.PyCapsule_GetPointer(cap, _interop.NAME_V)
        managed = _interop.DLManagedTensorVersioned.from_address(address)
        assert (managed.version.major, managed.version.minor) == written
        code = (managed.dl_tensor.dtype.code, managed.dl_tensor.dtype.bits)
        assert code == ({"float8_e4m3fn": 10}.get(fmt, 12), 8)
        del cap, managed
        gc.collect()


def test_cuda_array_interface_of_a_packed_and_a_padded_matrix():
    m = fake_matrix(3, 5, ptr=0x7F0000001000)
    cai = _interop.cuda_array_interface(m)
    assert cai["shape"] == (3, 5) and cai["typestr"] == "<f4" and cai["version"] == 3
    assert cai["data"] == (0x7F0000001000, False) and cai["strides"] is None and cai["stream"] == 1
    v = fake_matrix(3, 5, stride=8, ptr=0x7F0000001000)
    assert _interop.cuda_array_interface(v)["strides"] == (32, 4)
    assert _interop.cuda_array_interface(v, stream=0xABC)["stream"] == 0xABC


@pytest.mark.parametrize("versioned", [False, True])
def test_dlpack_capsule_fields(versioned):
    m = fake_matrix(4, 6, stride=9, ptr=0x7F0000002000)
    cap = _interop.export_dlpack(m, max_version=(1, 0) if versioned else None)
    name = _interop.NAME_V if versioned else _interop.NAME
    assert _interop._api.PyCapsule_IsValid(cap, name)
    address = _interop._api.PyCapsule_GetPointer(cap, name)
    managed = (_interop.DLManagedTensorVersioned if versioned else _interop.DLManagedTensor).from_address(address)
    t = managed.dl_tensor
    assert t.data == 0x7F0000002000 and t.device.device_type == _interop.KDL_CUDA and t.device.device_id == 0
    assert t.ndim == 2 and (t.dtype.code, t.dtype.bits, t.dtype.lanes) == (_interop.KDL_FLOAT, 32, 1)
    assert [t.shape[0], t.shape[1]] == [4, 6] and [t.strides[0], t.strides[1]] == [9, 1] and t.byte_offset == 0
    if versioned:
        assert (managed.version.major, managed.version.minor) == (1, 0) and managed.flags == 0
    assert address in _interop._exports
    del cap, managed, t
    gc.collect()
    assert address not in _interop._exports  # an unconsumed capsule releases what it held


@pytest.mark.parametrize("versioned", [False, True])
def test_the_import_s_header_reads_every_field_where_the_ctypes_structures_put_it(versioned):
    """from_dlpack reads a capsule with one struct unpack; export writes it with the ctypes structures: the
    two agree on size and on every field, each given a value of its own (the highest bit of each set, so
    a field read at the wrong width or sign shows)."""
    structure = _interop.DLManagedTensorVersioned if versioned else _interop.DLManagedTensor
    header = _interop.VERSIONED_HEADER if versioned else _interop.UNVERSIONED_HEADER
    assert header.size == ctypes.sizeof(structure)
    managed = structure()
    shape, strides = (ctypes.c_int64 * 3)(7, 11, 13), (ctypes.c_int64 * 3)(143, 13, 1)
    t = managed.dl_tensor
    t.data, t.ndim, t.byte_offset = 0x8123456789ABCDE0, 3, 0x8000000000000040
    t.device = _interop.DLDevice(-2, 0x7FFFFFF1)
    t.dtype = _interop.DLDataType(0x81, 0x82, 0x8003)
    t.shape, t.strides = shape, strides
    managed.manager_ctx = 0x8000000000000CC0
    deleter = _interop.DELETER(lambda address: None)
    managed.deleter = deleter
    tensor = [0x8123456789ABCDE0, -2, 0x7FFFFFF1, 3, 0x81, 0x82, 0x8003, ctypes.addressof(shape)]
    tensor += [ctypes.addressof(strides), 0x8000000000000040]
    deleter_address = ctypes.cast(deleter, ctypes.c_void_p).value
    if versioned:
        managed.version, managed.flags = _interop.DLPackVersion(0x80000001, 0x80000002), 0x8000000000000003
        expected = [0x80000001, 0x80000002, 0x8000000000000CC0, deleter_address, 0x8000000000000003, *tensor]
    else:
        expected = [*tensor, 0x8000000000000CC0, deleter_address]
    raw = (ctypes.c_char * header.size).from_address(ctypes.addressof(managed))
    assert list(header.unpack_from(raw)) == expected
    assert _interop._int64s(ctypes.addressof(shape), 3) == (7, 11, 13)


def test_dlpack_deleter_releases_the_export():
    m = fake_matrix(2, 2, ptr=0x7F0000003000)
    cap = _interop.export_dlpack(m)
    address = _interop._api.PyCapsule_GetPointer(cap, _interop.NAME)
    _interop._api.PyCapsule_SetName(cap, _interop.USED)  # what a consumer does
    managed = _interop.DLManagedTensor.from_address(address)
    assert address in _interop._exports
    managed.deleter(address)  # the consumer is done
    assert address not in _interop._exports


def test_layouts_accepted_without_a_copy():
    L = _interop.Layout
    assert _interop._layout((3, 4), None) == L(None, 3, 4, 4, 0, False)
    assert _interop._layout((3, 4), (10, 1)) == L(None, 3, 4, 10, 0, False)
    assert _interop._layout((5,), (1,)) == L(None, 1, 5, 5, 0, False)
    assert _interop._layout((5,), (2,)) == L(None, 1, 5, 2, 0, True)  # a strided vector: a transposed row
    assert _interop._layout((1, 4), (1, 1)) == L(None, 1, 4, 4, 0, False)
    assert _interop._layout((3, 1), (7, 3)) == L(None, 3, 1, 7, 0, False)
    # column-major (PyTorch's w.t(), Fortran order): a transposed view with the column stride as ld
    assert _interop._layout((3, 4), (1, 3)) == L(None, 3, 4, 3, 0, True)
    assert _interop._layout((3, 4), (1, 8)) == L(None, 3, 4, 8, 0, True)
    assert _interop._layout((3, 4), (8, 2)) is None  # every other column
    assert _interop._layout((3, 4), (-4, 1)) is None  # rows reversed
    # batches: C order, padded, column-major matrices, a shared (stride 0) matrix, overlapping matrices
    assert _interop._layout((2, 3, 4), None) == L(2, 3, 4, 4, 12, False)
    assert _interop._layout((2, 3, 4), (40, 10, 1)) == L(2, 3, 4, 10, 40, False)
    assert _interop._layout((2, 3, 4), (12, 1, 3)) == L(2, 3, 4, 3, 12, True)
    assert _interop._layout((2, 3, 4), (0, 4, 1)) == L(2, 3, 4, 4, 0, False)
    assert _interop._layout((2, 3, 4), (5, 4, 1)) is None
    with pytest.raises(ValueError, match="1-D, 2-D or 3-D"):
        _interop._layout((2, 2, 2, 2), None)


def test_dtype_codes():
    assert _interop.dlpack_dtype(np.dtype(np.float32)) == (_interop.KDL_FLOAT, 32)
    assert _interop.dlpack_dtype(np.dtype(np.float64)) == (_interop.KDL_FLOAT, 64)
    assert _interop.dtype_from_dlpack(_interop.KDL_FLOAT, 16, 1) == np.float16
    # the integers a Matrix holds: int8 and int32, both ways; other widths and unsigned ones refused
    for bits, dt in ((8, np.int8), (32, np.int32)):
        assert _interop.dlpack_dtype(np.dtype(dt)) == (_interop.KDL_INT, bits)
        assert _interop.dtype_from_dlpack(_interop.KDL_INT, bits, 1) == dt
    for code, bits in ((_interop.KDL_INT, 16), (_interop.KDL_INT, 64), (_interop.KDL_UINT, 8)):
        with pytest.raises(TypeError, match="not a gpumat dtype"):
            _interop.dtype_from_dlpack(code, bits, 1)
    with pytest.raises(TypeError):
        _interop.dtype_from_dlpack(_interop.KDL_FLOAT, 32, 4)


def test_exporting_to_another_device_is_refused():
    m = fake_matrix(2, 2)
    with pytest.raises(BufferError):
        _interop.export_dlpack(m, dl_device=(1, 0))  # the CPU


# -------------------------------------------------------------------------------------------------
# GPU: CuPy, PyTorch, JAX
# -------------------------------------------------------------------------------------------------
@gpu
def test_torch_round_trip_is_zero_copy():
    torch = pytest.importorskip("torch")
    t = torch.rand(300, 200, device="cuda")
    m = gm.from_dlpack(t)
    assert m.elements == t.data_ptr() and m.shape == (300, 200) and m.is_borrowed
    back = torch.from_dlpack(m)
    assert back.data_ptr() == t.data_ptr()
    # results are right through the borrowed memory
    a = t.cpu().numpy()
    assert product_error((m @ gm.transpose(m)).to_numpy(), a, a.T) < 1e-5
    # a padded view of a wider tensor: no copy, the stride is kept
    wide = torch.rand(128, 300, device="cuda")
    view = wide[:, 7:207]
    mv = gm.from_dlpack(view)
    assert mv.elements == view.data_ptr() and mv.stride == 300
    assert np.array_equal(mv.to_numpy(), view.cpu().numpy())
    # writes through gpumat land in the tensor
    out = gm.from_dlpack(torch.empty(300, 300, device="cuda"))
    gm.matmul(m, gm.transpose(m), out=out)
    torch.cuda.synchronize()


@gpu
def test_torch_column_major_is_a_view_and_other_layouts_are_refused():
    torch = pytest.importorskip("torch")
    t = torch.rand(60, 40, device="cuda")
    v = gm.from_dlpack(t.T)  # column-major: a transposed view of the same memory
    assert v.is_transposed and v.is_borrowed and v.elements == t.data_ptr()
    assert np.array_equal(v.to_numpy(), t.T.cpu().numpy())
    c = gm.from_dlpack(t.T, copy=True)  # PyTorch's own copy where it flags one, else gpumat's: never t's memory
    assert np.array_equal(c.to_numpy(), t.T.cpu().numpy()) and c.elements != t.data_ptr()
    with pytest.raises(ValueError, match="not one gpumat can view"):
        gm.from_dlpack(t[:, ::2])  # copy=None never copies (issue 24 item 6)
    with pytest.raises(ValueError, match="not one gpumat can view"):
        gm.from_dlpack(t[:, ::2], copy=False)
    for strided in (t[:, ::2], t[::3, ::2], t.T[::2, 1:]):  # copy=True gathers them (issue 24 item 15)
        g = gm.from_dlpack(strided, copy=True)
        assert g.elements != t.data_ptr() and np.array_equal(g.to_numpy(), strided.cpu().numpy())
        g.free()
    with pytest.raises(TypeError, match="not a gpumat dtype"):
        gm.from_dlpack(torch.ones(3, 3, device="cuda", dtype=torch.int16))


@gpu
def test_borrowed_memory_keeps_its_producer_alive():
    torch = pytest.importorskip("torch")
    t = torch.full((256, 256), 3.0, device="cuda")
    m = gm.from_dlpack(t)
    ptr = t.data_ptr()
    del t
    gc.collect()
    filler = [torch.full((256, 256), 9.0, device="cuda") for _ in range(8)]  # would reuse freed memory
    assert all(f.data_ptr() != ptr for f in filler)
    assert (m.to_numpy() == 3.0).all()
    m.free()  # gpumat lets go; the tensor's memory goes back to PyTorch, never to gpumat's pool
    assert m.is_freed
    with pytest.raises(gm.FreedMatrixError):
        m.to_numpy()


@gpu
def test_cupy_both_ways():
    cp = pytest.importorskip("cupy")
    x = cp.random.rand(100, 50, dtype=cp.float32)
    m = gm.Matrix.from_cuda_array(x)
    assert m.elements == x.data.ptr and np.array_equal(m.to_numpy(), cp.asnumpy(x))
    m2 = gm.from_dlpack(x)
    assert m2.elements == x.data.ptr
    a = random((64, 48))
    with gm.Matrix.from_numpy(a) as A:
        y = cp.asarray(A)  # through __cuda_array_interface__
        assert y.data.ptr == A.elements and np.array_equal(cp.asnumpy(y), a)
        z = cp.from_dlpack(A)
        assert z.data.ptr == A.elements and np.array_equal(cp.asnumpy(z), a)
        view = A[2:50, 3:40]
        yv = cp.asarray(view)
        assert yv.data.ptr == view.elements and np.array_equal(cp.asnumpy(yv), a[2:50, 3:40])
        assert gm.asmatrix(x).elements == x.data.ptr


@gpu
def test_cupy_stream_order_is_respected_on_import():
    cp = pytest.importorskip("cupy")
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        x = cp.zeros((4096, 4096), dtype=cp.float32)
        x += 1.0  # queued on s
        m = gm.from_dlpack(x)  # gpumat's legacy stream must wait for s
        total = gm.dot(m, m)
    assert total == 4096 * 4096


@gpu
def test_jax_both_ways():
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    x = jnp.arange(12 * 7, dtype=jnp.float32).reshape(12, 7)
    m = gm.from_dlpack(x)
    assert np.array_equal(m.to_numpy(), np.asarray(x))
    a = random((33, 17))
    with gm.Matrix.from_numpy(a) as A:
        y = jax.dlpack.from_dlpack(A)
        assert np.array_equal(np.asarray(y), a)


@gpu
def test_dlpack_device_and_copy_export():
    torch = pytest.importorskip("torch")
    a = random((20, 30))
    with gm.Matrix.from_numpy(a) as A:
        assert A.__dlpack_device__() == (2, A.device.ordinal)
        cap = A.__dlpack__(copy=True)
        t = torch.from_dlpack(cap)
        assert t.data_ptr() != A.elements and np.array_equal(t.cpu().numpy(), a)
        with pytest.raises(BufferError):
            A.__dlpack__(dl_device=(1, 0))


def _producer(shape, data=0x7F0000000000, dtype_code=2, bits=32, device_type=None):
    """A DLPack producer of a GPU tensor (fake address): its deleter counts how often it is called."""
    shape_array = (ctypes.c_int64 * len(shape))(*shape)
    managed = _interop.DLManagedTensor()
    t = managed.dl_tensor
    t.data, t.ndim, t.shape, t.strides, t.byte_offset = data, len(shape), shape_array, None, 0
    t.device = _interop.DLDevice(_interop.KDL_CUDA if device_type is None else device_type, 0)
    t.dtype = _interop.DLDataType(dtype_code, bits, 1)
    calls = []
    deleter = _interop.DELETER(lambda address: calls.append(address))
    managed.deleter = deleter

    class Producer:
        keep = (shape_array, managed, deleter)  # alive as long as the producer

        def __dlpack_device__(self):
            return _interop.KDL_CUDA, 0

        def __dlpack__(self, stream=None, max_version=None):
            return _interop._api.PyCapsule_New(ctypes.addressof(managed), _interop.NAME, _interop.CAPSULE_DESTRUCTOR())

    return Producer(), calls


@pytest.mark.parametrize(
    "shape, data", [((2, 2, 3, 4), 0x7F0000000000), ((), 0x7F0000000000), ((4, 4), 0x7F0000000002)]
)
def test_a_refused_dlpack_import_hands_the_tensor_back_once(monkeypatch, shape, data):
    """4-D and 0-d tensors and a misaligned address are refused, and the producer's deleter runs exactly
    once (a refusal used to keep the producer's memory forever)."""
    monkeypatch.setattr(_interop, "Device", lambda ordinal: FAKE_DEVICE)
    producer, calls = _producer(shape, data)
    with pytest.raises(ValueError):
        gm.from_dlpack(producer)
    assert len(calls) == 1


def test_empty_arrays_import_whatever_their_strides():
    """CuPy describes a (0, 5) or (5, 0) array with strides (0, 0): an empty matrix, not a refused layout."""
    for shape in ((0, 5), (5, 0)):
        layout = _interop._layout(shape, (0, 0))
        assert layout is not None and layout[1:3] == shape


def test_a_capsule_whose_tensor_is_on_the_host_is_refused(monkeypatch):
    """The producer says CUDA but the tensor inside says CPU (DLPack device type 1): refused, handed back once."""
    monkeypatch.setattr(_interop, "Device", lambda ordinal: FAKE_DEVICE)
    producer, calls = _producer((4, 4), device_type=1)
    with pytest.raises(ValueError, match="device type 1"):
        gm.from_dlpack(producer)
    assert len(calls) == 1


@gpu
@pytest.mark.parametrize("library", ["torch", "cupy"])
def test_a_copying_import_hands_the_source_back_only_after_the_copy_has_run(library):
    """Issue 24 item 1: from_dlpack(x, copy=True) on a busy gpumat stream used to hand x back to its
    producer as soon as the copy was queued; the producer's allocator gave the memory to its next array,
    whose fill ran before the copy, and the copy read that instead."""
    lib = pytest.importorskip(library)
    s = gm.Stream()
    with gm.Matrix.from_numpy(np.random.rand(busy(4096), busy(4096))) as big:
        for _ in range(3):  # tens of milliseconds of float64 work queued ahead of the copy
            gm.matmul(big, big, stream=s).free()
        if library == "torch":
            x = lib.full((1024, 1024), 3.0, device="cuda", dtype=lib.float64)
            lib.cuda.synchronize()
        else:
            x = lib.full((1024, 1024), 3.0, dtype=lib.float64)
            lib.cuda.Device().synchronize()
        copied = gm.from_dlpack(x, copy=True, stream=s)
        del x  # the producer may now reuse the memory: its next array of this size gets it
        if library == "torch":
            filler = [lib.full((1024, 1024), 7.0, device="cuda", dtype=lib.float64) for _ in range(4)]
        else:
            filler = [lib.full((1024, 1024), 7.0, dtype=lib.float64) for _ in range(4)]
        assert (copied.to_numpy(stream=s) == 3.0).all()
        copied.free()
        del filler
    s.close()


@gpu
def test_a_copy_pytorch_makes_when_asked_is_written_before_gpumat_reads_it():
    """Found by the stateful test: gm.from_dlpack(t, copy=True, stream=s) passes copy=True on, and PyTorch
    queues its copy on its own stream after it has ordered s behind that stream, so gpumat read the copy's
    block (values of an earlier product there) before PyTorch had written it. The copy is made on a busy
    PyTorch stream; what gpumat holds, transposed on s, must be t's values."""
    torch = pytest.importorskip("torch")
    side, s = torch.cuda.Stream(), gm.Stream()
    n = busy(4096)
    with torch.cuda.stream(side):
        big = torch.rand(n, n, device="cuda", dtype=torch.float64)
        t = torch.arange(2048 * 2048, device="cuda", dtype=torch.float64).reshape(2048, 2048)
        stale = torch.full((2048, 2048), -7.0, device="cuda", dtype=torch.float64)
        del stale  # its block goes to the next tensor of that size on this stream: the copy
        for _ in range(3):  # tens of milliseconds on the producer's stream ahead of the export
            big @ big
        m = gm.from_dlpack(t, copy=True, stream=s)
    assert m.elements != t.data_ptr()
    transposed = gm.transpose(m, stream=s)
    expected = np.arange(2048 * 2048, dtype=np.float64).reshape(2048, 2048).T
    assert np.array_equal(transposed.to_numpy(stream=s), expected)
    for x in (m, transposed):
        x.free()
    s.close()


@gpu
@pytest.mark.parametrize("copy", [None, True])
def test_a_pytorch_tensor_imports_on_the_per_thread_default_stream(copy):
    """PyTorch's __dlpack__ refuses the per-thread default stream; gpumat asks it for the legacy one, which
    the per-thread stream follows, and the import's values are right on the per-thread stream."""
    torch = pytest.importorskip("torch")
    t = torch.arange(12, device="cuda", dtype=torch.float32).reshape(3, 4)
    m = gm.from_dlpack(t, copy=copy, stream=2)
    assert (m.elements != t.data_ptr()) if copy else (m.is_borrowed and m.elements == t.data_ptr())
    expected = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert np.array_equal(gm.transpose(m, stream=2).to_numpy(stream=2), expected.T)
    m.free()


@gpu
@pytest.mark.parametrize("on", ["gm.Stream", "a PyTorch stream"])
def test_a_freed_import_goes_back_to_its_producer_only_after_the_queued_work_has_run(on):
    """Issue 24 item 2: freeing a borrowed matrix while gpumat work that reads it is still queued used to
    hand the memory back at once: PyTorch's allocator gave it to the next tensor and the kernel read that.
    On a PyTorch stream, the release waits for that stream's mark, recorded after gpumat's work there."""
    torch = pytest.importorskip("torch")
    t = torch.rand(1024, 1024, device="cuda", dtype=torch.float64)
    expected = (t @ t).cpu().numpy()
    s = gm.Stream() if on == "gm.Stream" else torch.cuda.Stream()
    with gm.Matrix.from_numpy(np.random.rand(busy(4096), busy(4096))) as big:
        for _ in range(4):  # tens of milliseconds of queued float64 work ahead of the product
            gm.matmul(big, big, stream=s).free()
        a = gm.from_dlpack(t)
        c = gm.matmul(a, a, stream=s)
        a.free()
        del t
        filler = [torch.full((1024, 1024), 7.0, device="cuda", dtype=torch.float64) for _ in range(4)]
        s.synchronize()
        assert np.allclose(c.to_numpy(), expected, rtol=1e-12, atol=1e-9)
        c.free()
        del filler
    if on == "gm.Stream":
        s.close()


# -------------------------------------------------------------------------------------------------
# negative strides and the copy keyword (issue 43 item 2)
# -------------------------------------------------------------------------------------------------
def _dlpack1_producer(
    shape, strides, data=0x7F0000001000, flags=0, takes_copy=True, refuses=(), refused_streams=(), streams=None
):
    """A DLPack 1.0 producer of a float32 GPU tensor (fake address) with the given strides in elements. It
    records the `copy` each call asked for (`asked`) and, in `streams` when given, the stream; raises
    BufferError for a copy value in `refuses` or a stream in `refused_streams`, and TypeError for the
    keyword when it does not take it; `handed_back` counts its deleter's calls."""
    shape_array = (ctypes.c_int64 * len(shape))(*shape)
    strides_array = (ctypes.c_int64 * len(shape))(*strides)
    managed = _interop.DLManagedTensorVersioned()
    managed.version = _interop.DLPackVersion(1, 0)
    managed.flags = flags
    t = managed.dl_tensor
    t.data, t.ndim, t.shape, t.strides, t.byte_offset = data, len(shape), shape_array, strides_array, 0
    t.device, t.dtype = _interop.DLDevice(_interop.KDL_CUDA, 0), _interop.DLDataType(2, 32, 1)
    asked, handed_back = [], []
    deleter = _interop.DELETER(lambda address: handed_back.append(address))
    managed.deleter = deleter

    class Producer:
        keep = (shape_array, strides_array, managed, deleter)

        def __dlpack_device__(self):
            return _interop.KDL_CUDA, 0

        def __dlpack__(self, stream=None, max_version=None, **copy):
            if copy and not takes_copy:
                raise TypeError("__dlpack__() got an unexpected keyword argument 'copy'")
            asked.append(copy.get("copy", "not passed"))
            if streams is not None:
                streams.append(stream)
            if stream in refused_streams:
                raise BufferError("per-thread default stream is not supported")
            if copy and copy["copy"] in refuses:
                raise BufferError(f"cannot export with copy={copy['copy']}")
            destructor = _interop.CAPSULE_DESTRUCTOR()
            return _interop._api.PyCapsule_New(ctypes.addressof(managed), _interop.NAME_V, destructor)

    return Producer(), asked, handed_back


NEGATIVE_LAYOUTS = [  # (shape, strides in elements) of reversed views of packed arrays
    ((4, 5), (5, -1)),  # x[:, ::-1]
    ((4, 5), (-5, 1)),  # x[::-1]
    ((4, 5), (-5, -1)),  # x[::-1, ::-1]
    ((5,), (-1,)),  # a reversed vector
    ((3, 4, 5), (-20, 5, 1)),  # a batch in reverse order
    ((3, 4, 5), (20, 5, -1)),  # each matrix's columns reversed
]


@pytest.mark.parametrize("shape, strides", NEGATIVE_LAYOUTS)
@pytest.mark.parametrize("copy", [None, False])
def test_negative_strides_are_refused_without_copy_true(monkeypatch, shape, strides, copy):
    """A reversed view used to import (its last element's address computed below the buffer: an
    OverflowError at first use, and a kernel would read outside the array); it is a ValueError that says
    to pass copy=True, the tensor goes back to its producer once, and the producer was asked for no copy."""
    monkeypatch.setattr(_interop, "Device", lambda ordinal: FAKE_DEVICE)
    producer, asked, handed_back = _dlpack1_producer(shape, strides)
    with pytest.raises(ValueError, match="negative strides .* pass copy=True"):
        gm.from_dlpack(producer, copy=copy)
    assert asked == [False] and len(handed_back) == 1
    cai = {"shape": shape, "typestr": "<f4", "data": (0x7F0000001000, False), "version": 3}
    cai["strides"] = tuple(4 * x for x in strides)
    holder = type("CAI", (), {"__cuda_array_interface__": cai})()
    monkeypatch.setattr(_interop, "_pointer_device", lambda ptr: FAKE_DEVICE)
    monkeypatch.setattr(_interop, "stream_handle", lambda stream, dev: 0)
    with pytest.raises(ValueError, match="negative strides"):
        gm.Matrix.from_cuda_array(holder, copy=copy)


@pytest.mark.parametrize("shape, strides", [*NEGATIVE_LAYOUTS, ((4, 5), (10, 2))])
def test_copy_true_gathers_a_layout_gpumat_cannot_view_in_one_launch(monkeypatch, shape, strides):
    """copy=True of a reversed (or every-other-column) layout is a packed copy gathered by one kernel over
    the producer's strides, exactly as they are; the producer is asked for the copy first (DLPack 1.0),
    and one that cannot make it (BufferError) is asked again without it."""
    monkeypatch.setattr(_interop, "Device", lambda ordinal: FAKE_DEVICE)
    monkeypatch.setattr(_interop.memops, "pointer_device_ordinal", lambda ptr: 0)
    gathered = []
    monkeypatch.setattr(
        _interop, "_gathered_copy", lambda ptr, shp, st, *rest: gathered.append((ptr, shp, st)) or "the copy"
    )
    producer, asked, _ = _dlpack1_producer(shape, strides, refuses=(True,))
    assert gm.from_dlpack(producer, copy=True) == "the copy"
    assert asked == [True, "not passed"] and gathered == [(0x7F0000001000, shape, strides)]


def test_the_copy_keyword_goes_to_the_producer_as_dlpack_defines_it(monkeypatch):
    """copy= is passed on to __dlpack__ (None as False: gpumat imports without a copy unless asked); a
    producer that does not take the keyword is asked without it; one that refuses to export without a copy
    is a ValueError naming copy=True; a copy the producer made unasked (DLPack's IS_COPIED flag) is refused,
    and one it made when asked and flagged is kept as the result, with no second copy, after a wait for the
    whole device (the protocol does not say which stream the copy ran on: PyTorch queues it after the
    ordering it promised). Every import goes back to its producer once, when freed (the producers live
    until then: their deleters are theirs)."""
    monkeypatch.setattr(_interop, "Device", lambda ordinal: FAKE_DEVICE)
    device_waits = []
    monkeypatch.setattr(FAKE_DEVICE, "synchronize", lambda: device_waits.append(True))
    monkeypatch.setattr(_interop.memops, "pointer_device_ordinal", lambda ptr: 0)
    from gpumat.memory import buffers

    monkeypatch.setattr(buffers, "synchronize_stream", lambda stream: None)  # the release's wait: no GPU here
    imported = []  # (matrix, its producer, the producer's deleter calls): freed at the end, producers alive
    for copy, expected in ((None, False), (False, False)):
        producer, asked, handed_back = _dlpack1_producer((4, 5), (5, 1))
        m = gm.from_dlpack(producer, copy=copy)
        assert asked == [expected] and m.elements == 0x7F0000001000 and m.is_borrowed
        imported.append((m, producer, handed_back))
    producer, asked, handed_back = _dlpack1_producer((4, 5), (5, 1), takes_copy=False)
    imported.append((gm.from_dlpack(producer), producer, handed_back))
    assert asked == ["not passed"]
    producer, asked, handed_back = _dlpack1_producer((4, 5), (5, 1), refuses=(False,))
    with pytest.raises(ValueError, match="refused the export with copy=False .* pass copy=True"):
        gm.from_dlpack(producer)
    producer, asked, handed_back = _dlpack1_producer((4, 5), (5, 1), flags=_interop.FLAG_IS_COPIED)
    with pytest.raises(ValueError, match="exported a copy where gpumat asked for none"):
        gm.from_dlpack(producer)
    assert len(handed_back) == 1 and not device_waits
    flags = _interop.FLAG_IS_COPIED | _interop.FLAG_READ_ONLY
    producer, asked, handed_back = _dlpack1_producer((4, 5), (5, 1), flags=flags)
    m = gm.from_dlpack(producer, copy=True)  # the producer's copy is the result: writable, and gpumat's to free
    assert asked == [True] and m.elements == 0x7F0000001000 and not m._operand()[8].readonly
    assert device_waits == [True]
    imported.append((m, producer, handed_back))
    producer, asked, handed_back = _dlpack1_producer((4, 5), (5, 1))  # takes copy=True, flags no copy
    copies = []
    monkeypatch.setattr(_interop.Matrix, "copy", lambda view, stream=None: copies.append(view) or "gpumat's copy")
    monkeypatch.setattr(_interop, "synchronize_stream", lambda stream: None)
    assert gm.from_dlpack(producer, copy=True) == "gpumat's copy"  # a view of the array, copied by gpumat
    assert asked == [True] and len(copies) == 1 and device_waits == [True, True] and len(handed_back) == 1
    with pytest.raises(TypeError, match="copy is True, False or None"):
        gm.from_dlpack(producer, copy="yes")
    for m, _, handed_back in imported:
        m.free()
        assert len(handed_back) == 1


@pytest.mark.parametrize("copy", [None, True])
def test_a_producer_that_refuses_the_per_thread_stream_is_asked_for_the_legacy_one(monkeypatch, copy):
    """PyTorch's __dlpack__ raises BufferError for the per-thread default stream (2), which gpumat reported as
    a layout that needs copy=True. It is asked again for the legacy stream (1): the per-thread stream waits
    for the legacy stream's earlier work by CUDA's rule, so the producer's ordering there holds for
    gpumat's work. Other streams keep the producer's BufferError."""
    monkeypatch.setattr(_interop, "Device", lambda ordinal: FAKE_DEVICE)
    monkeypatch.setattr(_interop.memops, "pointer_device_ordinal", lambda ptr: 0)
    monkeypatch.setattr(_interop, "stream_handle", lambda stream, dev: stream)
    monkeypatch.setattr(_interop, "_import", lambda *args: "imported")
    streams = []
    producer, asked, _ = _dlpack1_producer((4, 5), (5, 1), refused_streams=(2,), streams=streams)
    assert gm.from_dlpack(producer, copy=copy, stream=_interop.PER_THREAD_STREAM) == "imported"
    assert streams == [2, 1] and asked == [copy is True] * 2
    streams.clear()
    producer, asked, _ = _dlpack1_producer((4, 5), (5, 1), refused_streams=(0x1234,), streams=streams)
    with pytest.raises(ValueError, match="refused the export with copy=False"):
        gm.from_dlpack(producer, stream=0x1234)
    assert streams == [0x1234]


def test_a_negative_stride_a_producer_wrapped_into_a_huge_one_is_taken_as_negative(monkeypatch):
    """CuPy 14 divides a reversed view's negative byte strides by the itemsize as unsigned numbers: x[::-1]'s
    -53 elements arrives as 2^62 - 53 (float32). Taken at its word, a row stride that large made a
    'view' whose first use failed far outside the array (an OverflowError in cuMemcpyDtoH): gpumat reads
    such a stride (2^63 bytes or more) as the negative one it was, so the view is refused without
    copy=True and gathered exactly with it."""
    monkeypatch.setattr(_interop, "Device", lambda ordinal: FAKE_DEVICE)
    monkeypatch.setattr(_interop.memops, "pointer_device_ordinal", lambda ptr: 0)
    assert _interop._signed((53, (1 << 62) - 1), 4) == (53, -1)
    assert _interop._signed(((1 << 61) - 7, 1), 8) == (-7, 1)
    for strides, meant in (((1 << 62) - 53, 1), (-53, 1)), ((53, (1 << 62) - 1), (53, -1)):
        producer, _, handed_back = _dlpack1_producer((4, 53), strides)
        with pytest.raises(ValueError, match="negative strides"):
            gm.from_dlpack(producer)
        assert len(handed_back) == 1
        gathered = []
        monkeypatch.setattr(_interop, "_gathered_copy", lambda ptr, shp, st, *rest: gathered.append(st) or "copy")
        producer, _, _ = _dlpack1_producer((4, 53), strides)
        assert gm.from_dlpack(producer, copy=True) == "copy" and gathered == [meant]
        monkeypatch.undo()
        monkeypatch.setattr(_interop, "Device", lambda ordinal: FAKE_DEVICE)
        monkeypatch.setattr(_interop.memops, "pointer_device_ordinal", lambda ptr: 0)


@gpu
@pytest.mark.parametrize("through", ["from_dlpack", "asmatrix", "from_cuda_array"])
def test_reversed_cupy_views_are_refused_or_copied_exactly(through):
    """CuPy's reversed views (columns, rows, both, a batch's order, each matrix's columns) and a strided
    batch: refused without copy=True on every import path, and with it an exact copy (the bits as CuPy
    has them) that shares no memory with the source."""
    cp = pytest.importorskip("cupy")
    imports = {
        "from_dlpack": gm.from_dlpack,
        "asmatrix": gm.asmatrix,
        "from_cuda_array": gm.Matrix.from_cuda_array,
    }[through]
    x2 = cp.random.rand(37, 53, dtype=cp.float32)
    x3 = cp.random.rand(5, 19, 23).astype(cp.float16)
    views = [x2[:, ::-1], x2[::-1], x2[::-1, ::-1], x2[0, ::-1], x3[::-1], x3[:, :, ::-1], x3[::-1, ::-1, ::2]]
    for view in views:
        with pytest.raises(ValueError, match="negative strides|not one gpumat can view"):
            imports(view)
        m = imports(view, copy=True)
        want = cp.asnumpy(view)
        got = m.to_numpy()
        assert got.shape == (want.reshape(1, -1) if want.ndim == 1 else want).shape
        assert got.tobytes() == np.ascontiguousarray(want).tobytes()
        assert not (view.data.ptr <= m.elements < view.data.ptr + view.data.mem.size)
        m.free()
