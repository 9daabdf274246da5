"""What enters from outside, judged in one place (pytest-free, standard library + lazy yaml).

``finite``   -- the one rule for numbers: a number that is not finite is missing evidence. NaN, +-inf,
               a bool, a string, or a value whose arithmetic overflows is never a measurement; every
               gate, compare and budget asks this helper, and -0.0 is read as 0.0.
``show``     -- outside text in a one-line message: control characters, newlines and NULs escaped.
``read_bytes`` / ``read_text`` / ``load_json`` / ``load_yaml`` -- the one bounded reader: the file is
               opened with O_NONBLOCK (a FIFO cannot block the open), checked to be a regular file
               (no FIFO, device, socket or directory: their read may never end), its size bounded,
               and at most ``limit`` + 1 bytes are read. JSON refuses NaN/Infinity (they are not JSON)
               and nesting Python cannot parse; YAML refuses alias expansion past a node budget
               before anything is expanded. Every fault is one S2STError line naming the file.
"""
from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Any

from .errors import S2STError

MIB = 2**20
DEFAULT_LIMIT = 64 * MIB  # a config, policy, score file or saved run: far below this
YAML_MAX_NODES = 1_000_000  # scalars + containers after aliases are expanded (an alias bomb is far above)


# --- numbers --------------------------------------------------------------------------------------

def finite(value: Any) -> float | None:
    """``value`` as a finite float, or None when it is not usable evidence (NaN, +-inf, bool, str,
    None, an int too large for a float). -0.0 becomes 0.0. Derived numbers go through it too: a
    difference or ratio of finite numbers can still overflow (1e308 - -1e308)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        out = float(value)
    except OverflowError:
        return None
    return out + 0.0 if math.isfinite(out) else None


def finite_or_fail(value: Any, where: str, what: str = "value") -> float:
    """``finite(value)``, or one S2STError line naming where the value came from."""
    out = finite(value)
    if out is None:
        raise S2STError(f"{where}: {what} must be a finite number, got {show(value)}")
    return out


# --- one-line text --------------------------------------------------------------------------------

def show(value: Any, limit: int = 200) -> str:
    """Outside text in an error line: repr-escaped when it holds anything non-printable (newline,
    NUL, escape sequences), and cut to ``limit`` characters."""
    text = value if isinstance(value, str) else str(value)
    if not text.isprintable():
        text = repr(text)[1:-1]
    return text if len(text) <= limit else text[: limit - 3] + "..."


def closest(key: Any, known: Any) -> str:
    """'; did you mean 'x'?' for a misspelt key, or '' when nothing is close."""
    import difflib  # lazy: plugin load

    match = difflib.get_close_matches(str(key), [str(k) for k in known], n=1, cutoff=0.6)
    return f" (did you mean {match[0]!r}?)" if match else ""


# --- the bounded reader ---------------------------------------------------------------------------

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def read_bytes(path: str | os.PathLike, what: str = "file", limit: int = DEFAULT_LIMIT) -> bytes:
    """The bytes of the regular file ``path`` (at most ``limit``); one S2STError line otherwise."""
    where = show(os.fspath(path)) if isinstance(path, (str, os.PathLike)) else show(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise S2STError(f"{where}: {what} not found") from None
    except (OSError, ValueError, TypeError) as exc:  # ValueError: a NUL in the path
        if isinstance(exc, OSError) and exc.errno == errno.ELOOP:
            raise S2STError(f"{where}: cannot read {what}: a symlink loop") from None
        if isinstance(exc, OSError) and exc.errno == errno.ENXIO:
            raise S2STError(f"{where}: cannot read {what}: a socket, not a regular file") from None
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise S2STError(f"{where}: cannot read {what}: {show(reason)}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise S2STError(f"{where}: cannot read {what}: {_kind(st.st_mode)}, not a regular file")
        if st.st_size > limit:
            raise S2STError(f"{where}: {what} is {st.st_size} bytes, over the {limit} one may have")
        chunks, total = [], 0
        while total <= limit:
            chunk = os.read(fd, min(limit + 1 - total, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    except OSError as exc:
        raise S2STError(f"{where}: cannot read {what}: {show(exc.strerror or exc)}") from None
    finally:
        os.close(fd)
    if total > limit:  # it grew since fstat
        raise S2STError(f"{where}: {what} is over the {limit} bytes one may have")
    return b"".join(chunks)


def read_text(path: str | os.PathLike, what: str = "file", limit: int = DEFAULT_LIMIT,
              encoding: str = "utf-8") -> str:
    data = read_bytes(path, what, limit)
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise S2STError(f"{show(os.fspath(path))}: cannot read {what}: not {encoding} text "
                        f"(byte {exc.start})") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (a number that is not finite is missing evidence)")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e400 is well-formed JSON that no float holds
        raise ValueError(f"the number {text[:40]} overflows to infinity (a number that is not finite is missing "
                         "evidence)")
    return value


# a number that may overflow a float: an exponent of 308 or more (a token of its own: the hex of a sha256 in a
# string is no number), or 309 digits and more. Digits are first mapped to one byte (bytes.translate, C speed): a
# run of 309 is then a plain substring search and an exponent of 3+ digits a literal-led one; only those few
# places get the exact test (regexes over the raw text took 40-60 ms of an 860 KB saved run, most of its import)
_TO_ZERO = bytes.maketrans(b"123456789E", b"000000000e")
_WIDE_EXPONENT = re.compile(rb"e\+?0{3,}")
_EXPONENT = re.compile(rb"[eE]\+?0*(?:30[89]|3[1-9]\d|[4-9]\d\d|\d{4,})(?![0-9A-Za-z])")
_NUMBER_BEFORE = re.compile(rb"(?:^|[^0-9A-Za-z.])-?\d+(?:\.\d*)?$")


def _may_overflow(text: str | bytes) -> bool:
    data = text.encode("utf-8", "replace") if isinstance(text, str) else text
    shape = data.translate(_TO_ZERO)
    if b"0" * 309 in shape:
        return True
    for wide in _WIDE_EXPONENT.finditer(shape):
        at = wide.start()
        if _EXPONENT.match(data, at) and _NUMBER_BEFORE.search(data, max(0, at - 400), at):
            return True
    return False


def loads_finite(text: str | bytes) -> Any:
    """json.loads that refuses NaN/Infinity and numbers that overflow to them (1e400) (ValueError), as JSON
    does: a value from outside that later goes into a record must be writable as JSON again. Text with no number
    that could overflow is parsed by json's own float (a Python hook on every float took 10 s of an import of
    100 saved runs)."""
    if _may_overflow(text):
        return json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)
    return json.loads(text, parse_constant=_no_constant)


def parse_json(text: str | bytes, where: str, what: str | None = None) -> Any:
    """json.loads that refuses NaN/Infinity and nesting too deep; one S2STError line naming ``where``
    (and ``what`` was being read)."""
    prefix = f"{where}: cannot read {what}: " if what else f"{where}: "
    try:
        return loads_finite(text)
    except RecursionError:
        raise S2STError(f"{prefix}nested too deep") from None
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
        raise S2STError(f"{prefix}not valid JSON ({show(exc)})") from None


def load_json(path: str | os.PathLike, what: str = "JSON file", limit: int = DEFAULT_LIMIT) -> Any:
    return parse_json(read_text(path, what, limit), show(os.fspath(path)), what)


def dumps(data: Any, **kwargs: Any) -> str:
    """json.dumps that never writes NaN/Infinity (they are not JSON): ValueError instead. Text that cannot be
    UTF-8 (a lone surrogate, e.g. from a server's message) is written escaped, so the file is still JSON."""
    text = json.dumps(data, allow_nan=False, **kwargs)
    if kwargs.get("ensure_ascii") is False:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = json.dumps(data, allow_nan=False, **{**kwargs, "ensure_ascii": True})
    return text


def _expanded_nodes(node: Any, bound: int) -> int:
    """Nodes after aliases expand (aliases share node objects in the composed graph); stops past bound."""
    memo: dict[int, int] = {}
    active: set[int] = set()

    def size(n: Any) -> int:
        key = id(n)
        if key in memo:
            return memo[key]
        if key in active:
            raise S2STError("a recursive alias")
        active.add(key)
        total = 1
        value = n.value
        if isinstance(value, list):
            for item in value:
                total += sum(size(x) for x in item) if isinstance(item, tuple) else size(item)
                if total > bound:
                    break
        active.discard(key)
        memo[key] = min(total, bound + 1)
        return memo[key]

    return size(node)


def yaml_node(text: str, where: str, loader_cls: Any = None, max_nodes: int = YAML_MAX_NODES) -> tuple[Any, Any]:
    """(composed node, loader) of one YAML document, refusing an alias bomb before it is constructed.
    The caller constructs (``loader.construct_document(node)``) and disposes the loader."""
    import yaml  # lazy: heavy

    loader = (loader_cls or yaml.SafeLoader)(text)
    try:
        node = loader.get_single_node()
        if node is not None:
            try:
                n = _expanded_nodes(node, max_nodes)
            except S2STError as exc:
                raise S2STError(f"{where}: YAML refused: {exc}") from None
            if n > max_nodes:
                raise S2STError(f"{where}: YAML refused: aliases expand to more than {max_nodes} nodes")
    except RecursionError:
        loader.dispose()
        raise S2STError(f"{where}: YAML is nested too deep") from None
    except BaseException:
        loader.dispose()
        raise
    return node, loader


def parse_yaml(text: str, where: str, what: str = "YAML") -> Any:
    import yaml  # lazy: heavy

    try:
        node, loader = yaml_node(text, where)
        try:
            return loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except RecursionError:
        raise S2STError(f"{where}: cannot read {what}: nested too deep") from None
    except yaml.YAMLError as exc:
        raise S2STError(f"{where}: cannot read {what}: not valid YAML ({show(' '.join(str(exc).split()))})") from None


def load_yaml(path: str | os.PathLike, what: str = "YAML file", limit: int = DEFAULT_LIMIT) -> Any:
    return parse_yaml(read_text(path, what, limit), show(os.fspath(path)), what)


def is_regular_file(path: str | os.PathLike) -> bool:
    """True for a regular file (following symlinks); False for anything else or an error."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


__all__ = ["finite", "finite_or_fail", "show", "closest", "read_bytes", "read_text", "parse_json", "load_json", "dumps",
           "yaml_node", "parse_yaml", "load_yaml", "is_regular_file", "DEFAULT_LIMIT", "YAML_MAX_NODES"]
