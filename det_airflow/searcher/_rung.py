"""One ASHA rung: the values trials reached it with, kept sorted (smaller is better)."""

from __future__ import annotations

import base64
import bisect
import sys
from array import array
from typing import Any

#: The value of a trial that errored or left before reaching its rung, as Determined's
#: ``math.MaxFloat64``: worse than any finite report, and still plain JSON.
WORST = sys.float_info.max


def ordered(value: float, *, smaller_is_better: bool) -> float:
    """A reported metric turned into a rung value: negated when larger is better, and clamped to
    ``[-WORST, WORST]`` so that infinities stay JSON-safe and an error still ranks last."""
    value = value if smaller_is_better else -value
    return max(-WORST, min(WORST, value))


class Rung:
    """Sorted values with the trial that reported each; insertion is ``bisect`` (O(log n) search).

    ``promoted`` holds the trials promotion-based ASHA has sent on to the next rung.
    """

    __slots__ = ("ids", "promoted", "values")

    def __init__(self) -> None:
        self.values: list[float] = []
        self.ids: list[int] = []
        self.promoted: set[int] = set()

    def __len__(self) -> int:
        return len(self.values)

    def insert(self, request_id: int, value: float) -> int:
        """Adds a value ahead of equal ones (Determined's stopping ASHA); returns its rank from 0."""
        index = bisect.bisect_left(self.values, value)
        self.values.insert(index, value)
        self.ids.insert(index, request_id)
        return index

    def insert_promoting(self, request_id: int, value: float, divisor: float) -> int | None:
        """Adds a value behind equal ones and returns the trial to promote now, if any.

        As Determined's promotion ASHA: the best ``int(n / divisor)`` of a rung should have been
        promoted. The new trial is promoted at once when it ranks among them; otherwise, when that
        count grew by one, the trial at the new boundary is (unless it already was).
        """
        before = int(len(self.values) / divisor)
        after = int((len(self.values) + 1) / divisor)
        index = bisect.bisect_right(self.values, value)
        self.values.insert(index, value)
        self.ids.insert(index, request_id)
        if index < after:
            self.promoted.add(request_id)
            return request_id
        if after != before and self.ids[before] not in self.promoted:
            self.promoted.add(self.ids[before])
            return self.ids[before]
        return None

    def remove(self, request_id: int) -> None:
        """Forgets a trial's value (a trial with invalid hyperparameters does not count)."""
        if request_id in self.ids:
            index = self.ids.index(request_id)
            del self.values[index]
            del self.ids[index]
        self.promoted.discard(request_id)

    def state_dict(self) -> list[Any]:
        # Values go as packed doubles: exact, and JSON-encoding thousands of floats as text would
        # cost the master milliseconds on every event of a large search.
        return [pack("d", self.values), pack("q", self.ids), sorted(self.promoted)]

    @classmethod
    def from_state(cls, state: list[Any]) -> Rung:
        rung = cls()
        rung.values, rung.ids = unpack("d", state[0]), unpack("q", state[1])
        rung.promoted = set(state[2])
        return rung


def pack(typecode: str, numbers: list[Any]) -> str:
    """Numbers as base64 of little-endian machine values (``d``: float64, ``q``: int64)."""
    packed = array(typecode, numbers)
    if sys.byteorder == "big":
        packed.byteswap()
    return base64.b64encode(packed.tobytes()).decode("ascii")


def unpack(typecode: str, text: str) -> list[Any]:
    packed = array(typecode, base64.b64decode(text))
    if sys.byteorder == "big":
        packed.byteswap()
    return packed.tolist()
