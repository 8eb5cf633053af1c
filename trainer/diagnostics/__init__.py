"""What a run measures about itself: ratio and mismatch diagnostics, rollout metrics, probability scatters, policy drift,
a few episodes as text."""
