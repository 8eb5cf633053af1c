"""The commands, above every other layer: `alprl` and its subcommands (cli.py), `alprl eval` (eval_cli.py,
eval_plan.py), `alprl experiment` (experiment.py: suites and plans; experiment_run.py: cells and resume;
experiment_results.py: the small copy to commit) and the demo (demo.py). They parse arguments, call the trainer and
the evaluators, and print; nothing below imports them.
"""
