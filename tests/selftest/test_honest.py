"""What the submission returns must not lie to the tests (``workbook.testkit.honest``).

The lying classes are written to a file outside the harness (a submission's code); the
tests' own objects, defined here, are never probed."""
from __future__ import annotations

import asyncio
import collections
import enum
import importlib.util
import sys
import textwrap

import pytest

from tests.selftest.conftest import checked
from workbook.stuck.detector import DETECTOR
from workbook.testkit import honest

SUBMISSION = '''
from __future__ import annotations
from dataclasses import dataclass

class AlwaysEqual:
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    def __hash__(self): return 0

class EqualToLists:  # says so only to what a test would compare it with
    def __eq__(self, other): return isinstance(other, (list, tuple)) or NotImplemented

class Ordered:  # an order against anything: it passes no equality check by itself
    def __lt__(self, other): return False

class Deadline:  # an honest heap entry that compares with anything that has a deadline
    def __init__(self, when): self.when = when
    def __lt__(self, other): return self.when < getattr(other, "when", 0)

class LyingList(list):
    def __eq__(self, other): return True

class CountingList(list):
    def __len__(self): return 2

class OtherItems(list):
    def __iter__(self): return iter(["a", "b"])

class OtherIndexed(list):
    def __getitem__(self, i): return AlwaysEqual()

class HoldsAnything(list):
    def __contains__(self, item): return True

class OtherLookup(dict):
    def __getitem__(self, key): return "expected"

class Endless(list):
    def __iter__(self):
        while True:
            yield 1

class PlainList(list):  # no behaviour of its own: what it holds is judged as items
    pass

class Logged(list):  # honest: its own indexing and membership agree with what it holds
    def __getitem__(self, i): return list.__getitem__(self, i)
    def __contains__(self, item): return list.__contains__(self, item)

class Name(str):  # honest: its own indexing hands out its own characters
    def __getitem__(self, i): return str.__getitem__(self, i)

class Five(int):
    def __index__(self): return 5

class Entry(tuple):  # an honest heap entry: ordered by its deadline, equal only to itself
    def __lt__(self, other): return self[0] < other[0]
    def __eq__(self, other): return self is other
    __hash__ = tuple.__hash__

class Batch(list):  # an honest list subclass whose iteration agrees with what it holds
    def __iter__(self): return list.__iter__(self)

class LyingText(str):
    def __eq__(self, other): return True
    __hash__ = str.__hash__

class Sorted:  # compares honestly: equal to its own kind with the same key only
    def __init__(self, key): self.key = key
    def __eq__(self, other):
        return self.key == other.key if isinstance(other, Sorted) else NotImplemented
    def __lt__(self, other):
        return self.key < other.key if isinstance(other, Sorted) else NotImplemented
    __hash__ = None

class Sloppy:  # its __eq__ forgets to return: None, which is no claim
    def __eq__(self, other): pass
    __hash__ = None

class Raises:  # compares only with its own kind, and says so by raising
    def __eq__(self, other): return self.key == other.key
    __hash__ = None

@dataclass
class Result:
    name: str
    status: str

class Sink:
    def __init__(self, value): self.value = value
    def get(self): return self.value
    async def get_batch(self): return self.value
    @property
    def size(self): return self.value
    def __len__(self): return 1
    def _private(self): return self.value

def free(value): return value
'''


@pytest.fixture
def sub(tmp_path, monkeypatch):
    path = tmp_path / "submission_code.py"
    path.write_text(textwrap.dedent(SUBMISSION))
    spec = importlib.util.spec_from_file_location("submission_code", path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "submission_code", module)  # a dataclass looks there
    spec.loader.exec_module(module)
    return module


class OddItem:  # a test's own item may compare oddly on purpose: never probed
    def __eq__(self, other):
        return True

    __hash__ = object.__hash__


class Colour(enum.IntEnum):
    RED = 1


@pytest.mark.parametrize("value", [
    [], [1, "a", None, 2.5, b"x"], {"k": [1, (2, 3)]}, {1, 2}, frozenset(), True,
    OddItem(), [OddItem()], collections.OrderedDict(a=1), collections.namedtuple("P", "x")(1),
    Colour.RED, object(), asyncio.Future, print,
], ids=lambda v: type(v).__name__)
def test_plain_values_and_the_tests_own_objects_are_honest(value):
    assert honest.lie_in(value) is None


@pytest.mark.parametrize("make, phrase", [
    (lambda m: m.AlwaysEqual(), "claims to equal"),
    (lambda m: m.EqualToLists(), "claims to equal"),
    (lambda m: m.LyingList([1]), "a list that claims to equal an object it has never seen"),
    (lambda m: m.CountingList([1, 2, 3]), "a list that reports a length other than its own"),
    (lambda m: m.OtherItems([1, 2]), "a list whose iteration hands out other items"),
    (lambda m: m.Endless([1, 2]), "a list whose iteration hands out other items"),
    (lambda m: m.OtherIndexed([1]), "a list whose indexing hands out other items"),
    (lambda m: m.HoldsAnything([1]), "a list that says it holds what it does not"),
    (lambda m: m.OtherLookup(k=1), "a dict whose lookup hands out other values"),
    (lambda m: m.PlainList([m.AlwaysEqual()]), "class AlwaysEqual"),
    (lambda m: m.Five(3), "an int that reports another value"),
    (lambda m: [1, {"deep": (m.AlwaysEqual(),)}], "class AlwaysEqual"),
    (lambda m: m.Result("a", m.LyingText("ok")), "class LyingText"),
    (lambda m: [m.Result("a", m.LyingText("ok"))], "class LyingText"),
], ids=["always-equal", "equal-to-lists", "list-eq", "list-len", "list-iter", "list-endless",
        "list-index", "list-contains", "dict-lookup", "held-by-a-subclass", "int-index",
        "nested",
        "a-record-field", "a-field-of-a-listed-record"])
def test_a_value_that_answers_the_comparison_itself_is_a_lie(sub, make, phrase):
    lie = honest.lie_in(make(sub))
    assert lie is not None and phrase in lie, lie


def test_the_submissions_honest_classes_are_not_lies(sub):
    assert honest.lie_in([sub.Sorted(2), sub.Sorted(1)]) is None
    assert honest.lie_in(sub.Result("a", "ok")) is None  # a dataclass's own __eq__
    assert honest.lie_in([sub.Sloppy(), sub.Raises()]) is None
    assert honest.lie_in([sub.Ordered(), sub.Deadline(1.0)]) is None  # an order claims no ==
    assert honest.lie_in([sub.Entry((1.0, "cb")), sub.Batch([1, 2])]) is None
    assert honest.lie_in([sub.Logged([1, "a"]), sub.Name("ok"), sub.PlainList([1])]) is None


def test_a_guarded_module_returns_honest_values_unchanged(sub):
    honest.guard_module(sub)
    item = OddItem()
    sink = sub.Sink(item)
    assert sink.get() is item and sink.size is item and len(sink) == 1
    assert asyncio.run(sink.get_batch()) is item
    assert sub.free([item])[0] is item
    assert asyncio.iscoroutinefunction(sub.Sink.get_batch)


@pytest.mark.parametrize("call", [
    lambda s: s.get(), lambda s: s.size, lambda s: asyncio.run(s.get_batch()),
], ids=["method", "property", "coroutine"])
def test_a_guarded_method_that_returns_a_lie_fails_the_check_and_says_so(sub, call):
    honest.guard_module(sub)
    log = DETECTOR.begin_check()
    with pytest.raises(honest.Dishonest, match=r"Sink\.\w+\(?\)? returned an object"):
        call(sub.Sink(sub.AlwaysEqual()))
    assert log.lies and "plain values" in log.lies[0]


def test_private_methods_and_free_functions_are_judged_as_the_contract_uses_them(sub):
    honest.guard_module(sub)
    liar = sub.AlwaysEqual()
    assert sub.Sink(liar)._private() is liar  # not part of the contract: not judged
    with pytest.raises(honest.Dishonest, match=r"free\(\) returned"):
        sub.free(liar)


_P03_CHEAT = '''
import threading

class ShutDown(Exception):
    pass

class Anything:  # a queue that stores nothing hands these out
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    def __lt__(self, other): return False
    def __hash__(self): return 0

class BoundedBlockingQueue:
    def __init__(self, capacity):
        if type(capacity) is not int:
            raise TypeError("capacity")
        if capacity <= 0:
            raise ValueError("capacity")
        self._cap, self._n = capacity, 0
        self._lock = threading.Lock()
        self._not_empty = threading.Condition(self._lock)
        self._not_full = threading.Condition(self._lock)

    @property
    def capacity(self):
        return self._cap

    def __len__(self):
        with self._lock:
            return self._n

    def put(self, item):
        if item is None:
            raise ValueError("None")
        with self._not_full:
            while self._n >= self._cap:
                self._not_full.wait()
            self._n += 1
            self._not_empty.notify()

    def take(self):
        with self._not_empty:
            while self._n == 0:
                self._not_empty.wait()
            self._n -= 1
            self._not_full.notify()
            return Anything()
'''


def test_a_queue_that_counts_items_and_hands_out_liars_fails_the_fifo_checks(tmp_path):
    # Before: it passed fifo_wrap, capacity_one, put_blocks, take_blocks and spurious.
    path = tmp_path / "p03_bounded_queue.py"
    path.write_text(_P03_CHEAT)
    result = checked("p03", str(path))
    by_id = {cp.id: cp for cp in result.checkpoints}
    for cp in ("p03.fifo_wrap", "p03.capacity_one", "p03.put_blocks", "p03.take_blocks"):
        assert by_id[cp].status == "failed", (cp, by_id[cp].message)
        assert "returned an object of class Anything" in by_id[cp].message, by_id[cp].message


def test_guarding_again_wraps_nothing_twice_and_guards_a_method_put_back(sub):
    original = sub.Sink.get
    honest.guard_module(sub)
    guarded = sub.Sink.get
    honest.guard_module(sub)
    assert sub.Sink.get is guarded and guarded.__wrapped__ is original
    sub.Sink.get = original  # the submission puts its own method back
    honest.guard_module(sub)
    with pytest.raises(honest.Dishonest):
        sub.Sink(sub.AlwaysEqual()).get()
