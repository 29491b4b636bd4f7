"""Stream order of gpumat's memory on other libraries' streams, checked on the CPU: each scenario of
tests/stream_model.py runs in a process of its own with the driver replaced by a model that keeps the
order of the queued work and reports every block used or freed before an earlier use may have run, and
every call that reaches a destroyed stream. The GPU tests show the same guarantees by their results
(tests/test_devices_streams.py), where a race shows only when the timing is unlucky."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from stream_model import SCENARIOS

ROOT = Path(__file__).resolve().parents[1]


def run_scenario(name: str, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "tests" / "stream_model.py"), name, *flags],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        capture_output=True,
        text=True,
        timeout=300,
    )


def scenario(name: str, *flags: str) -> dict:
    out = run_scenario(name, *flags)
    assert out.returncode == 0, out.stderr[-3000:]
    facts = json.loads(out.stdout.splitlines()[-1])
    assert facts.pop("violations") == []
    return facts


def test_a_call_on_another_librarys_stream_adds_one_event_record():
    """The same stream object on every call: its id is asked once, and each product adds one driver call
    to the launch, the record of the stream's mark (a result's block comes from the last dropped one, or
    when results are kept, from the driver). The operands, results and kept blocks are all freed after
    their last use there."""
    facts = scenario("steady")
    assert facts["cuStreamGetId"] == 1
    per_call = facts["per_call"]
    # (the product's launch: a programmatic dependent of the launch before it on the stand-in's sm_90)
    assert per_call.pop("cuLaunchKernelEx") == 1 and per_call.pop("cuEventRecord") == 1
    assert set(per_call) <= {"cuMemAllocAsync"} and per_call.get("cuMemAllocAsync", 0) < 0.2


def test_a_split_product_queues_its_reduction_as_a_dependent_launch_and_stays_ordered():
    """A product that splits K on an sm_90 GPU: two dependent launches a call (the product after whatever
    came before it, the reduction after the product), on another library's stream, gpumat's and the legacy
    stream alike; the partials and results are freed after their last use."""
    per_call = scenario("split_products")["per_call"]
    assert per_call["cuLaunchKernelEx"] == 2 and "cuLaunchKernel" not in per_call


def test_a_call_on_one_of_pytorchs_own_streams_adds_no_driver_call():
    """PyTorch never destroys its own streams: the handle is settled once, and a product there costs the
    launch alone; the frees and uses elsewhere that need the stream's work record its mark when they wait,
    and every one of them still follows that work."""
    facts = scenario("pytorch_own_stream")
    assert facts["cuStreamGetId"] == 1
    per_call = facts["per_call"]
    assert per_call.pop("cuLaunchKernelEx") == 1
    assert set(per_call) <= {"cuMemAllocAsync"} and per_call.get("cuMemAllocAsync", 0) < 0.2


def test_a_handle_reused_by_a_new_stream_is_not_taken_for_the_old_one():
    """The old stream destroyed with work queued, its handle given to a new stream: the blocks kept for
    the old stream are not handed to the new one unordered, a result of the old stream used on the new
    one waits for its allocation there, frees wait for both streams' marks, and nothing reaches the
    destroyed stream. A new object for the handle costs one id query."""
    assert scenario("recycled_handle")["asked_for_new_stream"] == 1


def test_a_block_freed_right_after_use_on_another_librarys_stream_is_reused_only_after_that_use():
    assert scenario("freed_after_use") == {"cuCtxSynchronize": 0}


def test_a_matrix_used_on_two_threads_default_streams_is_freed_after_both():
    scenario("per_thread_streams")


def test_a_result_of_another_librarys_stream_is_ordered_before_its_use_elsewhere():
    scenario("made_there_used_here")


def test_work_the_call_waited_for_needs_no_mark_and_no_device_wait():
    """dot, to_numpy and from_numpy wait for their own work on the stream: no mark is recorded after it,
    and the matrices' frees (and that of a matrix made by empty() there) never wait for the device."""
    assert scenario("waited_for") == {"records": 0, "cuCtxSynchronize": 0}


def test_library_streams_destroyed_with_work_queued_are_never_named_again():
    """The GPU suite's sequence on other libraries' streams (a pooled stream that lives on; streams
    destroyed with gpumat's work queued, blocks kept for them, new streams after them; the cache handed
    back at the end): every use after its allocation, every free after every use, and no call naming a
    destroyed stream or event."""
    assert scenario("destroyed_with_work_queued") == {}


def test_a_closed_streams_handle_is_refused_until_a_new_stream_takes_it_back():
    """gpumat keeps the streams it closes: a raw handle kept past its Stream's close is a ValueError (it
    used to reach the driver after the stream was destroyed: a crash in cuStreamGetId), no library's stream
    is given that number meanwhile, and the next gm.Stream takes it back with its work ordered."""
    facts = scenario("closed_handle_reused")
    assert facts == {"refused": [True, True], "taken_back": True, "library_differs": True}


def test_out_of_core_products_and_a_collected_stream_keep_their_order():
    scenario("out_of_core_calls")


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_scenario_holds_when_the_driver_hands_out_destroyed_streams_handles_again(name):
    """Drivers often give a destroyed stream's handle to the next stream made; the GPUs of the test machines
    do not, so this runs only here: every scenario again, each new stream (gpumat's or a library's) taking
    the handle destroyed last. Nothing may be misordered or reach a destroyed stream."""
    scenario(name, "--reuse-handles")


def test_imported_memory_goes_back_to_its_producer_only_after_its_last_use():
    """Zero-copy imports (CUDA array interface) whose producer's allocator takes the memory back on its
    stream as soon as gpumat lets go: a Matrix collected with a product still queued on a third stream,
    one freed right after a transpose, a copy=True import. Each free must follow gpumat's uses, and the
    first use on a stream other than the import stream must follow the producer's work."""
    assert scenario("borrowed_memory") == {}


def test_memory_imported_on_another_librarys_stream_is_ordered_before_its_use_elsewhere():
    """An import on a library's stream waits there for the producer; a first use on another stream (after
    the import stream is destroyed, even) waits for the import's mark, and never names the destroyed
    stream."""
    assert scenario("imported_on_a_library_stream") == {}


def test_threads_on_every_kind_of_stream_sharing_operands_and_results_keep_the_order():
    assert scenario("threads_on_many_streams") == {"failures": []}


def test_an_external_stream_made_current_is_settled_like_one_passed_as_stream():
    """`with gm.Stream.external(handle):` after the handle's stream was destroyed and the handle given to a
    new stream: blocks kept for the old stream are not handed to the new one, and nothing is unordered
    (found by fuzzing threads and streams against the model)."""
    assert scenario("external_stream_behind_a_reused_handle") == {}


def test_an_import_used_on_a_new_stream_behind_its_import_streams_handle_waits_for_the_import():
    """An import made on a library's stream is known by that stream's Foreign, not its handle: used on the
    library's next stream behind the same handle, the use waits for the import (found by fuzzing threads
    and streams against the model)."""
    assert scenario("import_stream_handle_reused") == {}


def test_a_foreign_streams_mark_finalized_with_matrices_in_a_cycle_and_brought_back_is_not_used():
    """Matrices of a library's stream left in a reference cycle, that stream's Foreign held by them alone:
    the collector finalizes the Foreign with them and their finalizers bring it back on the pool's queue.
    Its event is retired, not destroyed at once, and the later frees wait for the device instead of a
    destroyed event (found by fuzzing threads and streams against the model)."""
    assert scenario("collected_in_a_cycle") == {}


def test_a_sparse_matrix_freed_after_products_on_other_streams_waits_for_them():
    """A CSRMatrix's arrays, freed right after spmm on a gpumat stream or another library's stream, are not
    reused before those products ran; to_dense in a `with` block fills and writes on one stream (found by
    fuzzing the sparse paths against the model)."""
    assert scenario("sparse_on_other_streams") == {}


def test_a_dlpack_export_is_ordered_before_the_consumers_stream_reads_it():
    """copy=True: the consumer's stream waits for the copy, not only for what came before it; no stream
    given: DLPack's None is the legacy stream, which waits for gpumat's current one (found by fuzzing the
    exports against the model)."""
    assert scenario("exports_to_another_library") == {}


def test_objects_left_for_the_interpreters_shutdown_make_no_driver_call_then():
    """A stream never closed, events, a matrix used on another library's stream and imported memory,
    alive when the program ends (some in a reference cycle): their finalizers run while the interpreter
    tears its modules down, when a call through the driver's bindings may find them half gone. They must
    make no driver call then; the process's end releases what they hold."""
    out = run_scenario("left_at_exit")
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.splitlines()[-1]) == {"violations": []}
    assert "left_at_exit collected during shutdown: True" in out.stderr  # the finalizers did run then
    assert "driver call during interpreter shutdown" not in out.stderr, out.stderr


def test_the_model_counts_a_host_wait_for_a_stream_as_covering_the_events_that_stream_waited_for():
    """The model itself, as the driver behaves: stream y waits for an event recorded after a kernel on x;
    a host wait for y then covers the kernel, though nothing was queued on y after its wait."""
    from stream_model import OrderingDriver

    model = OrderingDriver()
    x, y, z = (model.foreign_stream() for _ in range(3))
    kernel = model._node(model.resolve(x), "a kernel")
    _, event = model.cuEventCreate(0)
    model.cuEventRecord(event, x)
    model.cuStreamWaitEvent(y, event, 0)
    assert not model.before(kernel, model._node(model.resolve(z), "a copy"))  # z knows nothing of x yet
    model.cuStreamSynchronize(y)
    assert model.before(kernel, model._node(model.resolve(z), "a copy"))
