"""smss: a Python client for the smss message queue (standard library only).

    import smss
    c = smss.connect("127.0.0.1:12301")
    c.create_topic("orders")
    c.publish("orders", b"hello", {"k": "v"})
    with c.subscribe("orders", who="billing", resume=True) as sub:
        for msg in sub:
            print(msg.event_id, msg.headers, msg.body)

The wire protocol is docs/protocol.md of the smss repository.
"""

from .client import Client, Message, TopicInfo, connect
from .errors import (AuthFailed, AuthUnsupported, DelayTooShort, EventIdUnavailable, ExpireTooSoon, Fenced,
                     InvalidInput, InvalidRequest, InvalidTopicName, LimitExceeded, NetworkError, NoMaster,
                     NotMaster, NotSupported, PermissionDenied, ProtocolError, RetriesExhausted, ServerError,
                     ServerStopping, SmssError, SubscriberExists, Timeout, TopicDeleted, TopicExist, TopicNotExist,
                     TwoMasters, WriteNotConfirmed)
from ._epochs import Position
from .workqueue import Nak, QueueMessage, Term, Worker
from .subscriber import RESUME_FROM_END, RESUME_FROM_START, Delivery, Subscription

__version__ = "0.1.0"

__all__ = [
    "connect", "Client", "Message", "TopicInfo", "Delivery", "Subscription", "Position", "RESUME_FROM_START",
    "RESUME_FROM_END", "SmssError", "InvalidInput", "NetworkError", "Timeout", "ProtocolError", "NoMaster",
    "RetriesExhausted", "AuthUnsupported", "TopicDeleted", "ServerError", "TopicNotExist", "TopicExist",
    "SubscriberExists", "NotSupported", "NotMaster", "InvalidTopicName", "ExpireTooSoon", "DelayTooShort",
    "InvalidRequest", "LimitExceeded", "EventIdUnavailable", "AuthFailed", "PermissionDenied",
    "WriteNotConfirmed", "Fenced", "ServerStopping", "TwoMasters", "Term", "Nak", "QueueMessage", "Worker",
]
