"""Integrations of tracktrain with the tools around a fit: experiment trackers (MLflow, Weights & Biases,
TensorBoard), MLflow models, Ray Train, Optuna sweeps and the `tracktrain` command.

Each integration lives in its own module and imports its library only when used; the core package
`tracktrain` never imports this one.
"""
