"""`Callback` (defined with the Trainer that calls it, `tracktrain.trainer.callback`), where callbacks import it, with
`TrainerSurface`, the type of the Trainer its hooks receive."""

from tracktrain.trainer.callback import Callback, CallbackPhase, check_state_keys
from tracktrain.trainer.surface import TrainerSurface

__all__ = ["Callback", "CallbackPhase", "TrainerSurface", "check_state_keys"]
