"""The package installs with its resources, and importing it is cheap."""

import ast
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import venv
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD_JUNK = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache")


def source_copy(tmp_path: Path) -> Path:
    """The checkout as a clean source tree (no build leftovers that could leak into a wheel)."""
    return Path(shutil.copytree(ROOT, tmp_path / "src", ignore=BUILD_JUNK))


def build(source: Path, hook: str, out: Path) -> tuple[Path, str]:
    """Run a PEP 517/660 build hook of setup.py as pip does; the built wheel and everything it printed."""
    out.mkdir()
    code = f"from setuptools import build_meta; print(build_meta.{hook}({str(out)!r}))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=source, timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    return out / done.stdout.strip().splitlines()[-1], output


def test_wheel_install_ships_templates_web_assets_and_config(tmp_path):
    wheel, output = build(source_copy(tmp_path), "build_wheel", tmp_path / "wheels")
    assert "Traceback" not in output, output
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    assert {"anges/config.yaml", "anges/prompt_templates/agents/default.j2", "anges/web/static/app.js"} <= set(names)
    assert {"anges/py.typed", "anges/__init__.pyi"} <= set(names), "type checkers would ignore our annotations"
    assert not [n for n in names if n.endswith("setup.py") or "/tests/" in n]
    assert any(n.startswith("anges-0.2.0.dist-info/") and n.endswith("LICENSE") for n in names)
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
                   check=True)
    probe = textwrap.dedent("""
        import json, anges
        from anges.config.loading import load_config, resource_path
        from anges.prompt.templates import render_template
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


def test_an_editable_install_builds_cleanly_and_reads_the_checkout(tmp_path):
    source = source_copy(tmp_path)
    wheel, output = build(source, "build_editable", tmp_path / "wheels")
    assert "Traceback" not in output and "FileNotFoundError" not in output, output
    # a fresh environment: the editable wheel in its site-packages, our dependencies (not our anges) on its path
    env = tmp_path / "env"
    venv.create(env, with_pip=False)
    site_packages = next(env.glob("lib/python*/site-packages"))
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site_packages)
    (site_packages / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    probe = textwrap.dedent("""
        import json
        import anges.web
        from anges.config.loading import load_config, resource_path
        print(json.dumps({"web": anges.web.__file__, "config": str(resource_path("config.yaml")),
                          "templates": str(resource_path("prompt_templates")), "model": load_config().model}))
    """)
    out = subprocess.run([str(env / "bin" / "python"), "-c", probe], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)
    assert found == {"web": str(source / "web" / "__init__.py"), "config": str(source / "anges" / "config.yaml"),
                     "templates": str(source / "prompt_templates"), "model": "auto"}


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


def test_the_stub_type_checkers_read_names_every_public_name_as_it_loads():
    """`anges/__init__.pyi` gives `from anges import X` its real type (the package loads X lazily)."""
    import importlib

    import anges

    stub = ast.parse((ROOT / "anges" / "__init__.pyi").read_text())
    typed = {alias.asname or alias.name: (node.module, alias.name)
             for node in stub.body if isinstance(node, ast.ImportFrom) for alias in node.names}
    assert set(typed) == set(anges.__all__) - {"__version__"}
    for name, (module, original) in typed.items():
        assert getattr(importlib.import_module(module), original) is getattr(anges, name), name
