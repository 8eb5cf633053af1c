"""Agent harnesses written against the OpenAI API, played through the policy endpoint (`rollout.source=harness
env.harness=agents.harnesses.<module>:play`; agents/endpoint/harness.py runs them):

    tir_harness.py        the TIR agent loop (an example harness, used by the tests)
    bfcl_harness.py       BFCL's function-calling client (alprl/BFCL-v0)
    verifiers_harness.py  a verifiers environment as a harness (the `verifiers` extra; docs/ecosystem.md)
    verifiers_chat.py     a verifiers harness that chats in process, so a taskset plays without uv or network
"""
