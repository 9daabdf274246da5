"""The Protocols of pytest_s2st/protocols.py match the classes handed in their place (no type checker runs in
CI): every method a Protocol names is on the class with the same parameters, every attribute is set."""
from __future__ import annotations

import inspect
import typing

import pytest

from pytest_s2st import protocols
from pytest_s2st.hookcall import call_hook
from pytest_s2st.plugin_versions import VersionsController, VersionsWorker
from pytest_s2st.session import S2STSession


def _members(proto: type) -> dict[str, object]:
    """The Protocol's own members and those of the Protocols it extends."""
    out: dict[str, object] = {}
    for base in reversed(proto.__mro__):
        if getattr(base, "_is_protocol", False) and base is not typing.Protocol:
            out.update({k: v for k, v in vars(base).items() if not k.startswith("_")})
            out.update({k: "attribute" for k in vars(base).get("__annotations__", {})})
    return out


def _parameters(function: object) -> list[str]:
    return [p for p in inspect.signature(function).parameters if p != "self"]  # type: ignore[arg-type]


@pytest.mark.parametrize("proto, cls", [(protocols.CodeVersionsController, VersionsController),
                                        (protocols.CodeVersionsWorker, VersionsWorker),
                                        (protocols.SessionState, S2STSession)])
def test_a_class_has_what_its_protocol_names(proto, cls):
    init = inspect.getsource(cls.__init__)
    for name, member in _members(proto).items():
        if member == "attribute":
            assert f"self.{name}" in init or hasattr(cls, name), f"{cls.__name__} sets no {name}"
        elif isinstance(member, property):
            assert hasattr(cls, name), f"{cls.__name__} has no {name}"
        else:
            assert _parameters(getattr(cls, name)) == _parameters(member), f"{cls.__name__}.{name}"


def test_the_controller_flag_tells_the_two_apart():
    hints = {p: typing.get_type_hints(p.controller.fget) for p in protocols.CodeVersions.__args__}
    assert [typing.get_args(h["return"]) for h in hints.values()] == [(True,), (False,)]
    assert (VersionsController.controller, VersionsWorker.controller) == (True, False)


def test_hook_config_is_what_call_hook_reads(pytestconfig):
    assert set(_members(protocols.HookConfig)) == {"hook", "rootpath"}
    assert call_hook(pytestconfig, "pytest_s2st_table", config=pytestconfig, name="x", lines=[]) is None
