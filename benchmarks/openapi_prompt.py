"""The prompt with a web API of many operations: does a document of 200 operations leave room to work in a 32k-token
window, and how long does reading and checking it take?

Generates OpenAPI 3.1 documents shaped like a large real API's (tests/openapi_servers.py `many_operations`: each
operation a summary of a sentence, a path parameter; reads three query parameters, writes a JSON body of four fields),
renders the default agent's first prompt with the document as its one source, and prints its characters, the
tokens the model's estimate gives them (3.5 characters a token, anges' default) and the share of a 32,768-token
window's room that leaves the history. Then the seconds to read and check the document: the first time in a process,
and again (a valid document is not checked twice). Run:
    python benchmarks/openapi_prompt.py
"""

import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("ANGES_HOME", tempfile.mkdtemp(prefix="anges-bench-"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from openapi_servers import many_operations  # noqa: E402

from anges.actions.api import apis_for  # noqa: E402
from anges.agents import DefaultAgent  # noqa: E402
from anges.config.loading import load_config  # noqa: E402
from anges.models.scripted import ScriptedModel  # noqa: E402
from anges.models.window import DEFAULT_CHARS_PER_TOKEN  # noqa: E402

WINDOW = 32_768
REPLY = 8_192


def first_prompt(config, work: str) -> str:
    model = ScriptedModel([{"analysis": "", "reasoning": "", "actions": [{"action_type": "HELP_NEEDED",
                                                                           "content": "stop"}]}],
                          context_window=WINDOW)
    DefaultAgent(inference_func=model, cmd_init_dir=work, config=config).run_with_new_request("hello")
    return model.prompts[0]


def main() -> None:
    with tempfile.TemporaryDirectory() as specs, tempfile.TemporaryDirectory() as work:
        base = first_prompt(load_config(overrides={"safety": {"sandbox": "off", "approval": "auto"}}), work)
        print(f"{'operations':>10} {'index':>8} {'first prompt':>13} {'tokens':>7} {'of the room':>12} "
              f"{'read+check':>11} {'again':>7}")
        print(f"{0:>10} {0:>8,} {len(base):>13,} {round(len(base) / DEFAULT_CHARS_PER_TOKEN):>7,}")
        for count in (50, 200, 500, 1000):
            spec = Path(specs) / f"api{count}.json"
            spec.write_text(json.dumps(many_operations(count)))
            config = load_config(overrides={"tools": {"openapi": [{"spec": str(spec)}]},
                                            "safety": {"sandbox": "off", "approval": "auto"}})
            started = time.perf_counter()
            apis = apis_for(config, work)
            first = time.perf_counter() - started
            started = time.perf_counter()
            apis_for(config, work)
            again = time.perf_counter() - started
            index = sum(len(line) + 1 for source in apis.index() for line in source["operations"])
            prompt = first_prompt(config, work)
            tokens = round(len(prompt) / DEFAULT_CHARS_PER_TOKEN)
            room = WINDOW - REPLY
            print(f"{count:>10} {index:>8,} {len(prompt):>13,} {tokens:>7,} {tokens / room:>11.0%} "
                  f"{first:>10.2f}s {again:>6.2f}s")


if __name__ == "__main__":
    main()
