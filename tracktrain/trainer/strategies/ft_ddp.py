"""`FTDDPStrategy`: per-step fault-tolerant data parallelism on torchft (`pip install 'tracktrain[ft]'`).

Each replica group is an ordinary process (one process per group in this version). The groups meet at a torchft
lighthouse (`torchft_lighthouse --bind 127.0.0.1:29510 --min_replicas 1`), whose address the strategy takes from
its `lighthouse` argument or from `TORCHFT_LIGHTHOUSE`. Every optimizer step:

1. before the step's first forward, the group joins the step's quorum at the lighthouse (torchft's
   `Manager.start_quorum`); a group that is behind the others (it joined late, or it was killed and restarted)
   is healed there: it loads the module, optimizers, LR schedulers, gradient scaler and the Trainer's counters
   (global step, samples seen, callbacks) from a live peer, served over HTTP by that peer's Manager;
2. backward all-reduces the gradients over the groups in the quorum (torchft's `DistributedDataParallel`, through
   its managed gloo/nccl process group, which is rebuilt whenever the quorum changes);
3. the optimizer steps only if every group of the quorum agrees the step is good (`Manager.should_commit`): a
   step during which a group was lost is dropped by the survivors, which keep running — the job does not stop.

torchft is imported when the fit starts (`setup_environment`), never when tracktrain is.

Data: a DataLoader is split into `groups` shards, and group `group` reads shard `group` (torchft's own rule, its
`DistributedSampler`): while a group is down its shard is not read by anyone, and a healed group continues reading
its shard from where its own loader is (torchft drops or repeats those batches; it never re-balances shards).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import torch
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, RandomSampler, SequentialSampler

from tracktrain.trainer.strategies.base import ParallelStrategy
from tracktrain.trainer.strategies.data_parallel import StepModule, with_sampler

__all__ = ["LIGHTHOUSE_ENV", "PARTICIPANTS", "FTDDPStrategy", "check_lighthouse"]

LIGHTHOUSE_ENV = "TORCHFT_LIGHTHOUSE"
"""torchft's environment variable for the lighthouse address (`http://host:port`)."""
PARTICIPANTS = "ft/participants"
"""The published value of the replica groups that took part in the step (at the Trainer's `log_every_n_steps`)."""
INSTALL = "pip install 'tracktrain[ft]'"
# what a recovering group copies from a peer: a checkpoint's objects without the engine's loop position (which
# the running loop owns) and without the DataModule (whose data a group reads on its own)
_RECOVERED = ("model", "optimizers", "lr_schedulers", "grad_scaler", "trainer")


class FTDDPStrategy(ParallelStrategy):
    """`strategy="ft_ddp"`: data parallel over torchft replica groups that meet at a lighthouse; a lost group's step is
    dropped (not the job), and a group that comes back is healed from a live peer.

    Args:
        lighthouse: the lighthouse's address, `http://host:port` (default: `$TORCHFT_LIGHTHOUSE`).
        group: this replica group's index, 0 … groups-1 (default `$TRACKTRAIN_FT_GROUP`, else 0): its id at the
            lighthouse and the data shard it reads.
        groups: how many replica groups the data is split for (default `$TRACKTRAIN_FT_GROUPS`, else 1).
        min_replicas: the fewest groups a step commits with (torchft's `min_replica_size`).
        timeout: how long a collective, a commit vote or a recovery transfer waits.
        quorum_timeout: how long a step waits for its quorum at the lighthouse.
        connect_timeout: how long connecting to the lighthouse (and to a peer's Manager) may take; an unreachable
            lighthouse fails the fit within it.
        backend: "gloo" (CPU) or "nccl" (CUDA); default: nccl on CUDA, else gloo.
    """

    name = "ft_ddp"
    steps_in_lockstep = False  # groups come and go: no flag is exchanged between them outside a step's quorum

    def __init__(
        self,
        lighthouse: str | None = None,
        group: int | None = None,
        groups: int | None = None,
        min_replicas: int = 1,
        timeout: timedelta = timedelta(seconds=30),
        quorum_timeout: timedelta = timedelta(seconds=60),
        connect_timeout: timedelta = timedelta(seconds=10),
        backend: str | None = None,
    ) -> None:
        super().__init__()
        self.group = _index("group", group, "TRACKTRAIN_FT_GROUP", 0)
        self.groups = _index("groups", groups, "TRACKTRAIN_FT_GROUPS", 1)
        if not 0 <= self.group < self.groups:
            raise ValueError(
                f"FTDDPStrategy(group={self.group}) must be in 0 … groups-1 = {self.groups - 1}: give each replica "
                "group its own index and every group the same groups=."
            )
        if not (isinstance(min_replicas, int) and min_replicas >= 1):
            raise ValueError(f"FTDDPStrategy(min_replicas=...) must be an int >= 1, got {min_replicas!r}.")
        for what, value in (("timeout", timeout), ("quorum_timeout", quorum_timeout), ("connect", connect_timeout)):
            if not (isinstance(value, timedelta) and value.total_seconds() > 0):
                raise ValueError(f"FTDDPStrategy({what}=...) must be a positive datetime.timedelta, got {value!r}.")
        if backend not in (None, "gloo", "nccl"):
            raise ValueError(f"FTDDPStrategy(backend=...) must be 'gloo', 'nccl' or None, got {backend!r}.")
        self.lighthouse = lighthouse
        self.min_replicas = min_replicas
        self.timeout, self.quorum_timeout, self.connect_timeout = timeout, quorum_timeout, connect_timeout
        self.backend = backend
        # made by setup_environment, for one fit
        self._manager: Any = None
        self._store: Any = None  # torch.distributed.TCPStore (its stubs do not export it)
        self._recovered: dict[str, Any] = {}

    # ------------------------------------------------------------------------------- the group and its manager
    @property
    def manager(self) -> Any:
        """torchft's `Manager` of this fit (None outside a fit): its `current_step()`, `num_participants()`."""
        return self._manager

    def setup_environment(self, device: torch.device) -> torch.device:
        """Check the lighthouse answers, then start this group's store and torchft's Manager on it."""
        torchft = _import_torchft()
        address = self.lighthouse or os.environ.get(LIGHTHOUSE_ENV)
        if not address:
            raise ValueError(
                f"strategy='ft_ddp' needs a torchft lighthouse: pass FTDDPStrategy(lighthouse='http://host:port') or "
                f"set {LIGHTHOUSE_ENV}; start one with `torchft_lighthouse --bind 127.0.0.1:29510 --min_replicas 1`."
            )
        check_lighthouse(address, self.connect_timeout)
        if os.environ.get("WORLD_SIZE", "1") != "1":
            raise NotImplementedError(
                f"strategy='ft_ddp' runs one process per replica group for now; this group has "
                f"WORLD_SIZE={os.environ['WORLD_SIZE']}. Start each group as one process (no torchrun)."
            )
        cuda = device.type == "cuda"
        backend = self.backend or ("nccl" if cuda else "gloo")
        self._store = torch.distributed.TCPStore(  # type: ignore[attr-defined]
            "127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=self.timeout
        )
        pg = (
            torchft.ProcessGroupNCCL(timeout=self.timeout)
            if backend == "nccl"
            else torchft.ProcessGroupGloo(timeout=self.timeout)
        )
        self._manager = torchft.Manager(
            pg=pg,
            load_state_dict=self._load_recovered,
            state_dict=self._recovered_state,
            min_replica_size=self.min_replicas,
            use_async_quorum=False,  # heal before the step's forward: the step runs on the peer's weights
            timeout=self.timeout,
            quorum_timeout=self.quorum_timeout,
            connect_timeout=self.connect_timeout,
            rank=0,
            world_size=1,
            store_addr="127.0.0.1",
            store_port=self._store.port,
            lighthouse_addr=address,
            replica_id=f"tracktrain_group_{self.group}",
            hostname="127.0.0.1",
        )
        return device

    def setup_module(self, module: nn.Module, autocast_dtype: torch.dtype | None = None) -> Callable[[Any, int], Any]:
        from torchft import DistributedDataParallel  # torchft's DDP: gradients all-reduced through the Manager

        assert self._manager is not None, "setup_environment() first"
        return DistributedDataParallel(self._manager, StepModule(module))

    def model_engine_options(self, optimizer: torch.optim.Optimizer | None) -> dict[str, Any]:
        """The optimizer steps only on a commit (the step's quorum forms in `zero_grad`)."""
        if optimizer is None:
            raise NotImplementedError(
                "strategy='ft_ddp' supports automatic optimization only for now (torchft decides per step whether "
                "the optimizer steps); set automatic_optimization = True."
            )
        manager = self._manager

        def step_if_committed(optimizer: torch.optim.Optimizer) -> None:
            if manager.should_commit():  # every group of the quorum agrees the step's gradients are whole
                optimizer.step()

        return {"optimizer_step": step_if_committed}

    def zero_grad(self, zero: Callable[[], None]) -> None:
        """Join the step's quorum before its first forward — a group behind the others loads a peer's state here,
        so the step runs on the peer's weights — then clear the gradients (`zero`: the module's
        `optimizer_zero_grad` or the optimizer's)."""
        self._manager.start_quorum()  # waits for the quorum (use_async_quorum=False)
        zero()

    def check_schedule(
        self, max_epochs: int | None, max_steps: int | None, scheduler_intervals: Sequence[str], accumulates: bool
    ) -> None:
        """Refuse what hangs on the epoch position, which is each group's own (a healed group gets the peer's step,
        weights and schedulers, not its loop's place in the epoch): the groups would then step their LR, stop or
        close accumulation windows at different steps, and their weights diverge without an error."""
        epochs = [index for index, interval in enumerate(scheduler_intervals) if interval == "epoch"]
        if epochs:
            raise ValueError(
                f"strategy='ft_ddp' steps LR schedulers per optimizer step only, but the scheduler(s) at "
                f"{epochs} of configure_optimizers have interval='epoch': a healed replica group's epoch is its own, "
                "so it would step them at other steps than its peers and their weights would diverge. Return "
                '{"scheduler": s, "interval": "step"} (with the scheduler\'s period counted in optimizer steps).'
            )
        if max_steps is None or max_epochs is not None:
            raise ValueError(
                f"strategy='ft_ddp' stops a fit at max_steps only, but this Trainer has max_epochs={max_epochs}, "
                f"max_steps={max_steps}: a healed replica group's epoch is its own, so an epoch limit would stop the "
                "groups at different steps. Give Trainer(max_steps=N, max_epochs=None)."
            )
        if accumulates:
            raise ValueError(
                "strategy='ft_ddp' takes one batch per optimizer step, but this fit accumulates gradients "
                "(accumulate_grad_batches > 1 or a GradientAccumulationScheduler): its windows are counted per epoch, "
                "which is each replica group's own, so the groups' windows would not line up. Use "
                "accumulate_grad_batches=1 (and a larger batch, or more groups)."
            )

    def step_values(self) -> dict[str, float]:
        """`ft/participants`: the replica groups in the last step's quorum (torchft's `num_participants()`)."""
        if self._manager is None:
            return {}
        return {PARTICIPANTS: float(self._manager.num_participants())}

    def setup_recovery(self, objects: dict[str, Any]) -> None:
        self._recovered = {key: objects[key] for key in _RECOVERED if key in objects}

    def distribute(self, loader: Iterable[Any], shuffle_default: bool, seed: int = 0) -> Iterable[Any]:
        """`loader` reading this group's shard (one of `groups`): a DataLoader rebuilt around a DistributedSampler;
        other iterables are taken as sharded already."""
        if not isinstance(loader, DataLoader) or isinstance(loader.sampler, DistributedSampler):
            return loader
        if not isinstance(loader.sampler, (RandomSampler, SequentialSampler)) or loader.batch_sampler is None:
            raise ValueError(
                f"strategy='ft_ddp' shards a DataLoader by replacing its sampler, but this one has a custom "
                f"{type(loader.sampler).__name__}: give it DistributedSampler(dataset, num_replicas={self.groups}, "
                f"rank={self.group}) yourself."
            )
        sampler: DistributedSampler = DistributedSampler(
            loader.dataset,
            num_replicas=self.groups,
            rank=self.group,
            shuffle=isinstance(loader.sampler, RandomSampler),
            seed=seed,
            drop_last=loader.drop_last,
        )
        return with_sampler(loader, sampler)

    def reduce_gradients(self, module: nn.Module) -> None:
        """Average the gradients over the quorum's groups (an accumulation window flushed at an epoch's end)."""
        for parameter in module.parameters():
            if parameter.requires_grad:
                if parameter.grad is None:
                    parameter.grad = torch.zeros_like(parameter)
                self._manager.allreduce(parameter.grad).wait()

    def teardown(self) -> None:
        """Stop this group's Manager (its server and checkpoint transport) and store; the other groups go on."""
        manager, self._manager = self._manager, None
        if manager is not None:
            manager.shutdown(wait=False)
        self._store = None
        self._recovered = {}

    # ----------------------------------------------------------------------------------------- recovery state
    def _recovered_state(self) -> dict[str, Any]:
        return {key: _state_of(value) for key, value in self._recovered.items()}

    def _load_recovered(self, state: dict[str, Any]) -> None:
        missing = [key for key in self._recovered if key not in state]
        if missing:
            raise RuntimeError(
                f"strategy='ft_ddp': the peer this group heals from sent no {missing} (it sent {sorted(state)}): "
                "every group must run the same module, optimizers and schedulers."
            )
        for key, value in self._recovered.items():
            _load_into(value, state[key])


def check_lighthouse(address: str, timeout: timedelta) -> None:
    """ConnectionError naming `address` unless a TCP connection to it opens within `timeout`."""
    parts = urlsplit(address if "://" in address else f"http://{address}")
    try:
        host, port = parts.hostname, parts.port
    except ValueError as error:
        raise ValueError(f"Not a lighthouse address: {address!r} (expected http://host:port).") from error
    if not host or port is None:
        raise ValueError(f"Not a lighthouse address: {address!r} (expected http://host:port).")
    try:
        socket.create_connection((host, port), timeout=timeout.total_seconds()).close()
    except OSError as error:
        raise ConnectionError(
            f"No torchft lighthouse answers at {address} (within {timeout.total_seconds():g} s: {error}). Start one "
            f"(`torchft_lighthouse --bind {host}:{port} --min_replicas 1`) or point {LIGHTHOUSE_ENV} / "
            "FTDDPStrategy(lighthouse=...) at the running one."
        ) from error


def _import_torchft() -> Any:
    try:
        import torchft
    except ImportError as error:
        raise ImportError(f"strategy='ft_ddp' needs torchft: {INSTALL}") from error
    return torchft


def _index(what: str, value: int | None, env: str, default: int) -> int:
    if value is None:
        text = os.environ.get(env)
        if text is None:
            return default
        if not text.isdigit():
            raise ValueError(f"{env} must be a whole number, got {text!r}.")
        value = int(text)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"FTDDPStrategy({what}=...) must be an int >= 0, got {value!r}.")
    return value


def _state_of(value: Any) -> Any:
    if isinstance(value, list):
        return [item.state_dict() for item in value]
    return value.state_dict()


def _load_into(value: Any, state: Any) -> None:
    if isinstance(value, list):
        for item, item_state in zip(value, state):
            item.load_state_dict(item_state)
    else:
        value.load_state_dict(state)
