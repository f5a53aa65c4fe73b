"""`ParallelMode`: the process groups of Colossal-AI's global context (`gpc.get_local_rank(ParallelMode.DATA)`)."""

from __future__ import annotations

from enum import Enum

__all__ = ["ParallelMode"]


class ParallelMode(Enum):
    """Colossal-AI's parallel modes, with its values. The global context sets up `GLOBAL`, `DATA`, `MODEL`,
    `TENSOR` and (with `parallel.pipeline > 1`) `PIPELINE`; the modes of Colossal-AI's own tensor-parallel layers
    (1D, 2D, 2.5D, 3D, sequence) are never set up here, since `launch` refuses a tensor-parallel size above 1."""

    GLOBAL = "global"
    DATA = "data"
    MODEL = "model"
    PIPELINE = "pipe"
    TENSOR = "tensor"
    SEQUENCE = "sequence"
    SEQUENCE_DP = "sequence_dp"
    PARALLEL_1D = "1d"
    PARALLEL_2D_ROW = "2d_row"
    PARALLEL_2D_COL = "2d_col"
    PARALLEL_3D_INPUT = "3d_input"
    PARALLEL_3D_WEIGHT = "3d_weight"
    PARALLEL_3D_OUTPUT = "3d_output"
    PARALLEL_3D_INPUT_X_WEIGHT = "3d_input_x_weight"
    PARALLEL_3D_OUTPUT_X_WEIGHT = "3d_output_x_weight"
    PARALLEL_2P5D_ROW = "2p5d_row"
    PARALLEL_2P5D_COL = "2p5d_col"
    PARALLEL_2P5D_DEP = "2p5d_dep"
    PARALLEL_2P5D_XZ = "2p5d_xz"
