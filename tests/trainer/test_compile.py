"""`compile=` on the Trainer and `ModelEngine`: a compiled fit trains what an eager one trains; its checkpoints
have the eager module's keys and resume either way; graphs are compiled once, not per step nor per fit; under DDP
and FSDP2 (2 gloo processes), where each block FSDP shards is compiled on its own (a whole-model compile breaks at
FSDP2's hooks). Most tests compile with "aot_eager" or a counting backend (seconds); one compiles with inductor."""

from __future__ import annotations

import re

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard

from tracktrain import LoopModule, Trainer
from tracktrain.callbacks import ModelCheckpoint
from tracktrain.distributed.collectives import spawn
from tracktrain.engine import ModelEngine
from tracktrain.trainer.model_preparation import prepare_module

from ._blocks import Block, BlockNet, CountingBackend, max_difference, state
from ._ddp import load_per_rank as _load
from ._ddp import save_per_rank as _save
from ._tasks import checkpoint_files, make_loader, quiet

AOT = {"backend": "aot_eager"}  # traced and run through AOTAutograd, no code generated: seconds, not minutes


@pytest.fixture(autouse=True)
def _fresh_compile_cache():
    """Each test starts without the graphs of the tests before it (torch.compile's cache is per process)."""
    torch.compiler.reset()
    yield
    torch.compiler.reset()


def _fit(root, compile, ckpt_path=None, save_every=None, **kwargs) -> BlockNet:
    module = BlockNet()
    callbacks = [ModelCheckpoint(dirpath=root / "ckpt", every_n_train_steps=save_every, save_top_k=None)]
    options = quiet(root, max_epochs=2, loggers=False, compile=compile, callbacks=callbacks if save_every else None)
    Trainer(**options, **kwargs).fit(module, make_loader(), ckpt_path=ckpt_path)
    return module


def _checkpoint(directory, step: int):
    (name,) = [name for name in checkpoint_files(directory) if re.search(rf"_{step}\.pt$", name)]
    return directory / name


def test_a_compiled_fit_trains_what_an_eager_fit_trains_and_checkpoints_load_either_way(tmp_path):
    eager = _fit(tmp_path / "eager", False, save_every=6)
    compiled = _fit(tmp_path / "compiled", AOT, save_every=6)
    assert max_difference(state(compiled), state(eager)) <= 1e-6

    # the checkpoints hold the eager module's keys (no "_orig_mod."), so each resumes in the other kind of run
    keys = list(BlockNet().state_dict())
    for run in ("eager", "compiled"):
        assert list(torch.load(_checkpoint(tmp_path / run / "ckpt", 6), weights_only=False)["model"]) == keys
    eager_from_compiled = _fit(tmp_path / "r1", False, ckpt_path=_checkpoint(tmp_path / "compiled" / "ckpt", 6))
    compiled_from_eager = _fit(tmp_path / "r2", AOT, ckpt_path=_checkpoint(tmp_path / "eager" / "ckpt", 6))
    assert max_difference(state(eager_from_compiled), state(eager)) <= 1e-6
    assert max_difference(state(compiled_from_eager), state(eager)) <= 1e-6


def test_graphs_are_compiled_once_not_per_step_nor_per_fit(tmp_path):
    backend = CountingBackend()
    module = BlockNet()
    options = quiet(tmp_path, max_epochs=2, loggers=False, compile={"backend": backend})
    Trainer(**options).fit(module, make_loader(), make_loader(n=16))
    graphs = backend.graphs
    assert 1 <= graphs <= 2  # one for training, one for evaluation (module.training is part of the graph)
    assert backend.runs >= 16  # the compiled code ran each of the 16 training steps (and the validation)

    Trainer(**options).fit(module, make_loader(), make_loader(n=16))  # a second fit of the same module
    assert backend.graphs == graphs
    assert backend.runs >= 32


def test_a_plain_models_fit_compiles_the_model(tmp_path):
    backend = CountingBackend()
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    keys = list(model.state_dict())
    trainer = Trainer(**quiet(tmp_path, max_epochs=1, loggers=False, compile={"backend": backend}))
    trainer.fit(
        model, make_loader(), optimizer=torch.optim.SGD(model.parameters(), lr=0.1), criterion=nn.CrossEntropyLoss()
    )
    assert backend.graphs == 1 and backend.runs == 8  # fit(model, ...) steps call the model, not the LoopModule
    assert list(model.state_dict()) == keys


class StepsCallTheNet(LoopModule):
    """Lightning's usual style: no forward, the steps call the network (and a loss module) themselves."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
        self.loss = nn.CrossEntropyLoss()

    def train_step(self, batch, batch_idx):
        x, y = batch
        return self.loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_a_loop_module_without_forward_compiles_the_networks_its_steps_call(tmp_path):
    backend = CountingBackend()
    module = StepsCallTheNet()
    keys = list(module.state_dict())
    Trainer(**quiet(tmp_path, max_epochs=1, loggers=False, compile={"backend": backend})).fit(module, make_loader())
    assert backend.graphs == 1 and backend.runs == 8  # self.net, at each of the 8 steps; the loss module is not
    assert list(module.state_dict()) == keys

    class NothingToCompile(LoopModule):
        def train_step(self, batch, batch_idx):
            return torch.zeros((), requires_grad=True)

        def configure_optimizers(self):
            return torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.1)

    class BlocksInAList(StepsCallTheNet):  # the steps loop over an nn.ModuleList, which has no call of its own
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])

        def train_step(self, batch, batch_idx):
            x, y = batch
            for block in self.blocks:
                x = torch.tanh(block(x))
            return self.loss(self.net(x), y)

    backend = CountingBackend()
    Trainer(**quiet(tmp_path, max_epochs=1, loggers=False, compile={"backend": backend})).fit(
        BlocksInAList(), make_loader()
    )
    assert backend.graphs == 3 and backend.runs == 3 * 8  # each block and the net, at every step

    with pytest.raises(ValueError, match=r"compile=.*found nothing to compile in NothingToCompile"):
        Trainer(**quiet(tmp_path, max_epochs=1, loggers=False, compile=AOT)).fit(NothingToCompile(), make_loader())


def test_model_engine_compiles_its_model_in_place():
    backend = CountingBackend()
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    keys = list(model.state_dict())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    engine = ModelEngine(model, optimizer, nn.CrossEntropyLoss(), compile={"backend": backend})
    x, y = next(iter(make_loader()))
    for _ in range(3):
        engine.zero_grad()
        engine.backward(engine.criterion(engine(x), y))
        engine.step()
    assert engine.model is model and list(model.state_dict()) == keys
    assert backend.graphs == 1 and backend.runs == 3


@pytest.mark.parametrize(
    "make", [lambda value: Trainer(compile=value), lambda value: ModelEngine(nn.Linear(1, 1), compile=value)]
)
@pytest.mark.parametrize(
    ("value", "error", "match"),
    [
        ("yes", TypeError, r"compile=\.\.\.\) takes True, False or a dict of torch.compile options.*got 'yes'"),
        (1, TypeError, r"compile=\.\.\.\) takes True, False or a dict.*got 1"),
        ({"mode": "fastest"}, ValueError, r"compile=\.\.\.\) got options that torch.compile refuses.*fastest"),
        ({"backnd": "eager"}, ValueError, r"refuses: \{'backnd': 'eager'\}.*unexpected keyword argument 'backnd'"),
        ({"backend": "nope"}, ValueError, r"refuses.*Invalid backend: 'nope'"),
    ],
)
def test_bad_compile_options_say_what_was_given_and_what_is_accepted(make, value, error, match):
    with pytest.raises(error, match=match):
        make(value)


def test_inductor_compiles_a_fit_that_trains_what_eager_trains(tmp_path, monkeypatch):
    """compile=True: the default backend (inductor: C++ generated for the CPU), once in these tests (about 10 s on
    2 cores); its kernels may round differently, not more."""
    import torch._inductor.compile_fx as inductor  # where torch.compile's default backend compiles each graph

    graphs = []
    compile_fx = inductor.compile_fx
    monkeypatch.setattr(inductor, "compile_fx", lambda *args, **kwargs: graphs.append(1) or compile_fx(*args, **kwargs))
    eager = _fit(tmp_path / "eager", False)
    compiled = _fit(tmp_path / "compiled", True)
    assert len(graphs) == 1  # the training graph (no validation here)
    assert max_difference(state(compiled), state(eager)) <= 1e-5


# ------------------------------------------------------------------------------------------------ DDP, FSDP2
def _gathered(module: nn.Module) -> dict[str, torch.Tensor]:
    """The full weights, on every rank (FSDP2's are DTensors)."""
    return {
        name: (tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor).detach().clone()
        for name, tensor in module.state_dict().items()
    }


def _fit_in_rank(out: str, strategy: str, **kwargs) -> BlockNet:
    module = BlockNet()
    options = quiet(out, max_epochs=2, loggers=False, strategy=strategy, **kwargs)
    Trainer(**options).fit(module, make_loader(), make_loader(n=16))
    return module


def _ddp_compiled(out: str) -> None:
    backend = CountingBackend()
    eager = _gathered(_fit_in_rank(out, "ddp"))
    compiled = _gathered(_fit_in_rank(out, "ddp", compile={"backend": backend}))
    _save(out, "ddp", [max_difference(compiled, eager), backend.graphs, compiled["head.weight"].flatten().tolist()])


@pytest.mark.distributed
@pytest.mark.timeout(180)
@pytest.mark.slow  # 2 ranks: CI's slow run
def test_ddp_trains_a_compiled_module_as_an_eager_one(tmp_path):
    spawn(_ddp_compiled, 2, args=(str(tmp_path),))
    (difference0, graphs0, head0), (difference1, graphs1, head1) = _load(tmp_path, "ddp")
    assert difference0 <= 1e-6 and difference1 <= 1e-6
    assert graphs0 >= 1 and graphs1 >= 1
    assert head0 == head1  # the ranks stay identical


def _fsdp_compiled(out: str) -> None:
    backend = CountingBackend()
    eager = _gathered(_fit_in_rank(out, "fsdp"))
    # each block FSDP shards compiled as one whole graph (fullgraph=True), with its activations checkpointed
    options = {"backend": backend, "fullgraph": True}
    module = _fit_in_rank(out, "fsdp", compile=options, activation_checkpointing=[Block])
    compiled = _gathered(module)
    result = [max_difference(compiled, eager), backend.graphs, list(compiled) == list(eager)]

    # the alternative, the whole module compiled around its sharded blocks: FSDP2's hooks run outside
    # torch.compile, so the graph must break at each block, which fullgraph=True refuses
    whole = BlockNet()
    prepare_module(whole, compile={"backend": "eager", "fullgraph": True})
    for block in whole.blocks:
        fully_shard(block)
    fully_shard(whole)
    try:
        whole(torch.randn(8, 4))
        result.append("compiled")
    except Exception as error:  # torch._dynamo.exc.Unsupported
        result.append(type(error).__name__)
    _save(out, "fsdp", result)
    dist.barrier()


@pytest.mark.distributed
@pytest.mark.timeout(180)
@pytest.mark.slow  # 2 ranks: CI's slow run
def test_fsdp_compiles_each_sharded_block_as_one_graph(tmp_path):
    spawn(_fsdp_compiled, 2, args=(str(tmp_path),))
    for difference, graphs, same_keys, whole_module in _load(tmp_path, "fsdp"):
        assert difference <= 1e-6
        assert 1 <= graphs <= 4  # the 3 blocks share their code: per mode, a graph or two, not one per step
        assert same_keys
        assert whole_module == "Unsupported"
