"""One side of a code-version A/B: a pytest session in its own tree that, at each benchmark's timing pass, tells the
controller it is ready and then runs exactly the rounds it is told to, one at a time, and nothing in between.

Messages to the controller: ``hello``, ``ready`` (nodeid, samples), ``per_call`` (calibration), ``round`` (the
round's per-sample time), ``failed`` (nodeid, one line), ``measured`` (nodeid, the measurement's dict), ``bye``.
From it: ``items`` (the nodeids to run, once, after the controller's own collection), ``calibrate`` (budget_s),
``round`` (calls), ``done`` (time no more rounds), ``skip`` (this benchmark is not compared: the controller never
reached it).
"""
from __future__ import annotations

import os
from typing import Any

from . import channel

WAIT_S = 24 * 3600.0  # a worker waits for its next order at most this long (the controller's own bounds end it first)


class Skipped(Exception):
    """The controller does not compare this benchmark (the head's test ended before its timing)."""


class Worker:
    def __init__(self, spec: dict[str, Any]):
        self.spec = spec
        self.side, self.pair = str(spec["side"]), int(spec["pair"])
        self.conn = channel.connect(spec)
        channel.send(self.conn, {"op": "hello", "side": self.side, "pair": self.pair, "pid": os.getpid()})

    def items(self) -> set[str]:
        """The nodeids the controller compares, once its own collection is done (none when it went away first:
        its session ended before any test, e.g. a usage or collection error)."""
        try:
            order = channel.receive(self.conn, WAIT_S)
        except channel.ChannelClosed:
            return set()
        if order is None or order.get("op") != "items":
            raise channel.ChannelClosed(f"expected the benchmarks to run, got {order!r}")
        return {str(nodeid) for nodeid in order.get("nodeids") or ()}

    def serve(self, nodeid: str, rounds: Any, origins: dict[str, str] | None = None) -> None:
        """At ``nodeid``'s timing pass: ``rounds`` (rounds.TimedRounds) runs what the controller orders.
        ``origins``: the files the benchmark's module and its model's module were imported from (the controller
        refuses a side that runs the other side's code)."""
        channel.send(self.conn, {"op": "ready", "nodeid": nodeid, "samples": rounds.n_samples,
                                 "origins": origins or {}})
        while True:
            order = channel.receive(self.conn, WAIT_S)
            if order is None:
                raise channel.ChannelClosed(f"no order from the controller in {WAIT_S:g} s")
            op = order.get("op")
            if op == "calibrate":
                channel.send(self.conn, {"op": "per_call", "s": rounds.per_call_s(float(order["budget_s"]))})
            elif op == "round":
                rounds.calls = int(order["calls"])
                wall, own = rounds.next_round()  # own: less the time this thread waited for a CPU in it
                channel.send(self.conn, {"op": "round", "s": wall, "own_s": own})
            elif op == "done":
                return
            elif op == "skip":
                raise Skipped(nodeid)
            else:
                raise channel.ChannelClosed(f"unknown order {op!r}")

    def measured(self, nodeid: str, measurement: dict) -> None:
        channel.send(self.conn, {"op": "measured", "nodeid": nodeid, "measurement": measurement})

    def failed(self, nodeid: str, why: str) -> None:
        try:
            channel.send(self.conn, {"op": "failed", "nodeid": nodeid, "why": why[:2000]})
        except channel.ChannelClosed:
            pass

    def close(self, exitstatus: int | None = None) -> None:
        try:
            channel.send(self.conn, {"op": "bye", "exitstatus": exitstatus})
        except channel.ChannelClosed:
            pass
        self.conn.close()
