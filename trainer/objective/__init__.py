"""The RL objective: batch types, advantages (GRPO, GiGPO), policy losses, off-policy corrections, rejection, log-probs."""
