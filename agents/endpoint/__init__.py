"""alprl's policy endpoint: an OpenAI-compatible server in front of the rollout engine that records every call's
token ids and log-probs per episode, and the `harness` rollout source that trains on what it recorded.

    recorder.py    episodes: per-call records, stitching into `Trajectory`s, prefix breaks
    chat.py        messages → prompt ids (the chat template, and the sampled ids of earlier calls reused as sampled)
    tool_calls.py  tool schemas in, tool calls out (the formats of envs/tir/styles.py as OpenAI `tool_calls`)
    shapes.py      OpenAI-shaped responses and errors
    sampler.py     requests → the engine (batched from one thread for an engine without concurrent callers)
    service.py     one call, start to end: episode, prompt ids, budget, sampling, record, response
    app.py         the FastAPI routes (thin)
    server.py      uvicorn in a background thread on a loopback port the OS picks
    harness.py     `rollout.source=harness`: the user's async harness per episode, many at a time

The harnesses alprl ships (its TIR loop, BFCL's function-calling client, verifiers environments) are in
agents/harnesses/.

docs/policy_endpoint.md describes the endpoint, the harness contract and prefix breaks. FastAPI and uvicorn (the
`sandbox` extra) are imported only where the server starts.
"""
