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

Checkpoints: each group's checkpoints (its own `default_root_dir`) also hold its Manager's step (`ft_manager`), so
that after every group was stopped — killed, pre-empted — and all were started again, each resumes its newest
committed checkpoint with the Manager where it was: groups that resumed the same step form their first quorum at
that step, none is healed, and the run continues exactly as if it had not stopped. Groups that resumed different
steps (one was killed before its newest save committed) refuse to go on, each with an error naming both steps
(`_cold_mismatch`): healing the one behind from the one ahead would pair the ahead group's weights with the
behind group's data position, which is not the run that was checkpointed.

Data: a DataLoader is split into `groups` shards, and group `group` reads shard `group` (torchft's own rule, its
`DistributedSampler`): while a group is down its shard is not read by anyone, and a healed group continues reading
its shard from where its own loader is (torchft drops or repeats those batches; it never re-balances shards).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterable, Mapping, Sequence
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
MANAGER_ENTRY = "ft_manager"
"""The checkpoint entry holding the group's torchft Manager state (its step, the batches committed) and index."""
_START = "ft_start"  # the recovery state's record of how the serving group's fit started (see `_cold_mismatch`)


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
        self._resumed: int | None = None  # the Manager step this fit's checkpoint restored (None: a new run)
        self._stepped = False  # whether this fit took part in a quorum yet
        self._refusal: RuntimeError | None = None  # raised at this group's first optimizer step (a peer disagreed)

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
        self._resumed, self._stepped, self._refusal = None, False, None
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
            if self._refusal is not None:  # after the step's all-reduce: the peer that refused has its message
                raise self._refusal
            if manager.should_commit():  # every group of the quorum agrees the step's gradients are whole
                optimizer.step()

        return {"optimizer_step": step_if_committed}

    def zero_grad(self, zero: Callable[[], None]) -> None:
        """Join the step's quorum before its first forward — a group behind the others loads a peer's state here,
        so the step runs on the peer's weights — then clear the gradients (`zero`: the module's
        `optimizer_zero_grad` or the optimizer's)."""
        self._manager.start_quorum()  # waits for the quorum (use_async_quorum=False)
        self._stepped = True
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

    def checkpoint_objects(self, objects: dict[str, Any]) -> dict[str, Any]:
        """A full checkpoint also holds this group's Manager state (`ft_manager`), restored with it: a cold restart
        of every group starts their Managers at the step they were at, not at 0 (where torchft would heal every
        group but one from that one, whatever checkpoint each had resumed)."""
        if "train_engine" not in objects or self._manager is None:  # weights only, or outside a fit
            return objects
        return {**objects, MANAGER_ENTRY: ManagerState(self._manager, self.group, self._note_resumed)}

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
        self._refusal = None

    # ----------------------------------------------------------------------------------------- recovery state
    def _note_resumed(self, step: int) -> None:
        self._resumed = step

    def _start_record(self) -> dict[str, Any]:
        return {"group": self.group, "resumed": self._resumed, "first_step": not self._stepped, "step": self._step()}

    def _step(self) -> int:
        trainer = self._recovered.get("trainer")
        return int(getattr(trainer, "global_step", 0))

    def _recovered_state(self) -> dict[str, Any]:
        """What a peer that heals from this group gets (torchft calls it while serving, in the quorum)."""
        if self._resumed is not None and not self._stepped:
            # a peer is behind this group's first step after its checkpoint: it resumed an older one, or none
            self._refusal = RuntimeError(
                f"strategy='ft_ddp': replica group {self.group} resumed its checkpoint at global step {self._step()}, "
                "and a peer group joined its first step from an earlier step (it resumed an older checkpoint, or "
                "none): after a restart of every group they must all resume the same step, or the groups' weights "
                "and data positions would not be the run's. The peer's error names its step. " + _FIX
            )
        return {key: _state_of(value) for key, value in self._recovered.items()} | {_START: self._start_record()}

    def _load_recovered(self, state: dict[str, Any]) -> None:
        missing = [key for key in self._recovered if key not in state]
        if missing:
            raise RuntimeError(
                f"strategy='ft_ddp': the peer this group heals from sent no {missing} (it sent {sorted(state)}): "
                "every group must run the same module, optimizers and schedulers."
            )
        self._refusal = self._cold_mismatch(state.get(_START) or {})
        if self._refusal is not None:
            return  # this group keeps its own state; the step's all-reduce runs, then it refuses (step_if_committed)
        for key, value in self._recovered.items():
            _load_into(value, state[key])

    def _cold_mismatch(self, peer: dict[str, Any]) -> RuntimeError | None:
        """The error when this fit's first step would heal from a peer at its own first step while either resumed a
        checkpoint: every group was restarted, and they resumed different steps (torchft heals only a group behind
        its peer). Healing would give this group the peer's weights and counters with its own data position: not the
        run that was checkpointed, nor what either group resumed. Both groups take the step's forward and backward
        (so neither waits for the other's all-reduce) and raise before the optimizer step, with the same story: the
        one ahead from `_recovered_state`, the one behind from here, naming both steps."""
        if self._stepped or not peer.get("first_step") or (self._resumed is None and peer.get("resumed") is None):
            return None  # a live peer heals a group that rejoins: torchft's rule (the module's description)
        mine = "started a new run (no checkpoint)" if self._resumed is None else f"resumed global step {self._step()}"
        theirs = "started a new run" if peer.get("resumed") is None else f"resumed global step {peer.get('step')}"
        return RuntimeError(
            f"strategy='ft_ddp': replica group {self.group} {mine}, but group {peer.get('group')} {theirs}, and both "
            "are at their first step: after a restart of every group they must all resume the same step, or the "
            "groups' weights and data positions would not be the run's. " + _FIX
        )


_FIX = (
    "Start every group again from the same step: give the groups ahead Trainer(resume=PATH), PATH their committed "
    "checkpoint at the lowest step the groups resumed (ModelCheckpoint(save_top_k=...) keeps more than the newest), "
    "or remove their newer checkpoints; or start every group on a new run (an empty default_root_dir each)."
)


class ManagerState:
    """The `ft_manager` checkpoint entry: the group's torchft Manager state (its step and the batches committed,
    torchft's `Manager.state_dict()`) and the group's index. Loading it restores the Manager's step — so that groups
    restarted from the same step meet at it, and none is healed — and tells the strategy (`resumed`) the fit resumed
    a checkpoint; a checkpoint of another group is refused (each group needs its own `default_root_dir`)."""

    def __init__(self, manager: Any, group: int, resumed: Callable[[int], None]) -> None:
        self._manager = manager
        self._group = group
        self._resumed = resumed

    def state_dict(self) -> dict[str, int]:
        return {**self._manager.state_dict(), "group": self._group}

    def load_state_dict(self, state: dict[str, int]) -> None:
        if state.get("group") != self._group:
            raise ValueError(
                f"strategy='ft_ddp': replica group {self._group} is resuming a checkpoint of group {state.get('group')}: "
                "each group must keep its checkpoints apart. Give each group its own Trainer(default_root_dir=...) "
                "(or ModelCheckpoint(dirpath=...))."
            )
        self._manager.load_state_dict(
            {"step": int(state["step"]), "batches_committed": int(state["batches_committed"])}
        )
        self._resumed(int(state["step"]))

    def load_absent(self, checkpoint: Mapping[str, Any]) -> None:
        """A checkpoint without the entry (written by another strategy, or before it existed): the Manager starts at
        the checkpoint's global step — the same for every group that resumed that step (off only by the steps that
        were dropped), so they meet there as if it had been saved."""
        step = int((checkpoint.get("trainer") or {}).get("global_step", 0))
        self._manager.load_state_dict({"step": step, "batches_committed": self._manager.batches_committed()})
        self._resumed(step)


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
