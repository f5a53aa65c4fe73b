"""ProgressBar on real tqdm, drawing to a real terminal (a pseudo-terminal) and to non-terminal streams."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import re
import struct
import termios
import threading
import warnings
from collections.abc import Iterator

import pytest
import torch

from tracktrain.engine import Engine, Events
from tracktrain.handlers import ProgressBar

_ESCAPE = re.compile(r"\x1b\[(\d*)([A-Za-z])")


class Terminal:
    """A pseudo-terminal: `file` is a real TTY for tqdm, and everything written to it is read back."""

    def __init__(self, columns: int = 120) -> None:
        self._master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
        self.file = os.fdopen(slave, "w", encoding="utf-8")
        self._chunks: list[bytes] = []
        # drained continuously so a full pty buffer can never block the writer
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._text: str | None = None

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self._master, 65536)
            except OSError:  # EIO: the terminal side is closed and everything has been read
                return
            if not data:
                return
            self._chunks.append(data)

    def output(self) -> str:
        """Everything written, once the writer is done (closes the terminal side)."""
        if self._text is None:
            self.file.close()
            self._reader.join(timeout=5)
            os.close(self._master)
            self._text = b"".join(self._chunks).decode("utf-8")
        return self._text

    def screen(self) -> list[str]:
        """The lines as a terminal shows them at the end: carriage returns overwrite, cursor-up moves back."""
        lines: list[list[str]] = [[]]
        row = col = 0
        text = self.output()
        i = 0
        while i < len(text):
            match = _ESCAPE.match(text, i)
            if match:
                if match.group(2) == "A":
                    row = max(0, row - int(match.group(1) or 1))
                i = match.end()
                continue
            ch = text[i]
            if ch == "\r":
                col = 0
            elif ch == "\n":
                row += 1
                while len(lines) <= row:
                    lines.append([])
            else:
                line = lines[row]
                line.extend(" " * (col - len(line) + 1))
                line[col] = ch
                col += 1
            i += 1
        rendered = ["".join(line).rstrip() for line in lines]
        while rendered and not rendered[-1]:
            rendered.pop()
        return rendered


@pytest.fixture
def terminal() -> Iterator[Terminal]:
    term = Terminal()
    yield term
    term.output()


def make_engine(metric: float | None = 0.5) -> Engine:
    engine = Engine(lambda e, batch: torch.tensor(float(batch)))
    if metric is not None:

        @engine.on(Events.ITERATION_COMPLETED)
        def set_metric(e: Engine) -> None:
            e.state.metrics["acc"] = metric

    return engine


def test_bar_on_a_terminal_shows_epoch_percentage_and_values(terminal):
    engine = make_engine()
    pbar = ProgressBar(file=terminal.file, persist=True, mininterval=0, miniters=1)
    pbar.attach(engine, metric_names=["acc"], output_transform=lambda out: {"loss": out})
    engine.run(range(5), max_epochs=2)

    screen = terminal.screen()
    assert len(screen) == 2, screen
    for epoch, line in enumerate(screen, start=1):
        assert line.startswith(f"Epoch [{epoch}/2]: [5/5] 100%|"), line
        assert "acc=0.5" in line and "loss=4" in line
    # it was drawn while running, not only at the end
    assert "[3/5]  60%" in terminal.output()
    assert pbar.pbar is None  # closed on EPOCH_COMPLETED


def test_single_epoch_run_is_described_as_iteration(terminal):
    engine = make_engine(metric=None)
    ProgressBar(file=terminal.file, persist=True).attach(engine)
    engine.run(range(4), max_epochs=1)
    assert terminal.screen() == [terminal.screen()[0]]
    assert terminal.screen()[0].startswith("Iteration: [4/4] 100%|")


def test_custom_description(terminal):
    engine = make_engine(metric=None)
    ProgressBar(file=terminal.file, persist=True, desc="Training").attach(engine)
    engine.run(range(3), max_epochs=2)
    screen = terminal.screen()
    assert screen[0].startswith("Training [1/2]: [3/3] 100%|")
    assert screen[1].startswith("Training [2/2]: [3/3] 100%|")


def test_persist_false_clears_each_bar(terminal):
    engine = make_engine()
    ProgressBar(file=terminal.file, mininterval=0, miniters=1).attach(engine, metric_names="all")
    engine.run(range(5), max_epochs=2)
    assert "Epoch [2/2]: [5/5] 100%" in terminal.output()  # drawn...
    assert terminal.screen() == []  # ...and cleared


@pytest.mark.parametrize("make_stream", ["stringio", "pipe"], ids=["StringIO", "pipe"])
def test_no_output_on_a_non_terminal_unless_forced(make_stream):
    def run(**kwargs) -> str:
        if make_stream == "stringio":
            stream = io.StringIO()
            engine = make_engine()
            ProgressBar(file=stream, **kwargs).attach(engine, metric_names="all")
            engine.run(range(5), max_epochs=2)
            return stream.getvalue()
        read_fd, write_fd = os.pipe()
        with os.fdopen(write_fd, "w") as stream:
            engine = make_engine()
            ProgressBar(file=stream, **kwargs).attach(engine, metric_names="all")
            engine.run(range(5), max_epochs=2)
        with os.fdopen(read_fd) as reader:
            return reader.read()

    assert run() == ""
    forced = run(disable=False, persist=True)
    assert "Epoch [2/2]: [5/5] 100%" in forced and "acc=0.5" in forced


def test_default_stream_is_stderr_and_captured_stderr_is_not_a_terminal(capsys):
    engine = make_engine()
    pbar = ProgressBar()
    pbar.attach(engine, metric_names="all")
    engine.run(range(5), max_epochs=2)
    pbar.log_message("still printed")
    captured = capsys.readouterr()
    assert captured.err == ""
    assert captured.out == "still printed\n"


def test_values_are_read_only_when_the_bar_redraws(terminal):
    reads = []

    def output_transform(output):
        reads.append(output)
        return {"loss": output}

    # a redraw interval far longer than the run: drawn when opened and when closed, nothing in between
    engine = make_engine(metric=None)
    ProgressBar(file=terminal.file, mininterval=3600).attach(engine, output_transform=output_transform)
    engine.run(range(50), max_epochs=2)
    assert len(reads) == 2 * 2

    # redraw on every update: read on every iteration, plus once at the close
    reads.clear()
    engine = make_engine(metric=None)
    ProgressBar(file=terminal.file, mininterval=0, miniters=1).attach(engine, output_transform=output_transform)
    engine.run(range(10), max_epochs=1)
    assert len(reads) == 10 + 1

    # a disabled bar never reads
    reads.clear()
    engine = make_engine(metric=None)
    ProgressBar(file=io.StringIO()).attach(engine, output_transform=output_transform)
    engine.run(range(10), max_epochs=2)
    assert reads == []


def test_log_message_is_printed_above_the_bar(terminal):
    engine = make_engine(metric=None)
    pbar = ProgressBar(file=terminal.file, persist=True)
    pbar.attach(engine)

    @engine.on(Events.ITERATION_COMPLETED(once=2))
    def say(_):
        pbar.log_message("halfway there")

    engine.run(range(4), max_epochs=1)
    screen = terminal.screen()
    assert screen[0] == "halfway there"
    assert screen[1].startswith("Iteration: [4/4] 100%|")


def test_log_message_writes_to_a_non_terminal_file():
    stream = io.StringIO()
    ProgressBar(file=stream).log_message("hello")
    assert stream.getvalue() == "hello\n"


def test_postfix_flattens_dicts_sequences_tensors_and_state_attributes(terminal):
    engine = Engine(lambda e, b: {"loss": torch.tensor(0.25), "parts": torch.tensor([1.0, 2.0]), "lr": [0.1, 0.01]})

    @engine.on(Events.ITERATION_COMPLETED)
    def metrics(e):
        e.state.metrics.update(acc=0.75, nested={"top1": 0.5, "top5": 0.875}, name="run-a")
        e.state.alpha = 3

    ProgressBar(file=terminal.file, persist=True, ncols=200).attach(
        engine, metric_names="all", output_transform=lambda out: out, state_attributes=["alpha"]
    )
    engine.run(range(2), max_epochs=1)
    line = terminal.screen()[0]
    postfix = line.split("|")[-1]
    for expected in (
        "acc=0.75",
        "nested_top1=0.5",
        "nested_top5=0.875",
        "name=run-a",
        "loss=0.25",
        "parts_0=1",
        "parts_1=2",
        "lr_0=0.1",
        "lr_1=0.01",
        "alpha=3",
    ):
        assert expected in postfix, (expected, line)


def test_missing_metric_and_unsupported_value_warn(terminal):
    engine = Engine(lambda e, b: torch.zeros(2, 2))
    ProgressBar(file=terminal.file).attach(engine, metric_names=["nope"], output_transform=lambda out: out)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        engine.run(range(2), max_epochs=1)
    messages = [str(w.message) for w in caught]
    assert any("'nope' is missing" in m for m in messages), messages
    assert any("can not show 'output'" in m for m in messages), messages


def test_filtered_event_advances_in_steps_and_ends_full(terminal):
    engine = make_engine(metric=None)
    ProgressBar(file=terminal.file, persist=True, mininterval=0, miniters=1).attach(
        engine, event_name=Events.ITERATION_COMPLETED(every=3)
    )
    engine.run(range(10), max_epochs=2)
    output = terminal.output()
    assert "Epoch [1/2]: [3/10]" in output and "Epoch [1/2]: [6/10]" in output
    assert "Epoch [1/2]: [4/10]" not in output
    assert terminal.screen()[0].startswith("Epoch [1/2]: [10/10] 100%")


def test_epoch_level_bar_closed_on_completed(terminal):
    engine = make_engine(metric=None)
    ProgressBar(file=terminal.file, persist=True, mininterval=0).attach(
        engine, event_name=Events.EPOCH_COMPLETED, closing_event_name=Events.COMPLETED
    )
    engine.run(range(2), max_epochs=3)
    assert terminal.screen() == [terminal.screen()[0]]
    assert terminal.screen()[0].startswith("Epoch: [3/3] 100%")


def test_terminate_closes_the_bar_where_it_stopped(terminal):
    engine = make_engine(metric=None)
    pbar = ProgressBar(file=terminal.file, persist=True, mininterval=0)
    pbar.attach(engine)
    engine.add_event_handler(Events.ITERATION_COMPLETED(once=8), lambda e: e.terminate())
    engine.run(range(5), max_epochs=3)
    assert pbar.pbar is None
    screen = terminal.screen()
    assert screen[0].startswith("Epoch [1/3]: [5/5] 100%")
    assert screen[1].startswith("Epoch [2/3]: [3/5]  60%")  # not faked to 100%


def test_interrupt_closes_and_resume_starts_a_bar_at_the_current_step(terminal):
    engine = make_engine(metric=None)
    pbar = ProgressBar(file=terminal.file, persist=True, mininterval=0)
    pbar.attach(engine)
    engine.add_event_handler(Events.ITERATION_COMPLETED(once=3), lambda e: e.interrupt())
    engine.run(range(5), max_epochs=1)
    assert pbar.pbar is None
    engine.run(range(5), max_epochs=1)
    screen = terminal.screen()
    assert screen[0].startswith("Iteration: [3/5]  60%")
    assert screen[1].startswith("Iteration: [5/5] 100%")


def test_bar_left_by_an_exception_is_closed_by_the_next_run_or_by_close(terminal):
    engine = make_engine(metric=None)
    pbar = ProgressBar(file=terminal.file, persist=True, mininterval=0)
    pbar.attach(engine)
    failing = {"at": 3}

    @engine.on(Events.ITERATION_COMPLETED)
    def fail(e):
        if e.state.iteration == failing["at"]:
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        engine.run(range(5), max_epochs=1)
    assert pbar.pbar is not None and pbar.pbar.n == 3  # no engine event tells the bar about the exception
    failing["at"] = None
    engine.state.max_epochs = None  # start over: STARTED closes the leftover bar
    engine.run(range(5), max_epochs=1)
    screen = terminal.screen()
    assert screen[0].startswith("Iteration: [3/5]  60%")
    assert screen[1].startswith("Iteration: [5/5] 100%")


def test_context_manager_closes_the_bar_after_an_exception():
    engine = make_engine(metric=None)
    engine.add_event_handler(Events.ITERATION_COMPLETED(once=2), lambda _: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        with ProgressBar(file=io.StringIO(), disable=False) as pbar:
            pbar.attach(engine)
            try:
                engine.run(range(5), max_epochs=1)
            finally:
                assert pbar.pbar is not None
    assert pbar.pbar is None


def test_same_final_screen_as_ignite():
    ignite_engine_mod = pytest.importorskip("ignite.engine")
    ignite_handlers = pytest.importorskip("ignite.handlers")

    def scenario(engine_cls, events, bar_cls) -> list[str]:
        terminal = Terminal()
        engine = engine_cls(lambda e, batch: torch.tensor(batch / 4))

        @engine.on(events.ITERATION_COMPLETED)
        def set_metric(e):
            e.state.metrics["acc"] = e.state.iteration / 10

        bar_cls(file=terminal.file, persist=True).attach(
            engine, metric_names="all", output_transform=lambda out: {"loss": out}
        )
        engine.run(list(range(7)), max_epochs=3)
        return terminal.screen()

    ours = scenario(Engine, Events, ProgressBar)
    theirs = scenario(ignite_engine_mod.Engine, ignite_engine_mod.Events, ignite_handlers.ProgressBar)
    assert len(ours) == 3
    assert ours == theirs


def test_invalid_arguments_are_rejected_with_the_fix():
    engine = make_engine()
    with pytest.raises(TypeError, match="persist"):
        ProgressBar(leave=True)
    with pytest.raises(TypeError, match="total="):
        ProgressBar(total=10)
    with pytest.raises(TypeError, match="unknown tqdm argument"):
        ProgressBar(colour_scheme="red")
    pbar = ProgressBar()
    with pytest.raises(TypeError, match="metric_names"):
        pbar.attach(engine, metric_names="acc")
    with pytest.raises(TypeError, match="output_transform"):
        pbar.attach(engine, output_transform="loss")
    with pytest.raises(ValueError, match="should not be filtered"):
        pbar.attach(engine, closing_event_name=Events.EPOCH_COMPLETED(every=2))
    with pytest.raises(ValueError, match="before closing event"):
        pbar.attach(engine, event_name=Events.EPOCH_COMPLETED, closing_event_name=Events.EPOCH_COMPLETED)
    with pytest.raises(ValueError, match="not an event a ProgressBar can follow"):
        pbar.attach(engine, event_name=Events.GET_BATCH_STARTED)
    with pytest.raises(TypeError, match="needs an Engine"):
        pbar.attach("trainer")


def test_place_in_period_is_the_step_within_the_epoch_also_after_a_resume():
    from tracktrain.handlers.progress import place_in_period

    # iterations 1..8 of a 4-step epoch, as the bar and the Trainer's plain lines count them
    assert [place_in_period(count, 4) for count in range(1, 9)] == [1, 2, 3, 4, 1, 2, 3, 4]
    assert place_in_period(7, 4) == 3  # a run resumed at iteration 6 is at step 3 of epoch 2, not at its first
    assert place_in_period(7, None) == 7  # the epoch length not known yet: the count itself
