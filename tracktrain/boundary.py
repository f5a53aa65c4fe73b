"""The old path of `tracktrain.distributed.boundary`, kept so that existing imports work; new code imports from
there. Re-exports only."""

from tracktrain.distributed.boundary import AGREEMENTS, Boundary, Decision, decide

__all__ = ["AGREEMENTS", "Boundary", "Decision", "decide"]
