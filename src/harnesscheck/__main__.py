"""`python -m harnesscheck ...`: the console entry point, run by an interpreter named by path
(an ACP profile's `{python} -m harnesscheck acp serve`, where no `harnesscheck` is on PATH)."""

from harnesscheck.apps.launcher import main

if __name__ == "__main__":
    main()
