"""A package's names loaded when first asked for (PEP 562's module
``__getattr__``): a package whose heavy parts (trio, the client, a Kafka
front) only some of its importers need keeps them out of the others'
start.  Its ``__init__`` says where each name lives and imports them under
``TYPE_CHECKING`` for mypy."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping


def lazy_names(package: str, where: Mapping[str, str]) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``package``: each name of ``where`` from its
    module (``{name: "_module"}``), imported on first use."""

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    return __getattr__
