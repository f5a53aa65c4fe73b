"""The new user's path, for real: generate -> train -> SIGKILL mid-run -> the same command again (it resumes) ->
a real `mlflow server` on 127.0.0.1 over the project's sqlite file shows one run with one continuous metric
history -> the run page in headless Chromium shows the metric names (screenshot kept as a test artifact)."""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests._ci import in_ci, skip_outside_ci
from tests.template.conftest import REPOSITORY, project_environment
from tracktrain_integrations.testing import MlflowServer

pytest.importorskip("mlflow")

EPOCHS, STEPS_PER_EPOCH, LOG_EVERY = 6, 90, 5  # 1437 training images in batches of 16
ARTIFACTS = REPOSITORY / ".ci-artifacts" / "template"
NO_CHROMIUM = "the MLflow UI was not checked: no chromium binary (install it with scripts/install-chromium.sh)"


def train_command(server_root: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "digits_classifier.train",
        f"--trainer.max_epochs={EPOCHS}",
        f"--trainer.default_root_dir={server_root}",
        "--checkpoint.dirpath=runs/checkpoints",
        "--data.batch_size=16",
        f"--trainer.log_every_n_steps={LOG_EVERY}",
        "--trainer.enable_progress_bar=false",
    ]


def kill_after_first_checkpoint(project: Path, command: list[str]) -> None:
    process = subprocess.Popen(
        command,
        cwd=project,
        env=project_environment(project),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not glob.glob(str(project / "runs" / "checkpoints" / "*.pt")):
            assert process.poll() is None, f"training ended ({process.returncode}) before its first checkpoint"
            assert time.monotonic() < deadline, "no checkpoint within 120 s"
            time.sleep(0.05)
        time.sleep(0.5)  # well into the next epoch
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # the trainer and its MLflow sender, with no chance to clean up
        process.wait()
    assert process.returncode == -signal.SIGKILL


def rest(server: MlflowServer, path: str, body: dict | None = None) -> dict:
    request = urllib.request.Request(
        f"{server.url}/api/2.0/mlflow/{path}",
        data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


def history(server: MlflowServer, run_id: str, key: str) -> list[tuple[int, float]]:
    query = urllib.parse.urlencode({"run_id": run_id, "metric_key": key, "max_results": 25000})
    return sorted((int(m["step"]), m["value"]) for m in rest(server, f"metrics/get-history?{query}")["metrics"])


@pytest.mark.slow
def test_generate_train_kill_resume_and_read_the_run_back(generate, tmp_path):
    if in_ci() and chromium() is None:
        skip_outside_ci(NO_CHROMIUM)  # fails at once on CI, before minutes of training
    project = generate(tracker="mlflow")
    server_root = tmp_path / "mlflow"
    server_root.mkdir()
    command = train_command(server_root)

    kill_after_first_checkpoint(project, command)
    finished = subprocess.run(
        command, cwd=project, env=project_environment(project), capture_output=True, text=True, timeout=300
    )

    assert finished.returncode == 0, finished.stdout[-3000:] + finished.stderr[-3000:]
    assert "resumed from " in finished.stdout
    assert f"final metrics after {EPOCHS * STEPS_PER_EPOCH} steps" in finished.stdout
    assert f"mlflow ui --backend-store-uri sqlite:///{server_root}/mlflow.db" in finished.stdout
    assert "(then http://127.0.0.1:5000/#/experiments/1?workflowType=machine_learning)" in finished.stdout

    server = MlflowServer(server_root)  # over the very database the two training commands wrote
    server.start()
    try:
        experiment = rest(server, "experiments/get-by-name?experiment_name=digits_classifier")["experiment"]
        runs = rest(server, "runs/search", {"experiment_ids": [experiment["experiment_id"]]})["runs"]
        assert len(runs) == 1  # the resumed command continued the killed command's run
        (run,) = runs
        assert run["info"]["status"] == "FINISHED"

        browser_checked = check_the_run_page_in_chromium(
            server, experiment["experiment_id"], run["info"]["run_id"], tmp_path
        )

        train_loss = history(server, run["info"]["run_id"], "train_loss_step")
        steps = sorted({step for step, _ in train_loss})
        assert steps[-1] == EPOCHS * STEPS_PER_EPOCH
        assert steps == list(range(LOG_EVERY, steps[-1] + 1, LOG_EVERY)), steps[:25]  # no gap, none lost at the kill
        by_step: dict[int, set[float]] = {}
        for step, value in train_loss:
            by_step.setdefault(step, set()).add(value)
        # steps trained twice (after the checkpoint, before the kill) were trained identically
        assert all(len(values) == 1 for values in by_step.values())
        val_accuracy = history(server, run["info"]["run_id"], "val_accuracy")
        assert sorted({step for step, _ in val_accuracy}) == [STEPS_PER_EPOCH * e for e in range(1, EPOCHS + 1)]
        assert val_accuracy[-1][1] > 0.8
        # the template turns MLflow's system metrics on: sampled while both commands trained, on the same axis
        memory = history(server, run["info"]["run_id"], "system/system_memory_usage_megabytes")
        # (step 0: a sample taken while the fit set up, before its first step)
        assert memory and all(0 <= step <= EPOCHS * STEPS_PER_EPOCH for step, _ in memory)
    finally:
        server.stop()
    if not browser_checked:
        skip_outside_ci(NO_CHROMIUM)  # the rest was checked; on CI the browser check is part of the proof


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def check_the_run_page_in_chromium(server: MlflowServer, experiment_id: str, run_id: str, tmp_path: Path) -> bool:
    """What a person sees: the run page's metric names, and the metric chart page, rendered by the real UI."""
    browser = chromium()
    if browser is None:
        return False
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--run-all-compositor-stages-before-draw",
        "--virtual-time-budget=20000",
        "--window-size=1400,1000",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
    ]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)

    def look(address: str, name: str) -> str:
        """The page's text as rendered (and a screenshot of it among the CI artifacts)."""
        screenshot = tmp_path / f"{name}.png"
        subprocess.run([browser, *flags, f"--screenshot={screenshot}", address], capture_output=True, timeout=120)
        if screenshot.exists():
            shutil.copy(screenshot, ARTIFACTS / screenshot.name)
        dom = subprocess.run(
            [browser, *flags, "--dump-dom", address], capture_output=True, text=True, timeout=120
        ).stdout
        (ARTIFACTS / f"{name}.html").write_text(dom)
        return dom

    # the experiment as the printed link opens it: the model-training view, listing the run (not the GenAI view)
    overview = look(f"{server.url}/#/experiments/{experiment_id}?workflowType=machine_learning", "mlflow-experiment")
    assert "Runs - Experiment" in overview and "digits_classifier-" in overview, "not the training view"
    assert "Evaluation runs" not in overview and "Token Usage" not in overview

    page = f"{server.url}/#/experiments/{experiment_id}/runs/{run_id}"
    dom = look(page, "mlflow-run")
    for name in ("train_loss_step", "train_loss_epoch", "val_loss", "val_accuracy"):
        assert name in dom, f"{name} is not on the run page {page}"
    for param in ("trainer/max_epochs", "module/lr", "module/hidden"):
        assert param in dom, f"the parameter {param} is not on the run page {page}"
    artifacts = look(f"{page}/artifacts", "mlflow-run-artifacts")
    assert "checkpoints" in artifacts, "the run's checkpoints are not among its artifacts"

    charts = f"{page}/model-metrics"
    screenshot = tmp_path / "mlflow-run-metrics.png"
    subprocess.run([browser, *flags, f"--screenshot={screenshot}", charts], capture_output=True, timeout=120)
    chart_dom = subprocess.run(
        [browser, *flags, "--dump-dom", charts], capture_output=True, text=True, timeout=120
    ).stdout
    (ARTIFACTS / "mlflow-run-metrics.html").write_text(chart_dom)
    assert screenshot.stat().st_size > 10_000  # a rendered page, not a blank one
    shutil.copy(screenshot, ARTIFACTS / screenshot.name)
    assert "val_accuracy" in chart_dom and ("<canvas" in chart_dom or "<svg" in chart_dom)
    system = subprocess.run(
        [browser, *flags, "--dump-dom", f"{page}/system-metrics"], capture_output=True, text=True, timeout=120
    ).stdout
    assert "cpu_utilization_percentage" in system, f"no system metrics on {page}/system-metrics"
    return True
