"""Ignite's `ignite.contrib` paths, kept by Ignite for programs written before its handlers moved: `engines.common`
(the common training set-up of Ignite's examples) and `handlers` (Ignite's handler names, as `tracktrain.handlers`)."""
