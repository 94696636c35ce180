"""What the package's modules share, private to it: timeouts in seconds, and the completions of
each event loop (a native Notifier whose eventfd the loop watches), which the connector's
operations and the sideband's calls both wait on."""

import math
import operator

from . import _memwire
from .errors import InvalidArgumentError

#: Seconds a wait takes when given no timeout (every wait has one).
DEFAULT_TIMEOUT = 300.0


def timeout_seconds(timeout):
    if timeout is None:
        return DEFAULT_TIMEOUT
    if type(timeout) is float and 0 < timeout < math.inf:
        return timeout
    if type(timeout) is int and timeout > 0:
        return float(timeout)  # raises OverflowError past a float's range, as below
    try:
        seconds = float(timeout)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"timeout must be seconds, not {timeout!r}") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise InvalidArgumentError(f"timeout must be positive and finite, not {timeout!r}")
    return seconds


# Whole seconds up to this are exact in the float milliseconds timeout_ms otherwise computes.
_EXACT_MS_SECONDS = 2**53 // 1000


def timeout_ms(timeout):
    """timeout_seconds in whole milliseconds, at least 1: what the native waits take."""
    if type(timeout) is int and 0 < timeout <= _EXACT_MS_SECONDS:
        return timeout * 1000
    # On positive seconds floor is int() and `or 1` is max(1, ...), at a fraction of their cost.
    return math.floor(timeout_seconds(timeout) * 1000) or 1


def reason_text(reason):
    """The reason an ending call (cancel, close) passes on: a string, "" for the default wording."""
    if not isinstance(reason, str):
        raise InvalidArgumentError(f"a reason is a string, not {type(reason).__name__}")
    return reason


def read_only(attribute, doc=None):
    """A read-only property: the object's ``attribute`` (dotted for a part's: "_native.url")."""
    return property(operator.attrgetter(attribute), doc=doc)


def native_answer(method, doc=None):
    """A read-only property: what the native object's ``method()`` answers."""
    return property(lambda self: getattr(self._native, method)(), doc=doc)


class EndsWithBlock:
    """``with``: the block's end calls the method ``_end_of_block`` names (close, stop...)."""

    __slots__ = ()
    _end_of_block = "close"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        getattr(self, self._end_of_block)()
        return False


class EndsWithAsyncBlock(EndsWithBlock):
    """``with`` and ``async with`` alike."""

    __slots__ = ()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        getattr(self, self._end_of_block)()
        return False


class LoopCompletions:
    """Completions for one event loop. memwire's thread that finishes an operation posts
    (token, status) to a native Notifier, whose eventfd the loop watches (add_reader): no GIL is
    taken on memwire's threads and nothing polls. The loop then resolves the token's future."""

    __slots__ = ("native", "futures", "next_token", "loop", "watching", "timer", "timer_when", "__weakref__")

    def __init__(self, loop):
        self.native = _memwire.Notifier()
        self.futures = {}
        self.next_token = 0
        self.loop = loop
        # Deadlines of the waits in progress on this loop, behind one timer set for the earliest
        # (a timer per wait costs more than the wait itself).
        self.watching = {}
        self.timer = None
        self.timer_when = 0.0
        loop.add_reader(self.native.fd, self.drain)

    def watch(self, op, deadline):
        entry = [deadline, op]
        self.watching[id(entry)] = entry
        if self.timer is None or deadline < self.timer_when:
            if self.timer is not None:
                self.timer.cancel()
            self.timer = self.loop.call_at(deadline, self._expire)
            self.timer_when = deadline
        return entry

    def unwatch(self, entry):
        self.watching.pop(id(entry), None)

    def _time_out(self, op):
        # Wakes the op's waiter with TIMED_OUT; the op keeps its token, with a fresh future.
        old = op._done
        if old is not None and not old.done() and self.futures.get(op._token) is old:
            fresh = self.loop.create_future()
            self.futures[op._token] = fresh
            op._done = fresh
            old.set_result(TIMED_OUT)

    def _expire(self):
        self.timer = None
        now = self.loop.time()
        nearest = None
        for key, entry in list(self.watching.items()):
            if entry[0] <= now:
                del self.watching[key]
                self._time_out(entry[1])
            elif nearest is None or entry[0] < nearest:
                nearest = entry[0]
        if nearest is not None:
            self.timer = self.loop.call_at(nearest, self._expire)
            self.timer_when = nearest

    def drain(self):
        futures = self.futures
        for token, status in self.native.drain():
            future = futures.pop(token, None)
            if future is not None and not future.done():
                future.set_result(status)

    def arm(self):
        """(notifier, token, future): hand the first two to the native operation."""
        token = self.next_token
        self.next_token = token + 1
        future = self.loop.create_future()
        self.futures[token] = future
        return self.native, token, future


TIMED_OUT = -1  # what a watched wait's future gets when its deadline passes
# loop -> LoopCompletions. Each value holds its loop (it schedules on it), so a weak key would
# never die: entries of closed loops are dropped instead, whenever a new loop comes, which lets
# go of the loop and of its eventfd (once no operation in flight still posts to it).
_completions = {}
_last = [None, None]  # (loop, completions) of the last lookup: most programs have one loop


def completions_for(loop):
    if _last[0] is loop:
        return _last[1]
    completions = _completions.get(loop)
    if completions is None:
        _forget_closed_loops()
        completions = _completions[loop] = LoopCompletions(loop)
    _last[0], _last[1] = loop, completions
    return completions


def _forget_closed_loops():
    for loop in [loop for loop in _completions if loop.is_closed()]:
        del _completions[loop]
