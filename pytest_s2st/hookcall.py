"""Calling pytest-s2st's public hooks (hookspec.py) so that a plugin's exception is one line, not a traceback.

A conftest.py whose pytest_s2st_table raised lost every table and the summary behind pytest's INTERNALERROR; one
whose pytest_s2st_row_measured raised lost the row. The caller gets the line naming the hook and the implementing
function's file:line, keeps printing what was measured, and fails the session (or the test) with it.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from .inputs import show

if TYPE_CHECKING:
    from .protocols import HookConfig


def call_hook(config: HookConfig, name: str, /, **kwargs: Any) -> str | None:
    """``config.hook.<name>(**kwargs)``: None, or the one line saying which implementation raised what.
    Only Exception: pytest.fail, pytest.exit and KeyboardInterrupt keep their own meaning."""
    hook = getattr(config.hook, name)
    try:
        hook(**kwargs)
    except Exception as exc:  # noqa: BLE001 -- a plugin's bug fails the session; it never hides the tables
        return f"{name}: {_where(config, hook, exc)} raised {type(exc).__name__}: {show(exc)}"
    return None


def _where(config: HookConfig, hook: Any, exc: BaseException) -> str:
    """'conftest.py:12 (pytest_s2st_table)': the implementation's line in the traceback (relative to the rootdir
    when under it); the innermost frame when no implementation's code is in it (a decorated one)."""
    impls = {getattr(impl.function, "__code__", None): impl.function for impl in hook.get_hookimpls()}
    tb, found, last = exc.__traceback__, None, None
    while tb is not None:
        last = tb
        if found is None and tb.tb_frame.f_code in impls:
            found = tb
        tb = tb.tb_next
    at = found or last
    if at is None:
        return "an implementation"
    path = at.tb_frame.f_code.co_filename
    try:
        relative = os.path.relpath(path, str(config.rootpath))
        path = path if relative.startswith("..") else relative
    except (ValueError, AttributeError):  # another drive on Windows; a config without a rootpath
        pass
    function = impls.get(at.tb_frame.f_code)
    name = getattr(function, "__qualname__", None) or at.tb_frame.f_code.co_name
    return f"{show(path)}:{at.tb_lineno} ({name})"
