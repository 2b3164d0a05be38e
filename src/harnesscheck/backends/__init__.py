"""backends: one module or folder per backend (the README's and the matrix's word; this
package was `providers/`), the registry that collects their specs (registry.py), and what
only backends use: the model clients (llm.py), copilot's login file (authstore.py), the
post-run audit (audit.py), the CLI install manifest (climanifest.py), the loopback seam
(loopback_endpoint.py) and the shared helpers (`_*.py`). Above the bridge, below the levels
(testing/, loopback/, acpserve/) and the kit. Layer order: tests/test_layers.py.
"""
