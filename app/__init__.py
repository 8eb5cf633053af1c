"""The commands, above every other layer: `alprl` and its subcommands (cli.py, with the stop guard of the long runs in
stop_guard.py), `alprl eval` (eval_cli.py, eval_plan.py), `alprl experiment` (the experiments/ room), `alprl env serve`
(env_serve.py), `alprl check-template` (check_template.py) and the demo (demo.py). They parse arguments, call the
trainer and the evaluators, and print; nothing below imports them.
"""
