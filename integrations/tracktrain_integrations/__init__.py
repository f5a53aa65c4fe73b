"""Integrations of tracktrain with experiment trackers (MLflow, Weights & Biases, TensorBoard).

Each integration lives in its own module and imports its library only when used; the core package
`tracktrain` never imports this one.
"""
