"""Make docs/trace.png: the waterfall of a real trace, as a tracing tool would draw it.

    .venv/bin/python docs/trace.py [OUTPUT.png]

An orchestrator and its child agent run on a model served over the OpenAI wire format (the loopback server of the
test suite, `tests/wire_servers.py`: the real `openai` SDK, its first call rate-limited once), with real commands
in a temporary folder and a library approval callback that declines `git push`. Telemetry is on, exporting over
OTLP/HTTP to the receiver of the test suite (`tests/otlp_receiver.py`); the spans it decodes are drawn as HTML and
photographed with Chromium (/usr/bin/chromium, or $ANGES_CHROMIUM) through playwright.
"""

import html
import json
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
os.environ["ANGES_HOME"] = tempfile.mkdtemp(prefix="anges-trace-")
os.environ["OPENAI_API_KEY"] = "sk-test-wire-0123456789"
CHROMIUM = os.environ.get("ANGES_CHROMIUM", "/usr/bin/chromium")
COLOURS = {"invoke_agent": "#4063d8", "chat": "#9558b2", "execute_tool": "#389826", "approval": "#e0a000",
           "error": "#cb3c33"}


def reply(*actions, reasoning="next"):
    return json.dumps({"analysis": "", "reasoning": reasoning, "actions": list(actions)})


def run_traced(receiver_url: str, work: str) -> None:
    """The orchestrator's run, with telemetry exporting to `receiver_url`."""
    from wire_servers import OpenAIWireServer

    import anges.telemetry
    from anges.agents import Orchestrator
    from anges.config.loading import load_config
    from anges.config.types import ModelPreset, ModelSettings, RetryConfig
    from anges.models.openai_model import OpenAIModel

    steps = [
        reply({"action_type": "CALL_CHILD_AGENT", "directive": "NEW_CHILD_AGENT TASK_EXECUTOR",
               "agent_input": "Write fizzbuzz.py, run it, and publish it."}),
        reply({"action_type": "EDIT_FILE", "directive_line": "NEW_FILE fizzbuzz.py",
               "content": "for i in range(1, 16):\n    print('FizzBuzz' if i % 15 == 0 else 'Fizz' if i % 3 == 0 "
                          "else 'Buzz' if i % 5 == 0 else i)\n"}),
        reply({"action_type": "RUN_SHELL_CMD", "command": "sleep 0.6; python3 fizzbuzz.py | tail -3"}),
        reply({"action_type": "RUN_SHELL_CMD", "command": "git push origin main"}),
        reply({"action_type": "TASK_COMPLETE", "content": "fizzbuzz.py prints 1 to 15; pushing was declined."}),
        reply({"action_type": "TASK_COMPLETE", "content": "Done: fizzbuzz.py works; it is not pushed."}),
    ]
    with OpenAIWireServer() as server:
        server.enqueue_error(429, headers={"Retry-After": "0.3"})
        for number, text in enumerate(steps):
            server.enqueue_text(text, input_tokens=2400 + 300 * number, output_tokens=60, cached_tokens=2000,
                                gap=0.08 + 0.02 * number)
        model = OpenAIModel(ModelPreset("openai", "gpt-4.1", base_url=server.base_url, api_key_env="OPENAI_API_KEY"),
                            ModelSettings(), RetryConfig())
        config = load_config(overrides={
            "telemetry": {"enabled": True, "endpoint": receiver_url},
            "prices": {"gpt-4.1": {"input": 2.0, "output": 8.0, "cached_input": 0.5}},
            "safety": {"approval": "ask"}})
        decline_push = lambda request: "deny" if "git push" in request.subject else "allow"  # noqa: E731
        Orchestrator(inference_func=model, cmd_init_dir=work, config=config,
                     approval=decline_push).run_with_new_request("Write fizzbuzz.py and publish it.")
    anges.telemetry.shutdown()


def ordered(spans: list) -> list[tuple[int, object]]:
    """(depth, span) in tree order, children by start time."""
    children: dict[str, list] = {}
    ids = {span.span_id for span in spans}
    for span in sorted(spans, key=lambda s: s.start):
        children.setdefault(span.parent_id if span.parent_id in ids else "", []).append(span)
    out: list[tuple[int, object]] = []

    def visit(parent: str, depth: int) -> None:
        for span in children.get(parent, []):
            out.append((depth, span))
            visit(span.span_id, depth + 1)

    visit("", 0)
    return out


def page(spans: list) -> str:
    start, end = min(s.start for s in spans), max(s.end for s in spans)
    total = (end - start) or 1
    rows = []
    for depth, span in ordered(spans):
        kind = "error" if span.status == 2 else span.name.split()[0]
        left, width = 100 * (span.start - start) / total, max(100 * (span.end - span.start) / total, 0.25)
        label = f"{(span.end - span.start) / 1e6:,.0f} ms{_facts(span)}"
        if left + width < 62:  # after the bar, before it, or on it
            place = f"left:{left + width:.3f}%"
        elif left > 38:
            place = f"right:{100 - left:.3f}%;text-align:right;padding-right:6px"
        else:
            place = f"left:{left:.3f}%;color:#fff"
        rows.append(f'<div class="row"><div class="name" style="padding-left:{12 + 18 * depth}px">'
                    f'{html.escape(span.name)}</div><div class="lane"><div class="bar" style="left:{left:.3f}%;'
                    f'width:{width:.3f}%;background:{COLOURS.get(kind, "#777")}"></div>'
                    f'<div class="time" style="{place}">{html.escape(label)}</div></div></div>')
    ticks = "".join(f'<div class="tick" style="{"right:0" if i == 5 else f"left:{20 * i}%"}">'
                    f'{total / 1e9 * i / 5:.1f} s</div>' for i in range(6))
    return f"""<!doctype html><meta charset="utf-8"><style>
body{{font:13px/1.2 -apple-system,'DejaVu Sans',sans-serif;margin:18px;color:#222;background:#fff;width:1260px}}
h1{{font-size:15px;margin:0 0 10px}} .row{{display:flex;height:24px;align-items:center;border-bottom:1px solid #eee}}
.name{{width:330px;flex:none;white-space:nowrap;overflow:hidden;font:12px 'DejaVu Sans Mono',monospace}}
.lane,.axis{{position:relative;flex:1;height:100%}} .bar{{position:absolute;top:6px;height:12px;border-radius:2px}}
.time{{position:absolute;top:5px;padding-left:6px;font-size:11px;color:#555;white-space:nowrap}}
.axis{{height:18px;margin-left:330px;border-bottom:1px solid #ccc}} .tick{{position:absolute;font-size:11px;color:#777}}
</style><h1>Trace {spans[0].trace_id} &middot; {len(spans)} spans &middot; service anges</h1>
<div class="axis">{ticks}</div>{''.join(rows)}"""


def _facts(span) -> str:
    a = span.attributes
    if "gen_ai.usage.input_tokens" in a and span.name.startswith("chat"):
        cached = a.get("gen_ai.usage.cache_read.input_tokens", 0)
        extra = f" · {a['gen_ai.usage.input_tokens']:,} tokens in ({cached:,} cached) / " \
                f"{a['gen_ai.usage.output_tokens']} out"
        if a.get("anges.model.attempts", 1) > 1:
            extra += f" · {a['anges.model.attempts']} attempts"
        return extra + (f" · ${a['anges.cost.usd']:.4f}" if "anges.cost.usd" in a else "")
    if "anges.command.exit_code" in a:
        return f" · exit {a['anges.command.exit_code']} · sandbox {a.get('anges.sandbox', '?')}"
    if "anges.approval.decision" in a:
        return f" · {a['anges.approval.decision']} by {a.get('anges.approval.by')}"
    if "anges.run.status" in a:
        return f" · {a['anges.run.status']}"
    return ""


def main() -> None:
    from otlp_receiver import OTLPReceiver
    from playwright.sync_api import sync_playwright

    output = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "trace.png"
    with OTLPReceiver() as receiver, tempfile.TemporaryDirectory() as work:
        run_traced(receiver.url, work)
        spans = receiver.wait_for(lambda found: sum(s.name.startswith("invoke_agent") for s in found) == 2)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        view = browser.new_page(viewport={"width": 1300, "height": 200}, device_scale_factor=1)
        view.set_content(page(spans))
        view.screenshot(path=str(output), full_page=True)
        browser.close()
    print(f"wrote {output} ({len(spans)} spans)")


if __name__ == "__main__":
    main()
