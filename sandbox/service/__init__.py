"""The HTTP service: a thin FastAPI layer over the execution core. `app` wires settings → `sandbox_service`
(backend, sessions, admission gate, metrics) → `routes`; `schemas` are the wire models (SandboxFusion's and the
native routes'); `admission` bounds the queue, `auth` checks API keys and per-client caps, `metrics` serves
/metrics."""
