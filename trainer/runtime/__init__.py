"""What a run runs on: ranks, checkpoints, weight sync to the sampler, async rollouts, memory plan, logs and progress."""
