"""A stand-in for matplotlib_inline (Jupyter's inline plots) in the Lightning program ports: the course notebooks
only call `backend_inline.set_matplotlib_formats(...)`, which does nothing outside a notebook."""
