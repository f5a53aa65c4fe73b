"""Ignite's tracker loggers (`TensorboardLogger`, `MLflowLogger`, `WandBLogger`) as faces over tracktrain's
(`tracktrain_integrations.tensorboard`, `.mlflow`, `.wandb`): the same runs, the same non-blocking delivery that
keeps what a tracker outage holds back. Ignite's module paths reach them: `tracktrain.handlers.tensorboard_logger`,
`.mlflow_logger` and `.wandb_logger` resolve these names on first use (the core imports no integration when it is
imported; see `tracktrain.handlers.base_logger` for the tracker-independent half)."""
