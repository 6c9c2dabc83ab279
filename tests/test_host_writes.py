"""No write anges makes on the host follows a link the model planted (issue 35, point 2): a link is planted at each
place anges writes (an export, a recording, an undo, the histories, the checkpoint store), and what it points to
must stay as it was; and no module writes a file but through the helpers that guarantee it."""

import ast
import errno
import os
from pathlib import Path

import pytest
from test_checkpoints import complete as step_complete
from test_checkpoints import run
from test_checkpoints import shell as step_shell
from test_cli import anges, complete, only_stream, scripted, shell
from test_session import finished, sessions  # noqa: F401  (a fixture)

from anges.checkpoints.undo import apply_restore
from anges.cli.composer import History
from anges.util.paths import links_on_the_way, open_file, write_file

ROOT = Path(__file__).resolve().parent.parent
PRECIOUS = "export PATH=/usr/bin\n"


@pytest.fixture
def planted(tmp_path):
    """A working directory and, outside it, a login script and a folder a planted link may lead to."""
    work, outside = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    (outside / "autostart").mkdir(parents=True)
    (outside / ".bash_profile").write_text(PRECIOUS)
    return work, outside


def untouched(outside: Path) -> bool:
    return (outside / ".bash_profile").read_text() == PRECIOUS and list((outside / "autostart").iterdir()) == []


# --- the helpers ---------------------------------------------------------------------------------------------

def test_write_file_replaces_a_link_instead_of_writing_through_it(planted):
    work, outside = planted
    (work / "summary.md").symlink_to(outside / ".bash_profile")
    write_file(str(work / "summary.md"), b"report\n")
    assert not (work / "summary.md").is_symlink() and (work / "summary.md").read_text() == "report\n"
    assert untouched(outside)


def test_write_file_leaves_other_hard_links_of_the_file_as_they_were(planted):
    work, outside = planted
    os.link(outside / ".bash_profile", work / "summary.md")
    write_file(str(work / "summary.md"), b"report\n")
    assert (work / "summary.md").read_text() == "report\n" and untouched(outside)


def test_open_file_refuses_a_link_and_names_every_link_on_the_way(planted):
    work, outside = planted
    (work / "rec.jsonl").symlink_to(outside / ".bash_profile")
    (work / "docs").symlink_to(outside / "autostart")
    with pytest.raises(OSError) as caught:
        os.close(open_file(str(work / "rec.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT))
    assert caught.value.errno == errno.ELOOP and untouched(outside)
    assert links_on_the_way(str(work / "docs" / "a.desktop"), [str(work)]) == [
        (str(work / "docs"), str(outside / "autostart"))]
    assert links_on_the_way(str(work / "docs" / "a.desktop"), [str(outside)]) == [], "a link outside the roots"


# --- exports and recordings ----------------------------------------------------------------------------------

def test_export_refuses_a_link_the_model_planted_and_names_where_it_points(planted):
    work, outside = planted
    plant = f"ln -s {outside / '.bash_profile'} summary.md && ln -s {outside / 'autostart'} docs"
    assert anges("-q", "x", "--model", scripted(work, shell(plant), complete()), cwd=work).returncode == 0
    uid = only_stream().uid
    refused = anges("export", uid, "--format", "md", "-o", "summary.md", cwd=work)
    assert refused.returncode == 2
    assert f"summary.md is a link to {outside / '.bash_profile'}" in refused.stderr
    through = anges("export", uid, "--format", "md", "-o", "docs/run.desktop", cwd=work)
    assert through.returncode == 2 and f"docs is a link to {outside / 'autostart'}" in through.stderr
    assert untouched(outside)
    done = anges("export", uid, "--format", "md", "-o", "report.md", cwd=work)
    assert done.returncode == 0 and (work / "report.md").read_text().startswith("# x")


def test_a_recording_is_never_written_through_a_link(planted):
    work, outside = planted
    (work / "rec.jsonl").symlink_to(outside / ".bash_profile")
    out = anges("-q", "x", "--model", scripted(work, complete()), "--record", "rec.jsonl", cwd=work)
    assert out.returncode != 0 and "cannot record to rec.jsonl: it is a symbolic link" in out.stderr
    assert untouched(outside)


def test_the_terminal_export_names_where_a_link_points_and_replaces_the_link_only(planted, sessions):  # noqa: F811
    work, outside = planted
    plant = f"ln -s {outside / '.bash_profile'} summary.md && ln -s {outside / 'autostart'} docs"
    term = sessions("--model", scripted(work, shell(plant), complete("planted")), cwd=work, columns=200)
    term.send("go\r")
    finished(term)
    term.send("/export docs/run.desktop\r")
    term.wait_for(f"not written: {work / 'docs'} is a link to {outside / 'autostart'}")
    term.send("/export summary.md\r")
    term.wait_for(f"summary.md is a link to {outside / '.bash_profile'}: replace the link with the report?",
                  on_screen=True)
    term.send("\r")  # yes, replace the link
    term.wait_until(lambda: not (work / "summary.md").is_symlink(), what="the link replaced by the report")
    assert (work / "summary.md").read_text().startswith("# go") and untouched(outside)


def test_batch_results_are_never_written_through_a_link_a_task_planted(planted):
    from test_batch import batch, script, task_file

    work, outside = planted
    plant = script(work, "plant.json", shell(f"ln -s {outside / '.bash_profile'} results.jsonl"), complete())
    tasks = task_file(work, {"id": "plant", "task": "plant a link", "path": "."})
    out = batch(str(tasks), "--model", plant, "-o", "results.jsonl", cwd=work)
    assert out.returncode != 0 and f"results.jsonl is a link to {outside / '.bash_profile'}" in out.stderr
    assert untouched(outside)


def test_the_request_history_is_never_written_through_a_link(planted):
    work, outside = planted
    (work / "history").symlink_to(outside / ".bash_profile")
    History(str(work / "history")).store_string("rm -rf ~")
    assert untouched(outside)


# --- undo ----------------------------------------------------------------------------------------------------

def test_undo_recreates_a_file_the_step_replaced_by_a_link_to_a_login_script(planted):
    work, outside = planted
    (work / "notes.md").write_text("mine\n")
    agent = run(work, step_shell(f"rm notes.md && ln -s {outside / '.bash_profile'} notes.md"), step_complete())
    assert (work / "notes.md").is_symlink()
    agent.checkpoints.undo()
    assert not (work / "notes.md").is_symlink() and (work / "notes.md").read_text() == "mine\n"
    assert untouched(outside)


def test_undo_never_writes_through_a_folder_swapped_for_a_link_after_it_was_planned(planted):
    work, outside = planted
    (work / "src" / "deep").mkdir(parents=True)
    (work / "src" / "deep" / "a.py").write_text("a\n")
    agent = run(work, step_shell("rm -r src"), step_complete())
    plan = agent.checkpoints.plan_undo()
    (work / "src").symlink_to(outside / "autostart")  # planted between the plan and the writing
    assert apply_restore(plan.restores[0]) == []
    assert not (work / "src").is_symlink() and (work / "src" / "deep" / "a.py").read_text() == "a\n"
    assert untouched(outside)


def test_the_checkpoint_store_replaces_a_link_planted_in_it(planted, anges_home):
    work, outside = planted
    (work / "a.txt").write_text("a\n")
    agent = run(work, step_shell("echo b > a.txt"), step_complete())
    store = agent.checkpoints.files
    head = store.git(str(work.resolve())).gitdir / "refs" / "heads" / "checkpoints"
    head.unlink()
    head.symlink_to(outside / ".bash_profile")
    store.take(agent.event_stream.uid, "end", [str(work.resolve())])
    assert not head.is_symlink() and untouched(outside)


# --- every host-side write goes through the helpers ------------------------------------------------------------

WRITE_FLAGS = {"O_CREAT", "O_WRONLY", "O_RDWR", "O_TRUNC", "O_APPEND"}
WRITING_CALLS = {"os.replace", "os.rename", "os.link", "os.symlink", "os.mkdir", "os.makedirs", "os.chmod",
                 "os.truncate", "shutil.copy", "shutil.copy2", "shutil.copyfile", "shutil.copytree", "shutil.move",
                 "tempfile.mkstemp", "tempfile.NamedTemporaryFile"}
WRITING_METHODS = {"write_text", "write_bytes", "mkdir", "touch", "rename", "symlink_to", "hardlink_to", "chmod"}
HELPERS = "anges/util/paths.py"
ALLOWED = {
    ("anges/checkpoints/restore.py", "os.mkdir"): "an undo's folders and links: each relative to a folder "
                                                  "descriptor, a new name renamed into place",
    ("anges/checkpoints/restore.py", "os.symlink"): "",
    ("anges/checkpoints/restore.py", "os.rename"): "",
    ("anges/checkpoints/git.py", "os.open"): "the checkpoint ref, written in place through the store's folder "
                                             "descriptor (O_NOFOLLOW: a link there is replaced instead)",
    ("anges/tools/fileedit.py", "os.open"): "the model's own edits, judged by the policy: folder descriptors, "
                                            "O_NOFOLLOW, O_EXCL",
    ("anges/tools/fileedit.py", "os.replace"): "",
    ("anges/store/event_store.py", "os.replace"): "the store's durable rewrite: a temp_copy (O_EXCL, O_NOFOLLOW) "
                                                  "under ANGES_HOME, which commands cannot see",
    ("anges/store/event_store.py", "os.link"): "",
    ("anges/store/fileops.py", "os.open"): "temp_copy: O_EXCL and O_NOFOLLOW",
    ("anges/store/runlock.py", "os.open"): "lock and stop files: O_NOFOLLOW, under ANGES_HOME",
    ("web/approvals.py", "os.open"): "an answer: O_NOFOLLOW temp, linked into place (never over another)",
    ("web/approvals.py", "os.link"): "",
    ("anges/safety/capture.py", "tempfile.mkstemp"): "a new name (O_EXCL, O_NOFOLLOW), used by its descriptor",
    ("anges/safety/shell.py", "tempfile.mkstemp"): "",
    ("anges/actions/api.py", "tempfile.mkstemp"): "",
    ("anges/safety/limits.py", "os.mkdir"): "a cgroup under /sys/fs/cgroup: the kernel's files",
    ("anges/safety/limits.py", "open"): "",
    ("anges/cli/main.py", "os.open"): "/dev/null",
    ("anges/cli/session.py", "os.open"): "/dev/null",
    ("anges/batch/worker.py", "shutil.copytree"): "a batch task's fresh folder under ANGES_HOME (links copied as "
                                                  "links, mkdir never follows one)",
    ("anges/batch/worker.py", ".mkdir"): "",
    ("anges/batch/ray_engine.py", ".mkdir"): "",
}


def _name(node) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _name(node.value)
        return f"{inner}.{node.attr}" if inner else f".{node.attr}"
    return ""


def _writes(tree):
    """(call, line) of each call in `tree` that makes, changes or opens a file for writing."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _name(node.func)
        method = node.func.attr if isinstance(node.func, ast.Attribute) else ""
        if name in WRITING_CALLS:
            yield name, node.lineno
        elif name == "os.open":
            flags = {n.attr for arg in node.args[1:2] for n in ast.walk(arg) if isinstance(n, ast.Attribute)}
            if flags & WRITE_FLAGS:
                yield name, node.lineno
        elif name == "open" or (method == "open" and name not in ("os.open", "tarfile.open")):
            position = 1 if name == "open" else 0
            mode = node.args[position] if len(node.args) > position else next(
                (k.value for k in node.keywords if k.arg == "mode"), None)
            if isinstance(mode, ast.Constant) and isinstance(mode.value, str) and set(mode.value) & set("wax+"):
                yield name, node.lineno
        elif method in WRITING_METHODS:
            yield f".{method}", node.lineno


def test_every_host_side_write_goes_through_the_safe_helpers():
    found: dict[tuple[str, str], list[int]] = {}
    for path in sorted([*(ROOT / "anges").rglob("*.py"), *(ROOT / "web").rglob("*.py")]):
        relative = path.relative_to(ROOT).as_posix()
        if relative == HELPERS:
            continue
        for call, line in _writes(ast.parse(path.read_text(encoding="utf-8"))):
            found.setdefault((relative, call), []).append(line)
    bypassing = [f"{path}:{lines[0]} {call}" for (path, call), lines in found.items() if (path, call) not in ALLOWED]
    assert not bypassing, ("these write files without anges.util.paths (write_file, open_file, make_dirs), which "
                           f"never follow a link a command planted: {bypassing}")
    assert not set(ALLOWED) - set(found), "allowed writes that are gone: drop them from ALLOWED"


def test_the_write_scan_catches_the_writes_that_followed_links_before():
    source = ("Path(f).expanduser().write_text(t)\nwith open(path, 'w') as f: pass\nopen(p, 'a')\n"
              "os.open(p, os.O_WRONLY | os.O_CREAT)\nos.replace(t, p)\nPath(p).open('wb')\nopen(p)\n")
    assert [call for call, _ in sorted(_writes(ast.parse(source)), key=lambda found: found[1])] == [".write_text", "open", "open", "os.open",
                                                                 "os.replace", ".open"]
