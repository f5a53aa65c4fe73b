"""Port a Colossal-AI script: copy it with `colossalai` changed to `tracktrain.colossal` in its import lines only.

    python scripts/colossal-ports/port.py SRC.py DST.py

`import colossalai` becomes `import tracktrain.colossal as colossalai` (the script goes on calling `colossalai.x`);
`from colossalai.a import b` becomes `from tracktrain.colossal.a import b`; `import colossalai.nn as col_nn` becomes
`import tracktrain.colossal.nn as col_nn`. No other line changes.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

_IMPORT = re.compile(r"^(\s*)(from|import)(\s+)colossalai\b")


def port_line(line: str) -> str:
    """`line` with its import of colossalai changed (other lines as they are)."""
    if not _IMPORT.match(line):
        return line
    ported = _IMPORT.sub(r"\1\2\3tracktrain.colossal", line, count=1)
    if re.match(r"^\s*import tracktrain\.colossal\s*(#.*)?$", ported):
        ported = ported.replace("import tracktrain.colossal", "import tracktrain.colossal as colossalai", 1)
    return ported


def main(source: str, destination: str) -> None:
    text = Path(source).read_text()
    Path(destination).write_text("".join(port_line(line) for line in text.splitlines(keepends=True)))


if __name__ == "__main__":
    main(*sys.argv[1:3])
