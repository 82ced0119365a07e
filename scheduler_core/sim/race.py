"""The race detector: vector clocks per stream, checked on every memory access.

Actors are streams; actor 0 is the host. Each actor has a vector clock; an access by actor ``a`` at
epoch ``e`` (``a``'s own component after the access ticked it) happens before a later access by
``b`` iff ``b``'s clock has ``clock_b[a] >= e``. The clocks move only through the operations a GPU
program has: the host launching work on a stream (the stream learns what the host knew), events
(``record`` captures the stream's clock, ``wait_event`` joins it into a stream, ``sync_event``
joins it into the host), ``wait_stream`` and host synchronisation with a stream or the device.

Memory is tracked per block (a storage): its last write and the last read from each actor. An
access that is not ordered after a conflicting earlier access from another actor is a hazard:
read-after-write, write-after-read or write-after-write. A block freed on the host while an actor
other than its allocating stream used it, without ``record_stream`` for that actor and without that
use being ordered before the allocating stream's current position, may be handed out again by a
caching allocator while the use is still running: a use-after-free hazard (reported at the free).

A stream may claim, with an event, that its reads of some blocks are done (``reads_done``: upstream's
shared-read-done event, which another stream waits on instead of the whole stream). The claim holds
until the stream next waits on another actor (the next batch); a read of a claimed block by that
stream before then means the event was recorded too early: a read-after-read-done hazard naming the
event's record and the late read.

This module knows nothing about torch, so the fuzz test drives it directly.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Callable, Hashable, NamedTuple

HOST = 0
Clock = tuple[int, ...]


class Access(NamedTuple):
    # A tuple, not a dataclass: one is made per access (through ``_new_access``, without the Python
    # ``__new__``). The garbage collector still tracks it (a NamedTuple, holding a stack handle of a
    # GC type), so ``sim.measure.run_reference`` keeps older objects out of its full passes.
    actor: int
    epoch: int
    op: str
    stack: object = ()  # a tuple of strings or (file, line, function) frames, or the handle a
    # ``RaceDetector(format_stack=...)`` formats when a report names the access


# ``Access((actor, epoch, op, stack))`` without the NamedTuple's Python ``__new__`` (one per access).
_new_access = partial(tuple.__new__, Access)


def format_stack(stack: object) -> tuple[str, ...]:
    """Frames as ``file:line in function`` (strings pass through)."""
    if not isinstance(stack, tuple):
        raise TypeError(f"a stack handle of type {type(stack).__name__} needs RaceDetector(format_stack=...)")
    return tuple(f"{f[0]}:{f[1]} in {f[2]}" if isinstance(f, tuple) else str(f) for f in stack)


@dataclass(frozen=True)
class Hazard:
    """An unordered pair of accesses to one buffer (or a reuse of a block still in use)."""

    kind: str  # "read-after-write" | "write-after-read" | "write-after-write" | "use-after-free"
    #          | "read-after-read-done"
    buffer: str
    first_op: str
    first_stream: str
    first_stack: tuple[str, ...]
    second_op: str
    second_stream: str
    second_stack: tuple[str, ...]

    def describe(self) -> str:
        lines = [(f"{self.kind} on {self.buffer}: {self.second_op} on stream {self.second_stream!r} is not "
                  f"ordered after {self.first_op} on stream {self.first_stream!r}"),
                 f"  earlier access ({self.first_stream}):"]
        lines += [f"    {frame}" for frame in self.first_stack] or ["    (no Python stack)"]
        lines.append(f"  later access ({self.second_stream}):")
        lines += [f"    {frame}" for frame in self.second_stack] or ["    (no Python stack)"]
        return "\n".join(lines)


@dataclass(slots=True)
class Block:
    name: object  # str() of it names the buffer (formatted only for a report)
    owner: int  # the actor whose allocation made it (a caching allocator's pool stream)
    write: Access | None = None
    reads: dict[int, Access] | None = None  # the last read per actor (None until one: most blocks of
    # a forward are written once and read once, and every object here is one more for the GC)
    recorded: tuple[int, ...] = ()  # actors named by record_stream (rare: no set per block)

    def users(self) -> list[Access]:
        out = list(self.reads.values()) if self.reads else []
        if self.write is not None:
            out.append(self.write)
        return out


class RaceDetector:
    """Vector clocks for the host and each stream, and per-block access history."""

    def __init__(self, format_stack: Callable[[object], tuple[str, ...]] = format_stack) -> None:
        self.format_stack = format_stack
        self.names: list[str] = ["host"]
        self.clocks: list[list[int]] = [[0]]
        self.blocks: dict[Hashable, Block] = {}
        self.hazards: list[Hazard] = []
        # Blocks some actor other than their owner has used: the ones a free must check.
        self.cross: set[Hashable] = set()
        # The host's clock changes only at host syncs and host accesses: a stream that has joined
        # this version of it need not join again.
        self._host_version = 0
        self._seen_host: list[int] = [0]
        # stream -> {block: the read-done event's record (as an Access)}: reads the stream claimed done.
        self.claims: dict[int, dict[Hashable, Access]] = {}

    # -- actors and ordering ----------------------------------------------------------------------
    def new_stream(self, name: str) -> int:
        self.names.append(name)
        for clock in self.clocks:
            clock.append(0)
        self.clocks.append([0] * len(self.names))
        self._seen_host.append(-1)
        return len(self.names) - 1

    def _join(self, into: int, other: Clock | list[int]) -> None:
        clock = self.clocks[into]
        for i, v in enumerate(other):
            if v > clock[i]:
                clock[i] = v
                if into == HOST:
                    self._host_version += 1

    def launch(self, stream: int) -> None:
        """The host queues work on ``stream``: that work follows everything the host has seen."""
        if stream != HOST and self._seen_host[stream] != self._host_version:
            self._join(stream, self.clocks[HOST])
            self._seen_host[stream] = self._host_version

    def record(self, stream: int) -> Clock:
        """An event on ``stream``: its clock now."""
        self.launch(stream)
        return tuple(self.clocks[stream])

    def wait_event(self, stream: int, event: Clock) -> None:
        self.claims.pop(stream, None)
        self.launch(stream)
        self._join(stream, event)

    def wait_stream(self, stream: int, other: int) -> None:
        """``stream`` waits for all work queued on ``other`` so far."""
        self.claims.pop(stream, None)
        self.launch(stream)
        self.launch(other)
        self._join(stream, self.clocks[other])

    def sync_event(self, event: Clock) -> None:
        self._join(HOST, event)

    def sync_stream(self, stream: int) -> None:
        self.launch(stream)
        self._join(HOST, self.clocks[stream])

    def sync_device(self) -> None:
        for stream in range(1, len(self.clocks)):
            self.sync_stream(stream)

    def ordered(self, earlier: Access, actor: int) -> bool:
        return earlier.actor == actor or self.clocks[actor][earlier.actor] >= earlier.epoch

    def reads_done(self, stream: int, event: Clock, keys: list[Hashable], stack: object = ()) -> None:
        """The event ``event`` (recorded on ``stream``) claims ``stream``'s reads of ``keys`` are done
        until ``stream`` next waits on another actor."""
        record = Access(stream, event[stream], "shared-read-done event recorded", stack)
        claimed = self.claims.setdefault(stream, {})
        for key in keys:
            claimed[key] = record

    # -- memory -----------------------------------------------------------------------------------
    def op(self, actor: int, op: str, reads: list[Hashable], writes: list[Hashable],
           stack: object = (), fresh: list[tuple[Hashable, object]] = ()) -> list[Hazard]:  # type: ignore[assignment]
        """One operation by ``actor`` reading and writing the given blocks; returns new hazards.
        ``fresh`` lists blocks (key, name) this op allocates and writes first (``allocate`` plus a
        write, which cannot race)."""
        if actor != HOST and self._seen_host[actor] != self._host_version:
            self.launch(actor)
        clock = self.clocks[actor]
        clock[actor] += 1
        if actor == HOST:
            self._host_version += 1
        access = _new_access((actor, clock[actor], op, stack))
        found: list[Hazard] = []
        blocks = self.blocks
        claimed = self.claims.get(actor)
        if claimed:
            for key in reads:
                record = claimed.pop(key, None)  # one report per claim
                if record is not None:
                    found.append(self._hazard("read-after-read-done", self._block(key, actor), record, access))
        # Inlined ``ordered``: an earlier access is ordered when it is this actor's own or this
        # actor's clock has reached it (this loop runs for every device op).
        for key in reads:
            if writes and key in writes:
                continue
            block = blocks.get(key) or self._block(key, actor)
            last = block.write
            if last is not None and last.actor != actor and clock[last.actor] < last.epoch:
                found.append(self._hazard("read-after-write", block, last, access))
            if block.reads is None:
                block.reads = {actor: access}
            else:
                block.reads[actor] = access
            if actor != block.owner:
                self.cross.add(key)
        for key in writes:
            block = blocks.get(key) or self._block(key, actor)
            last = block.write
            if last is not None and last.actor != actor and clock[last.actor] < last.epoch:
                found.append(self._hazard("write-after-write", block, last, access))
            if block.reads:
                for other in block.reads.values():
                    if other.actor != actor and clock[other.actor] < other.epoch:
                        found.append(self._hazard("write-after-read", block, other, access))
                block.reads = None
            block.write = access
            if actor != block.owner:
                self.cross.add(key)
        if fresh:
            cross = self.cross
            for key, name in fresh:
                blocks[key] = Block(name, actor, access)
                cross.discard(key)
        if found:
            self.hazards += found
        return found

    def _block(self, key: Hashable, actor: int) -> Block:
        block = self.blocks.get(key)
        if block is None:
            block = self.blocks[key] = Block(name=str(key), owner=actor)
        return block

    def allocate(self, key: Hashable, actor: int, name: object = None) -> None:
        """A fresh block owned by ``actor`` (forgets any earlier block under ``key``)."""
        self.blocks[key] = Block(name=name or str(key), owner=actor)
        self.cross.discard(key)

    def name(self, key: Hashable, name: str) -> None:
        self._block(key, HOST).name = name

    def record_stream(self, key: Hashable, stream: int) -> None:
        block = self._block(key, stream)
        if stream not in block.recorded:
            block.recorded += (stream,)

    def free(self, key: Hashable, op: str = "free", stack: tuple = ()) -> list[Hazard]:
        """The host frees the block: every unrecorded use by another actor must be ordered before
        the owning stream's current position, or the allocator may reuse the block under it.
        Host-owned (pinned) blocks are exempt: the host allocator tracks their copies itself."""
        block = self.blocks.pop(key, None)
        if key not in self.cross:  # only its owner used it: nothing can still be using it
            return []
        self.cross.discard(key)
        if block is None or block.owner == HOST:
            return []
        found = []
        owner_clock = self.clocks[block.owner]
        host_clock = self.clocks[HOST]
        for use in block.users():
            if use.actor in (block.owner, HOST) or use.actor in block.recorded:
                continue
            if owner_clock[use.actor] >= use.epoch or host_clock[use.actor] >= use.epoch:
                continue
            found.append(Hazard("use-after-free", str(block.name), use.op, self.names[use.actor], self.format_stack(use.stack),
                                f"{op} (block returns to stream {self.names[block.owner]!r}'s pool)",
                                self.names[HOST], self.format_stack(stack)))
        self.hazards += found
        return found

    def _hazard(self, kind: str, block: Block, first: Access, second: Access) -> Hazard:
        return Hazard(kind, str(block.name), first.op, self.names[first.actor], self.format_stack(first.stack),
                      second.op, self.names[second.actor], self.format_stack(second.stack))
