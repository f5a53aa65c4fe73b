"""scripts/colossal-ports/port.py changes a Colossal-AI script's imports of colossalai, and no other line."""

from __future__ import annotations

import importlib.util
from pathlib import Path

PORTER = Path(__file__).resolve().parents[2] / "scripts" / "colossal-ports" / "port.py"


def test_only_the_imports_of_colossalai_change(tmp_path):
    spec = importlib.util.spec_from_file_location("colossal_port", PORTER)
    assert spec is not None and spec.loader is not None
    porter = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(porter)
    script = (
        "import colossalai\n"
        "import colossalai.nn as col_nn\n"
        "from colossalai.core import global_context as gpc\n"
        "    from colossalai.trainer import hooks\n"
        "import colossalai_extra\n"
        "colossalai.launch_from_torch(config='./config.py')  # colossalai stays the name\n"
    )
    (tmp_path / "train.py").write_text(script)
    porter.main(str(tmp_path / "train.py"), str(tmp_path / "ported.py"))
    assert (tmp_path / "ported.py").read_text().splitlines() == [
        "import tracktrain.colossal as colossalai",
        "import tracktrain.colossal.nn as col_nn",
        "from tracktrain.colossal.core import global_context as gpc",
        "    from tracktrain.colossal.trainer import hooks",
        "import colossalai_extra",
        "colossalai.launch_from_torch(config='./config.py')  # colossalai stays the name",
    ]
