"""Lightning's `lightning.pytorch.utilities`, for programs ported with the renames: each name over tracktrain's own
piece (`rank_zero_only` over `tracktrain.distributed.ranks`, `AttributeDict` the module's `hparams` type,
`move_data_to_device` the Trainer's batch move, `seed_everything` and `isolate_rng` over `tracktrain.rng`), or, for
a name not offered, an error that says what to use.
"""

from __future__ import annotations

from tracktrain._lazy import lazy_attributes

_LAZY = {
    "AttributeDict": "tracktrain.utilities.parsing",
    "is_picklable": "tracktrain.utilities.parsing",
    "rank_zero_only": "tracktrain.utilities.rank_zero",
    "rank_zero_info": "tracktrain.utilities.rank_zero",
    "rank_zero_warn": "tracktrain.utilities.rank_zero",
    "rank_zero_debug": "tracktrain.utilities.rank_zero",
    "rank_zero_deprecation": "tracktrain.utilities.rank_zero",
    "grad_norm": "tracktrain.utilities.grads",
    "move_data_to_device": "tracktrain.utilities.data",
    "measure_flops": "tracktrain.utilities.flops",
    "find_shared_parameters": "tracktrain.utilities.parameter_tying",
    "set_shared_parameters": "tracktrain.utilities.parameter_tying",
    "suggested_max_num_workers": "tracktrain.utilities.data",
    "disable_possible_user_warnings": "tracktrain.utilities.warnings",
    "is_shared_filesystem": "tracktrain.utilities.data",
    "LightningEnum": "tracktrain.utilities.enums",
    "GradClipAlgorithmType": "tracktrain.utilities.enums",
    "CombinedLoader": "tracktrain.utilities.combined_loader",
    "cli_lightning_logo": "tracktrain.utilities.logo",
    "LIGHTNING_LOGO": "tracktrain.utilities.logo",
}

FLOAT16_EPSILON = 0.0009765625  # torch.finfo(torch.float16).eps, without importing torch here
FLOAT32_EPSILON = 1.1920928955078125e-07
FLOAT64_EPSILON = 2.220446049250313e-16

__all__ = sorted([*_LAZY, "FLOAT16_EPSILON", "FLOAT32_EPSILON", "FLOAT64_EPSILON"])

__getattr__, __dir__ = lazy_attributes(__name__, globals(), _LAZY)
