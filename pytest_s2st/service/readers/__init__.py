"""The load generator's readers, one per answer shape, chosen by the protocol object (wire.py) by Content-Type.

A reader takes a ``Stream`` (one 200 response: its body's pieces as they arrive, the record to fill, the
sink its PCM goes to, the bounds) and fills the record: audio arrivals ``chunks`` [t, nbytes] stamped
when each body piece is read, ``first_audio_t`` at the piece that completes the first whole int16
sample, ``done_t``, ``sample_rate``, ``streaming`` and ``server_done`` (what the server says it sent:
samples / sample_rate / pcm_sha256, checked later), or raises ``Fail`` with the request's reason.

One module per answer shape, beside what they share:

- ``own_sse`` ("s2st"): {"type": "audio", "pcm": base64, "sample_rate"} events, then {"type": "done", ...};
- ``openai_sse``: speech.audio.delta (base64 "audio") events, then speech.audio.done (or [DONE]);
- ``raw_pcm`` (OpenAI's pcm): every body piece an arrival; the rate from the Content-Type, else the one asked
  for (``Stream.sample_rate``); audio/L16 swapped from big-endian; more than one channel refused;
- ``wav``: audio only when whole: one arrival at the body's end (TTFA = the whole response);
- ``response``: what every reader gets and fills (``Stream``, ``Seen``); ``limits``: its bounds (``Limits``)
  and the request-level failure (``Fail``);
- ``sse_frames``: SSE framing, bounded, an event too large to hold decoded as it arrives (``Events``);
- ``sse``: the one SSE loop (``read_sse``) over a protocol's ``SseDialect``.

A new wire format is a protocol object in wire.py naming its readers; an SSE one needs only an
``sse.SseDialect`` and its ``read_<format>`` (one module here).

Every byte a reader holds is bounded from ``max_audio_s`` (``Limits``): the audio, one SSE line and
event, one HTTP chunk's announced size, the number of events or arrivals. Audio that begins with a
RIFF/WAVE header where samples were promised is refused (``Stream.not_a_wav``).
"""
