"""The RL objective: batch types, advantages (GRPO, GiGPO) and who counts in them (infrastructure failures), policy
losses, off-policy corrections, rejection, log-probs."""
