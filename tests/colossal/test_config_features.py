"""A Colossal-AI config means what it means in Colossal-AI: `launch` loads and checks it, `initialize` applies its
features (gradient accumulation, clipping, torch AMP), and what cannot mean the same here is refused naming the key.
One process, launched as torchrun would launch it."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from tracktrain.colossal import initialize, launch_from_torch
from tracktrain.colossal.amp import AMP_TYPE
from tracktrain.colossal.context import Config, ConfigException, ParallelMode
from tracktrain.colossal.core import global_context as gpc
from tracktrain_integrations.testing import free_port


@pytest.fixture
def launch(monkeypatch):
    """`launch_from_torch(config)` in this process, as rank 0 of 1; the process group left at the end."""
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))

    def run(config):
        launch_from_torch(config=config, verbose=False)
        return gpc

    yield run
    gpc.destroy()


def batches(count, size=4, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [
        (torch.randn(size, 3, generator=generator), torch.randint(0, 2, (size,), generator=generator))
        for _ in range(count)
    ]


def optimizer_steps(optimizer):
    steps = []
    optimizer.register_step_post_hook(lambda *_: steps.append(1))
    return steps


def engine_loop(engine, loader):
    """The loop of Colossal-AI's gradient-accumulation and clipping examples, as written there."""
    engine.train()
    for img, label in loader:
        engine.zero_grad()
        output = engine(img)
        train_loss = engine.criterion(output, label)
        engine.backward(train_loss)
        engine.step()


def test_gradient_accumulation_steps_the_optimizer_every_4_batches_on_their_mean_gradient(launch):
    launch(dict(BATCH_SIZE=4, gradient_accumulation=4))
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    reference = nn.Linear(3, 2)
    reference.load_state_dict(model.state_dict())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    steps = optimizer_steps(optimizer)
    data = batches(10)
    engine, loader, _, _ = initialize(model, optimizer, nn.CrossEntropyLoss(), data, verbose=False)
    assert len(loader) == 8  # cut to whole windows, as Colossal-AI's GradAccumDataloader does
    weights = []
    for img, label in loader:
        engine.zero_grad()
        engine.backward(engine.criterion(engine(img), label))
        engine.step()
        weights.append(model.weight.detach().clone())
    assert len(steps) == 2
    changed = [not torch.equal(a, b) for a, b in zip(weights, weights[1:], strict=False)]
    assert changed == [False, False, True, False, False, False, True]  # steps after batches 4 and 8
    # the first step is one SGD step on the four batches' mean loss (equal batches: their concatenation)
    inputs, labels = torch.cat([b[0] for b in data[:4]]), torch.cat([b[1] for b in data[:4]])
    nn.CrossEntropyLoss()(reference(inputs), labels).backward()
    with torch.no_grad():
        expected = reference.weight - 0.5 * reference.weight.grad
    torch.testing.assert_close(weights[3], expected)


def test_clip_grad_norm_clips_the_gradients_total_norm(launch):
    launch(dict(clip_grad_norm=1.0))
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    before = [p.detach().clone() for p in model.parameters()]
    engine, *_ = initialize(model, torch.optim.SGD(model.parameters(), lr=1.0), nn.MSELoss(), verbose=False)
    engine.zero_grad()
    engine.backward(engine.criterion(engine(torch.full((4, 3), 10.0)), torch.full((4, 2), -10.0)))
    raw = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
    engine.step()
    moved = torch.nn.utils.get_total_norm([b - p.detach() for b, p in zip(before, model.parameters(), strict=True)])
    assert raw > 10 and moved == pytest.approx(1.0, rel=1e-5)  # lr 1: the step is the clipped gradient


def test_the_trainer_counts_iterations_and_the_engine_accumulates(launch, tmp_path, monkeypatch):
    from tracktrain.colossal.trainer import Trainer, hooks

    monkeypatch.chdir(tmp_path)
    launch(dict(gradient_accumulation=4))
    model = nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    steps = optimizer_steps(optimizer)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    engine, loader, _, scheduler = initialize(
        model, optimizer, nn.CrossEntropyLoss(), batches(9), lr_scheduler=scheduler, verbose=False
    )
    trainer = Trainer(engine)
    trainer.fit(loader, epochs=2, hooks=[hooks.LRSchedulerHook(scheduler, by_epoch=False)])
    assert trainer.cur_step == 16 and len(steps) == 4  # Colossal-AI's cur_step counts iterations
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.1 * 0.5**4)  # the wrapped scheduler: once a window


def test_fp16_is_torch_amp(launch):
    launch(dict(fp16=dict(mode=AMP_TYPE.TORCH, init_scale=2.0**10)))
    model = nn.Linear(3, 2)
    engine, *_ = initialize(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.CrossEntropyLoss(), verbose=False)
    assert engine(torch.randn(2, 3)).dtype == torch.float16
    assert isinstance(engine.scaler, torch.amp.GradScaler) and engine.scaler.get_scale() == 2.0**10


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (dict(fp16=dict(mode=AMP_TYPE.NAIVE)), r"fp16 = dict\(mode=AMP_TYPE.NAIVE\) is not supported"),
        (dict(fp16=dict(mode=AMP_TYPE.APEX)), r"apex AMP runs NVIDIA apex"),
        (dict(fp16=dict(mode="torch")), "must be an AMP_TYPE"),
        (dict(fp16=dict(mode=AMP_TYPE.TORCH, init_scal=1.0)), r"unknown keys \['init_scal'\]"),
        (dict(zero=dict(model_config=dict())), "zero = .* FSDP2"),
        (dict(gradient_handler=[dict(type="DataParallelGradientHandler")]), "gradient_handler = .* handle_gradient"),
        (dict(parallel=dict(data=2)), r"unknown keys \['data'\]"),
        (dict(parallel=dict(tensor=dict(size=2, mode="1d"))), "TensorParallelStrategy"),
        (dict(parallel=dict(tensor=dict(size=1, mode="4d"))), "mode must be one of"),
        (dict(parallel=dict(pipeline=2)), "NUM_MICRO_BATCHES"),
        (dict(gradient_accumulation=0), "gradient_accumulation must be a whole number"),
        (dict(clip_grad_norm=-1), "clip_grad_norm must be a number >= 0"),
        (dict(torch_ddp=True), "torch_ddp holds"),
    ],
)
def test_what_cannot_mean_the_same_is_refused_naming_the_key(config, message):
    with pytest.raises(ConfigException, match=message):
        gpc.load_config(config)


def test_the_scripts_own_values_are_kept_and_a_setting_misnamed_is_warned_about():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gpc.load_config(dict(BATCH_SIZE=128, lr_drop=200, CONFIG=dict(fp16=dict(mode=AMP_TYPE.TORCH))))
    assert gpc.config.BATCH_SIZE == 128 and gpc.config.CONFIG.fp16.mode is AMP_TYPE.TORCH
    with pytest.warns(UserWarning, match="gradient_clipping = 2.0, which is not a Colossal-AI setting.*clip_grad_norm"):
        gpc.load_config(dict(gradient_clipping=2.0))
    with pytest.warns(UserWarning, match="write gradient_accumulation = "):
        gpc.load_config(dict(gradient_accumulations=4))
    assert gpc.features.gradient_accumulation == 1  # as under Colossal-AI: it changes nothing
    gpc.load_config({})


def test_a_config_file_keeps_its_values_not_its_imports(tmp_path):
    (tmp_path / "config.py").write_text(
        "from tracktrain.colossal.amp import AMP_TYPE\nimport math\nBATCH_SIZE = 128\nNUM_EPOCHS = 2\n"
        "fp16 = dict(mode=AMP_TYPE.TORCH)\n"
    )
    config = Config.from_file(tmp_path / "config.py")
    assert sorted(config) == ["BATCH_SIZE", "NUM_EPOCHS", "fp16"]
    assert config.fp16.mode is AMP_TYPE.TORCH and isinstance(config.fp16, Config)
    with pytest.raises(AttributeError, match=r"no 'LEARNING_RATE' .*\['BATCH_SIZE', 'NUM_EPOCHS', 'fp16'\]"):
        _ = config.LEARNING_RATE
    with pytest.raises(FileNotFoundError, match="does not exist"):
        Config.from_file(tmp_path / "missing.py")


def test_gpc_of_one_process(launch):
    gpc = launch(dict(BATCH_SIZE=8))
    assert gpc.get_global_rank() == 0 and gpc.config.BATCH_SIZE == 8
    assert [gpc.get_world_size(mode) for mode in (ParallelMode.GLOBAL, ParallelMode.DATA, ParallelMode.TENSOR)] == [
        1,
        1,
        1,
    ]
    assert (gpc.data_parallel_size, gpc.pipeline_parallel_size, gpc.tensor_parallel_size) == (1, 1, 1)
    assert not gpc.is_initialized(ParallelMode.PIPELINE)
    with pytest.raises(RuntimeError, match="only with parallel.pipeline > 1"):
        gpc.get_local_rank(ParallelMode.PIPELINE)


def test_launch_from_torch_outside_torchrun_says_how_to_start(monkeypatch):
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(RuntimeError, match="torchrun --nproc_per_node N"):
        launch_from_torch(config={})
