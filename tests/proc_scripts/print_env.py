"""Child that prints its argv and environment as one JSON line, and a secret-looking
value from its env on stderr (so tests can prove the stderr tail is redacted)."""

import json
import os
import sys

print(json.dumps({"argv": sys.argv, "env": dict(os.environ)}), flush=True)
for name, value in os.environ.items():
    sys.stderr.write(f"debug: {name} is {value}\n")
