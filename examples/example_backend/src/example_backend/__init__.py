"""An example third-party backend: registered through the `harnesscheck.backends` entry point,
verified with the suite shipped in the harnesscheck wheel (no test file copied):

    harnesscheck verify --backend example
    pytest -m conformance --hc-backend example

It is built on harnesscheck's scripted reference transport, so the kit drives it in-process;
a real backend would put its own transport behind the same ProviderSpec.
"""

from __future__ import annotations

from harnesscheck.authoring import Capability as C
from harnesscheck.authoring import FakeTransport, Kind, ProviderSpec


class ExampleTransport(FakeTransport):
    """The example backend's transport."""


def spec() -> ProviderSpec:
    return ProviderSpec(
        id="example",
        kind=Kind.api,
        label="Example (third-party package)",
        factory="example_backend:ExampleTransport",
        capabilities=frozenset(
            {
                C.host_tool_loop,
                C.builtin_tools_off,
                C.max_turns,
                C.system_prompt,
                C.usage_reporting,
                C.served_model_reporting,
                C.cancellation,
                C.early_auth_stop,
            }
        ),
        description="Registered through the harnesscheck.backends entry point.",
    )
