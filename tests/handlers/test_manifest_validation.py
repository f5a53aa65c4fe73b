"""A checkpoint manifest is trusted only once every field is checked (issue 15, item 6): one edited by hand, written
by another version or damaged so that it still parses is "not committed". `Trainer(resume="auto")` then warns,
naming the manifest, the field, its value and what it should be, and resumes from the newest valid checkpoint; a
checkpoint named explicitly is refused with that message. The newest checkpoint is the highest step a valid manifest
records, never the file name. Locally and on S3 (moto)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from tests.trainer._tasks import Classifier, make_loader, quiet
from tracktrain import Trainer, storage
from tracktrain.callbacks import ModelCheckpoint
from tracktrain.checkpoint.discovery import committed_checkpoints, resume_candidates
from tracktrain.checkpoint.manifest import CheckpointCorrupted, manifest_name, parse_manifest, write_manifest
from tracktrain.checkpoint.savers import FsspecSaver
from tracktrain.handlers.checkpoint import Checkpoint

NEWEST = ("checkpoint_8.pt", "last_checkpoint_8.pt")  # what the template run wrote last, at step 8


def _rename_file(manifest: dict, old: str, new: str) -> None:
    manifest["files"] = {new if name == old else name: entry for name, entry in manifest["files"].items()}


def _set(path: str, value: Any) -> Callable[[dict, str], None]:
    """Set the field at the dotted `path` ("{data}" is the checkpoint file's name) to `value`."""

    def corrupt(manifest: dict, data: str) -> None:
        *parents, last = path.format(data=data).split("|")
        target = manifest
        for key in parents:
            target = target[key]
        target[last] = value

    return corrupt


def _delete(path: str) -> Callable[[dict, str], None]:
    def corrupt(manifest: dict, data: str) -> None:
        *parents, last = path.format(data=data).split("|")
        target = manifest
        for key in parents:
            target = target[key]
        del target[last]

    return corrupt


class _Whole:
    """What a corruption returns to replace the whole manifest (None included)."""

    def __init__(self, value: Any) -> None:
        self.value = value


def _replace(value: Any) -> Callable[[dict, str], _Whole]:
    return lambda manifest, data: _Whole(value)


def _add_file(name: str) -> Callable[[dict, str], None]:
    def corrupt(manifest: dict, data: str) -> None:
        manifest["files"][name] = dict(manifest["files"][data])

    return corrupt


# id -> (what to do to the parsed manifest, the field as the message names it, the value as shown, what it should be)
CORRUPTIONS: dict[str, tuple[Callable, str, str, str]] = {
    "format-missing": (_delete("format"), "field 'format'", "missing", "present"),
    "format-future": (
        _set("format", "tracktrain-checkpoint/2"),
        "field 'format'",
        "'tracktrain-checkpoint/2'",
        "'tracktrain-checkpoint/1'",
    ),
    "format-wrong-type": (_set("format", 1), "field 'format'", "1", "'tracktrain-checkpoint/1'"),
    "created-missing": (_delete("created"), "field 'created'", "missing", "present"),
    "created-string": (_set("created", "yesterday"), "field 'created'", "'yesterday'", "a finite number"),
    "created-nan": (_set("created", math.nan), "field 'created'", "nan", "a finite number"),
    "created-infinite": (_set("created", math.inf), "field 'created'", "inf", "a finite number"),
    "created-bool": (_set("created", True), "field 'created'", "True", "a finite number"),
    "files-missing": (_delete("files"), "field 'files'", "missing", "present"),
    "files-empty": (_set("files", {}), "field 'files'", "{}", "a non-empty object"),
    "files-list": (_set("files", ["x"]), "field 'files'", "['x']", "a non-empty object"),
    "files-parent-traversal": (
        _add_file("../victim.pt"),
        "a name in field 'files'",
        "'../victim.pt'",
        "a plain file name",
    ),
    "files-subdirectory": (_add_file("sub/x.pt"), "a name in field 'files'", "'sub/x.pt'", "a plain file name"),
    "files-dotdot": (_add_file(".."), "a name in field 'files'", "'..'", "a plain file name"),
    "files-absolute": (_add_file("/etc/passwd"), "a name in field 'files'", "'/etc/passwd'", "a plain file name"),
    "files-entry-not-object": (_set("files|{data}", 12), "field 'files.{data}'", "12", "an object {bytes, sha256}"),
    "files-bytes-missing": (_delete("files|{data}|bytes"), "field 'files.{data}.bytes'", "missing", "an integer >= 0"),
    "files-bytes-negative": (_set("files|{data}|bytes", -1), "field 'files.{data}.bytes'", "-1", "an integer >= 0"),
    "files-bytes-string": (
        _set("files|{data}|bytes", "1234"),
        "field 'files.{data}.bytes'",
        "'1234'",
        "an integer >= 0",
    ),
    "files-bytes-float": (_set("files|{data}|bytes", 1.5), "field 'files.{data}.bytes'", "1.5", "an integer >= 0"),
    "files-bytes-bool": (_set("files|{data}|bytes", True), "field 'files.{data}.bytes'", "True", "an integer >= 0"),
    "files-sha256-missing": (
        _delete("files|{data}|sha256"),
        "field 'files.{data}.sha256'",
        "missing",
        "64 lowercase hexadecimal digits",
    ),
    "files-sha256-uppercase": (
        _set("files|{data}|sha256", "AB" * 32),
        "field 'files.{data}.sha256'",
        repr("AB" * 32),
        "64 lowercase hexadecimal digits",
    ),
    "files-sha256-short": (
        _set("files|{data}|sha256", "ab12"),
        "field 'files.{data}.sha256'",
        "'ab12'",
        "64 lowercase hexadecimal digits",
    ),
    "files-sha256-number": (
        _set("files|{data}|sha256", 12),
        "field 'files.{data}.sha256'",
        "12",
        "64 lowercase hexadecimal digits",
    ),
    "files-without-its-data-file": (
        lambda manifest, data: _rename_file(manifest, data, "other.pt"),
        "field 'files'",
        "['other.pt']",
        "a listing that includes '{data}'",
    ),
    "summary-missing": (_delete("summary"), "field 'summary'", "missing", "present"),
    "summary-list": (_set("summary", [8]), "field 'summary'", "[8]", "an object"),
    "global_step-negative": (_set("summary|global_step", -1), "field 'summary.global_step'", "-1", "an integer >= 0"),
    "global_step-string": (_set("summary|global_step", "8"), "field 'summary.global_step'", "'8'", "an integer >= 0"),
    "global_step-list": (_set("summary|global_step", [8]), "field 'summary.global_step'", "[8]", "an integer >= 0"),
    "global_step-float": (_set("summary|global_step", 8.5), "field 'summary.global_step'", "8.5", "an integer >= 0"),
    "global_step-nan": (_set("summary|global_step", math.nan), "field 'summary.global_step'", "nan", "an integer >= 0"),
    "global_step-null": (_set("summary|global_step", None), "field 'summary.global_step'", "None", "an integer >= 0"),
    "iteration-negative": (_set("summary|iteration", -3), "field 'summary.iteration'", "-3", "an integer >= 0"),
    "epoch-string": (_set("summary|epoch", "one"), "field 'summary.epoch'", "'one'", "an integer >= 0"),
    "samples_seen-bool": (
        _set("summary|samples_seen", False),
        "field 'summary.samples_seen'",
        "False",
        "an integer >= 0",
    ),
    "run_ids-list": (
        _set("summary|run_ids", ["csv"]),
        "field 'summary.run_ids'",
        "['csv']",
        "an object of tracker name -> run id",
    ),
    "run_ids-number": (
        _set("summary|run_ids", {"csv": 3}),
        "field 'summary.run_ids'",
        "{'csv': 3}",
        "an object of tracker name -> run id",
    ),
    "metadata-missing": (_delete("metadata"), "field 'metadata'", "missing", "present"),
    "metadata-list": (_set("metadata", [1]), "field 'metadata'", "[1]", "an object"),
    "metadata-nested": (_set("metadata|priority", [8]), "field 'metadata.priority'", "[8]", "a JSON scalar"),
    "manifest-list": (_replace([1, 2]), "the manifest", "[1, 2]", "a JSON object"),
    "manifest-null": (_replace(None), "the manifest", "None", "a JSON object"),
    "manifest-string": (
        _replace("tracktrain-checkpoint/1"),
        "the manifest",
        "'tracktrain-checkpoint/1'",
        "a JSON object",
    ),
}
# damaged below the JSON level: (what to do to the manifest's bytes, what the message says)
UNREADABLE: dict[str, tuple[Callable[[bytes], bytes], str]] = {
    "truncated": (lambda text: text[: len(text) // 2], "is not valid JSON"),
    "empty": (lambda text: b"", "is not valid JSON"),
    "not-utf8": (lambda text: b"\xff\xfe" + text, "is not valid JSON"),
}


def corrupted(text: bytes, case: str, data: str) -> bytes:
    if case in UNREADABLE:
        return UNREADABLE[case][0](text)
    manifest = json.loads(text)
    replaced = CORRUPTIONS[case][0](manifest, data)
    # NaN and Infinity written as Python's json writes them (and reads them back)
    return json.dumps(replaced.value if isinstance(replaced, _Whole) else manifest).encode()


def expected_message(case: str, manifest_url: str, data: str) -> list[str]:
    """The parts the message must hold: the manifest, the field, its value, what it should be."""
    if case in UNREADABLE:
        return [manifest_url, UNREADABLE[case][1]]
    _, field, value, should = CORRUPTIONS[case]
    return [
        manifest_url,
        field.replace("{data}", data),
        f" is {value.replace('{data}', data)}",
        f"it should be {should.replace('{data}', data)}",
    ]


ALL_CASES = [*CORRUPTIONS, *UNREADABLE]


# ------------------------------------------------------------------------------------------ a template run, once
@pytest.fixture(scope="module")
def template(tmp_path_factory) -> dict[str, bytes]:
    """The checkpoint directory of a 1-epoch run (steps 4 and 8 kept, top-k and latest): name -> bytes."""
    root = tmp_path_factory.mktemp("template")
    run(root, root / "ckpt")
    return {path.name: path.read_bytes() for path in sorted((root / "ckpt").iterdir())}


def run(root: Path, dirpath: str | Path, **fit_kwargs: Any) -> Trainer:
    checkpoint = ModelCheckpoint(dirpath=dirpath, every_n_train_steps=4, save_top_k=2, save_last=2)
    trainer = Trainer(**quiet(root, max_epochs=1, seed=3, resume="auto", loggers=False, callbacks=[checkpoint]))
    trainer.fit(Classifier(), make_loader(shuffle=True), **fit_kwargs)
    return trainer


@pytest.fixture(params=["local", "s3"])
def where(request, tmp_path) -> str:
    """A checkpoint directory: on local disk, or in a fresh moto bucket."""
    if request.param == "local":
        return str(tmp_path / "ckpt")
    return request.getfixturevalue("s3_bucket") + "/runs/ckpt"


def put(directory: str, files: dict[str, bytes]) -> None:
    storage.makedirs(directory)
    for name, data in files.items():
        storage.write_bytes(storage.join(directory, name), data)


# --------------------------------------------------------------------------------------- the parser, every case
@pytest.mark.parametrize("case", ALL_CASES)
def test_the_parser_names_the_manifest_the_field_the_value_and_what_it_should_be(template, case):
    data = "last_checkpoint_8.pt"
    url = f"/runs/a/{manifest_name(data)}"
    with pytest.raises(CheckpointCorrupted) as caught:
        parse_manifest(corrupted(template[manifest_name(data)], case, data), url)
    for part in expected_message(case, url, data):
        assert part in str(caught.value)
    parse_manifest(template[manifest_name(data)], url)  # the template itself is valid


# ------------------------------------------------------------------------ resume="auto" falls back, warning why
def resume_after_corrupting(template, root: Path, directory: str, case: str) -> tuple[Trainer, str]:
    put(directory, template)
    for data in NEWEST:
        name = manifest_name(data)
        storage.write_bytes(storage.join(directory, name), corrupted(template[name], case, data))
    with pytest.warns(UserWarning) as caught:
        trainer = run(root, directory)
    return trainer, " ".join(str(warning.message) for warning in caught)


# discovery reads every manifest through the parser tested above on each case: end to end, one case of each kind
# (a field's type, the manifest's structure, its file list, unreadable text) runs by default, every case with -m slow
RESUME_CASES = {"global_step-null", "manifest-list", "files-sha256-uppercase", "truncated"}


@pytest.mark.parametrize(
    "case", [case if case in RESUME_CASES else pytest.param(case, marks=pytest.mark.slow) for case in ALL_CASES]
)
def test_resume_auto_skips_an_invalid_manifest_with_a_warning_and_takes_the_newest_valid_one(
    template, tmp_path, where, case
):
    trainer, warned = resume_after_corrupting(template, tmp_path, where, case)
    for data in NEWEST:
        assert "Skipping a checkpoint that is not committed" in warned
        for part in expected_message(case, storage.join(where, manifest_name(data)), data):
            assert part in warned
    # both step-8 checkpoints are refused: the newest valid ones are of step 4, the latest of them written last
    assert trainer.ckpt_path == storage.join(where, "last_checkpoint_4.pt")
    assert trainer.global_step == 8


def test_no_type_error_anywhere_from_a_wrongly_typed_manifest(template, tmp_path):
    """Before the fields were checked, sorting by `order` raised TypeError on a list step (int([8]))."""
    directory = tmp_path / "ckpt"
    put(str(directory), template)
    (directory / manifest_name("last_checkpoint_8.pt")).write_bytes(
        corrupted(template[manifest_name("last_checkpoint_8.pt")], "global_step-list", "last_checkpoint_8.pt")
    )
    with pytest.warns(UserWarning, match=r"field 'summary.global_step' is \[8\]"):
        candidates = resume_candidates([str(directory)])
    assert [c.data_filename for c in candidates] == ["checkpoint_8.pt", "last_checkpoint_4.pt", "checkpoint_4.pt"]


# ---------------------------------------------------------------------------- an explicit ckpt_path is refused
@pytest.mark.parametrize(
    "case", ["format-future", "global_step-negative", "files-sha256-uppercase", "metadata-nested", "truncated"]
)
def test_an_explicit_ckpt_path_with_an_invalid_manifest_is_refused_naming_it_and_the_fix(
    template, tmp_path, where, case
):
    put(where, template)
    data = "checkpoint_8.pt"
    name = manifest_name(data)
    storage.write_bytes(storage.join(where, name), corrupted(template[name], case, data))
    module = Classifier()
    before = [p.detach().clone() for p in module.parameters()]
    with pytest.raises(CheckpointCorrupted) as caught:
        Trainer(**quiet(tmp_path, max_epochs=1, loggers=False)).fit(
            module, make_loader(), ckpt_path=storage.join(where, data)
        )
    for part in expected_message(case, storage.join(where, name), data):
        assert part in str(caught.value)
    assert "restore the manifest from a copy, or load another checkpoint" in str(caught.value)
    assert all(torch.equal(a, b) for a, b in zip(before, module.parameters()))  # nothing was loaded


def multi_file_checkpoint(directory: str) -> tuple[nn.Module, str]:
    """A checkpoint of two files, model.pt and model.pt.extra, both listed in model.pt's manifest."""
    model = nn.Linear(3, 2)
    saver = FsspecSaver(directory, require_empty=False)
    saver({"model": model.state_dict()}, "model.pt")
    extra = b"the second file of the checkpoint" * 10
    storage.write_bytes(storage.join(directory, "model.pt.extra"), extra)
    data = storage.read_bytes(storage.join(directory, "model.pt"))
    write_manifest(directory, {"model.pt": data, "model.pt.extra": extra}, {"global_step": 3})
    return model, storage.join(directory, "model.pt")


@pytest.mark.parametrize("damage", ["missing", "shorter", "longer"])
def test_every_file_a_manifest_lists_must_be_there_with_its_size(where, damage):
    model, url = multi_file_checkpoint(where)
    fresh = nn.Linear(3, 2)
    Checkpoint.load_objects({"model": fresh}, url)  # whole: it loads
    assert torch.equal(fresh.weight, model.weight)

    extra = storage.join(where, "model.pt.extra")
    if damage == "missing":
        storage.remove(extra)
    else:
        data = storage.read_bytes(extra)
        storage.write_bytes(extra, data[:-5] if damage == "shorter" else data + b"!")
    fresh = nn.Linear(3, 2)
    before = fresh.weight.detach().clone()
    expected = {
        "missing": r"model\.pt\.extra is missing",
        "shorter": r"model\.pt\.extra is 325 bytes, its manifest says 330 \(truncated",
        "longer": r"model\.pt\.extra is 331 bytes, its manifest says 330 \(appended to",
    }[damage]
    with pytest.raises(CheckpointCorrupted, match=rf"Checkpoint {url} is incomplete: {expected}.*restore the file"):
        Checkpoint.load_objects({"model": fresh}, url)
    assert torch.equal(fresh.weight, before)
    # and a listing does not count it as committed
    found, problems = committed_checkpoints(where)
    assert found == [] and len(problems) == 1 and "model.pt.extra" in problems[0]


def test_a_manifest_that_does_not_list_its_own_file_is_refused(tmp_path):
    directory = str(tmp_path)
    multi_file_checkpoint(directory)
    manifest = json.loads((tmp_path / "model.pt.manifest.json").read_text())
    del manifest["files"]["model.pt"]
    (tmp_path / "model.pt.manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(
        CheckpointCorrupted,
        match=r"field 'files' is \['model.pt.extra'\], it should be a listing "
        r"that includes 'model.pt'",
    ):
        Checkpoint.load_objects({"model": nn.Linear(3, 2)}, tmp_path / "model.pt")


# --------------------------------------------------------------------------------- newest by step, not by name
def test_the_newest_checkpoint_is_the_highest_recorded_step_never_the_file_name(template, tmp_path, where):
    """checkpoint_99.pt holds step 4, checkpoint_5.pt step 8: resuming takes checkpoint_5.pt."""
    files = {}
    for old, new in (("checkpoint_4.pt", "checkpoint_99.pt"), ("checkpoint_8.pt", "checkpoint_5.pt")):
        manifest = json.loads(template[manifest_name(old)])
        _rename_file(manifest, old, new)
        files[new], files[manifest_name(new)] = template[old], json.dumps(manifest).encode()
    put(where, files)
    found, problems = committed_checkpoints(where)
    assert [c.data_filename for c in found] == ["checkpoint_5.pt", "checkpoint_99.pt"] and problems == []
    trainer = run(tmp_path, where)  # Trainer(resume="auto")
    assert trainer.ckpt_path == storage.join(where, "checkpoint_5.pt")
    assert trainer.global_step == 8


# -------------------------------------------------------------------------------------------------- the writer
def test_the_writer_refuses_a_manifest_the_reader_would_refuse(tmp_path):
    saver = FsspecSaver(tmp_path, manifest=True, summarize=lambda checkpoint: {"global_step": -1})
    with pytest.raises(ValueError, match=r"field 'summary.global_step' is -1, it should be an integer >= 0"):
        saver({"model": nn.Linear(2, 1).state_dict()}, "model_1.pt")
    assert not (tmp_path / "model_1.pt.manifest.json").exists()  # never committed


def test_a_numpy_score_is_recorded_exactly_as_a_json_number(tmp_path):
    saver = FsspecSaver(tmp_path, manifest=True, summarize=lambda checkpoint: {"global_step": 1})
    score = np.float32(0.1234567)
    saver({"model": nn.Linear(2, 1).state_dict()}, "model_1.pt", {"priority": score, "step": np.int64(7)})
    metadata = json.loads((tmp_path / "model_1.pt.manifest.json").read_text())["metadata"]
    assert metadata["priority"] == float(score) and metadata["step"] == 7
