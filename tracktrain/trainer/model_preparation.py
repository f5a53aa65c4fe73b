"""What the Trainer does to a module before the strategy wraps it: activation checkpointing, then compile.

The order is torchtitan's (`parallelize`): activation checkpointing, then `torch.compile`, then FSDP2's
`fully_shard` (the strategy's `setup_module`, right after). Neither step changes the module's structure: its
submodules keep their classes and its parameters their names, so `state_dict` keys are the same as an eager run's
and checkpoints load either way.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from tracktrain.engine.compiling import compile_module
from tracktrain.trainer.arguments import check_activation_checkpointing
from tracktrain.trainer.supervised_module import SupervisedModule

__all__ = ["ActivationCheckpointing", "prepare_module"]

#: the submodules whose activations are recomputed in backward: a class, classes, or a predicate over submodules
ActivationCheckpointing = type[nn.Module] | Iterable[type[nn.Module]] | Callable[[nn.Module], bool] | None


def prepare_module(
    module: nn.Module,
    activation_checkpointing: ActivationCheckpointing = None,
    compile: Mapping[str, Any] | None = None,  # torch.compile's options (the Trainer's argument, checked)
    blocks: list[nn.Module] | None = None,
) -> None:
    """Checkpoint the activations of the submodules `activation_checkpointing` picks, then compile `blocks` (the
    strategy's `compile_blocks`) one by one with `torch.compile(**compile)` — or, without blocks, the module's forward
    (a plain model's, for `fit(model, optimizer=..., criterion=...)`). Preparing the same module again (a second fit)
    checkpoints nothing twice and traces nothing again."""
    spec = check_activation_checkpointing(activation_checkpointing)
    if spec is not None:
        picked = _picked(module, spec)
        if not picked:
            raise ValueError(
                f"Trainer(activation_checkpointing={activation_checkpointing!r}) picks no submodule of "
                f"{type(module).__name__}: name the class of the blocks its forward calls (e.g. [TransformerBlock])."
            )
        for block in picked:
            if not isinstance(block.__dict__.get("forward"), _Checkpointed):
                # Set on the block itself (an instance attribute; its class, its code and its names unchanged)
                # rather than a wrapper module, which torch's `checkpoint_wrapper` is: it renames every parameter
                # `_checkpoint_wrapped_module.*`. Nor `torch.distributed._composable.checkpoint`'s hooks: private,
                # and torch.compile breaks its graph at them (an error with fullgraph=True). torch.compile traces
                # this public `torch.utils.checkpoint` call into the block's graph; FSDP2's hooks stay around it.
                block.forward = _Checkpointed(block.forward)
    if compile is None:
        return
    for target in blocks or _compiled_whole(module):
        compile_module(target, compile)


def _compiled_whole(module: nn.Module) -> list[nn.Module]:
    """What `compile=` compiles when no blocks are named: a plain model's fit compiles the model; a LoopModule with
    a forward of its own, that forward (its steps call `self(...)`). A LoopModule without one runs its networks from
    its steps (`self.net(x)`, Lightning's usual style), where compiling its own call would compile nothing, silently:
    its children that hold parameters are what the steps run, so each is compiled (a metric or a loss module, without
    parameters, is left as it is; an `nn.ModuleList` or `nn.ModuleDict`, which has no call, gives its elements)."""
    if isinstance(module, SupervisedModule):
        return [module.model]
    if type(module).forward is not nn.Module.forward:
        return [module]
    networks = _networks_in(module)
    if not networks:
        raise ValueError(
            f"Trainer(compile=...) found nothing to compile in {type(module).__name__}: it has no forward of its own "
            "and no submodule with parameters. Give it a forward that its steps call, or leave compile off."
        )
    return networks


def _networks_in(module: nn.Module) -> list[nn.Module]:
    """`module`'s children that hold parameters, the elements of a container (ModuleList, ModuleDict) in its place."""
    networks = []
    for child in module.children():
        if next(child.parameters(), None) is None:
            continue
        networks += _networks_in(child) if isinstance(child, (nn.ModuleList, nn.ModuleDict)) else [child]
    return networks


class _Checkpointed:
    """A block's forward under `torch.utils.checkpoint.checkpoint` (non-reentrant): only its inputs are kept for
    backward, which runs the forward again (with the same random state) to get the rest."""

    def __init__(self, forward: Callable[..., Any]) -> None:
        self.forward = forward

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled():  # evaluation: nothing is kept, nothing to recompute
            return self.forward(*args, **kwargs)
        # the block's keyword arguments bound here, so none is taken for checkpoint's own (debug=, context_fn=...)
        forward = functools.partial(self.forward, **kwargs) if kwargs else self.forward
        return checkpoint(forward, *args, use_reentrant=False)


def _picked(module: nn.Module, spec: Callable[[nn.Module], bool] | tuple[type[nn.Module], ...]) -> list[nn.Module]:
    """The submodules `spec` picks, outermost only (a block inside a checkpointed block is recomputed with it)."""
    picked: list[nn.Module] = []

    def visit(parent: nn.Module) -> None:
        for child in parent.children():
            if isinstance(child, spec) if isinstance(spec, tuple) else spec(child):
                picked.append(child)
            else:
                visit(child)

    visit(module)
    return picked
