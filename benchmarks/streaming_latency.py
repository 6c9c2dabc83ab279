"""Streaming latency: how long after a piece of a reply leaves the provider's server it reaches the agent's delta
handlers (the figure to the screen, through the session's live screen on a pseudo-terminal: `session.py`).

Each provider's loopback wire server (`tests/wire_servers.py`) streams a reply in PIECES pieces, GAP seconds apart,
each piece adding to the `analysis` the CLI shows; it notes when each piece was written. The real SDK reads the
stream, the agent parses the partial JSON and calls its delta handlers, one of which notes the time.

Run: `.venv/bin/python benchmarks/streaming_latency.py`
"""

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ["ANGES_HOME"] = tempfile.mkdtemp(prefix="anges-bench-")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from wire_servers import PROVIDERS, TEST_KEY  # noqa: E402

from anges.agents import DefaultAgent  # noqa: E402
from anges.config.loading import load_config  # noqa: E402
from anges.config.types import ModelPreset  # noqa: E402
from anges.registry import providers  # noqa: E402

PIECES = 40
GAP = 0.02
RUNS = 5


def reply_pieces() -> list[str]:
    words = [f"word{n} " for n in range(PIECES)]
    text = json.dumps({"analysis": "".join(words), "reasoning": "done",
                       "actions": [{"action_type": "TASK_COMPLETE", "content": "ok"}]})
    start = text.index("word0")
    pieces = [text[:start + len(words[0])]]
    position = start + len(words[0])
    for word in words[1:]:
        pieces.append(text[position:position + len(word)])
        position += len(word)
    pieces[-1] += text[position:]
    return pieces


def measure(provider: str) -> list[float]:
    """Delays (seconds) of each piece to the handlers, for one run."""
    server_class, _, key_env = PROVIDERS[provider]
    os.environ[key_env] = TEST_KEY
    config = load_config(overrides={"safety": {"sandbox": "off", "approval": "auto"}})
    with server_class() as server:
        server.enqueue_text("".join(pieces := reply_pieces()), chunks=pieces, gap=GAP)
        preset = ModelPreset(provider, "bench-model", server.base_url, key_env)
        model = providers.get(provider)(preset, config.model_settings, config.retry)
        agent = DefaultAgent(inference_func=model, cmd_init_dir=tempfile.mkdtemp(), config=config)
        delivered = []
        analysis = lambda delta: delta.field == "analysis"  # one per piece (the last also ends the reasoning)
        agent.delta_handlers.append(lambda delta: analysis(delta) and delivered.append(time.monotonic()))
        agent.run_with_new_request("go")
        sent = server.sent
    assert len(delivered) == len(sent) == PIECES, (len(delivered), len(sent))
    return [d - s for d, s in zip(delivered, sent)]


def main() -> None:
    print(f"{PIECES} pieces {GAP * 1000:.0f} ms apart, {RUNS} runs per provider; delays in ms from the server's "
          "write to the delta handlers: first piece, median, p95")
    for provider in sorted(PROVIDERS):
        handler, firsts = [], []
        for _ in range(RUNS):
            delays = measure(provider)
            firsts.append(delays[0])
            handler += delays
        median, p95 = statistics.median(handler), statistics.quantiles(handler, n=20)[-1]
        print(f"{provider:9}  first {statistics.median(firsts) * 1000:.2f}, median {median * 1000:.2f}, "
              f"p95 {p95 * 1000:.2f}")


if __name__ == "__main__":
    main()
