"""MultiTimer and StopWatch: real intervals, exact history without a list, switching off, and clear errors."""

from __future__ import annotations

import math
import random
import subprocess
import sys
import time
import tracemalloc

import pytest

from tracktrain.engine import Engine, Events
from tracktrain.handlers.multi_timer import MultiTimer, StopWatch, _add_exactly

NAP = 0.02  # seconds slept inside a timed interval


def test_stop_returns_at_least_the_time_slept():
    timer = MultiTimer()
    before = time.perf_counter()
    timer.start("step")
    time.sleep(NAP)
    elapsed = timer.stop("step", keep_in_history=True)
    assert NAP <= elapsed <= time.perf_counter() - before  # the nap, and no more than the wall time around it
    watch = timer.get_timer("step")
    assert isinstance(watch, StopWatch)
    assert watch.get_elapsed_time() == elapsed
    assert watch.get_history_sum() == elapsed
    assert watch.get_history_mean() == elapsed


def test_separate_names_time_separate_intervals():
    timer = MultiTimer()
    timer.start("epoch")
    timer.start("step")
    time.sleep(NAP)
    step = timer.stop("step")
    time.sleep(NAP)
    epoch = timer.stop("epoch")
    assert step >= NAP
    assert epoch >= step + NAP  # the epoch kept running across the step's stop


def test_history_sum_and_mean_equal_the_exact_sum_of_kept_intervals():
    watch = StopWatch("step")
    kept, dropped = [], []
    for i in range(300):
        watch.start()
        if i % 50 == 0:
            time.sleep(0.001)  # a few longer intervals, so magnitudes differ
        keep = i % 3 != 0
        elapsed = watch.stop(keep_in_history=keep)
        (kept if keep else dropped).append(elapsed)
        assert watch.get_elapsed_time() == elapsed  # the last interval, kept or not
    assert watch.history_count == len(kept) == 200
    assert watch.get_history_sum() == math.fsum(kept)
    assert watch.get_history_mean() == math.fsum(kept) / len(kept)
    assert watch.get_history_sum() == pytest.approx(sum(kept), rel=1e-12)


def test_the_running_sum_is_correctly_rounded_where_naive_addition_drifts():
    tenths: list[float] = []
    for _ in range(10):
        _add_exactly(tenths, 0.1)
    assert math.fsum(tenths) == 1.0
    assert sum([0.1] * 10) != 1.0  # what a plain running total would report

    rng = random.Random(0)
    values = [rng.random() * 10.0 ** rng.randint(-9, 4) for _ in range(20_000)]
    partials: list[float] = []
    for value in values:
        _add_exactly(partials, value)
    assert math.fsum(partials) == math.fsum(values)
    assert len(partials) < 10  # the exact sum stays a handful of floats


def test_history_memory_does_not_grow_with_the_number_of_intervals():
    watch = StopWatch()
    for _ in range(100):  # warm up: first allocations of the watch itself
        watch.start()
        watch.stop(keep_in_history=True)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(20_000):
            watch.start()
            watch.stop(keep_in_history=True)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert watch.history_count == 20_100
    assert grown < 10_000  # a list of 20,000 float intervals would need over 400 kB


def test_empty_history():
    watch = StopWatch("eval")
    assert not watch.has_history
    assert watch.history_count == 0
    assert watch.get_history_sum() == 0.0
    assert watch.get_elapsed_time() == 0.0
    watch.start()
    watch.stop(keep_in_history=False)
    assert not watch.has_history
    with pytest.raises(RuntimeError, match=r"StopWatch 'eval' has no history.*keep_in_history=True"):
        watch.get_history_mean()


def test_stop_of_a_watch_that_is_not_running_is_an_error():
    watch = StopWatch("step")
    with pytest.raises(RuntimeError, match=r"StopWatch 'step' is not running.*start\(\) first"):
        watch.stop()
    watch.start()
    watch.stop()
    with pytest.raises(RuntimeError, match="is not running"):
        watch.stop()  # stopped twice

    timer = MultiTimer()
    timer.start("step")
    timer.stop("step")
    with pytest.raises(RuntimeError, match="StopWatch 'step' is not running"):
        timer.stop("step")


def test_start_of_a_running_watch_is_an_error_and_keeps_the_interval():
    timer = MultiTimer()
    timer.start("step")
    time.sleep(NAP)
    with pytest.raises(RuntimeError, match=r"StopWatch 'step' is already running.*stop\(\)"):
        timer.start("step")
    assert timer.stop("step") >= NAP  # the first start still counts


def test_elapsed_time_of_a_running_watch_is_an_error():
    watch = StopWatch("step")
    watch.start()
    with pytest.raises(RuntimeError, match=r"still running.*stop\(\) first"):
        watch.get_elapsed_time()


def test_unknown_names_list_the_known_timers():
    timer = MultiTimer()
    timer.start("Train-step")
    timer.start("Train-epoch")
    with pytest.raises(KeyError, match=r"no timer named 'Test-step'; known timers: \['Train-step', 'Train-epoch'\]"):
        timer.get_timer("Test-step")
    with pytest.raises(KeyError, match="no timer named 'Test-step'"):
        timer.stop("Test-step")
    with pytest.raises(KeyError, match="no timer named 'Test-step'"):
        timer.reset("Test-step")


def test_bad_arguments():
    with pytest.raises(TypeError, match="on must be True or False, got 'yes'"):
        MultiTimer(on="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="synchronize must be True or False"):
        MultiTimer(synchronize=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="names timers with strings, got 3"):
        MultiTimer().start(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="set_status needs True or False"):
        MultiTimer().set_status(None)  # type: ignore[arg-type]


def test_switched_off_start_and_stop_do_nothing():
    timer = MultiTimer(on=False)
    assert not timer.is_on()
    timer.start("step")
    assert timer.stop("step", keep_in_history=True) == 0.0
    assert list(timer) == []
    assert "step" not in timer
    with pytest.raises(KeyError, match="known timers: \\[\\]"):
        timer.get_timer("step")

    timer.set_status(True)
    assert timer.is_on()
    timer.start("step")
    time.sleep(NAP)
    assert timer.stop("step", keep_in_history=True) >= NAP
    assert timer.get_timer("step").history_count == 1


def test_switching_off_mid_interval_abandons_it():
    timer = MultiTimer()
    timer.start("step")
    timer.stop("step", keep_in_history=True)
    timer.start("step")
    timer.set_status(False)
    assert timer.stop("step", keep_in_history=True) == 0.0
    assert not timer.get_timer("step").is_running
    timer.set_status(True)
    timer.start("step")  # no "already running" error
    timer.stop("step", keep_in_history=True)
    assert timer.get_timer("step").history_count == 2  # the abandoned interval was not recorded


def test_reset_one_or_all_keeps_the_names():
    timer = MultiTimer()
    for name in ("a", "b"):
        timer.start(name)
        timer.stop(name, keep_in_history=True)
    timer.start("a")
    timer.reset("a")
    a, b = timer.get_timer("a"), timer.get_timer("b")
    assert not a.has_history and not a.is_running and a.get_elapsed_time() == 0.0
    assert b.has_history
    timer.set_status(False)
    timer.reset()  # works while off: resetting is not timing
    assert not b.has_history
    assert [name for name, _ in timer] == ["a", "b"]


def test_iteration_yields_names_and_watches_in_creation_order():
    timer = MultiTimer()
    for name in ("Train-epoch", "Train-step", "Test-step"):
        timer.start(name)
        timer.stop(name)
    assert [(name, watch) for name, watch in timer] == [
        (name, timer.get_timer(name)) for name in ("Train-epoch", "Train-step", "Test-step")
    ]
    assert "Train-step" in timer
    for name, _watch in timer:  # starting another timer while iterating is allowed
        timer.start(name + "-again")
    assert len(list(timer)) == 6


def test_timing_iterations_of_an_engine():
    work = 0.005
    timer = MultiTimer()
    engine = Engine(lambda e, b: time.sleep(work))
    engine.add_event_handler(Events.ITERATION_STARTED, lambda: timer.start("Train-step"))
    engine.add_event_handler(Events.ITERATION_COMPLETED, lambda: timer.stop("Train-step", keep_in_history=True))
    engine.run(range(4), max_epochs=2)
    watch = timer.get_timer("Train-step")
    assert watch.history_count == 8
    assert work <= watch.get_history_mean() < work + 1.0
    assert watch.get_history_sum() >= 8 * work


def test_synchronize_on_a_cpu_only_process_just_reads_the_clock():
    torch = pytest.importorskip("torch")
    timer = MultiTimer(synchronize=True)
    timer.start("step")
    torch.ones(64, 64) @ torch.ones(64, 64)
    assert timer.stop("step") > 0.0
    assert not torch.cuda.is_initialized()  # timing did not initialize CUDA


def test_module_imports_and_times_without_torch():
    code = """
import sys
sys.modules["torch"] = None  # any "import torch" now fails
from tracktrain.handlers.multi_timer import MultiTimer
timer = MultiTimer(synchronize=True)
timer.start("step")
print(timer.stop("step", keep_in_history=True) >= 0.0, timer.get_timer("step").history_count)
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["True", "1"]


@pytest.mark.cuda
def test_synchronize_waits_for_queued_gpu_work():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    torch.cuda.init()
    events = [torch.cuda.Event(enable_timing=True) for _ in range(4)]

    # each sleep kernel timed by events around it: its run time depends on the clock, which rises from idle at the
    # first kernels, so each timer is compared with its own kernel, not an earlier one's
    synced, unsynced = MultiTimer(synchronize=True), MultiTimer()
    synced.start("gpu")
    events[0].record()
    torch.cuda._sleep(50_000_000)
    events[1].record()
    synced_seconds = synced.stop("gpu")
    unsynced.start("gpu")
    events[2].record()
    torch.cuda._sleep(50_000_000)
    events[3].record()
    unsynced_seconds = unsynced.stop("gpu")
    torch.cuda.synchronize()
    assert synced_seconds >= 0.9 * events[0].elapsed_time(events[1]) / 1000.0
    assert unsynced_seconds < 0.5 * events[2].elapsed_time(events[3]) / 1000.0  # only the launch was timed
