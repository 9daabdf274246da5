"""The controller and its workers talk over loopback: ``multiprocessing.connection`` (length-framed messages, an
HMAC handshake on a random key, so no other local process can drive a worker), each message one JSON object of
at most MAX_MESSAGE bytes.

The worker finds the controller in the environment variable ENV: JSON ``{"address": [host, port], "key": hex,
"side": "base"|"head", "pair": N}``.
"""
from __future__ import annotations

import json
import os
from multiprocessing.connection import Client, Connection, Listener
from typing import Any

ENV = "S2ST_AB_WORKER"
MAX_MESSAGE = 64 * 1024 * 1024  # a measurement with every round kept is tens of KB; a bound, not a size


class ChannelClosed(Exception):
    """The other end went away (exited, crashed or closed)."""


def send(conn: Connection, message: dict[str, Any]) -> None:
    data = json.dumps(message, allow_nan=True).encode()
    if len(data) > MAX_MESSAGE:
        raise ValueError(f"message of {len(data)} bytes is over {MAX_MESSAGE}")
    try:
        conn.send_bytes(data)
    except (OSError, EOFError) as exc:
        raise ChannelClosed(str(exc)) from None


def receive(conn: Connection, timeout: float | None = None) -> dict[str, Any] | None:
    """The next message; None when ``timeout`` passed first. ChannelClosed when the other end is gone."""
    try:
        if timeout is not None and not conn.poll(timeout):
            return None
        data = conn.recv_bytes(MAX_MESSAGE)
    except (OSError, EOFError) as exc:
        raise ChannelClosed(str(exc) or "closed") from None
    message = json.loads(data)
    if not isinstance(message, dict):
        raise ChannelClosed(f"not a message: {type(message).__name__}")
    return message


def listener(workers: int) -> tuple[Listener, bytes]:
    """A loopback listener whose accept queue holds every worker at once: multiprocessing's default of 1 drops the
    handshake of workers that connect together, and such a worker then waits for a challenge that never comes."""
    key = os.urandom(32)
    return Listener(("127.0.0.1", 0), backlog=max(workers, 1) + 8, authkey=key), key


def worker_spec() -> dict[str, Any] | None:
    """This process's part in a code-version A/B, from the environment; None in any other process."""
    raw = os.environ.get(ENV)
    if not raw:
        return None
    spec = json.loads(raw)
    return spec if isinstance(spec, dict) else None


def connect(spec: dict[str, Any]) -> Connection:
    host, port = spec["address"]
    return Client((host, int(port)), authkey=bytes.fromhex(spec["key"]))
