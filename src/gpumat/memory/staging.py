"""Copies between numpy arrays and device memory: pinned sources in one DMA, large pageable ones
through the staging pipeline (host threads filling pinned buffers while the copy engine drains the
previous ones), small ones through the driver."""

from __future__ import annotations

import ctypes
import os
import threading

import numpy as np

from ..runtime import memops
from ..runtime.devices import Device, device
from ..runtime.streams import LEGACY_STREAM, new_event, record_on, synchronize_event, synchronize_stream
from .host import PinnedBlock, address_of, is_pinned

# staged copies from and into pageable memory ----------------------------------------------------
STAGE_CHUNK = 8 << 20  # bytes a staging buffer holds
STAGE_BUFFERS = 6  # staging buffers in flight per device
# Smaller pageable copies go straight through the driver: on the H100 it moved 4 and 8 MiB at 9-11 GB/s
# each way against the staging pipeline's 6.4-7.1; from 16 MiB staging is as fast or faster (13 GB/s, 18-22
# at 32-64 MiB). benchmarks/results/staging-crossover-*.json, benchmarks/staging_crossover.py.
STAGE_MIN = 16 << 20
STAGE_THREADS = max(2, min(8, (os.cpu_count() or 2)))
STAGE_PIECE_MIN = 1 << 20  # a staged transfer is cut into pieces of at least this much, one a thread


class Staging:
    """Pinned buffers and host threads that move pageable arrays at more than the driver's pageable rate:
    host threads copy chunks into pinned buffers (numpy releases the GIL) while the copy engine moves
    the previous chunks; each buffer is reused only after its event says the DMA is done."""

    def __init__(self, dev: Device, chunk: int = STAGE_CHUNK, buffers: int = STAGE_BUFFERS):
        from concurrent.futures import ThreadPoolExecutor

        self.device = dev.activate()  # the events belong to this device's context
        self.chunk, self.count = chunk, buffers
        self.block = PinnedBlock(chunk * buffers, dev)
        self.events = [new_event() for _ in range(buffers)]
        self.busy = [False] * buffers
        self.lock = threading.Lock()  # one staged transfer at a time per Staging
        self.pool = ThreadPoolExecutor(STAGE_THREADS, thread_name_prefix="gpumat-stage")

    def host(self, i: int) -> int:
        return self.block.ptr + i * self.chunk

    def _wait(self, i: int) -> None:
        if self.busy[i]:
            synchronize_event(self.events[i])
            self.busy[i] = False

    def _plan(self, host: np.ndarray, dev_pitch: int):
        """How to cut a transfer: (byte view of host, row bytes, whole-bytes pieces?, step). A host array
        whose rows follow each other and a packed device side go as byte ranges; anything else (a
        tile of a bigger host matrix, a device view) goes as whole rows through 2-D copies. Pieces are
        at most a buffer, and small enough that every host thread gets one (a single thread copies
        pageable memory at a fraction of what several do), but not below STAGE_PIECE_MIN."""
        rows, row_bytes = host.shape[0], host.shape[1] * host.itemsize
        u8 = host.view(np.uint8)  # (rows, row_bytes); no copy: the rows themselves are contiguous
        piece = min(self.chunk, max(STAGE_PIECE_MIN, -(-rows * row_bytes // STAGE_THREADS)))
        if host.flags.c_contiguous and (dev_pitch == row_bytes or rows == 1):
            return u8.reshape(-1), row_bytes, True, -(-piece // 4096) * 4096
        if row_bytes > self.chunk:
            raise ValueError(f"a staged copy moves whole rows of at most {self.chunk} bytes, not {row_bytes}")
        return u8, row_bytes, False, max(1, min(self.chunk // row_bytes, -(-piece // row_bytes)))

    def _pieces(self, total: int, step: int, start_piece) -> None:
        """Cut [0, total) into pieces of `step`, piece n going through buffer n % count once the buffer's
        previous piece is done; start_piece(i, start, count) starts one and returns the future of its
        host work. Returns (or raises the first failure) after every piece's host work has finished."""
        with self.lock:
            self.device.activate()
            futures: list = [None] * self.count
            try:
                for n, start in enumerate(range(0, total, step)):
                    i = n % self.count
                    if futures[i] is not None:
                        futures[i].result()
                    futures[i] = start_piece(i, start, min(step, total - start))
            finally:
                _settle(futures)

    def upload(self, dst: int, dst_pitch: int, host: np.ndarray, stream: int) -> None:
        """host: 2-D with contiguous rows; its rows go to dst, dst_pitch bytes apart. Returns once `host`
        has been read (the last DMAs may still be in flight; the buffers wait for them before reuse)."""
        view, row_bytes, flat, step = self._plan(host, dst_pitch)

        def start_piece(i: int, start: int, count: int):
            self._wait(i)  # the buffer's last DMA has drained it
            return self.pool.submit(self._stage_in, i, view, start, count, dst, dst_pitch, row_bytes, flat, stream)

        self._pieces(view.shape[0], step, start_piece)

    def _stage_in(self, i, view, start, count, dst, dst_pitch, row_bytes, flat, stream) -> None:
        self.device.activate()
        nbytes = count if flat else count * row_bytes
        buf = np.frombuffer((ctypes.c_byte * nbytes).from_address(self.host(i)), dtype=np.uint8)
        if flat:
            np.copyto(buf, view[start : start + count])
            memops.copy_to_device(dst + start, self.host(i), count, stream)
        else:
            np.copyto(buf.reshape(count, row_bytes), view[start : start + count])
            memops.copy_2d_async(
                dst + start * dst_pitch,
                dst_pitch,
                self.host(i),
                row_bytes,
                row_bytes,
                count,
                dst_on_host=False,
                src_on_host=True,
                stream=stream,
            )
        record_on(self.events[i], stream)
        self.busy[i] = True

    def download(self, host: np.ndarray, src: int, src_pitch: int, stream: int) -> None:
        """Fill a 2-D host array with contiguous rows from pitched device memory; returns when complete."""
        view, row_bytes, flat, step = self._plan(host, src_pitch)

        def start_piece(i: int, start: int, count: int):
            # queue the DMA into the buffer; a host thread drains it once its event completes
            if flat:
                memops.copy_to_host(self.host(i), src + start, count, stream)
            else:
                memops.copy_2d_async(
                    self.host(i),
                    row_bytes,
                    src + start * src_pitch,
                    src_pitch,
                    row_bytes,
                    count,
                    dst_on_host=True,
                    src_on_host=False,
                    stream=stream,
                )
            record_on(self.events[i], stream)
            return self.pool.submit(self._stage_out, i, view, start, count, row_bytes, flat)

        self._pieces(view.shape[0], step, start_piece)

    def _stage_out(self, i, view, start, count, row_bytes, flat) -> None:
        synchronize_event(self.events[i])
        nbytes = count if flat else count * row_bytes
        buf = np.frombuffer((ctypes.c_byte * nbytes).from_address(self.host(i)), dtype=np.uint8)
        np.copyto(view[start : start + count], buf if flat else buf.reshape(count, row_bytes))


def _settle(futures: list) -> None:
    """Wait for every piece of a staged transfer, then raise the first failure: on an error no host thread
    is left copying or queueing copies after the transfer has returned."""
    first = None
    for f in futures:
        if f is None:
            continue
        try:
            f.result()
        except BaseException as exc:
            first = first or exc
    if first is not None:
        raise first


def staging(dev: Device, role: str = "copies", chunk: int = STAGE_CHUNK, buffers: int = STAGE_BUFFERS) -> Staging:
    """The device's staging pipeline for `role` (made on first use, kept for the process): plain copies
    share one; the out-of-core product has one for uploads and one for downloads, so both run at once."""
    key = "staging:" + role
    s = dev.scratch.get(key)
    if s is None:
        with dev.lock:
            s = dev.scratch.get(key)
            if s is None:
                s = dev.scratch[key] = Staging(dev, chunk, buffers)
    return s


def upload(
    dst: int,
    dst_pitch: int,
    host: np.ndarray,
    stream: int = LEGACY_STREAM,
    dev: Device | None = None,
    sync: bool = True,
) -> None:
    """host: a 2-D array whose rows are contiguous (C-contiguous, or a tile of a bigger array); its rows
    go to dst, dst_pitch bytes apart.

    Pinned sources are one DMA (asynchronous when sync is False); large pageable ones go through the
    staging pipeline; small ones through the driver."""
    if host.size == 0:
        return
    dev = dev or device()
    rows, row_bytes = host.shape[0], host.shape[1] * host.itemsize
    if host.nbytes >= STAGE_MIN and not is_pinned(host) and row_bytes <= STAGE_CHUNK:
        staging(dev).upload(dst, dst_pitch, host, stream)
        if sync:
            synchronize_stream(stream)
        return
    dev.activate()
    packed = host.flags.c_contiguous and (dst_pitch == row_bytes or rows == 1)
    if packed and sync and stream == LEGACY_STREAM:
        memops.copy_to_device(dst, address_of(host), host.nbytes, None)  # one call, in order
        return
    if packed:
        memops.copy_to_device(dst, address_of(host), host.nbytes, stream)
    else:
        memops.copy_2d_async(
            dst,
            dst_pitch,
            address_of(host),
            host.strides[0] if rows > 1 else row_bytes,
            row_bytes,
            rows,
            False,
            True,
            stream,
        )
    if sync:
        synchronize_stream(stream)


def download(
    host: np.ndarray,
    src: int,
    src_pitch: int,
    stream: int = LEGACY_STREAM,
    dev: Device | None = None,
    sync: bool = True,
) -> None:
    """Fill a C-contiguous 2-D host array from pitched device memory (waits unless sync is False and the
    array is pinned)."""
    if host.size == 0:
        return
    dev = dev or device()
    rows, row_bytes = host.shape[0], host.shape[1] * host.itemsize
    if host.nbytes >= STAGE_MIN and not is_pinned(host) and row_bytes <= STAGE_CHUNK:
        staging(dev).download(host, src, src_pitch, stream)
        return
    dev.activate()
    packed = host.flags.c_contiguous and (src_pitch == row_bytes or rows == 1)
    if packed and sync and stream == LEGACY_STREAM:
        memops.copy_to_host(address_of(host), src, host.nbytes, None)  # one call, in order
        return
    if packed:
        memops.copy_to_host(address_of(host), src, host.nbytes, stream)
    else:
        memops.copy_2d_async(
            address_of(host),
            host.strides[0] if rows > 1 else row_bytes,
            src,
            src_pitch,
            row_bytes,
            rows,
            True,
            False,
            stream,
        )
    if sync:
        synchronize_stream(stream)


def upload_contiguous(dst: int, host: np.ndarray, stream: int = LEGACY_STREAM) -> None:
    """Copy a C-contiguous host array of any dtype and shape to dst, byte for byte, and wait."""
    if host.nbytes:
        flat = np.ascontiguousarray(host).reshape(1, -1).view(np.uint8)
        upload(dst, flat.nbytes, flat, stream)


def download_contiguous(host: np.ndarray, src: int, stream: int = LEGACY_STREAM) -> None:
    """Fill a C-contiguous host array of any dtype and shape from src, byte for byte (waits)."""
    if host.nbytes:
        download(host.reshape(1, -1).view(np.uint8), src, host.nbytes, stream)
