"""The package installs with its resources, and importing it is cheap."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_install_ships_templates_web_assets_and_config(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(wheels), str(ROOT)], check=True, cwd=tmp_path)
    wheel = next(wheels.glob("anges-*.whl"))
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
                   check=True)
    probe = textwrap.dedent("""
        import json, anges
        from anges.config import load_config, resource_path
        from anges.prompt import render_template
        config = load_config()
        print(json.dumps({
            "file": anges.__file__,
            "config": str(resource_path("config.yaml")),
            "templates": str(resource_path("prompt_templates")),
            "web": str(resource_path("web")),
            "static": sorted(p.name for p in (resource_path("web") / "static").iterdir()),
            "pages": sorted(p.name for p in (resource_path("web") / "templates").iterdir()),
            "action_guides": sorted(p.name for p in (resource_path("prompt_templates") / "actions").iterdir()),
            "model": config.model,
            "rendered": render_template("invalid_reply.j2", error="E-123", attempt=1, max_attempts=3),
        }))
    """)
    env = {**os.environ, "PYTHONPATH": str(target)}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)
    for key in ("file", "config", "templates", "web"):
        assert found[key].startswith(str(target)), (key, found[key])
    assert {"app.js", "anges.css"} <= set(found["static"]), "web assets missing from the wheel"
    assert {"chat.html", "login.html"} <= set(found["pages"]), "web page templates missing from the wheel"
    assert "run_shell_cmd.j2" in found["action_guides"]
    assert found["model"] == "auto"
    assert "E-123" in found["rendered"]


def test_import_is_cheap_and_side_effect_free(tmp_path):
    probe = textwrap.dedent("""
        import sys, json
        events = []
        def hook(name, args):
            if name in ("subprocess.Popen", "os.system", "os.fork", "os.posix_spawn", "os.exec"):
                events.append(name)
            elif name == "open" and isinstance(args[0], str) and not args[0].endswith((".py", ".pyc", ".pth")):
                events.append(f"open {args[0]}")
        sys.addaudithook(hook)
        import anges
        print(json.dumps({"modules": sorted(sys.modules), "events": events}))
    """)
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path, check=True)
    found = json.loads(out.stdout)
    heavy = {"openai", "google.genai", "anthropic", "flask", "jinja2", "yaml", "mcp", "httpx", "subprocess"}
    assert heavy.isdisjoint(found["modules"]), heavy & set(found["modules"])
    assert found["events"] == []


def test_public_names_resolve_lazily():
    import anges

    for name in ("Event", "EventStream", "EventSummary", "EventStore", "ScriptedModel", "load_config"):
        assert getattr(anges, name).__name__ == name
