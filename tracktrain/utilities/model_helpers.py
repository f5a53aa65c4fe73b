"""Lightning's `utilities.model_helpers`: `get_torchvision_model(name, **kwargs)`, a torchvision model by its name."""

from __future__ import annotations

from typing import Any

from torch import nn

from tracktrain.utilities.imports import module_available

__all__ = ["get_torchvision_model"]


def get_torchvision_model(model_name: str, **kwargs: Any) -> nn.Module:
    """torchvision's model `model_name` ("resnet18", ...) built with `kwargs` (`weights=...`, `num_classes=...`)."""
    if not module_available("torchvision"):
        raise ModuleNotFoundError(
            f"get_torchvision_model({model_name!r}) needs torchvision: pip install torchvision, pinned beside torch."
        )
    from torchvision import models  # type: ignore[import-not-found]  # optional: checked above

    get_model = getattr(models, "get_model", None)  # torchvision >= 0.14
    return get_model(model_name, **kwargs) if get_model is not None else getattr(models, model_name)(**kwargs)
