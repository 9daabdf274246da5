"""The load generator's wire formats and transports, each one object, chosen by name from one registry.

A ``Protocol`` is what goes over the wire for one speech request and what comes back: the request's
Accept and Authorization headers and its JSON body, the reader of each answer shape it takes (by
Content-Type, readers/), and the words of its reasons (what it expected, the hint to switch when the
answer looks like another protocol's). A ``Transport`` (transport.py) carries the bytes. ``run_load``
takes both by name (``LoadOptions.protocol`` / ``.transport``) and asks the object, never the name.

Adding a wire format takes three files: its reader(s), one new module of readers/ (an SSE one is a
``readers.sse.SseDialect`` and its read function); here a Protocol subclass and one entry in
``PROTOCOLS``; and its name in settings.py's ``protocol`` choice (kept equal to ``PROTOCOLS`` by
tests/test_service_wire.py). Adding a transport: a ``transport.Transport`` subclass and one entry in
``TRANSPORTS``.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from ..errors import S2STError
from . import openai_api as oa
from .readers.openai_sse import read_openai_sse
from .readers.own_sse import read_own_sse
from .readers.raw_pcm import read_raw_pcm
from .readers.response import Reader
from .readers.wav import read_wav
from .record import WORKLOAD_FIELDS
from .transport import Aiohttp, Http1, Transport


class Protocol:
    """One wire format of a speech request and its answer."""
    name = ""
    accept = "*/*"  # the request's Accept header
    readers: Mapping[str, Reader] = {}  # Content-Type -> reader; any other type is that request's error
    wanted = ""  # what a wrong Content-Type's reason says was expected
    event_types = ""  # the SSE event types its answer holds, for reasons
    sends_model = False  # the request names a model: extra_body["model"], else GET /v1/models' first id
    ttfa_method: str | None = None  # how TTFA is measured, where it differs from stats.METHODS

    def reader(self, content_type: str) -> Reader | None:
        return self.readers.get(content_type)

    def authorization(self) -> str | None:
        """The Authorization header's value, or None; ValueError (one line) when it cannot be sent."""
        return None

    def check(self) -> None:
        """Before anything is sent: what the requests need is usable (S2STError, one line)."""
        try:
            self.authorization()
        except ValueError as exc:
            raise S2STError(str(exc)) from None

    def body(self, item: dict, model: str | None, extra_body: dict) -> dict:
        """The JSON body of one request for a workload item."""
        raise NotImplementedError

    def level_entry(self, options: Any, model: str | None, model_source: str | None) -> dict:
        """What a level's summary.json entry says about this protocol's requests, beyond the common keys."""
        return {}

    def pcm_rate(self, options: Any) -> int:
        """The rate of an answer that names none (raw PCM, SSE deltas): the run's ``sample_rate``."""
        return options.sample_rate

    def expected(self) -> str:
        return f"{self.event_types} for protocol {self.name}"

    def speaks(self, event_names: Iterable[str]) -> bool:
        """Event names (repr'd, as Seen keeps them) that look like this protocol's own."""
        return False

    def hint(self, event_names: Iterable[str]) -> str:
        """' (this server may speak protocol X: try --s2st-protocol X)' when the events look like another's."""
        names = list(event_names)
        for other in PROTOCOLS.values():
            if other is not self and other.speaks(names):
                return f" (this server may speak protocol {other.name}: try --s2st-protocol {other.name})"
        return ""

    def wrong_type(self, content_type: str) -> str:
        """What follows a wrong Content-Type in its reason."""
        return ""


class Own(Protocol):
    """This project's SSE dialect (server.py): the workload item's fields as the body, audio/done events back."""
    name = "s2st"
    accept = oa.SSE_TYPE
    readers = {oa.SSE_TYPE: read_own_sse}
    wanted = "SSE audio events (text/event-stream)"
    event_types = "audio/done"

    def body(self, item: dict, model: str | None, extra_body: dict) -> dict:
        return {key: item[key] for key in WORKLOAD_FIELDS if key in item}

    def speaks(self, event_names: Iterable[str]) -> bool:
        return any(t in ("'audio'", "'done'") for t in event_names)

    def wrong_type(self, content_type: str) -> str:
        other = next((p for p in PROTOCOLS.values() if p is not self and p.reader(content_type)), None)
        hint = f" (this server may speak protocol {other.name}: try --s2st-protocol {other.name})" if other else ""
        return f" (not {oa.SSE_TYPE}){hint}"


class OpenAI(Protocol):
    """OpenAI's speech API (openai_api.py), as vLLM-Omni serves it: any answer is read (raw PCM, SSE or WAV),
    as vLLM-Omni's client sends no Accept either."""
    name = "openai"
    readers = {oa.SSE_TYPE: read_openai_sse, **dict.fromkeys(oa.PCM_TYPES, read_raw_pcm),
               **dict.fromkeys(oa.WAV_TYPES, read_wav)}
    wanted = "raw PCM, SSE audio events or a WAV"
    event_types = f"{oa.DELTA}/{oa.DONE}"
    sends_model = True
    ttfa_method = ("send_t -> first audio: the body piece completing the first int16 sample (raw PCM, stamped "
                   "when read), the first speech.audio.delta event with audio (SSE), or the whole body (WAV: "
                   "not streamed); queueing included")

    def authorization(self) -> str | None:
        return oa.authorization()

    def body(self, item: dict, model: str | None, extra_body: dict) -> dict:
        return oa.build_request(item, model, extra_body)

    def level_entry(self, options: Any, model: str | None, model_source: str | None) -> dict:
        return {"extra_body": options.extra_body, "sample_rate": self.pcm_rate(options), "model": model,
                "model_source": model_source}

    def pcm_rate(self, options: Any) -> int:
        """The rate the request asks for (vLLM-Omni's ``sample_rate`` in the extra body: the server resamples
        to it, and its pcm answer and SSE deltas do not say so), else the run's ``sample_rate``; S2STError
        (one line) when the extra body asks for one that is no rate."""
        asked = (options.extra_body or {}).get("sample_rate")
        if asked is None:
            return options.sample_rate
        try:
            return oa.check_rate(asked, "extra_body")
        except ValueError as exc:
            raise S2STError(f"run_load {exc}") from None

    def speaks(self, event_names: Iterable[str]) -> bool:
        return any(t.startswith("'speech.") for t in event_names)


PROTOCOLS: dict[str, Protocol] = {p.name: p for p in (Own(), OpenAI())}
DEFAULT_PROTOCOL = Own.name
TRANSPORTS: dict[str, type[Transport]] = {t.name: t for t in (Http1, Aiohttp)}
DEFAULT_TRANSPORT = Http1.name


def protocol(name: str) -> Protocol:
    """The protocol of that name; S2STError naming the known ones."""
    try:
        return PROTOCOLS[name]
    except (KeyError, TypeError):
        raise S2STError(f"protocol={name!r}: expected one of {', '.join(PROTOCOLS)}") from None


def transport(name: str) -> type[Transport]:
    """The transport of that name; S2STError naming the known ones."""
    try:
        return TRANSPORTS[name]
    except (KeyError, TypeError):
        raise S2STError(f"transport={name!r}: expected {' or '.join(TRANSPORTS)}") from None
