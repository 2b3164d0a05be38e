"""apps: the programs on top of every layer: the command line (cli.py, launcher.py), the
host-side run (runner.py, report.py, preflight.py), the setup check (doctor.py) and the
published JSON Schemas of the files they and the kit write (schemas.py).
Layer order: tests/test_layers.py.
"""
