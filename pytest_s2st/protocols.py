"""The shapes of the objects the pytest glue hands around, named by what their callers use (typing only).

Each Protocol lists just the attributes and methods its callers touch, so a module can say what it needs of an
object without importing the class (a plugin module importing another, a cycle). This module is pytest-free and
imports nothing at run time beyond typing: pytest's objects appear as the small Node shape they are used as.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Protocol, Union

if TYPE_CHECKING:
    from pathlib import Path

    from .measurement import Measurement
    from .rounds import TimedRounds


class Node(Protocol):
    """A pytest item as the code-version A/B uses it: its node id and its name."""

    @property
    def nodeid(self) -> str: ...

    @property
    def name(self) -> str: ...


class CodeVersionsController(Protocol):
    """--s2st-ab-base's controller (plugin_versions.VersionsController): both sides measured in its workers."""

    @property
    def controller(self) -> Literal[True]: ...

    def compare(self, item: Node, ab_estimator: str | None = None) -> Measurement: ...

    def head_rounds(self, item: Node) -> list[float]: ...


class CodeVersionsWorker(Protocol):
    """A worker a controller started (plugin_versions.VersionsWorker): it times the rounds the controller orders."""

    @property
    def controller(self) -> Literal[False]: ...

    def serve(self, item: Node, rounds: TimedRounds, model: Any = None) -> None: ...

    def measured(self, item: Node, measurement: dict) -> None: ...


# the session's code-version part: ``if versions.controller`` tells the two apart (for a type checker too)
CodeVersions = Union[CodeVersionsController, CodeVersionsWorker]


class SessionOptions(Protocol):
    """The session's settings as a plugin module's configure reads them (session.S2STSession)."""

    explicit: dict[str, Any]  # a setting given on the command line -> its value

    def option(self, name: str) -> Any: ...

    def source(self, name: str) -> str: ...


class SessionState(SessionOptions, Protocol):
    """The session as the code-version A/B's configure and controller use it."""

    code_versions: CodeVersions | None

    def plan_evidence_root(self) -> str: ...


class HookConfig(Protocol):
    """What hookcall needs of a pytest.Config: its hook relay (one attribute per hook) and its rootdir."""

    @property
    def hook(self) -> Any: ...

    @property
    def rootpath(self) -> Path: ...
