from IPython.display import HTML, display

__all__ = ["HTML", "display"]
