"""The interactive session's latencies, on a real pseudo-terminal with a 2,000-step session on screen.

- start-up: from starting `anges` (no task) to its input box on the terminal, median of STARTS runs;
- keystroke to screen: a key written to the terminal until anges has drawn it (its echo read back), KEYS keys;
- streamed piece to screen: a piece of a streaming reply written by the loopback OpenAI server until anges has drawn
  it, PIECES pieces GAP seconds apart.

The 2,000-step session is a real run (the agent, the runner, the store: `echo` and a file edit every tenth step),
resumed in the session so its earlier steps are drawn first. Run: `.venv/bin/python benchmarks/session.py`
"""

import json
import os
import pty
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HOME = tempfile.mkdtemp(prefix="anges-bench-")
os.environ["ANGES_HOME"] = HOME
(Path(HOME) / "config.yaml").write_text("safety: {sandbox: 'off', approval: auto}\n")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from wire_servers import TEST_KEY, OpenAIWireServer  # noqa: E402

STEPS = 2000
STARTS = 10
KEYS = 200
PIECES = 40
GAP = 0.05
BOX = "›".encode()


def long_session(work: str) -> str:
    """A stored stream of STEPS steps made by the real agent; its id."""
    from anges.agents import DefaultAgent
    from anges.config.loading import load_config
    from anges.models.scripted import is_summary_prompt

    steps = iter(range(STEPS + 1))

    def model(prompt: str, temperature: float = 0.0) -> str:
        if is_summary_prompt(prompt):
            return "Echoed numbers and wrote notes; all went well."
        n = next(steps)
        if n == STEPS:
            action = {"action_type": "TASK_COMPLETE", "content": "All steps done."}
        elif n % 10 == 9:
            action = {"action_type": "EDIT_FILE", "directive_line": f"NEW_FILE notes/{n}.py",
                      "content": f"def step_{n}():\n    return {n}\n"}
        else:
            action = {"action_type": "RUN_SHELL_CMD", "command": f"echo step {n}"}
        return json.dumps({"analysis": "", "reasoning": f"step {n}", "actions": [action]})

    config = load_config(overrides={"agents": {"common": {
        "max_number_of_events_to_exhaust": 0, "max_model_calls": 0, "max_repeated_actions": 0}}})
    agent = DefaultAgent(inference_func=model, cmd_init_dir=work, config=config)
    return agent.run_with_new_request("take 2,000 steps").uid


class Pty:
    """`anges ARGS` on a pseudo-terminal; what it writes is read and timed."""

    def __init__(self, args: list[str], cwd: str, env: dict, columns: int = 120, rows: int = 40):
        import fcntl
        import struct
        import termios

        self.started = time.monotonic()
        pid, fd = pty.fork()
        if pid == 0:
            os.chdir(cwd)
            os.execve(sys.executable, [sys.executable, "-m", "anges", *args], env)
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        self.pid, self.fd, self.output = pid, fd, b""

    def read_until(self, wanted: bytes, timeout: float = 60, after: int = 0) -> float:
        """Read until `wanted` appears past offset `after`; the time it was read."""
        deadline = time.monotonic() + timeout
        while wanted not in self.output[after:]:
            ready, _, _ = select.select([self.fd], [], [], max(deadline - time.monotonic(), 0))
            if not ready:
                raise TimeoutError(f"{wanted!r} never came; the end: {self.output[-500:]!r}")
            self.output += os.read(self.fd, 1 << 20)
        return time.monotonic()

    def drain(self, quiet: float = 0.3) -> None:
        """Read until nothing comes for `quiet` seconds."""
        while select.select([self.fd], [], [], quiet)[0]:
            self.output += os.read(self.fd, 1 << 20)

    def close(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)
        os.close(self.fd)


def start_up(work: str, env: dict) -> tuple[list[float], list[float]]:
    """Wall times to the input box, and the CPU time anges had used by then (what a busy machine does not move);
    after a first start not counted (it writes the bytecode, as an install does)."""
    times, cpu = [], []
    for _ in range(STARTS + 1):
        term = Pty(["--model", "auto"], work, env)
        times.append(term.read_until(BOX) - term.started)
        cpu.append(cpu_seconds(term.pid))
        term.close()
    return times[1:], cpu[1:]


def cpu_seconds(pid: int) -> float:
    """User and system time of process `pid` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def keystrokes(term: Pty) -> list[float]:
    delays = []
    for n in range(KEYS):
        key = "abcdefghijklmnopqrstuvwxyz"[n % 26].encode()
        if n % 60 == 59:
            os.write(term.fd, b"\x03")  # Ctrl-C: clear the box, so it stays one line
            term.drain(0.1)
        after = len(term.output)
        sent = time.monotonic()
        os.write(term.fd, key)
        delays.append(term.read_until(key, after=after) - sent)
        term.drain(0.01)
    return delays


def streamed(term: Pty, server: OpenAIWireServer) -> list[float]:
    words = [f"w{n:02d}x " for n in range(PIECES)]
    text = json.dumps({"analysis": "".join(words), "reasoning": "done",
                       "actions": [{"action_type": "TASK_COMPLETE", "content": "ok"}]})
    start = text.index(words[0])
    pieces = [text[:start + len(words[0])]]
    position = start + len(words[0])
    for word in words[1:]:
        pieces.append(text[position:position + len(word)])
        position += len(word)
    pieces[-1] += text[position:]
    server.enqueue_text(text, chunks=pieces, gap=GAP)
    after = len(term.output)
    os.write(term.fd, b"stream now\r")
    shown = [term.read_until(word.strip().encode(), after=after) for word in words]
    term.read_until(b"completed in", after=after)
    return [seen - sent for seen, sent in zip(shown, server.sent)]


def figures(name: str, values: list[float]) -> str:
    ms = sorted(v * 1000 for v in values)
    return (f"{name}: median {statistics.median(ms):.1f} ms, p95 {ms[int(len(ms) * 0.95) - 1]:.1f} ms, "
            f"max {ms[-1]:.1f} ms ({len(ms)} samples)")


def main() -> None:
    work = tempfile.mkdtemp(prefix="anges-bench-work-")
    env = {**os.environ, "TERM": "xterm-256color"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed anges has its bytecode
    wall, cpu = start_up(work, env)
    print(figures("start-up to the input box (new session), wall", wall))
    print(figures("start-up to the input box (new session), CPU", cpu))
    made = time.monotonic()
    uid = long_session(work)
    print(f"a {STEPS}-step session made in {time.monotonic() - made:.1f} s")
    with OpenAIWireServer() as server:
        term = Pty(["--resume", uid, "--model", "openai:bench-model"], work,
                   {**env, **server.env, "OPENAI_API_KEY": TEST_KEY})
        box = term.read_until(BOX) - term.started
        drawn = term.read_until(b"All steps done.") - term.started
        term.drain()
        lines = term.output.count(b"\n")
        print(f"resumed: input box after {box * 1000:.0f} ms; the {STEPS} earlier steps drawn after {drawn:.2f} s "
              f"({lines:,} lines into the scrollback)")
        print(figures("keystroke to screen", keystrokes(term)))
        os.write(term.fd, b"\x03")
        term.drain(0.2)
        print(figures("streamed piece to screen", streamed(term, server)))
        term.close()
    subprocess.run(["rm", "-rf", HOME, work], check=False)


if __name__ == "__main__":
    main()
