"""Positions that survive a failover: the epoch history of docs/protocol.md §4.7.

A node's status carries "epochs": [{"epoch": E, "start": S}, ...], oldest
first: the eventIds from S on were assigned by the master of epoch E, until
the next entry's start (before the first entry: epoch 0, the first master's).
Two nodes that place an eventId in the same epoch hold the same message there
and the same history before it, so a consumer notes, with the last eventId it
took, the epoch the serving node placed it in and where that epoch began; on
another node it resumes at resume_point().
"""

from typing import List, NamedTuple, Optional, Tuple

from .errors import ProtocolError


class Position(NamedTuple):
    """Where a consumer is in a history: the last eventId it took, the epoch the
    serving node placed it in, and where that epoch began there."""
    event_id: int
    epoch: int
    start: int


def parse_history(status) -> Optional[List[Tuple[int, int]]]:
    """The checked epoch history of a status dict, [] when the node kept none.

    Raises ProtocolError for a history that breaks the rules of §4.7: epochs
    above 0 and strictly increasing, starts at least 1 and never decreasing."""
    raw = status.get("epochs") or []
    if not isinstance(raw, list) or len(raw) > 1 << 16:
        raise ProtocolError("status: epochs is not a list of at most 65536 entries")
    out = []
    for i, e in enumerate(raw):
        try:
            epoch, start = int(e["epoch"]), int(e["start"])
        except (TypeError, KeyError, ValueError) as err:
            raise ProtocolError(f"status: epochs entry {i} {e!r}: {err}") from None
        if epoch < 1 or start < 1 or (out and (epoch <= out[-1][0] or start < out[-1][1])):
            raise ProtocolError(f"status: epochs entry {i} (epoch {epoch} from eventId {start}) breaks the history's order")
        out.append((epoch, start))
    return out


def epoch_start_of(history, event_id):
    """(epoch, start) of the entry placing event_id; (0, 0) before the first."""
    e = (0, 0)
    for epoch, start in history:
        if start > event_id:
            break
        e = (epoch, start)
    return e


def resume_point(history, pos: Position):
    """(point, same): where a consumer at pos resumes on a node with history.

    same is True when the node places pos.event_id in pos.epoch: both hold the
    same messages through it. Otherwise the histories part at or before it,
    and point is the last eventId they provably share (the consumer takes
    again what follows it: duplicates of what both share, never a gap)."""
    if epoch_start_of(history, pos.event_id)[0] == pos.epoch:
        return pos.event_id, True
    point = pos.event_id
    had = pos.epoch == 0  # epoch 0 is every history's first
    for i, (epoch, start) in enumerate(history):
        if epoch == pos.epoch:
            had = True
            if i + 1 < len(history):
                point = min(point, history[i + 1][1] - 1)  # where the node's epoch ended
        if epoch > pos.epoch:
            point = min(point, start - 1)
            break
    if not had:
        point = min(point, pos.start - 1)
    return max(point, 0), False
