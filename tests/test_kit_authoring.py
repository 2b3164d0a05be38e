"""The public, typed base for backend authors (issue 32, item 4): `harnesscheck.authoring`
exports every name a check's fix points at; the package ships `py.typed`; doc/AUTHORS.md holds
the complete example backend verbatim (tests/test_example_cli_backend.py runs the suite on it)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import harnesscheck
import harnesscheck.authoring as authoring
from harnesscheck.kit.guidance import load_guidance

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "claude_cli_backend" / "src" / "claude_cli_backend" / "__init__.py"


def test_every_public_name_resolves_and_the_package_is_typed() -> None:
    for name in authoring.__all__:
        assert getattr(authoring, name) is not None, name
    assert (Path(harnesscheck.__file__).parent / "py.typed").is_file()


def test_every_function_a_fix_names_exists() -> None:
    """A fix line that names `harnesscheck.x.y` names something importable."""
    named = set()
    for guide in load_guidance().values():
        named.update(re.findall(r"harnesscheck\.[a-z_]+(?:\.[A-Za-z_]+)+", guide.fix))
    assert named
    for dotted in sorted(named):
        module, _, attr = dotted.rpartition(".")
        try:
            target = importlib.import_module(dotted)
        except ImportError:
            target = getattr(importlib.import_module(module), attr, None)
        assert target is not None, f"a fix names {dotted}, which does not exist"


def test_the_author_guide_holds_the_example_backend_verbatim_and_it_uses_only_the_public_base() -> None:
    code = EXAMPLE.read_text(encoding="utf-8")
    body = code[code.index("from __future__ import annotations") :]
    guide = (REPO / "doc" / "AUTHORS.md").read_text(encoding="utf-8")
    assert f"```python\n{body}```" in guide
    imports = re.findall(r"^from (harnesscheck[\w.]*) import", body, re.M)
    assert imports and set(imports) == {"harnesscheck.authoring"}, imports
