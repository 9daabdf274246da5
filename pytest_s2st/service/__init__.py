"""Reference HTTP/SSE speech service and its load generator (pytest-free core).

aiohttp serves and drives both sides: one asyncio stack gives a streaming SSE server, a streaming
client with per-read timeouts, and in-process misbehaving servers for fault tests, without a web framework.

Modules: ``server`` (make_app / run_server / synthesizers), ``client`` (run_load), ``workload``
(load_workload), ``stats`` (summarize), ``evidence`` (run-directory layout and readers).
Import the submodules directly; this package imports nothing heavy.
"""
