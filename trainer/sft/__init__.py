"""The supervised warm start: expert episodes, the SFT loop, its cache and resume."""
