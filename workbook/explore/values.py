"""The values explorers hand to learner code besides builtins: objects that can be weakly
referenced (so a judge can see whether the code still keeps one) and that show by a short
label in a timeline (``obj3``, ``odd1``)."""
from __future__ import annotations


class Item:
    """A plain object with a label: ``Item(3)`` shows as ``obj3``, ``Item("x")`` as ``x``."""
    __slots__ = ("label", "__weakref__")
    prefix = "obj"

    def __init__(self, label: int | str) -> None:
        self.label = label if isinstance(label, str) else f"{self.prefix}{label}"

    def __repr__(self) -> str:
        return self.label


class OddEq(Item):
    """Equal to everything, hashing alike: code that finds its values again by equality (a
    ``list.remove``, a dict key) finds the wrong one."""
    __slots__ = ()
    prefix = "odd"

    def __eq__(self, other: object) -> bool:
        return True

    def __ne__(self, other: object) -> bool:
        return False

    def __hash__(self) -> int:
        return 0
