"""testing: what harnesscheck ships to test a backend without its vendor: the per-test fake
CLIs (fakes.py; the fake CLI engine itself lives in fake_clis/). Shipped, not test-only: the
offline level runs the fakes. Above backends/, below the kit. Layer order: tests/test_layers.py.
"""
