"""Ignite's `ignite.contrib.engines`: `common`, the training set-up Ignite's examples share."""
