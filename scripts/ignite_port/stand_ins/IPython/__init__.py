"""A stand-in for IPython in the Ignite example ports: what a notebook's code reaches of it, printing as text."""


def get_ipython():
    """No interactive shell: the notebook runs as a script (matplotlib asks)."""
    return None


version_info = (8, 30, 0)  # new enough that matplotlib asks nothing more of it
