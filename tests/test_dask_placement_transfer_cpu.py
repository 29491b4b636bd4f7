"""gpumat.dask's placement rule and its scheduler plugin, and the CUDA IPC transfer's protocol (offers,
claims, acknowledgements, withdrawals), on the CPU with stand-ins for the GPU."""

from __future__ import annotations

import os
import time
import weakref
from collections import deque

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("dask.array", reason="dask is not installed (make test installs it)")

from support import HostChunk  # noqa: E402

from gpumat.dask import chunks, graph, placement, transfer  # noqa: E402


# --- the rule --------------------------------------------------------------------------------------------
def _row_layout(n: int, workers: list[str], nbytes: int = 100) -> dict:
    """C blocks (i, j) of an n x n product: A (i, k) on worker i % W, B (k, j) on worker k % W."""
    tasks = {}
    for i in range(n):
        for j in range(n):
            inputs = {}
            for k in range(n):
                inputs[("a", i, k)] = (nbytes, {workers[i % len(workers)]})
                inputs[("b", k, j)] = (nbytes, {workers[k % len(workers)]})
            tasks[(i, j)] = inputs
    return tasks


@pytest.mark.parametrize("n,w", [(4, 2), (3, 2), (5, 3), (1, 2), (7, 4)])
def test_every_block_goes_to_a_worker_holding_most_of_its_inputs_within_its_share(n, w):
    workers = [f"w{x}" for x in range(w)]
    tasks = _row_layout(n, workers)
    placed, moved = placement.assign(tasks, dict.fromkeys(workers, 1))
    assert set(placed) == set(tasks)
    counts = {x: list(placed.values()).count(x) for x in workers}
    assert max(counts.values()) <= -(-len(tasks) // w)  # the tasks' share, rounded up
    for t, worker in placed.items():
        held = {x: sum(nb for nb, hs in tasks[t].values() if x in hs) for x in workers}
        if n % w == 0:  # rows of blocks split evenly: each block where its row of A is (the most bytes)
            assert held[worker] == max(held.values()), (t, worker, held)
    # what moves: each input once to each worker that runs a block needing it and lacks it
    expected = {(name, placed[t]) for t in tasks for name, (nb, hs) in tasks[t].items() if placed[t] not in hs}
    assert moved == 100 * len(expected)


def test_uneven_holdings_are_balanced_by_the_tasks_with_most_to_lose_first():
    # worker a holds every input; b nothing: without the share, all four blocks would go to a
    tasks = {t: {("x", t): (10 * (t + 1), {"a"})} for t in range(4)}
    placed, moved = placement.assign(tasks, {"a": 1, "b": 1})
    assert sorted(placed.values()) == ["a", "a", "b", "b"]
    assert placed[3] == "a" and placed[2] == "a"  # the largest stay where their bytes are
    assert moved == 10 + 20
    # threads weigh the share: a worker with three threads takes three of four
    placed, _ = placement.assign(tasks, {"a": 3, "b": 1})
    assert list(placed.values()).count("a") == 3


def test_the_rule_is_deterministic_and_needs_workers():
    tasks = _row_layout(3, ["p", "q"])
    both = {"p": 1, "q": 1}
    assert placement.assign(tasks, both) == placement.assign(dict(reversed(tasks.items())), both)
    assert placement.assign(tasks, {}) == ({}, 0)


def test_the_scheduler_plugin_places_a_resident_product_as_the_plan_says(monkeypatch):
    """Two in-process workers, numpy stand-ins for the GPU chunks: the plugin restricts each block of C to
    the worker matmul_plan names, and the blocks are computed there."""
    distributed = pytest.importorskip("distributed", reason="distributed is not installed")
    import gpumat.dask as gmd

    monkeypatch.setattr(chunks, "upload", lambda block, dtype=None: np.asarray(block, dtype=dtype))
    monkeypatch.setattr(chunks, "device_count", lambda: 0)
    monkeypatch.setattr("gpumat.dask.upload.device_count", lambda: 0)  # this process has no GPU: numpy scattered

    def block(a_row, b_col):
        acc = a_row[0] @ b_col[0]
        for x, y in zip(a_row[1:], b_col[1:], strict=True):
            acc = acc + x @ y
        return acc

    monkeypatch.setattr(graph, "resident_block", block)
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((40, 30)), rng.standard_normal((30, 20))
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cl,
        distributed.Client(cl) as client,
    ):
        A = gmd.from_array(a, chunks=10)
        B = gmd.from_array(b, chunks=10)
        distributed.wait([A, B])
        first, second = sorted(client.scheduler_info()["workers"])
        holders = client.who_has(A)
        rows_at = {key[1]: ws[0] for key, ws in holders.items()}
        assert len(set(rows_at.values())) == 2  # rows of blocks spread over the workers
        plan = gmd.matmul_plan(A, B)
        assert set(plan.blocks) == {(i, j) for i in range(4) for j in range(2)}
        assert all(plan.blocks[(i, j)] == rows_at[i] for i, j in plan.blocks)  # A's row stays, B moves
        assert plan.moved_bytes == 2 * (b.nbytes // 2) and plan.input_bytes == a.nbytes + b.nbytes
        assert "8 blocks of C" in str(plan)
        C = gmd.matmul(A, B).persist()
        distributed.wait(C)
        where = client.who_has(C)
        assert {(k[1], k[2]): ws[0] for k, ws in where.items()} == plan.blocks
        np.testing.assert_allclose(C.compute(), a @ b, rtol=1e-12, atol=1e-12)


# --- where IPC is used ---------------------------------------------------------------------------------------
def _context(sender, recipient):
    return {"sender": {"address": sender}, "recipient": {"address": recipient}}


def test_ipc_only_between_two_ends_of_one_host(monkeypatch):
    monkeypatch.delenv("GPUMAT_DASK_IPC", raising=False)
    assert transfer.same_host(_context("tcp://127.0.0.1:40001", "tcp://127.0.0.1:40002"))
    assert transfer.same_host(_context("tcp://10.0.0.5:1", "tcp://10.0.0.5:2"))
    assert transfer.same_host(_context("tcp://[::1]:1", "tcp://[::1]:2"))
    assert not transfer.same_host(_context("tcp://10.0.0.5:1", "tcp://10.0.0.6:1"))
    assert not transfer.same_host(_context("inproc://x/1/2", "inproc://x/1/3"))
    assert not transfer.same_host(None) and not transfer.same_host({})
    monkeypatch.setenv("GPUMAT_DASK_IPC", "0")
    assert not transfer.same_host(_context("tcp://127.0.0.1:40001", "tcp://127.0.0.1:40002"))


# --- offers, claims and acknowledgements ----------------------------------------------------------------------------
class StandInDevice:
    ordinal = 0

    def activate(self):
        return self


@pytest.fixture
def offers(tmp_path, monkeypatch):
    """The protocol's files in a temporary folder, the driver's calls stood in (copies have run)."""
    monkeypatch.setattr(transfer, "offer_dir", lambda: str(tmp_path))
    freed = []
    monkeypatch.setattr(transfer.ipc, "event_done", lambda event: True)
    monkeypatch.setattr(transfer.ipc, "free_shareable", freed.append)
    monkeypatch.setattr(transfer, "destroy_event", lambda event: None)
    monkeypatch.setattr(transfer, "_exports", [])
    monkeypatch.setattr(transfer, "_imports", [])
    monkeypatch.setattr(transfer, "_spares", {})
    monkeypatch.setattr(transfer, "counts", dict.fromkeys(transfer.counts, 0))
    monkeypatch.setattr(transfer, "_marks", weakref.WeakKeyDictionary())  # stand-in marks stay here
    monkeypatch.setattr(transfer, "_spare_events", deque())
    monkeypatch.setattr(transfer, "background_step", lambda: None)  # only the test's own sweep() settles
    return tmp_path, freed


def _export(folder, n, nbytes=256, age=0.0):
    e = transfer._Export()
    e.path = os.path.join(folder, f"{transfer.OFFER_PREFIX}{os.getpid()}-test-{n}")
    e.device, e.ptr, e.nbytes, e.event = StandInDevice(), 1000 + n, nbytes, f"event{n}"
    e.memory_handle, e.event_handle, e.buffer, e.made = b"m", b"e", None, time.monotonic() - age
    open(e.path, "x").close()
    transfer._exports.append(e)
    return e


def test_an_offer_settles_only_once_its_receiver_acknowledged_or_died(offers):
    folder, freed = offers
    waiting = _export(folder, 0)
    copying = _export(folder, 1)
    acked = _export(folder, 2)
    orphan = _export(folder, 3)
    claimed, fd = transfer._claim(copying.path)  # a live claim: its lock held (here, by this process)
    assert claimed == copying.path + ".claimed" and not os.path.exists(copying.path)
    transfer._acknowledge(*transfer._claim(acked.path))  # claimed, copied, acknowledged
    os.rename(orphan.path, orphan.path + ".claimed")  # claimed by a process that died: no lock on it
    transfer.sweep()
    assert transfer._exports == [waiting, copying]
    assert sorted(p for p, *_ in transfer._spares[(0, 256)]) == [1002, 1003]  # blocks kept for reuse
    assert not os.path.exists(orphan.path + ".claimed")
    assert freed == [] and transfer.counts["withdrawn"] == 0
    transfer._acknowledge(claimed, fd)  # the copy done: the next sweep settles it
    transfer.sweep()
    assert transfer._exports == [waiting] and len(transfer._spares[(0, 256)]) == 3


def test_an_offer_nobody_claims_is_withdrawn_and_a_late_receiver_fails_clearly(offers):
    folder, freed = offers
    stale = _export(folder, 0, age=transfer.OFFER_TIMEOUT_S + 1)
    transfer.sweep()
    assert transfer._exports == [] and transfer.counts["withdrawn"] == 1
    assert os.listdir(folder) == []
    info = {"offer": stale.path, "memory": b"m", "event": b"e", "host": transfer._host_id()}
    with pytest.raises(transfer.WithdrawnOfferError, match="GPUMAT_DASK_IPC=0"):
        transfer.receive(info, (2, 2), np.float32, StandInDevice())


def test_handles_that_reach_another_host_fail_with_the_reason(offers):
    folder, _ = offers
    e = _export(folder, 0)
    info = {"offer": e.path, "memory": b"m", "event": b"e", "host": "elsewhere/some-boot-id"}
    with pytest.raises(transfer.WithdrawnOfferError, match="another host.*direct=True"):
        transfer.receive(info, (2, 2), np.float32, StandInDevice())
    assert os.path.exists(e.path)  # not claimed: the sender settles it as it would any unclaimed offer


def test_a_failed_settle_is_dropped_and_the_others_still_settle(offers, monkeypatch):
    folder, freed = offers
    broken, fine = _export(folder, 0), _export(folder, 1)
    os.unlink(broken.path)
    os.unlink(fine.path)  # both acknowledged
    real = transfer._retire

    def retire(e):
        if e is broken:
            raise RuntimeError("a driver call failed")
        real(e)

    monkeypatch.setattr(transfer, "_retire", retire)
    transfer.sweep()
    assert transfer._exports == [] and transfer.counts["failed"] == 1
    assert [p for p, *_ in transfer._spares[(0, 256)]] == [1001]


def test_spare_blocks_stay_within_their_budget(offers, monkeypatch):
    folder, freed = offers
    monkeypatch.setattr(transfer, "SPARE_BYTES", 600)
    for n in range(4):
        os.unlink(_export(folder, n).path)  # acknowledged at once
    transfer.sweep()
    assert len(transfer._spares[(0, 256)]) == 2 and sorted(freed) == [1002, 1003]


def test_a_chunk_to_this_host_carries_handles_and_one_elsewhere_its_bytes(monkeypatch):
    monkeypatch.delenv("GPUMAT_DASK_IPC", raising=False)
    offered, received = [], []
    monkeypatch.setattr(transfer, "offer", lambda x: offered.append(x) or {"offer": "/dev/shm/x", "pid": 1})
    monkeypatch.setattr(transfer, "receive", lambda info, shape, dtype, dev: received.append((info, shape, dtype)))
    monkeypatch.setattr(chunks, "as_device", lambda ordinal: None)
    x = HostChunk(np.arange(12, dtype=np.float32).reshape(3, 4))
    header, frames = chunks.serialize_host(x, context=_context("tcp://127.0.0.1:1", "tcp://127.0.0.1:2"))
    assert frames == [] and offered == [x] and header["ipc"]["offer"] == "/dev/shm/x"
    assert header["shape"] == [3, 4] and header["nbytes"] == 48
    chunks.deserialize_host(header, frames)
    assert received == [(header["ipc"], (3, 4), np.dtype(np.float32))]
    # another host, no context (spilling to disk), or an empty chunk: the bytes themselves
    for context, chunk in [
        (_context("tcp://10.0.0.1:1", "tcp://10.0.0.2:2"), x),
        (None, x),
        (_context("tcp://127.0.0.1:1", "tcp://127.0.0.1:2"), HostChunk(np.empty((0, 4), np.float32))),
    ]:
        header, frames = chunks.serialize_host(chunk, context=context)
        assert "ipc" not in header and len(frames) == 1 and frames[0].nbytes == chunk.nbytes
    assert len(offered) == 1


def test_a_chunk_that_cannot_be_exported_goes_as_bytes(monkeypatch):
    monkeypatch.delenv("GPUMAT_DASK_IPC", raising=False)

    def no_room(x):
        raise OSError("no room in /dev/shm")

    monkeypatch.setattr(transfer, "offer", no_room)
    x = HostChunk(np.arange(6, dtype=np.float64).reshape(2, 3))
    header, frames = chunks.serialize_host(x, context=_context("tcp://127.0.0.1:1", "tcp://127.0.0.1:2"))
    assert "ipc" not in header and bytes(frames[0]) == x.values.tobytes()


@given(
    st.integers(1, 6),
    st.integers(1, 6),
    st.integers(1, 4),
    st.lists(st.integers(1, 3), min_size=4, max_size=4),
    st.randoms(use_true_random=False),
)
@settings(max_examples=60, deadline=None)
def test_any_holdings_every_task_placed_within_its_share_and_the_moves_counted(rows, cols, w, threads, rnd):
    """Random holdings (each input of a random size on 1-2 random workers): every task gets a worker, no
    worker takes more than its share by threads (rounded up), the bytes moved are exactly each input
    once to each worker that runs a task needing it and lacks it, and the plan repeats."""
    workers = {f"w{x}": threads[x] for x in range(w)}
    names = list(workers)

    def an_input():
        return rnd.randint(1, 100), set(rnd.sample(names, rnd.randint(1, min(2, w))))

    a_blocks = {(i, k): an_input() for i in range(rows) for k in range(3)}
    b_blocks = {(k, j): an_input() for k in range(3) for j in range(cols)}
    tasks = {
        (i, j): {**{("a", i, k): a_blocks[i, k] for k in range(3)}, **{("b", k, j): b_blocks[k, j] for k in range(3)}}
        for i in range(rows)
        for j in range(cols)
    }
    placed, moved = placement.assign(tasks, workers)
    assert set(placed) == set(tasks) and set(placed.values()) <= set(names)
    total = sum(workers.values())
    for x in names:
        assert list(placed.values()).count(x) <= -(-len(tasks) * workers[x] // total)
    expected = {(name, placed[t]): nb for t in tasks for name, (nb, hs) in tasks[t].items() if placed[t] not in hs}
    assert moved == sum(expected.values())
    assert placement.assign(tasks, workers) == (placed, moved)  # the same plan every time


# --- offer() and receive() end to end, with a stand-in driver ---------------------------------------------------------
class StandInBuffer:
    def __init__(self):
        self.holds = 0

    def hold(self):
        self.holds += 1

    def unhold(self):
        self.holds -= 1


class StandInGPU(StandInDevice):
    """A device with the lock and the waits offer() and receive() use."""

    def __init__(self, ordinal):
        import threading

        self.ordinal, self.lock, self.synchronized = ordinal, threading.RLock(), 0

    def synchronize(self):
        self.synchronized += 1


class StandInChunk:
    """What offer() reads of a packed row-major 2-D Matrix (and what receive() makes with Matrix.empty)."""

    def __init__(self, shape, dtype, device, elements, stride=None):
        self.shape, self.dtype, self.device, self.elements = shape, np.dtype(dtype), device, elements
        self.itemsize = self.dtype.itemsize
        self.stride = shape[1] if stride is None else stride
        self.size, self.nbytes = shape[0] * shape[1], shape[0] * shape[1] * self.itemsize
        self.buffer = StandInBuffer()

    def _operand(self):
        return (self.buffer,)


class Driver:
    """The driver calls of runtime.ipc and the copies and events transfer.py queues, recorded."""

    def __init__(self):
        self.calls, self.blocks, self.events, self.next = [], {}, {}, 0x1000

    def alloc_shareable(self, nbytes):
        self.next += 0x1000
        self.blocks[self.next] = nbytes
        return self.next

    def memory_handle(self, ptr):
        return ptr.to_bytes(8, "little") * 8  # 64 bytes that name the block

    def event_handle(self, event):
        return event.encode().ljust(64, b"\0")

    def open_memory(self, handle):
        self.calls.append(("open_memory", int.from_bytes(handle[:8], "little")))
        return 0x9000

    def open_event(self, handle):
        self.calls.append(("open_event", handle.rstrip(b"\0").decode()))
        return "opened-event"

    def close_memory(self, ptr):
        self.calls.append(("close_memory", ptr))

    def stream_wait(self, stream, event):
        self.calls.append(("wait", stream, event))

    def copy(self, dst, dst_pitch, src, src_pitch, width, height, dst_host, src_host, stream):
        self.calls.append(("copy", dst, dst_pitch, src, src_pitch, width, height, stream))


def test_a_chunk_offered_and_received_through_a_stand_in_driver(offers, monkeypatch):
    folder, freed = offers
    drv = Driver()
    for name in ("alloc_shareable", "memory_handle", "event_handle", "open_memory", "open_event", "close_memory"):
        monkeypatch.setattr(transfer.ipc, name, getattr(drv, name))
    monkeypatch.setattr(transfer.ipc, "shareable_event", lambda: "export-event")
    monkeypatch.setattr(transfer.ipc, "stream_wait", drv.stream_wait)
    monkeypatch.setattr(transfer.memops, "copy_2d_async", drv.copy)
    monkeypatch.setattr(transfer, "record_on", lambda event, stream: drv.calls.append(("record", event, stream)))
    monkeypatch.setattr(transfer, "new_event", lambda: "done-event")
    monkeypatch.setattr(transfer, "_event_for", lambda dev: "ready-event")

    class Side:
        def __init__(self, ptr):
            self.ptr = ptr

        def synchronize(self):
            pass

    monkeypatch.setattr(transfer, "side_stream", lambda dev: Side(70 + dev.ordinal))
    sender_gpu, receiver_gpu = StandInGPU(0), StandInGPU(1)
    chunk = StandInChunk((3, 5), np.float32, sender_gpu, elements=0x5000, stride=8)  # a view: 8-element rows
    transfer._marks[chunk] = transfer._Mark("chunk-written", sender_gpu)

    info = transfer.offer(chunk)
    block = next(iter(drv.blocks))
    assert drv.blocks[block] == chunk.nbytes and info["device"] == 0 and info["host"] == transfer._host_id()
    assert drv.calls == [
        ("wait", 70, "chunk-written"),  # the side stream waits for the chunk's writer only
        ("copy", block, 20, 0x5000, 32, 20, 3, 70),  # packed 20-byte rows from 32-byte ones
        ("record", "export-event", 70),
    ]
    assert chunk.buffer.holds == 1 and os.path.exists(info["offer"])

    made = []

    def empty(cls, shape, dtype, device, stream):
        made.append(StandInChunk(shape, dtype, device, 0x7000))
        return made[-1]

    monkeypatch.setattr(transfer.Matrix, "empty", classmethod(empty))
    drv.calls.clear()
    got = transfer.receive(info, (3, 5), np.float32, receiver_gpu)
    assert got is made[0] and got.device is receiver_gpu
    assert drv.calls == [
        ("open_memory", block),
        ("open_event", "export-event"),
        ("wait", 71, "opened-event"),
        ("copy", 0x7000, 20, 0x9000, 20, 20, 3, 71),
        ("record", "done-event", 71),
        ("record", "ready-event", 71),  # the received chunk's own ready mark
    ]
    assert not os.path.exists(info["offer"]) and os.path.exists(info["offer"] + ".claimed")
    drv.calls.clear()
    transfer.sweep()  # the import settles first (unmapped, acknowledged), then the export (copy run, block kept)
    assert ("close_memory", 0x9000) in drv.calls
    assert os.listdir(folder) == [] and transfer._exports == [] and transfer._imports == []
    assert chunk.buffer.holds == 0 and transfer._spares[(0, chunk.nbytes)][0][0] == block and freed == []
