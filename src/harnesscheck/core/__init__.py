"""core: the contract every layer above speaks, with no harnesscheck import from above it.

The types a host and a backend exchange (contracts.py: the request, the outcome, the spec,
the typed errors), the settings (config.py), where the shipped data lives (paths.py), the
event stream (events.py), the model metadata (models.py), and the two values a request
carries: the tool scope (scope.py: ToolScope and path resolution beneath its root) and the
policy (policy.py: the one decision for every tool call). scope.py and policy.py sit here,
not in choke/, because AgentSessionRequest holds a ToolScope and a Policy as fields: the
contract cannot be defined below them. Layer order: tests/test_layers.py.
"""
