"""`python -m harnesscheck.loopback serve --scenario NAME`: a scripted model server on
127.0.0.1 for trying a CLI by hand. Prints the base URL, then one JSON summary per request
(no credential values, no bodies) until interrupted. `python -m harnesscheck.loopback list`
prints the named scenarios."""

from __future__ import annotations

import argparse
import json
import sys
import time


def main(argv: list[str] | None = None) -> int:
    from harnesscheck.loopback.scenario import SCENARIO_NAMES, named_scenario
    from harnesscheck.loopback.server import ScriptedModelServer

    parser = argparse.ArgumentParser(prog="python -m harnesscheck.loopback", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve a named scenario until interrupted")
    serve.add_argument("--scenario", default="success", choices=SCENARIO_NAMES)
    serve.add_argument("--served-model", default=None, help="answer as this model (mismatch)")
    serve.add_argument("--seconds", type=float, default=None, help="stop after this long")
    sub.add_parser("list", help="list the named scenarios")
    ns = parser.parse_args(argv)
    if ns.command == "list":
        print("\n".join(SCENARIO_NAMES))
        return 0
    scenario = named_scenario(ns.scenario)
    if ns.served_model:
        scenario = scenario.with_served_model(ns.served_model)
    with ScriptedModelServer(scenario) as srv:
        print(f"serving {ns.scenario} on {srv.base_url} (Anthropic /v1/messages, Responses /v1/responses, Chat /v1/chat/completions)", flush=True)
        seen = 0
        deadline = None if ns.seconds is None else time.monotonic() + ns.seconds
        try:
            while deadline is None or time.monotonic() < deadline:
                time.sleep(0.1)
                for rec in srv.requests[seen:]:
                    print(json.dumps(rec.summary()), flush=True)
                seen = len(srv.requests)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
