"""`set_matplotlib_formats`, a no-op outside a notebook (see the package's docstring)."""


def set_matplotlib_formats(*formats, **kwargs):
    return None
