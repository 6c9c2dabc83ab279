"""Counting a prompt's tokens with the server's tokenizer: what it costs a step.

A long run of scripted steps through the real agent, runner and store (a temporary ANGES_HOME), its model on a
window of 8k or 32k tokens whose server counts tokens over HTTP on 127.0.0.1 (a tokenizer of words in pieces of up
to six letters, digits one by one, as `tests/local_servers.py` has), like llama-server's `/tokenize`; then the
same run estimating instead. Each command prints one line (`echo step N`), every tenth 150 numbers (`seq 1 150`).
Prints per window: the run's time with counting and with the estimate, the time spent counting (per step: mean
and 95th percentile), the tokenizer's requests per step, and the characters counted against those sent. Run:
    python benchmarks/token_count.py [--steps 200]
"""

import argparse
import json
import os
import re
import statistics
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

os.environ.setdefault("ANGES_HOME", tempfile.mkdtemp(prefix="anges-bench-"))

from anges.agents import DefaultAgent  # noqa: E402
from anges.config.loading import load_config  # noqa: E402
from anges.models.base import Completion, Usage  # noqa: E402
from anges.models.scripted import SUMMARY_PROMPT_MARK  # noqa: E402
from anges.models.window import Window  # noqa: E402

STEP = '{"reasoning": "step %d", "actions": [{"action_type": "RUN_SHELL_CMD", "command": "%s"}]}'
DONE = '{"reasoning": "done", "actions": [{"action_type": "TASK_COMPLETE", "content": "done"}]}'
SUMMARY = "Summary: the agent ran `echo step N` for each step; every command exited 0. Open: the next steps. " * 8
TOKEN = re.compile(r" ?[A-Za-z]{1,6}|[0-9]| +|\n|[^\x00-\x7f]|[^A-Za-z0-9 \n]")


class Tokenizer(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        data = json.dumps({"tokens": [0] * len(TOKEN.findall(body["content"]))}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


class Served:
    """A model on a server that said its window and counts tokens (the steps are scripted)."""

    def __init__(self, window, url, steps, count):
        import httpx2

        self.name, self._window, self.steps, self.done = "bench", Window(window, "server", "bench"), steps, 0
        self.client, self.count = httpx2.Client(base_url=url), count
        self.spent: list[float] = []
        self.requests = self.counted = self.sent = 0

    def window(self):
        return self._window

    def tokenizer(self):
        return self._count if self.count else None

    def _count(self, text):
        started = time.perf_counter()
        answer = self.client.post("/tokenize", json={"content": text, "add_special": False}).json()
        self.spent[-1] += time.perf_counter() - started
        self.requests += 1
        self.counted += len(text)
        return len(answer["tokens"])

    def __call__(self, prompt, temperature=0.0):
        self.sent += len(prompt)
        usage = Usage(len(TOKEN.findall(prompt)) + 10, 20)
        if prompt.startswith(SUMMARY_PROMPT_MARK):
            return Completion(SUMMARY, usage=usage)
        self.spent.append(0.0)  # the counting for the next prompt goes here
        self.done += 1
        if self.done > self.steps:
            return Completion(DONE, usage=usage)
        command = "seq 1 150" if self.done % 10 == 0 else f"echo step {self.done}"
        return Completion(STEP % (self.done, command), usage=usage)


def run(window, steps, url, count):
    config = load_config(overrides={"agents": {"common": {"max_number_of_events_to_exhaust": 0,
                                                          "max_model_calls": 0, "max_repeated_actions": 0}}})
    model = Served(window, url, steps, count)
    model.spent.append(0.0)
    with tempfile.TemporaryDirectory() as work:
        started = time.perf_counter()
        stream = DefaultAgent(inference_func=model, cmd_init_dir=work, config=config).run_with_new_request("go")
        elapsed = time.perf_counter() - started
    assert stream.events_list[-1].type == "task_completion", stream.events_list[-1].content
    return model, elapsed


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Tokenizer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    print(f"{args.steps} steps; counting per step in ms (mean / p95); tokenizer requests per step; "
          "characters counted / sent")
    for window in (8_192, 32_768):
        counted, with_count = run(window, args.steps, url, True)
        _, estimated = run(window, args.steps, url, False)
        spent = [seconds * 1000 for seconds in counted.spent]
        p95 = statistics.quantiles(spent, n=20)[-1]
        print(f"{window:>6,}-token window: run {with_count:6.1f}s counted, {estimated:6.1f}s estimated; counting "
              f"{statistics.mean(spent):5.2f} / {p95:5.2f} ms a step; {counted.requests / args.steps:4.1f} requests "
              f"a step; {counted.counted:,} / {counted.sent:,} characters ({counted.counted / counted.sent:.0%})")
    server.shutdown()


if __name__ == "__main__":
    main()
