"""Every placer by name: ParDNN (``"pardnn"``) and the baselines (:data:`pardnn.baselines.BASELINES`).

The CLI's ``--algorithm`` choices and the settings' ``algorithm`` values are built from
:data:`PLACERS`.
"""

from __future__ import annotations

from collections.abc import Callable

from pardnn.baselines import BASELINES
from pardnn.pipeline import partition
from pardnn.result import Result

__all__ = ["PLACERS", "Placer", "get_placer"]

Placer = Callable[..., Result]

PLACERS: dict[str, Placer] = {"pardnn": partition, **BASELINES}


def get_placer(name: str) -> Placer:
    """The placer called ``name``; raises ``ValueError`` listing the valid names."""
    try:
        return PLACERS[name]
    except KeyError:
        raise ValueError(f"unknown placer {name!r}; expected one of {', '.join(PLACERS)}") from None
