"""Exceptions raised by the smss client.

Every exception is an ``SmssError``. Catch the narrower classes to branch:

* ``InvalidInput`` (also a ``ValueError``): the call was refused before
  anything was sent (a bad topic name, a payload over the limit, ...).
* ``ServerError`` and its subclasses: the server refused the request (a 400
  reply); ``.message`` is the server's text, verbatim. The connection stays
  usable.
* ``NetworkError`` (also an ``OSError``): the connection could not be opened
  or was lost; ``Timeout`` (also a ``TimeoutError``) when a deadline ran out.
* ``ProtocolError``: the server sent bytes this client cannot parse.
* ``RetriesExhausted``: every attempt a retried call was allowed failed;
  ``.last`` is the last attempt's error (also the ``__cause__``).
"""


class SmssError(Exception):
    """Base class of every error of this package."""


class InvalidInput(SmssError, ValueError):
    """A bad argument, refused before anything was sent."""


class NetworkError(SmssError, OSError):
    """The connection could not be opened, or it was lost.

    ``not_sent`` is True when the request certainly did not reach the server
    (the connection could not be opened)."""

    not_sent = False


class Timeout(NetworkError, TimeoutError):
    """A connect, write or read did not finish within its timeout."""


class ProtocolError(SmssError):
    """The server sent something this client cannot parse."""


class NoMaster(SmssError):
    """None of several addresses is a reachable master."""


class TwoMasters(NoMaster):
    """Two reachable masters claim the newest epoch (two slaves promoted by
    hand, or a slave restarted as a master): writing to either could lose
    what is written to the other when one rejoins, so the client writes to
    neither until one follows the other. A cluster (-role auto) never has two."""


class RetriesExhausted(SmssError):
    """A call failed on every attempt its retry budget allowed.

    The exception raised is also an instance of the last attempt's class
    (``except smss.NetworkError`` still matches); ``last`` is that error."""

    def __init__(self, msg, last=None):
        super().__init__(msg)
        self.text = msg
        self.last = last

    def __str__(self):
        return self.text


_exhausted_classes = {}


def retries_exhausted(msg, last):
    """A RetriesExhausted that is also an instance of type(last)."""
    base = type(last)
    cls = _exhausted_classes.get(base)
    if cls is None:
        cls = type("RetriesExhausted", (RetriesExhausted, base), {"__module__": __name__})
        _exhausted_classes[base] = cls
    e = cls.__new__(cls)
    e.__dict__.update(getattr(last, "__dict__", {}))
    Exception.__init__(e, msg)
    e.text, e.last = msg, last
    return e


class AuthUnsupported(SmssError):
    """Credentials were given but the server does not offer authentication."""


class TopicDeleted(SmssError):
    """The server ended a subscription (code 255): the topic was deleted or expired."""


class ServerError(SmssError):
    """A 400 reply. ``message`` is the server's text, verbatim."""

    def __init__(self, message, context=""):
        self.message = message
        self.context = context
        super().__init__(message)

    def __str__(self):
        return f"{self.context}: smss server: {self.message}" if self.context else f"smss server: {self.message}"


class TopicNotExist(ServerError):
    """The topic is unknown, deleted or expired."""


class TopicExist(ServerError):
    """Create of a topic name that already exists."""


class SubscriberExists(ServerError):
    """Another subscriber with the same who is active on the topic."""


class NotSupported(ServerError):
    """The server does not serve this command (``don't support action``)."""


class NotMaster(ServerError):
    """A write or topic management sent to a slave (``just master can ...``)."""


class InvalidTopicName(ServerError):
    """The server refused the topic name."""


class ExpireTooSoon(ServerError):
    """A topic lifetime under 10 s."""


class DelayTooShort(ServerError):
    """A delay under 1 s."""


class InvalidRequest(ServerError):
    """The server refused the request's payload."""


class LimitExceeded(ServerError):
    """A request over one of the server's size limits (``... exceeds limit.X N``)."""


class EventIdUnavailable(ServerError):
    """A subscription start the server cannot resume from."""


class AuthFailed(ServerError):
    """The server refused the login, or a command before it."""


class PermissionDenied(ServerError):
    """The user may not run this command on this topic."""


class WriteNotConfirmed(ServerError):
    """A master with syncSlaves did not get the write confirmed in time (it may be stored)."""


class Fenced(ServerError):
    """A cluster master refused to acknowledge a write: it may no longer be the master."""


class ServerStopping(ServerError):
    """The server refused a subscription because it is stopping (a cluster node changing role); reconnect."""


_EXACT = {
    "topic not exist": TopicNotExist,
    "topic exist": TopicExist,
    "don't support action": NotSupported,
    "just master can pub message": NotMaster,
    "just master can manage topic": NotMaster,
    "just master can change stored positions": NotMaster,
    "expire MUST more than 10s": ExpireTooSoon,
    "delay time must be more than 1 second": DelayTooShort,
    "topic name is required": InvalidTopicName,
    "topic name MUST be less than 128 char and NOT contains space/enter/tab": InvalidTopicName,
    "invalid pub payload": InvalidRequest,
    "invalid request, payload size must be more than 8": InvalidRequest,
    "invalid delay request": InvalidRequest,
    "invalid replica eventId": EventIdUnavailable,
    "EOF": EventIdUnavailable,
    "invalid pos": EventIdUnavailable,
    "can't find event id": EventIdUnavailable,
    "can't find event id,because file not exist": EventIdUnavailable,
    "found event id,but expired": EventIdUnavailable,
    "server shutting down": ServerStopping,
    "the server is shutting down": ServerStopping,
}


def classify(message, topic=""):
    """Return the ServerError subclass for a 400 text (docs/protocol.md §2.3)."""
    cls = _EXACT.get(message)
    if cls is not None:
        return cls
    m = message
    if topic and m == topic + " not exist":
        return TopicNotExist
    if m.endswith(" regiester exist"):
        return SubscriberExists
    if m.startswith("invalid topic name"):
        return InvalidTopicName
    if m.startswith("queue groups are served by the master only"):
        return NotMaster
    if m.startswith("write not confirmed"):
        return WriteNotConfirmed
    if m.startswith("fenced: "):
        return Fenced
    if m.startswith("permission denied:"):
        return PermissionDenied
    if (m.startswith("authentication ") or m.startswith("too many failed authentication")
            or (m.startswith("user ") and (m.endswith("is disabled") or m.endswith("no longer exists")))):
        return AuthFailed
    if "exceeds limit." in m or "exceeds delay.maxDelay" in m:
        return LimitExceeded
    if m.startswith("smss-msg-id must be "):
        return InvalidRequest
    if (m.startswith("invalid eventId") or "is beyond the last eventId" in m
            or "removed by retention" in m or "is older than the oldest retained" in m
            or "is inside a binlog block" in m or m.startswith("subscription position is gone")):
        return EventIdUnavailable
    return ServerError


def server_error(message, topic="", context=""):
    return classify(message, topic)(message, context)
