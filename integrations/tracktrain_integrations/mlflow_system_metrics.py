"""System metrics for `MLflowLogger(log_system_metrics=True)`: CPU, memory, disk, network (and GPU where
`nvidia-ml-py` is installed), measured by MLflow's own monitors under the names MLflow's UI shows on a run's
"System metrics" tab (`system/cpu_utilization_percentage`, `system/system_memory_usage_megabytes`, ...).

Unlike `mlflow.start_run(log_system_metrics=True)`, whose thread writes to the tracking server itself (and stops
for good at its first failure), the samples here are records of the logger's own queue: they are batched with
the training metrics, outlive a tracker outage and a kill after a checkpoint, and go out from the sender child.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

__all__ = ["SystemMetricsSampler", "mlflow_defaults"]

_logger = logging.getLogger(__name__)
PREFIX = "system/"


def mlflow_defaults() -> tuple[bool, float | None]:
    """What MLflow itself would do, and how often: `mlflow.enable_system_metrics_logging()` (or
    MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING) and MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL (None when unset: see
    `adaptive_interval`)."""
    from mlflow.environment_variables import (
        MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING,
        MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL,
    )

    interval = MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL.get()
    return bool(MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING.get()), float(interval) if interval else None


def adaptive_interval(elapsed: float) -> float:
    """Seconds to the next sample when no interval is set: about 100 points over the run so far, every second at
    first and every minute at most, so that a 10-second run and a day-long one both get a useful curve (MLflow's
    fixed 10 s gave a short run 2 points)."""
    return min(max(elapsed / 100, 1.0), 60.0)


def _monitors() -> list:
    try:
        from mlflow.system_metrics.metrics.cpu_monitor import CPUMonitor
        from mlflow.system_metrics.metrics.disk_monitor import DiskMonitor
        from mlflow.system_metrics.metrics.network_monitor import NetworkMonitor
    except ImportError as error:  # psutil, which MLflow's monitors use, is not one of MLflow's own requirements
        raise ImportError(
            f"MLflowLogger(log_system_metrics=True) needs psutil ({error}): pip install psutil, or "
            "pip install 'tracktrain[mlflow]'."
        ) from error
    monitors = [CPUMonitor(), DiskMonitor(), NetworkMonitor()]
    try:
        from mlflow.system_metrics.metrics.gpu_monitor import GPUMonitor

        monitors.append(GPUMonitor())
    except Exception as error:  # no nvidia-ml-py, or no NVIDIA GPU: the other metrics still count
        _logger.debug("No GPU system metrics: %s", error)
    return monitors


class SystemMetricsSampler:
    """Samples the machine every `interval` seconds (None: `adaptive_interval`) on a daemon thread and hands each
    sample to `record(metrics, step)`, at the global step `current_step()` reads (the latest training step logged,
    so the samples line up with the training curves). Its cost to training is a few psutil calls per sample."""

    def __init__(
        self,
        record: Callable[[Mapping[str, float], int], None],
        current_step: Callable[[], int],
        interval: float | None = None,
    ) -> None:
        if interval is not None and not interval > 0:
            raise ValueError(
                f"MLflowLogger(system_metrics_interval=...) must be a positive number of seconds, got {interval!r}."
            )
        self._monitors = _monitors()
        self._record = record
        self._current_step = current_step
        self.interval = interval
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        for monitor in self._monitors:  # the first CPU reading is since this call: a baseline, not a sample
            monitor.collect_metrics()
            monitor.clear_metrics()
        self._stopping.clear()
        self._thread = threading.Thread(target=self._run, name="tracktrain-system-metrics", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop sampling, after one last sample (a run shorter than the interval still gets one)."""
        if self._thread is None:
            return
        self._stopping.set()
        self._thread.join()
        self._thread = None

    def _run(self) -> None:
        started = time.monotonic()
        while True:
            wait = self.interval if self.interval is not None else adaptive_interval(time.monotonic() - started)
            stopping = self._stopping.wait(wait)
            try:
                self._record(self.sample(), self._current_step())
            except Exception as error:  # a failing monitor must never reach training
                _logger.warning("System metrics sampling stopped: %s: %s", type(error).__name__, error)
                return
            if stopping:
                return

    def sample(self) -> dict[str, float]:
        metrics: dict[str, float] = {}
        for monitor in self._monitors:
            monitor.collect_metrics()
            metrics.update({PREFIX + name: float(value) for name, value in monitor.aggregate_metrics().items()})
            monitor.clear_metrics()
        return metrics
