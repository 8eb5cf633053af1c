"""Reports: run, robustness, benchmark (`alprl eval`) and experiment reports, their figures and statistics."""
