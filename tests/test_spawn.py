"""tracktrain.distributed.spawn: ranks set up as torchrun sets them, started from scratch or forked from a server
that imported torch once, each seeing the caller's environment as it is at the call."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tracktrain.distributed.collectives import spawn


def _write_what_the_rank_sees(out: Path) -> None:
    seen = {name: os.environ.get(name) for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SPAWN_TEST_VALUE")}
    (out / f"rank{os.environ['RANK']}.json").write_text(json.dumps(seen))


@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_every_rank_sees_the_callers_environment_as_it_is_at_each_call(tmp_path, monkeypatch, start_method):
    """The second call's value must arrive: a forked rank would otherwise have the server's environment, from
    whenever the server started (the first call, or an earlier test)."""
    for value in ("first", "second"):
        monkeypatch.setenv("SPAWN_TEST_VALUE", value)
        out = tmp_path / value
        out.mkdir()
        spawn(_write_what_the_rank_sees, 2, args=(out,), start_method=start_method)
        seen = [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(2)]
        assert seen == [
            {"RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank), "SPAWN_TEST_VALUE": value}
            for rank in range(2)
        ]


@pytest.mark.parametrize("setting", [{"start_method": "fork"}, {"environment": "threads"}])
def test_an_unknown_start_method_is_refused_with_the_choices(monkeypatch, setting):
    monkeypatch.delenv("TRACKTRAIN_START_METHOD", raising=False)
    if "environment" in setting:
        monkeypatch.setenv("TRACKTRAIN_START_METHOD", setting["environment"])
        setting = {}
    with pytest.raises(ValueError, match=r"must be one of \('spawn', 'forkserver'\)"):
        spawn(_write_what_the_rank_sees, 2, **setting)
