"""What the load generator asks a server before the load, untimed: GET /identity and GET /v1/models (its
first id, where the protocol sends a model), over http1.py, each bounded as the speech requests are."""
from __future__ import annotations

import asyncio
import json

from yarl import URL

from . import http1, wire
from . import openai_api as oa
from .readers.response import Seen, short
from .transport import host_header, not_an_answer


MAX_GET_BYTES = 1 << 20  # the answer of an untimed GET (/identity, /v1/models): read to at most this


class GetFailed(Exception):
    """An untimed GET that gave no usable answer; the message says why (status and what followed)."""


async def http_get(url: URL, path: str, timeout_s: float, authorization: str | None = None,
                   max_bytes: int = MAX_GET_BYTES) -> tuple[int, bytes]:
    """(status, body) of ``GET path`` over http1.py, or GetFailed naming why. Bounded as the speech requests
    are: ``timeout_s`` bounds the whole GET, the body is read to at most ``max_bytes`` (never inflated: the
    client asks for identity and refuses any other Content-Encoding), and a redirect is never followed (its
    status and Location are the reason): what is saved about a server comes from the endpoint given."""
    conn: http1.Connection | None = None
    seen = Seen()

    async def go() -> tuple[int, bytes]:
        nonlocal conn
        conn = await http1.Connection.open(url.raw_host, url.port, tls=url.scheme == "https", timeout_s=timeout_s)
        auth = f"Authorization: {authorization}\r\n" if authorization else ""
        conn.send(f"GET {path} HTTP/1.1\r\nHost: {host_header(url)}\r\nUser-Agent: pytest-s2st\r\n"
                  "Accept: application/json"
                  f"\r\nAccept-Encoding: identity\r\n{auth}Connection: close\r\n\r\n".encode())
        resp = await conn.response(timeout_s)
        seen.head_read(resp.status, resp.content_type)
        why = not_an_answer(resp.status, resp.headers)
        if why:
            raise GetFailed(why)
        length = resp.headers.get("content-length", "")
        if length.isdigit() and int(length) > max_bytes:
            raise GetFailed(f"HTTP {resp.status}: an answer of {int(length)} bytes passed {max_bytes} (not read)")
        body = bytearray()
        async for piece in conn.body(timeout_s):
            seen.body(piece)
            body += piece
            if len(body) > max_bytes:
                raise GetFailed(f"HTTP {resp.status}: the answer passed {max_bytes} bytes (not read further)")
        return resp.status, bytes(body)

    try:
        return await http1.within(timeout_s, go())
    except asyncio.TimeoutError:
        raise GetFailed(seen.then(f"timeout: no complete answer within {timeout_s:g} s")) from None
    except http1.Stalled:
        raise GetFailed(seen.then(f"read stalled: no data for {timeout_s:g} s")) from None
    except (http1.Disconnected, http1.ProtocolError) as exc:
        raise GetFailed(seen.then(str(exc))) from None
    except (OSError, ValueError) as exc:  # refused, unreachable, TLS handshake, ...
        raise GetFailed(seen.then(f"connection failed: {exc}")) from None
    finally:
        if conn is not None:
            conn.close()


async def fetch_identity(url: URL, timeout_s: float) -> tuple[dict | None, str | None]:
    """(GET /identity's JSON object, None), or (None, why there is none)."""
    try:
        status, raw = await http_get(url, "/identity", timeout_s)
    except GetFailed as exc:
        return None, f"GET /identity: {exc}"
    if status != 200:
        return None, f"GET /identity: HTTP {status}"
    try:
        identity = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        return None, f"GET /identity: not JSON ({short(str(exc))})"
    if not isinstance(identity, dict):
        return None, f"GET /identity: a JSON {type(identity).__name__}, not an object"
    return identity, None



async def fetch_model(url: URL, timeout_s: float) -> tuple[str | None, str]:
    """(the first model id of GET /v1/models, where it came from or why there is none), as ``vllm bench
    serve`` picks its model when none is given. The answer is read to at most MAX_GET_BYTES (http_get)."""
    where = f"GET {oa.MODELS_PATH}"
    try:
        status, raw = await http_get(url, oa.MODELS_PATH, timeout_s, oa.authorization())
    except GetFailed as exc:
        return None, f"{where}: {exc}; no model sent"
    if status != 200:
        return None, f"{where}: HTTP {status}; no model sent"
    try:
        model = json.loads(raw)["data"][0]["id"]
    except (ValueError, KeyError, IndexError, TypeError, RecursionError):
        return None, f"{where}: no {{\"data\": [{{\"id\"}}]}} list in the answer; no model sent"
    if not isinstance(model, str) or not model:
        return None, f"{where}: the first id is not a string; no model sent"
    return model, where


async def server_facts(url: URL, protocol: wire.Protocol, extra_body: dict,
                        timeout_s: float) -> tuple[dict | None, str | None, str | None, str | None]:
    """(identity, why there is none, model, where it came from), fetched untimed before the load."""
    model, model_source = None, None
    identity, identity_error = await fetch_identity(url, min(timeout_s, 5.0))
    if protocol.sends_model:
        if "model" in extra_body:
            model, model_source = extra_body["model"], "extra_body"
        else:
            model, model_source = await fetch_model(url, min(timeout_s, 5.0))
    return identity, identity_error, model, model_source
