"""The execution core, pure Python with no FastAPI: a pool of warm zygotes (`pool`) whose slots each hold a zygote
process handle (`zygote_handle`) speaking the server↔zygote `protocol`; the zygote (`zygote`, with its `preload`)
forks one `child` per run; `supervision` watches a run's pipes and report. Also stateful `sessions`, the
one-container-per-run `docker_backend`, and the in-process runner (`in_process`). Modules the zygote imports
(zygote, child, preload, protocol) stay lean: every page they touch is copied after each fork."""
