"""`cli_lightning_logo()`: the banner a Lightning script prints before its CLI runs (`from lightning.pytorch import
cli_lightning_logo`), here tracktrain's, printed the same way (a blank line, the logo in magenta, a blank line)."""

from __future__ import annotations

LIGHTNING_LOGO = """
 _                  _    _             _
| |_ _ __ __ _  ___| | _| |_ _ __ __ _(_)_ __
| __| '__/ _` |/ __| |/ / __| '__/ _` | | '_ \\
| |_| | | (_| | (__|   <| |_| | | (_| | | | | |
 \\__|_|  \\__,_|\\___|_|\\_\\\\__|_|  \\__,_|_|_| |_|
"""
"""The banner `cli_lightning_logo()` prints (Lightning's name for it; here tracktrain's logo)."""


def cli_lightning_logo() -> None:
    """Print tracktrain's logo, as Lightning's function of this name prints Lightning's."""
    print()
    print("\033[0;35m" + LIGHTNING_LOGO + "\033[0m")
    print()
