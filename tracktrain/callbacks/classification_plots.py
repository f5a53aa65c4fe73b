"""`ConfusionMatrixPlot`: the confusion matrix of each validation, summed over the ranks, drawn with per-class
precision, recall and F1 as PNG images kept as artifacts of the run (matplotlib, imported only when drawing)."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from tracktrain import storage
from tracktrain.callbacks.base import Callback
from tracktrain.callbacks.reporting import is_rank_zero

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from tracktrain.trainer.module import LoopModule
    from tracktrain.trainer.surface import TrainerSurface

__all__ = ["PLOTS_ARTIFACTS", "ConfusionMatrixPlot", "per_class_metrics"]

PLOTS_ARTIFACTS = "plots"  # the artifact path of the images in each tracker's run
NORMALIZE = ("true", "pred", "all", None)
_ANNOTATE_UP_TO = 20  # classes: beyond that the counts written in the cells are unreadable


class ConfusionMatrixPlot(Callback):
    """Counts (target, prediction) pairs over each validation and draws them, with per-class precision, recall and
    F1, as images a person would rather look at than a table of numbers.

    The module's `eval_step` returns a mapping (as `SupervisedModule.eval_step` does) with, under `output_key`,
    logits or scores of shape (N, C, ...) (the class is dim 1; the prediction is their argmax) or class indices of
    the target's shape, and under `target_key` class indices (N, ...). The counts are kept on the device, without a
    host-device sync per batch. At the end of the validation the matrix is summed over the ranks (every rank, one
    collective; none in an epoch that is not plotted), then on rank 0:

    - `confusion_matrix_epoch{epoch}_step{step}.png`: the heatmap (rows: the true class, columns: the predicted
      one), normalized as `normalize` says, with the counts written in the cells up to 20 classes;
    - `per_class_metrics_epoch{epoch}_step{step}.png`: precision, recall and F1 per class, as bars;

    both written under `dirpath` and handed to every tracker (`Trainer.log_artifact`, artifact path "plots").
    `val_precision_class{i}`, `val_recall_class{i}` and `val_f1_class{i}` are published to the loggers
    (`publish_metrics=False`: not; with hundreds of classes that is a lot of scalars). `matrix` keeps the last
    matrix of counts (a CPU int64 tensor, `matrix[true, predicted]`), `image_paths` the files rank 0 wrote.

    Args:
        num_classes: the number of classes C (>= 2).
        class_names: C names for the axes (default: the class indices).
        every_n_epochs: plot the validations of every n-th training epoch (a `validate()` of its own always).
        normalize: "true" (each row sums to 1: recall on the diagonal), "pred" (each column: precision), "all"
            or None (the counts), for the heatmap only.
        dirpath: a local directory (default: `plots` in the Trainer's `default_root_dir`, or in `.tracktrain`
            when that is a remote URL).
        output_key, target_key: the keys of the predictions and the targets in what `eval_step` returns.
        publish_metrics: publish the per-class values as scalars too.
    """

    def __init__(
        self,
        num_classes: int,
        class_names: Sequence[str] | None = None,
        every_n_epochs: int = 1,
        normalize: str | None = "true",
        dirpath: str | os.PathLike | None = None,
        output_key: str = "output",
        target_key: str = "target",
        publish_metrics: bool = True,
    ) -> None:
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2:
            raise ValueError(f"ConfusionMatrixPlot(num_classes=...) must be an int >= 2, got {num_classes!r}.")
        if isinstance(every_n_epochs, bool) or not isinstance(every_n_epochs, int) or every_n_epochs < 1:
            raise ValueError(f"ConfusionMatrixPlot(every_n_epochs=...) must be a positive int, got {every_n_epochs!r}.")
        if normalize not in NORMALIZE:
            raise ValueError(f"ConfusionMatrixPlot(normalize=...) must be one of {NORMALIZE}, got {normalize!r}.")
        if class_names is not None:
            class_names = [str(name) for name in class_names]
            if len(class_names) != num_classes:
                raise ValueError(
                    f"ConfusionMatrixPlot(class_names=...) must name the {num_classes} classes, got "
                    f"{len(class_names)} names: {class_names!r}."
                )
        if importlib.util.find_spec("matplotlib") is None:  # checked here, imported when the first plot is drawn
            raise ImportError(
                "ConfusionMatrixPlot draws with matplotlib, which is not installed: pip install matplotlib"
            )
        self.num_classes = num_classes
        self.class_names = class_names or [str(index) for index in range(num_classes)]
        self.every_n_epochs = every_n_epochs
        self.normalize = normalize
        self.dirpath = _check_dirpath(dirpath)
        self.output_key = output_key
        self.target_key = target_key
        self.publish_metrics = bool(publish_metrics)
        self.matrix: torch.Tensor | None = None  # the last validation's counts, matrix[true, predicted]
        self.image_paths: list[str] = []
        # counts of this validation, flat: C*C cells, then one for the pairs out of range (raised at the end)
        self._counts: torch.Tensor | None = None
        self._active = False

    # ------------------------------------------------------------------------------------------------- hooks
    def on_validation_start(self, trainer: TrainerSurface, module: LoopModule) -> None:
        # every rank decides alike (the same epoch): the collective at the end is issued by all or by none; the
        # sanity check's batches are no epoch's
        at_epoch = not trainer.fitting or (trainer.current_epoch + 1) % self.every_n_epochs == 0
        self._active = at_epoch and not trainer.sanity_checking
        self._counts = None

    def on_validation_batch_end(
        self,
        trainer: TrainerSurface,
        module: LoopModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if not self._active:
            return
        predicted, target = self._read(outputs, batch_idx)
        classes = self.num_classes
        valid = (target >= 0) & (target < classes) & (predicted >= 0) & (predicted < classes)
        cells = torch.where(valid, target * classes + predicted, classes * classes)  # stays on the device: no sync
        if self._counts is None:
            self._counts = torch.zeros(classes * classes + 1, dtype=torch.int64, device=cells.device)
        self._counts.index_add_(0, cells.to(self._counts.device), torch.ones_like(cells, device=self._counts.device))

    def on_validation_end(self, trainer: TrainerSurface, module: LoopModule) -> None:
        if not self._active:
            return
        self._active = False
        classes = self.num_classes
        counts, self._counts = self._counts, None
        if counts is None:  # this rank saw no batch: it still takes its part in the sum
            counts = torch.zeros(classes * classes + 1, dtype=torch.int64)
        counts = trainer.strategy.reduce_tensor(counts.to(trainer.device), "sum").cpu()  # the sync of the epoch
        if int(counts[-1]) > 0:
            raise ValueError(
                f"ConfusionMatrixPlot(num_classes={classes}) got {int(counts[-1])} predictions or targets outside "
                f"0..{classes - 1} in this validation. Give the right num_classes, or map the targets to class indices."
            )
        self.matrix = counts[:-1].reshape(classes, classes)
        precision, recall, f1 = per_class_metrics(self.matrix)
        if self.publish_metrics:
            values: dict[str, float] = {}
            for index in range(classes):
                values[f"val_precision_class{index}"] = float(precision[index])
                values[f"val_recall_class{index}"] = float(recall[index])
                values[f"val_f1_class{index}"] = float(f1[index])
            trainer.publish(values)
        if is_rank_zero():  # one set of images per run, and rank 0 alone talks to trackers
            self._draw(trainer, self.matrix, precision, recall, f1)

    def on_exception(self, trainer: TrainerSurface, module: LoopModule, exception: BaseException) -> None:
        self._counts, self._active = None, False

    # ------------------------------------------------------------------------------------------------ inputs
    def _read(self, outputs: Any, batch_idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The predicted and true class indices of a batch, flat, from what `eval_step` returned."""
        expected = (
            f"ConfusionMatrixPlot reads what eval_step returns: a mapping with {self.output_key!r} (logits (N, C, ...) "
            f"or class indices) and {self.target_key!r} (class indices (N, ...)), e.g. "
            f"`return {{{self.output_key!r}: logits, {self.target_key!r}: y}}`"
        )
        if not isinstance(outputs, Mapping):
            raise TypeError(f"{expected}; validation batch {batch_idx} returned {_describe(outputs)}.")
        missing = [key for key in (self.output_key, self.target_key) if key not in outputs]
        if missing:
            raise KeyError(f"{expected}; validation batch {batch_idx} returned keys {sorted(map(str, outputs))}.")
        output, target = outputs[self.output_key], outputs[self.target_key]
        for key, value in ((self.output_key, output), (self.target_key, target)):
            if not isinstance(value, torch.Tensor):
                raise TypeError(f"{expected}; batch {batch_idx}'s {key!r} is {_describe(value)}, not a tensor.")
        if target.is_floating_point() or target.is_complex():
            raise TypeError(
                f"{expected}; batch {batch_idx}'s {self.target_key!r} is a {target.dtype} tensor: give class indices "
                "(an integer tensor), not one-hot or probabilities (`.argmax(1)`)."
            )
        if output.is_floating_point() and output.dim() == target.dim() + 1:
            if output.shape[1] != self.num_classes:
                raise ValueError(
                    f"{expected}; batch {batch_idx}'s {self.output_key!r} has shape {tuple(output.shape)}: "
                    f"{output.shape[1]} scores per sample in dim 1, for num_classes={self.num_classes}."
                )
            output = output.argmax(1)
        elif output.is_floating_point() or output.is_complex():
            raise ValueError(
                f"{expected}; batch {batch_idx}'s {self.output_key!r} is a {output.dtype} tensor of shape "
                f"{tuple(output.shape)} for a target of shape {tuple(target.shape)}: logits need one more dim (the "
                "classes, dim 1); predicted classes are an integer tensor of the target's shape."
            )
        if output.shape != target.shape:
            raise ValueError(
                f"{expected}; batch {batch_idx}'s predicted classes have shape {tuple(output.shape)}, its "
                f"{self.target_key!r} {tuple(target.shape)}: they must match."
            )
        return output.reshape(-1).long(), target.reshape(-1).long()

    # ---------------------------------------------------------------------------------------------- drawing
    def _draw(
        self,
        trainer: TrainerSurface,
        matrix: torch.Tensor,
        precision: torch.Tensor,
        recall: torch.Tensor,
        f1: torch.Tensor,
    ) -> None:
        directory = self.dirpath or os.path.join(storage.local_dir(trainer.default_root_dir), "plots")
        os.makedirs(directory, exist_ok=True)
        tag = f"epoch{trainer.current_epoch}_step{trainer.global_step}"
        title = f"epoch {trainer.current_epoch}, step {trainer.global_step}"
        paths = [
            os.path.join(directory, f"confusion_matrix_{tag}.png"),
            os.path.join(directory, f"per_class_metrics_{tag}.png"),
        ]
        draw_confusion_matrix(matrix, self.class_names, self.normalize, f"Confusion matrix, {title}").savefig(paths[0])
        draw_per_class_metrics(precision, recall, f1, self.class_names, f"Per-class metrics, {title}").savefig(paths[1])
        for path in paths:
            self.image_paths.append(path)
            trainer.log_artifact(path, PLOTS_ARTIFACTS)


def per_class_metrics(matrix: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Precision, recall and F1 of each class from a confusion matrix `matrix[true, predicted]` (0 where a class
    was never predicted, never present, or both)."""
    matrix = matrix.double()
    hits = matrix.diagonal()
    predicted, actual = matrix.sum(0), matrix.sum(1)
    precision = torch.where(predicted > 0, hits / predicted.clamp(min=1), 0.0)
    recall = torch.where(actual > 0, hits / actual.clamp(min=1), 0.0)
    both = precision + recall
    f1 = torch.where(both > 0, 2 * precision * recall / both.clamp(min=1e-12), 0.0)
    return precision, recall, f1


def draw_confusion_matrix(
    matrix: torch.Tensor, class_names: Sequence[str], normalize: str | None = "true", title: str = ""
) -> Figure:
    """The heatmap of `matrix[true, predicted]`, as a Figure pyplot does not keep (save it or show it)."""
    counts = matrix.double()
    if normalize == "true":
        shown = counts / counts.sum(1, keepdim=True).clamp(min=1)
    elif normalize == "pred":
        shown = counts / counts.sum(0, keepdim=True).clamp(min=1)
    elif normalize == "all":
        shown = counts / counts.sum().clamp(min=1)
    else:
        shown = counts
    classes = len(class_names)
    side = min(4.0 + 0.45 * classes, 30.0)
    figure = _new_figure((side + 1.5, side))
    axes = figure.add_subplot()
    image = axes.imshow(shown.numpy(), cmap="Blues", vmin=0.0, vmax=1.0 if normalize else None)
    figure.colorbar(image, ax=axes)
    axes.set(xlabel="predicted", ylabel="true", title=title)
    axes.set_xticks(
        range(classes),
        class_names,
        rotation=45 if _crowded(class_names) else 0,
        ha="right" if _crowded(class_names) else "center",
    )
    axes.set_yticks(range(classes), class_names)
    if classes <= _ANNOTATE_UP_TO:
        top = float(shown.max()) if shown.numel() else 0.0
        for true in range(classes):
            for pred in range(classes):
                value = float(shown[true, pred])
                text = f"{value:.2f}" if normalize else f"{int(value)}"
                color = "white" if top > 0 and value > top / 2 else "black"
                axes.text(pred, true, text, ha="center", va="center", color=color, fontsize=8)
    return figure


def draw_per_class_metrics(
    precision: torch.Tensor, recall: torch.Tensor, f1: torch.Tensor, class_names: Sequence[str], title: str = ""
) -> Figure:
    """Grouped bars of precision, recall and F1 per class, as a Figure pyplot does not keep."""
    classes = len(class_names)
    figure = _new_figure((min(5.0 + 0.6 * classes, 40.0), 4.0))
    axes = figure.add_subplot()
    width = 0.27
    for offset, (name, values) in enumerate((("precision", precision), ("recall", recall), ("F1", f1))):
        positions = [index + (offset - 1) * width for index in range(classes)]
        axes.bar(positions, values.tolist(), width, label=name)
    axes.set_xticks(range(classes), class_names, rotation=45 if _crowded(class_names) else 0)
    axes.set(ylim=(0.0, 1.05), ylabel="value", title=title)
    axes.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))  # beside the bars, never over them
    return figure


def _new_figure(size: tuple[float, float]) -> Figure:
    """A matplotlib Figure outside pyplot: no global state to close, no GUI backend (`savefig` draws with Agg)."""
    try:
        from matplotlib.figure import Figure
    except ImportError as error:
        raise ImportError(
            "ConfusionMatrixPlot draws with matplotlib, which is not installed: pip install matplotlib"
        ) from error
    return Figure(figsize=size, layout="tight")


def _crowded(class_names: Sequence[str]) -> bool:
    """Whether the names along the x axis would run into each other unless slanted."""
    return len(class_names) > 5 and max(len(name) for name in class_names) > 3


def _describe(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:80] + '...' if len(text) > 80 else text}"


def _check_dirpath(dirpath: str | os.PathLike | None) -> str | None:
    if dirpath is None:
        return None
    if not isinstance(dirpath, (str, os.PathLike)):
        raise TypeError(f"ConfusionMatrixPlot(dirpath=...) takes a local directory (str or path), got {dirpath!r}.")
    if not storage.is_url(dirpath):
        return os.fspath(dirpath)
    local = storage.local_path(dirpath)
    if local is None:
        raise ValueError(
            f"ConfusionMatrixPlot(dirpath=...) must be a local directory, got {dirpath!r}. Leave it out, or give a "
            "local one: the images reach remote storage as artifacts of the Trainer's loggers."
        )
    return local
