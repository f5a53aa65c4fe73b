"""get_dist_logger: one shared logger per name, its console and per-rank file output, levels, and rank gating —
in this process (rank from RANK) and for real in two gloo processes."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from tests import _processes
from tracktrain.distributed.logger import DistributedLogger, get_dist_logger
from tracktrain.engine import Engine
from tracktrain_integrations.testing import free_port

LINE = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] (DEBUG|INFO|WARNING|ERROR) (\S+)( \[rank \d+\])? - (.*)$")


@pytest.fixture(autouse=True)
def not_distributed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pytest process is a single rank 0, whatever the shell it was started from exported."""
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)


@pytest.fixture
def logger(request: pytest.FixtureRequest):
    """A logger of its own for each test (shared loggers live for the whole process); its files closed after."""
    dist_logger = get_dist_logger(f"test-{request.node.name}")
    yield dist_logger
    close_files(dist_logger)


def close_files(dist_logger: DistributedLogger) -> None:
    for handler in list(dist_logger.logger.handlers):
        if isinstance(handler, logging.FileHandler):
            dist_logger.logger.removeHandler(handler)
            handler.close()


def stderr_lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    captured = capsys.readouterr()
    assert captured.out == ""
    return captured.err.splitlines()


def test_one_shared_logger_per_name():
    assert get_dist_logger("test-shared") is get_dist_logger("test-shared")
    assert get_dist_logger("test-shared") is not get_dist_logger("test-shared-other")
    assert get_dist_logger().name == "tracktrain"
    with pytest.raises(RuntimeError, match=r"named 'test-shared' exists already.*get_dist_logger\('test-shared'\)"):
        DistributedLogger("test-shared")


def test_info_prints_one_formatted_line_to_stderr(logger, capsys):
    logger.info("loss 0.5%")
    lines = stderr_lines(capsys)
    assert len(lines) == 1  # nothing propagated to a second handler
    match = LINE.match(lines[0])
    assert match is not None, lines[0]
    assert match.groups() == ("INFO", logger.name, None, "loss 0.5%")  # no rank tag outside distributed runs


def test_levels_console(logger, capsys):
    logger.debug("d1")
    logger.info("i1")
    logger.set_level("debug")
    logger.debug("d2")
    logger.set_level("WARNING")
    logger.info("i2")
    logger.warning("w")
    logger.error("e")
    messages = [LINE.match(line).group(1, 4) for line in stderr_lines(capsys)]
    assert messages == [("INFO", "i1"), ("DEBUG", "d2"), ("WARNING", "w"), ("ERROR", "e")]


def test_unknown_level_lists_the_valid_ones(logger, tmp_path):
    with pytest.raises(ValueError, match=r"unknown logging level 'LOUD'.*\['DEBUG', 'INFO', 'WARNING', 'ERROR'\]"):
        logger.set_level("LOUD")
    with pytest.raises(ValueError, match=r"log_to_file: unknown logging level 10"):
        logger.log_to_file(tmp_path, level=10)  # type: ignore[arg-type]


def test_records_reach_added_handlers_once_with_the_callers_location(logger, caplog):
    logger.logger.addHandler(caplog.handler)
    try:
        logger.warning("watch out")
    finally:
        logger.logger.removeHandler(caplog.handler)
    [record] = caplog.records
    assert record.getMessage() == "watch out"
    assert record.levelname == "WARNING"
    assert record.filename == "test_dist_logger.py"
    assert record.funcName == "test_records_reach_added_handlers_once_with_the_callers_location"


def test_does_not_change_the_engines_own_loggers(capsys):
    get_dist_logger("tracktrain").info("hello")
    engine_logger = logging.getLogger("tracktrain.engine.engine.Engine")
    assert engine_logger.propagate and engine_logger.getEffectiveLevel() == logging.getLogger().level
    assert logging.getLogger("tracktrain").handlers == []
    Engine(lambda e, b: None).run(range(2), max_epochs=1)
    err = capsys.readouterr().err
    assert "hello" in err
    assert "Engine run starting" not in err  # the Engine's INFO messages stay as quiet as in Ignite


def test_log_to_file_writes_rank_zero_file_in_a_created_directory(logger, tmp_path, capsys):
    directory = tmp_path / "logs" / "run1"
    file = logger.log_to_file(directory)
    assert file == (directory / "rank_0.log").resolve()
    logger.info("first")
    logger.debug("hidden")
    logger.error("second")
    lines = file.read_text().splitlines()
    assert [LINE.match(line).group(1, 2, 4) for line in lines] == [
        ("INFO", logger.name, "first"),
        ("ERROR", logger.name, "second"),
    ]
    assert len(stderr_lines(capsys)) == 2  # the console still gets them too


def test_suffix_names_the_file(logger, tmp_path):
    file = logger.log_to_file(tmp_path, suffix="train")
    assert file.name == "rank_0_train.log"
    logger.info("x")
    assert file.read_text().endswith(" - x\n")


def test_same_file_twice_keeps_one_handler(logger, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    first = logger.log_to_file("logs")
    second = logger.log_to_file(tmp_path / "logs")  # the same directory, spelled differently
    third = logger.log_to_file("logs", suffix="b")
    assert first == second != third
    logger.info("once")
    assert first.read_text().count("once") == 1
    assert third.read_text().count("once") == 1
    assert sum(isinstance(h, logging.FileHandler) for h in logger.logger.handlers) == 2


def test_file_and_console_levels_are_independent(logger, tmp_path, capsys):
    debug_file = logger.log_to_file(tmp_path, level="DEBUG", suffix="debug")
    warning_file = logger.log_to_file(tmp_path, level="WARNING", suffix="warning")
    logger.debug("d")
    logger.info("i")
    logger.warning("w")
    assert [line.rsplit(" - ", 1)[1] for line in debug_file.read_text().splitlines()] == ["d", "i", "w"]
    assert [line.rsplit(" - ", 1)[1] for line in warning_file.read_text().splitlines()] == ["w"]
    assert [line.rsplit(" - ", 1)[1] for line in stderr_lines(capsys)] == ["i", "w"]
    logger.log_to_file(tmp_path, level="ERROR", suffix="debug")  # again: only the level changes
    logger.warning("w2")
    assert "w2" not in debug_file.read_text()


def test_mode_append_or_overwrite(tmp_path, request):
    (tmp_path / "rank_0.log").write_text("old line\n")
    appending = get_dist_logger(f"test-{request.node.name}-a")
    try:
        appending.log_to_file(tmp_path, mode="a")
        appending.info("new")
    finally:
        close_files(appending)
    assert (tmp_path / "rank_0.log").read_text().startswith("old line\n[")
    overwriting = get_dist_logger(f"test-{request.node.name}-w")
    try:
        overwriting.log_to_file(tmp_path, mode="w")
        overwriting.info("newer")
    finally:
        close_files(overwriting)
    assert (tmp_path / "rank_0.log").read_text().splitlines()[0].endswith(" - newer")


def test_log_to_file_errors(logger, tmp_path):
    a_file = tmp_path / "taken"
    a_file.write_text("")
    with pytest.raises(NotADirectoryError, match=r"'.*taken' is a file.*Pass a directory"):
        logger.log_to_file(a_file)
    with pytest.raises(ValueError, match=r"mode must be 'a' \(append\) or 'w' \(overwrite\), got 'r'"):
        logger.log_to_file(tmp_path, mode="r")
    with pytest.raises(ValueError, match="suffix must be a non-empty file-name part without '/', got '../up'"):
        logger.log_to_file(tmp_path, suffix="../up")
    assert list(tmp_path.iterdir()) == [a_file]  # nothing was created by the failed calls


def test_ranks_argument_on_rank_zero(logger, capsys):
    logger.info("default")
    logger.info("listed", ranks=[0, 1])
    logger.info("others only", ranks=[1, 2])
    logger.info("a range", ranks=range(2))
    assert [line.rsplit(" - ", 1)[1] for line in stderr_lines(capsys)] == ["default", "listed", "a range"]
    with pytest.raises(TypeError, match=r"ranks must be None \(rank 0\) or a list of ranks such as \[0, 1\], got 0"):
        logger.info("x", ranks=0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="got '01'"):
        logger.info("x", ranks="01")  # type: ignore[arg-type]


def test_rank_from_the_environment_before_the_process_group_exists(logger, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    file = logger.log_to_file(tmp_path)
    assert file.name == "rank_1.log"
    logger.info("rank zero only")
    logger.info("everyone", ranks=[0, 1])
    [line] = stderr_lines(capsys)
    assert LINE.match(line).group(3, 4) == (" [rank 1]", "everyone")
    assert file.read_text().splitlines() == [line]

    monkeypatch.setenv("RANK", "one")
    with pytest.raises(ValueError, match="RANK environment variable is 'one', not an integer"):
        logger.info("x", ranks=[1])


def test_module_logs_without_torch(tmp_path):
    code = f"""
import sys
sys.modules["torch"] = None  # any "import torch" now fails
from tracktrain.distributed.logger import get_dist_logger
logger = get_dist_logger()
logger.log_to_file({str(tmp_path)!r})
logger.info("no torch here")
print("torch" in sys.modules and sys.modules["torch"] is not None)
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
    assert result.stderr.endswith("INFO tracktrain - no torch here\n")
    assert (tmp_path / "rank_0.log").read_text().endswith("INFO tracktrain - no torch here\n")


# --- two real ranks -------------------------------------------------------------------------------------------


def _rank_worker(rank: int, port: int, out_dir: str) -> None:
    import torch.distributed as dist

    out = Path(out_dir)
    sys.stderr = open(out / f"stderr_{rank}.txt", "w")  # the console handler follows sys.stderr
    # before the process group: the rank comes from RANK, as under torchrun
    os.environ["RANK"], os.environ["WORLD_SIZE"] = str(rank), "2"
    early = get_dist_logger("early")
    early.log_to_file(out / "early")
    early.info(f"early default from {rank}")
    early.info(f"early all from {rank}", ranks=[0, 1])

    os.environ["RANK"] = str(1 - rank)  # wrong on purpose: an initialized process group must win
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2, timeout=timedelta(seconds=20)
    )
    try:
        logger = get_dist_logger("train")
        logger.log_to_file(out / "train", suffix="run")
        logger.info(f"default from {rank}")
        logger.info(f"all from {rank}", ranks=[0, 1])
        logger.info(f"only one from {rank}", ranks=[1])
        logger.warning(f"warning default from {rank}")
        logger.debug(f"debug from {rank}", ranks=[0, 1])
        dist.barrier()
    finally:
        dist.destroy_process_group()
        sys.stderr.close()
        sys.stderr = sys.__stderr__


@pytest.fixture(scope="module")
def two_rank_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    mp = pytest.importorskip("torch.multiprocessing")
    out = tmp_path_factory.mktemp("ranks")
    with _processes.stopped_on_exit("the logger tests' ranks"):  # a rank that hangs: its stack, then killed
        mp.spawn(_rank_worker, args=(free_port(), str(out)), nprocs=2, join=True)
    return out


def messages(path: Path) -> list[tuple[str | None, str]]:
    """(rank tag, message) of every line in a log file."""
    return [LINE.match(line).group(3, 4) for line in path.read_text().splitlines()]


@pytest.mark.distributed
@pytest.mark.timeout(60)
def test_each_rank_writes_the_lines_its_ranks_allow(two_rank_logs):
    train = two_rank_logs / "train"
    assert sorted(p.name for p in train.iterdir()) == ["rank_0_run.log", "rank_1_run.log"]
    assert messages(train / "rank_0_run.log") == [
        (" [rank 0]", "default from 0"),
        (" [rank 0]", "all from 0"),
        (" [rank 0]", "warning default from 0"),
    ]
    assert messages(train / "rank_1_run.log") == [(" [rank 1]", "all from 1"), (" [rank 1]", "only one from 1")]


@pytest.mark.distributed
@pytest.mark.timeout(60)
def test_each_rank_prints_the_lines_its_ranks_allow(two_rank_logs):
    def printed(rank: int) -> list[str]:
        return [LINE.match(line).group(4) for line in (two_rank_logs / f"stderr_{rank}.txt").read_text().splitlines()]

    assert printed(0) == [
        "early default from 0",
        "early all from 0",
        "default from 0",
        "all from 0",
        "warning default from 0",
    ]
    assert printed(1) == ["early all from 1", "all from 1", "only one from 1"]


@pytest.mark.distributed
@pytest.mark.timeout(60)
def test_before_init_the_rank_comes_from_the_environment(two_rank_logs):
    early = two_rank_logs / "early"
    assert messages(early / "rank_0.log") == [(" [rank 0]", "early default from 0"), (" [rank 0]", "early all from 0")]
    assert messages(early / "rank_1.log") == [(" [rank 1]", "early all from 1")]
