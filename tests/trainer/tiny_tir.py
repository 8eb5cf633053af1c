"""The tiny TIR warm-start config shared by the trainer tests (the `sft_dir` fixture in conftest.py builds it)."""

# A model small enough to warm-start in well under a minute: it learns the format (code block, tool call,
# boxed answer) but not yet to copy numbers, so its rewards are mostly 0.
SMALL = ["model.hidden_size=64", "model.num_layers=2", "model.num_heads=2", "model.num_kv_heads=1",
         "model.intermediate_size=128", "model.vocab_size=384", "env.task_types=multiply",
         "sft.num_examples=600", "sft.epochs=4", "sft.batch_size=16", "sft.lr=5e-3",
         "rollout.prompts_per_step=4", "rollout.group_size=4", "rollout.max_new_tokens=40",
         "rollout.max_response_tokens=160", "optim.micro_batch_size=8", "eval_tasks=0",
         "rollout.engine=hf"]  # transformers: one vLLM start per test would cost ~20 s (see test_vllm_training)
SMALL_SFT_STEPS = 4 * 38  # ceil(600 / 16) steps x 4 epochs
