"""`tracktrain.utilities.imports` says what Lightning's `utilities.imports` says about this environment (Lightning 2.6
is the oracle): the availability flags its examples read."""

from __future__ import annotations

import pytest

from tracktrain.utilities import imports


@pytest.mark.parametrize("name", [n for n in imports.__all__ if n.startswith("_")])
def test_each_flag_is_lightnings(name):
    lightning = pytest.importorskip("lightning.pytorch.utilities.imports")
    assert getattr(imports, name) is bool(getattr(lightning, name))


def test_module_available_looks_up_dotted_names_without_importing():
    assert imports.module_available("torch.utils.data")
    assert not imports.module_available("no_such_package.sub")
    assert not imports.module_available("no_such_package")


def test_get_torchvision_model_without_torchvision_says_what_to_install():
    from tracktrain.utilities import model_helpers

    if imports._TORCHVISION_AVAILABLE:
        pytest.skip("torchvision is installed")
    with pytest.raises(ModuleNotFoundError, match=r"get_torchvision_model\('resnet18'\) needs torchvision"):
        model_helpers.get_torchvision_model("resnet18")
