"""The old path of `tracktrain.distributed.preemption`, kept so that existing imports work; new code imports from
there. Re-exports only."""

from tracktrain.distributed.preemption import PREEMPTION_SIGNALS, SignalWatch, Terminated

__all__ = ["PREEMPTION_SIGNALS", "SignalWatch", "Terminated"]
