"""Reference HTTP/SSE speech service, its load generator and the service bench (pytest-free core).

Modules: ``bench`` (reference-server lifecycle, run one level, judge one level), ``server``
(make_app / run_server: the routes; the model thread ``model_worker``, the answers' bytes ``answers``,
``synthesizers``), ``client`` (run_load; its options ``options.LoadOptions``; what it records
``record``; the untimed GETs ``server_facts``; the wire formats and transports by name in ``wire``, the
transports in ``transport``, its HTTP/1.1 client in ``http1``, the readers of each answer shape in the
package ``readers``),
``stats`` (summarize), ``openai_api`` (OpenAI's speech request/answer
shape, both sides), ``arrivals`` (open-loop arrival schedules). The run directory they write and read is
``pytest_s2st.runs``. Import the submodules directly; this package imports nothing heavy.
"""
