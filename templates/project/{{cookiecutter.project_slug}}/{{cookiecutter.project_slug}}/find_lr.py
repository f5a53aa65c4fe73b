"""Find a learning rate: `python -m {{ cookiecutter.project_slug }}.find_lr [--config FILE] [--model.hidden 64 ...]`.

Sweeps the optimizer's learning rate from `--min_lr` to `--max_lr` over `--steps` short training steps of the same
model, data and settings as `train` (the same config and options, `tracktrain.tuning.lr_find`), in one process, and
prints the rate where the loss fell fastest with the command that trains with it. The curve (loss against learning
rate) is saved beside the runs and logged to the tracker, in a run of its own named "lr_find". No checkpoint is read
or written, and the training run's saved config is left as it was.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from tracktrain.cli import LightningArgumentParser

from {{ cookiecutter.project_slug }}.train import TrainCLI, build, how_to_view


class FindLrCLI(TrainCLI):
    """`train`'s settings and three of the sweep's; the sweep runs in one process (a learning rate found there holds for
    DDP with the same per-process batch), without a progress bar, in a tracker run named "lr_find" unless the config
    names one."""

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        super().add_arguments_to_parser(parser)
        parser.add_argument("--min_lr", type=float, default=1e-5, help="the first learning rate of the sweep")
        parser.add_argument("--max_lr", type=float, default=10.0,
                            help="the last learning rate of the sweep (it stops early once the loss diverges)")
        parser.add_argument("--steps", type=int, default=100, help="optimizer steps of the sweep")

    def before_instantiate_classes(self) -> None:
        self.config.trainer.strategy = "single_device"
        self.config.trainer.enable_progress_bar = False
        for logger in self.config.trainer.loggers or []:
            names = {"MLflowLogger": "run_name", "WandbLogger": "name"}
            name = names.get(logger.class_path.rsplit(".", 1)[-1])
            if name and logger.init_args.get(name) is None:
                logger.init_args[name] = "lr_find"
        super().before_instantiate_classes()


def main(argv: Sequence[str] | None = None) -> int:
    cli = build(FindLrCLI, argv, prog="python -m {{ cookiecutter.project_slug }}.find_lr", save_config_callback=None)
    if isinstance(cli, int):
        return cli
    from tracktrain.tuning import lr_find

    config = cli.config
    result = lr_find(cli.trainer, cli.model, cli.datamodule.train_dataloader(),
                     min_lr=config.min_lr, max_lr=config.max_lr, num_training=config.steps)
    suggested = result.suggestion()
    root_dir = cli.trainer.default_root_dir
    plot_dir = root_dir if "://" not in root_dir else "."  # a remote default_root_dir: the curve stays here
    os.makedirs(plot_dir, exist_ok=True)
    plot = result.save_plot(os.path.join(plot_dir, "lr_find.png"))
    print(f"suggested learning rate: {suggested:.3g} (the loss fell fastest there; swept {len(result.lrs)} steps)")
    print(f"the loss against the learning rate: {plot}")
    print(f"train with it: {sys.executable} -m {{ cookiecutter.project_slug }}.train --model.lr {suggested:.3g}")
    for line in how_to_view(cli.trainer):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
