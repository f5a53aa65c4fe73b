"""Find a learning rate: `python -m {{ cookiecutter.project_slug }}.find_lr [--config FILE] [--set section.key=value ...]`.

Sweeps the optimizer's learning rate from `--min-lr` to `--max-lr` over `--steps` short training steps of the same
model, data and settings as `train` (`tracktrain.tuning.lr_find`), in one process, and prints the rate where the
loss fell fastest with the command that trains with it. The curve (loss against learning rate) is saved beside the
runs and logged to the tracker, in a run of its own named "lr_find". No checkpoint is read or written: the training
run is left as it was.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Sequence

from {{ cookiecutter.project_slug }}.config import Config, ConfigError
from {{ cookiecutter.project_slug }}.train import build_trainer, config_from_args, how_to_view, local_or_url


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m {{ cookiecutter.project_slug }}.find_lr",
                                     description="Sweep the learning rate and suggest one for `train`.")
    parser.add_argument("--config", help="a TOML file whose keys replace the defaults (as for train)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="replace one value, e.g. --set data.batch_size=32 (repeatable)")
    parser.add_argument("--min-lr", type=float, default=1e-5, help="the first learning rate of the sweep")
    parser.add_argument("--max-lr", type=float, default=10.0, help="the last learning rate of the sweep (it stops "
                        "early once the loss diverges)")
    parser.add_argument("--steps", type=int, default=100, help="optimizer steps of the sweep")
    parser.set_defaults(epochs=None, no_resume=False)  # what config_from_args reads of train's options
    return parser.parse_args(argv)


def sweep_config(config: Config) -> Config:
    """The sweep runs in one process (a learning rate found there holds for DDP with the same per-process batch),
    in a tracker run named "lr_find" unless the config names one."""
    trainer = dataclasses.replace(config.trainer, strategy="single_device", progress_bar="never")
    tracking = dataclasses.replace(config.tracking, run_name=config.tracking.run_name or "lr_find")
    return dataclasses.replace(config, trainer=trainer, tracking=tracking)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        config = sweep_config(config_from_args(args))
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    from tracktrain.tuning import lr_find

    from {{ cookiecutter.project_slug }}.data import DigitsData
    from {{ cookiecutter.project_slug }}.module import Classifier

    data = DigitsData(config.data, seed=config.trainer.seed)
    result = lr_find(build_trainer(config), Classifier(config.model), data.train_dataloader(),
                     min_lr=args.min_lr, max_lr=args.max_lr, num_training=args.steps)
    suggested = result.suggestion()
    root_dir = local_or_url(config.run.root_dir)
    plot_dir = root_dir if "://" not in root_dir else "."  # a remote root_dir: the curve stays here
    os.makedirs(plot_dir, exist_ok=True)
    plot = result.save_plot(os.path.join(plot_dir, "lr_find.png"))
    print(f"suggested learning rate: {suggested:.3g} (the loss fell fastest there; swept {len(result.lrs)} steps)")
    print(f"the loss against the learning rate: {plot}")
    print(f"train with it: {sys.executable} -m {{ cookiecutter.project_slug }}.train --set model.lr={suggested:.3g}")
    for line in how_to_view(config):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
