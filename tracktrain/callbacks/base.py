"""`Callback` (defined with the Trainer that calls it, `tracktrain.trainer.callback`), where callbacks import it."""

from tracktrain.trainer.callback import Callback, CallbackPhase, check_state_keys

__all__ = ["Callback", "CallbackPhase", "check_state_keys"]
