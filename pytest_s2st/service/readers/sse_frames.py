"""SSE framing for the readers: body bytes in, whole events' data out, every line and event bounded; an
event too large to hold is read as it arrives, its base64 audio decoded piece by piece (``Events``)."""
from __future__ import annotations

import binascii
import re
import sys
from typing import Any, Callable, Iterator

from ...inputs import loads_finite
from .limits import Fail, Limits


class Streamed:
    """An SSE event too large to hold (its data passed HOLD_BYTES): its fields as a dict, the audio field's
    value replaced by "", and the count of audio bytes that field's base64 decoded to, already handed to
    the reader's sink piece by piece as it arrived (None: the event had no such string field)."""
    __slots__ = ("event", "audio_bytes")

    def __init__(self, event: dict, audio_bytes: int | None) -> None:
        self.event, self.audio_bytes = event, audio_bytes

    def __repr__(self) -> str:
        return f"Streamed({self.event!r}, {self.audio_bytes})"


BOM = b"\xef\xbb\xbf"  # one at the stream's start is not part of its first line (WHATWG HTML, 9.2.5)
HOLD_BYTES = 256 * 1024  # an SSE line or event held whole; a larger one is streamed (Events)
MAX_FIELDS = 64 * 1024  # a streamed event's JSON besides its audio field's base64
_B64 = re.compile(rb"[A-Za-z0-9+/]*={0,2}")


def _a2b_strict(block: Any) -> bytes:
    """Whole base64 quanta -> bytes; ValueError unless every character is base64 and '=' only pads the end."""
    if sys.version_info >= (3, 11):  # one C pass that checks as it decodes
        return binascii.a2b_base64(block, strict_mode=True)
    if not _B64.fullmatch(block):
        raise ValueError("not base64")
    return binascii.a2b_base64(block)


def _str_stop(raw: bytes, i: int, n: int) -> int:
    """Where a JSON string's text stops in raw[i:n]: its closing quote or a backslash, else n."""
    quote = raw.find(b'"', i, n)
    end = n if quote < 0 else quote
    backslash = raw.find(b"\\", i, end)
    return end if backslash < 0 else backslash
_JSON_SPACE = frozenset(b" \t\r\n")


class _Scanner:
    """One SSE event's JSON data, read as it arrives, without holding its audio: the value of the top-level
    ``key`` (a base64 string) is decoded piece by piece into ``on_audio``; the rest of the text (at most
    MAX_FIELDS bytes, that value written as "") is parsed once the event ends. Only JSON's ``\\/`` escape is
    taken inside the base64 (no other escape can stand for a base64 character)."""

    def __init__(self, key: bytes, on_audio: Callable[[bytes], None]) -> None:
        self.key, self.on_audio = key, on_audio
        self.fields = bytearray()
        self.audio_bytes = 0
        self.streamed = False  # the audio field was met (and decoded)
        self._depth = 0
        self._in_str = self._esc = self._is_key = False
        self._last = b""  # the last ':' / ',' / '{' at depth 1: a string after '{' or ',' is a key
        self._key = bytearray()  # the key string being read
        self._prev_key = b""
        self._audio = False  # inside the audio field's string
        self._carry = b""  # base64 characters of an incomplete quantum
        self._padded = False  # a quantum ended with '=': nothing may follow
        self._closed = False  # the top-level object has ended: only whitespace may follow

    def _grow(self, data: Any) -> None:
        self.fields += data
        if len(self.fields) > MAX_FIELDS:
            raise Fail(f"an SSE event's fields besides its audio passed {MAX_FIELDS} bytes")

    def _decode(self, data: Any, last: bool = False) -> None:
        buf = self._carry + bytes(data) if self._carry else data
        n = len(buf) if last else len(buf) // 4 * 4
        block, self._carry = buf[:n], bytes(buf[n:])
        if not block:
            return
        if self._padded or len(block) % 4:
            raise self._bad()
        try:
            chunk = _a2b_strict(block)
        except ValueError:  # binascii.Error
            raise self._bad() from None
        self._padded = block[-1:] == b"="
        self.audio_bytes += len(chunk)
        self.on_audio(chunk)

    def _bad(self) -> Fail:
        return Fail(f"malformed SSE event: its {self.key.decode()!r} is not base64")

    def feed(self, data: Any) -> None:
        raw = data if isinstance(data, bytes) else bytes(data)  # bytes.find (memchr): a regex search ran ~10x slower
        data = memoryview(raw)
        i, n = 0, len(data)
        while i < n:
            if self._audio:
                if self._esc:  # an escape split across pieces: only \/ stands for a base64 character
                    if data[i] != 0x2F:
                        raise self._bad()
                    self._esc = False
                    self._decode(b"/")
                    i += 1
                    continue
                j = _str_stop(raw, i, n)
                if j > i:
                    self._decode(data[i:j])
                if j == n:
                    return
                if data[j] == 0x5C:  # backslash
                    self._esc = True
                    i = j + 1
                    continue
                self._decode(b"", last=True)  # the closing quote
                self._audio = False
                self._grow(b'""')
                i = j + 1
                continue
            if self._in_str:
                if self._esc:
                    self._esc = False
                    self._grow(data[i:i + 1])
                    if self._is_key:
                        self._key += data[i:i + 1]
                    i += 1
                    continue
                j = _str_stop(raw, i, n)
                self._grow(data[i:n if j == n else j + 1])
                if self._is_key:
                    self._key += data[i:j]
                    if len(self._key) > MAX_FIELDS:
                        raise Fail(f"an SSE event's fields besides its audio passed {MAX_FIELDS} bytes")
                if j == n:
                    return
                if data[j] == 0x5C:
                    self._esc = True
                else:
                    self._in_str = False
                    if self._is_key:
                        self._prev_key, self._key = bytes(self._key), bytearray()
                i = j + 1
                continue
            c = data[i]
            if self._depth == 0 and c not in _JSON_SPACE and (self._closed or c != 0x7B):
                raise Fail("malformed SSE event (not one JSON object): "
                           f"{bytes(self.fields[:40]) + bytes(data[i:i + 40])!r}")
            if c == 0x22:  # '"'
                if self._depth == 1 and self._last == b":" and self._prev_key == self.key and not self.streamed:
                    self._audio = self.streamed = True
                    i += 1
                    continue
                self._in_str, self._is_key = True, self._depth == 1 and self._last in (b"{", b",")
            elif c in (0x7B, 0x5B):  # '{' '['
                self._depth += 1
                if self._depth == 1:
                    self._last = b"{" if c == 0x7B else b"["
            elif c in (0x7D, 0x5D):  # '}' ']'
                self._depth -= 1
                self._closed = self._depth == 0
            elif self._depth == 1 and c in (0x3A, 0x2C):  # ':' ','
                self._last = bytes((c,))
            self._grow(data[i:i + 1])
            i += 1

    def finish(self) -> Streamed:
        if self._audio or self._in_str or self._esc:
            raise Fail(f"malformed SSE event: it ended inside a string ({bytes(self.fields[:60])!r}...)")
        event = parse_event(bytes(self.fields))
        if self.streamed and event.get(self.key.decode()) != "":
            raise Fail(f"malformed SSE event: its {self.key.decode()!r} field twice")
        return Streamed(event, self.audio_bytes if self.streamed else None)


class Events:
    """SSE framing: body bytes in, whole events' data out; a line and an event are bounded.

    An event whose data stays within HOLD_BYTES comes out whole (bytes). A longer one is never held: its
    line is read as it arrives, its audio field (``key``: "pcm" or "audio") decoded into ``on_audio`` piece
    by piece, and it comes out as a Streamed. So one stream holds at most about 2 x HOLD_BYTES of framing,
    whatever the event bound (max_event_bytes, up to 16 MiB) lets the server send."""

    def __init__(self, limits: Limits, key: str = "pcm", on_audio: Callable[[bytes], None] | None = None) -> None:
        self.limits, self.rate = limits, None  # the rate the bound follows, once the stream names it
        self.limit = limits.at(None)[1]
        self.done: dict | None = None  # the done event, once read: the rest of the body is drained
        self.key = key.encode()
        self.on_audio = on_audio or (lambda chunk: None)
        self._line = bytearray()  # a partial line (at most HOLD_BYTES)
        self._data: list[bytes] = []
        self._size = 0  # the current event's data bytes
        self._scan: _Scanner | None = None  # the current event, streamed
        self._long: str | None = None  # a line too long to hold, being read: "data" or "skip"
        self._long_size = 0
        self._start: bytes | None = b""  # the stream's first bytes, until a leading BOM is known or not
        self._cr = False  # the last piece ended with a CR: a LF first in the next is the same line end

    def _check(self, n: int, what: str) -> None:
        if n > self.limit:
            raise Fail(f"{what} passed max_event_bytes={self.limit} ({self.limits.why(self.rate)})")

    def held(self) -> int:
        """Bytes this reader holds between pieces (its bound is what the tests check)."""
        return len(self._line) + self._size * (self._scan is None) + (len(self._scan.fields) if self._scan else 0)

    def _stream(self, data: Any, sep: bool) -> None:
        """Data of the current event, streamed: into its scanner (made from what was held, the first time);
        ``sep``: a line break (JSON whitespace) before it, as SSE joins an event's data lines."""
        if self._scan is None:
            self._scan = _Scanner(self.key, self.on_audio)
            for k, held in enumerate(self._data):
                if k:
                    self._scan.feed(b"\n")
                self._scan.feed(held)
            self._data = []
        if sep:
            self._scan.feed(b"\n")
        if len(data):
            self._scan.feed(data)

    def _data_line(self, value: Any) -> None:
        first = self._scan is None and not self._data
        self._size += len(value) + 1
        self._check(self._size, "an SSE event")
        if self._scan is None and self._size <= HOLD_BYTES:
            self._data.append(bytes(value))
        else:
            self._stream(value, not first)

    def _end_event(self) -> Any:
        event = self._scan.finish() if self._scan is not None else b"\n".join(self._data)
        self._scan, self._data, self._size = None, [], 0
        return event

    def _line_done(self, line: Any) -> Any:
        """A whole line (held); the event it ends, if any."""
        if line[-1:] == b"\r":
            line = line[:-1]
        if line[:5] == b"data:":
            self._data_line(line[6:] if line[:6] == b"data: " else line[5:])
        elif not len(line) and (self._data or self._scan is not None):  # comments, other fields: ignored
            return self._end_event()
        return None

    def _long_line(self, data: Any) -> None:
        """More of a line too long to hold."""
        self._long_size += len(data)
        if self._long == "skip":
            self._check(self._long_size, "an SSE line")
            return
        self._size += len(data)
        self._check(self._size, "an SSE event")
        self._stream(data, False)

    def _start_long(self, head: memoryview) -> None:
        """A line passed HOLD_BYTES without its newline: from now on it is read as it arrives."""
        self._long_size = 0
        if head[:5] != b"data:":
            self._long = "skip"
            self._long_line(head)
            return
        self._long = "data"
        if self._scan is not None or self._data:
            self._size += 1
            self._stream(b"", True)
        self._long_line(head[6:] if head[:6] == b"data: " else head[5:])

    def _lines(self, piece: bytes) -> bytes:
        """``piece`` with the stream's one leading UTF-8 BOM removed and every line end (CRLF, LF or a CR alone,
        as the WHATWG event-stream grammar allows) made LF; a CRLF split across pieces stays one line end."""
        if self._start is not None:
            piece = self._start + piece
            if len(piece) < len(BOM) and BOM.startswith(piece):
                self._start = piece
                return b""
            self._start = None
            if piece.startswith(BOM):
                piece = piece[len(BOM):]
        if self._cr and piece[:1] == b"\n":
            piece = piece[1:]
        if b"\r" in piece:
            self._cr = piece[-1:] == b"\r"
            piece = piece.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        else:
            self._cr = False
        return piece

    def feed(self, piece: bytes) -> Iterator[Any]:
        """The events that ``piece`` completes, as they are found (a caller that stops reads no further):
        bytes (held whole) or Streamed."""
        piece = self._lines(bytes(piece))
        view = memoryview(piece)
        pos, n = 0, len(piece)
        while pos < n:
            nl = piece.find(b"\n", pos)
            end = n if nl < 0 else nl
            if self._long is not None:
                if end > pos:
                    self._long_line(view[pos:end])
                if nl < 0:
                    return
                self._long = None  # the line ended; its event goes on to its blank line
                pos = nl + 1
                continue
            if nl < 0:
                if len(self._line) + n - pos <= max(HOLD_BYTES, 6):  # 6: the line's field is known
                    self._line += view[pos:]
                    self._check(len(self._line), "an SSE line")
                else:
                    head, self._line = self._line + view[pos:], bytearray()
                    self._start_long(memoryview(head))
                return
            if self._line:
                self._line += view[pos:nl]
                line, self._line = self._line, bytearray()
            else:
                line = view[pos:nl]
            event = self._line_done(line)
            pos = nl + 1
            if event is not None:
                yield event


def parse_event(raw: bytes) -> dict:
    try:
        event = loads_finite(raw)  # NaN/Infinity are not JSON: a done event's value goes into the record
    except (ValueError, RecursionError):  # RecursionError: nested too deep
        raise Fail(f"malformed SSE event: {raw[:80]!r}") from None
    if not isinstance(event, dict):
        raise Fail(f"malformed SSE event (not an object): {raw[:80]!r}")
    return event

