"""What a run runs on: ranks, checkpoints, weight sync to the sampler, LoRA adapters, async rollouts, memory plan, logs
and progress."""
