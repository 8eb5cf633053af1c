"""What a run runs on: ranks, checkpoints, weight sync to the sampler, LoRA adapters, async rollouts, memory plan, logs,
progress, and the stop when the infrastructure keeps failing its episodes."""
