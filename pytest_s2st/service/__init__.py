"""Reference HTTP/SSE speech service, its load generator and the service bench (pytest-free core).

Modules: ``bench`` (reference-server lifecycle, run one level, judge one level), ``server``
(make_app / run_server / synthesizers), ``client`` (run_load; its HTTP/1.1 client in ``http1``),
``workload`` (load_workload), ``stats`` (summarize), ``openai_api`` (OpenAI's speech request/answer
shape, both sides), ``arrivals`` (open-loop arrival schedules). The run directory they write and read is
``pytest_s2st.runs``. Import the submodules directly; this package imports nothing heavy.
"""
