"""`alprl experiment`: the paper comparisons as suites of cells, run, kept and reported.

plan.py (the types: Scale, Setting, Suite, Horizon, the plan of cells) ← suites.py (each suite's methods, settings
and declared comparisons) ← run.py (the command: build the plan, run the cells, write the report; provenance.py
records what code the cells ran from and when the comparisons were declared); results.py keeps
each finished cell's small files in a `--results` folder, packed per suite by archive.py; rebuild.py regenerates
every committed report and figure from those archives.
"""
