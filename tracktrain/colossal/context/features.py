"""What a Colossal-AI config's reserved names mean: read once, checked, and handed to `launch` (the parallel sizes)
and `initialize` (precision, clipping, accumulation, the pipeline) as one `Features` value.

Colossal-AI's config holds its features under reserved names and the script's own hyper-parameters under any other
name ("Define Your Configuration"). So:

- a reserved name is applied as Colossal-AI applies it, or refused with the reason when it cannot mean the same here
  (ZeRO, naive and apex AMP, gradient handlers by registry name, Colossal-AI's own tensor-parallel layers);
- an unknown key inside a feature's dict (`fp16 = dict(mode=..., init_scal=...)`, `parallel = dict(data=2)`) is an
  error naming it: Colossal-AI would pass it on or drop it;
- any other top-level name is the script's own (`BATCH_SIZE`, `lr_drop`), kept in `gpc.config` for it to read, as
  Colossal-AI keeps it. One that looks like a reserved name misspelt, or is a name Colossal-AI's own examples use as if
  it were a setting (`gradient_clipping`, which Colossal-AI never read), is kept too but warned about, naming the
  setting: under Colossal-AI it silently changed nothing, and here it still changes nothing, but says so.
"""

from __future__ import annotations

import difflib
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tracktrain.checks.numeric import is_integral, is_real
from tracktrain.colossal.amp import AMP_TYPE
from tracktrain.colossal.context.config import ConfigException

__all__ = ["RESERVED", "Features", "read_features"]

RESERVED = (
    "parallel",
    "fp16",
    "clip_grad_norm",
    "gradient_accumulation",
    "torch_ddp",
    "cudnn_benchmark",
    "cudnn_deterministic",
    "zero",
    "gradient_handler",
)
"""The top-level names Colossal-AI's `launch` and `initialize` read as features (with `NUM_MICRO_BATCHES` and
`model.num_chunks` under a pipeline)."""

_REFUSED = {
    "zero": "ZeRO shards the optimizer through Colossal-AI's own sharded model and optimizer, which tracktrain does not "
    "have; shard with tracktrain's FSDP2 instead: tracktrain.Trainer(strategy='fsdp') (docs/tutorials/distributed.md)",
    "gradient_handler": "Colossal-AI builds gradient handlers from its registry by type name; here the engine's "
    "gradient handlers are objects: pass them as initialize(..., gradient_handlers=[...]), each with a "
    "handle_gradient() method (data parallelism all-reduces by itself, through DDP)",
}

_SAID_OTHERWISE = {"gradient_clipping": "clip_grad_norm"}
"""Names Colossal-AI's own examples write as if they were settings, which Colossal-AI never read."""

_TORCH_AMP_OPTIONS = ("init_scale", "growth_factor", "backoff_factor", "growth_interval", "enabled")
_TENSOR_MODES = (None, "1d", "2d", "2.5d", "3d", "sequence")


@dataclass(frozen=True)
class Features:
    """The config's features, as `launch` and `initialize` apply them."""

    pipeline_size: int = 1
    tensor_size: int = 1
    fp16: bool = False
    grad_scaler_options: dict[str, Any] = field(default_factory=dict)
    clip_grad_norm: float = 0.0
    gradient_accumulation: int = 1
    torch_ddp: dict[str, Any] = field(default_factory=dict)
    cudnn_benchmark: bool = False
    cudnn_deterministic: bool = False
    num_microbatches: int | None = None
    num_chunks: int = 1


def read_features(config: Mapping[str, Any]) -> Features:
    """`config`'s features, checked (a `ConfigException` naming the key, its value and the fix), with a warning for
    a name that looks like a setting but is not one."""
    for key, reason in _REFUSED.items():
        if key in config:
            raise ConfigException(f"The config sets {key} = {config[key]!r}: not supported here. {reason}.")
    _warn_about_lookalikes(config)
    pipeline_size, tensor_size = _parallel_sizes(config.get("parallel"))
    fp16, scaler_options = _fp16(config.get("fp16"))
    clip = config.get("clip_grad_norm", 0.0)
    if clip is None:
        clip = 0.0
    if not is_real(clip) or isinstance(clip, bool) or clip < 0:
        raise ConfigException(f"clip_grad_norm must be a number >= 0 (0: no clipping), got {clip!r}.")
    accumulation = config.get("gradient_accumulation", 1)
    if accumulation is None:
        accumulation = 1
    if not is_integral(accumulation) or isinstance(accumulation, bool) or accumulation < 1:
        raise ConfigException(
            f"gradient_accumulation must be a whole number of batches >= 1, got {accumulation!r}, e.g. "
            "gradient_accumulation = 4."
        )
    torch_ddp = config.get("torch_ddp", {})
    if not isinstance(torch_ddp, Mapping):
        raise ConfigException(
            f"torch_ddp holds DistributedDataParallel's keyword arguments as a dict, e.g. "
            f"torch_ddp = dict(find_unused_parameters=True); got {torch_ddp!r}."
        )
    flags = {}
    for name in ("cudnn_benchmark", "cudnn_deterministic"):
        value = config.get(name, False)
        if not isinstance(value, bool):
            raise ConfigException(f"{name} must be True or False, got {value!r}.")
        flags[name] = value
    num_microbatches, num_chunks = _pipeline_options(config, pipeline_size)
    return Features(
        pipeline_size=pipeline_size,
        tensor_size=tensor_size,
        fp16=fp16,
        grad_scaler_options=scaler_options,
        clip_grad_norm=float(clip),
        gradient_accumulation=int(accumulation),
        torch_ddp=dict(torch_ddp),
        num_microbatches=num_microbatches,
        num_chunks=num_chunks,
        **flags,
    )


def _warn_about_lookalikes(config: Mapping[str, Any]) -> None:
    for key in config:
        if not isinstance(key, str) or key in RESERVED:
            continue
        setting = _SAID_OTHERWISE.get(key)
        if setting is None:
            close = difflib.get_close_matches(key, RESERVED, n=1, cutoff=0.8)
            setting = close[0] if close else None
        if setting is not None:
            warnings.warn(
                f"The config sets {key} = {config[key]!r}, which is not a Colossal-AI setting: it is kept in "
                f"gpc.config as a value of the script's own and changes nothing, as under Colossal-AI. For the "
                f"feature, write {setting} = ... instead.",
                UserWarning,
                stacklevel=4,
            )


def _size(value: Any, where: str) -> int:
    if isinstance(value, Mapping):
        unknown = sorted(set(value) - {"size"})
        if unknown:
            raise ConfigException(f"{where} = {dict(value)!r}: unknown keys {unknown}; it takes size=N.")
        value = value.get("size", 1)
    if not is_integral(value) or isinstance(value, bool) or value < 1:
        raise ConfigException(f"{where} size must be a whole number >= 1, got {value!r}.")
    return int(value)


def _parallel_sizes(parallel: Any) -> tuple[int, int]:
    if parallel is None:
        return 1, 1
    if not isinstance(parallel, Mapping):
        raise ConfigException(
            f"parallel must be a dict, e.g. parallel = dict(pipeline=2, tensor=dict(size=1, mode=None)); got "
            f"{parallel!r}."
        )
    unknown = sorted(set(parallel) - {"pipeline", "tensor"})
    if unknown:
        raise ConfigException(
            f"parallel = {dict(parallel)!r}: unknown keys {unknown}. It takes pipeline and tensor; the data-parallel "
            "size is what is left of the processes (world size / (pipeline * tensor)), never set, as in Colossal-AI."
        )
    pipeline = _size(parallel.get("pipeline", 1), "parallel.pipeline")
    tensor = parallel.get("tensor", {"size": 1})
    if not isinstance(tensor, Mapping):
        tensor = {"size": tensor}
    unknown = sorted(set(tensor) - {"size", "mode", "depth"})
    if unknown:
        raise ConfigException(
            f"parallel.tensor = {dict(tensor)!r}: unknown keys {unknown}; it takes size, mode and (for 2.5d) depth."
        )
    mode = tensor.get("mode")
    if mode not in _TENSOR_MODES:
        raise ConfigException(f"parallel.tensor mode must be one of {list(_TENSOR_MODES)}, got {mode!r}.")
    size = _size(tensor.get("size", 1), "parallel.tensor")
    if size > 1 or mode is not None:
        raise ConfigException(
            f"parallel.tensor = {dict(tensor)!r} is not supported: Colossal-AI's tensor parallelism ({mode or '1d'}) "
            "splits only its own layers (colossalai.nn.Linear, Linear1D_Col, ...), which tracktrain.colossal does "
            "not have, so no layer of a torch model would be split. Split torch layers with tracktrain's "
            "TensorParallelStrategy({'net.0': 'colwise', 'net.2': 'rowwise'}) in tracktrain.Trainer "
            "(docs/tutorials/distributed.md), or leave parallel.tensor at size=1, mode=None."
        )
    return pipeline, size


def _fp16(fp16: Any) -> tuple[bool, dict[str, Any]]:
    if fp16 is None:
        return False, {}
    if not isinstance(fp16, Mapping):
        raise ConfigException(f"fp16 must be a dict, e.g. fp16 = dict(mode=AMP_TYPE.TORCH); got {fp16!r}.")
    options = dict(fp16)
    mode = options.pop("mode", None)
    if mode is None:
        if options:
            raise ConfigException(f"fp16 = {dict(fp16)!r} sets options without a mode; add mode=AMP_TYPE.TORCH.")
        return False, {}
    if mode in (AMP_TYPE.NAIVE, AMP_TYPE.APEX):
        how = (
            "keeps the model in fp16 with fp32 master weights in Colossal-AI's own optimizer wrapper"
            if mode is AMP_TYPE.NAIVE
            else "runs NVIDIA apex's amp"
        )
        raise ConfigException(
            f"fp16 = dict(mode={mode}) is not supported: {mode.name.lower()} AMP {how}, which tracktrain does not "
            "have. Use mode=AMP_TYPE.TORCH: torch's autocast and GradScaler, the mixed precision tracktrain runs."
        )
    if mode is not AMP_TYPE.TORCH:
        raise ConfigException(
            f"fp16 mode must be an AMP_TYPE (from tracktrain.colossal.amp import AMP_TYPE), got {mode!r}; "
            "use mode=AMP_TYPE.TORCH."
        )
    unknown = sorted(set(options) - set(_TORCH_AMP_OPTIONS))
    if unknown:
        raise ConfigException(
            f"fp16 = {dict(fp16)!r}: unknown keys {unknown}; torch AMP takes {list(_TORCH_AMP_OPTIONS)} (the "
            "GradScaler's arguments)."
        )
    return True, options


def _pipeline_options(config: Mapping[str, Any], pipeline_size: int) -> tuple[int | None, int]:
    if pipeline_size == 1:
        return None, 1  # NUM_MICRO_BATCHES and model are then the script's own values, as in Colossal-AI
    microbatches: Any = config.get("NUM_MICRO_BATCHES")
    if not is_integral(microbatches) or isinstance(microbatches, bool) or microbatches < 1:
        raise ConfigException(
            f"parallel.pipeline = {pipeline_size} needs NUM_MICRO_BATCHES, the number of micro-batches each batch is "
            f"split into (e.g. NUM_MICRO_BATCHES = 4); got {microbatches!r}."
        )
    model = config.get("model")
    chunks = model.get("num_chunks", 1) if isinstance(model, Mapping) else 1
    if not is_integral(chunks) or isinstance(chunks, bool) or chunks < 1:
        raise ConfigException(f"model.num_chunks (the stages per rank) must be a whole number >= 1, got {chunks!r}.")
    return int(microbatches), int(chunks)
