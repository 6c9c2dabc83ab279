"""The fast path of checkpoints (issue 42): what the kernel's events say changed is read in anges' own process, and
no git process starts; what they cannot tell goes to git. Each fast checkpoint must hold the very tree git would
have made of the same files, the store must stay one `git fsck` accepts, and Part A's guarantees hold."""

import os
import shutil
import stat
import subprocess
import tarfile
from pathlib import Path

import pytest
from test_checkpoints_cli import anges

from anges.checkpoints.git import root_key
from anges.checkpoints.store import CheckpointStore
from anges.config.types import CheckpointsConfig

GIT = "/usr/bin/git"


@pytest.fixture
def folder(tmp_path):
    """A folder with a few files, a store whose git is a wrapper that counts its runs, and a way to checkpoint."""
    work = tmp_path / "work"
    (work / "src").mkdir(parents=True)
    (work / "src" / "a.py").write_text("a\n")
    (work / "b.txt").write_text("b\n")
    (work / ".gitignore").write_text("build/\n")
    (work / "build").mkdir()
    log = tmp_path / "git-runs"
    wrapper = tmp_path / "bin" / "git"
    wrapper.parent.mkdir()
    wrapper.write_text(f"#!/bin/sh\necho \"$*\" >> {log}\nexec {GIT} \"$@\"\n")
    wrapper.chmod(0o755)
    store = CheckpointStore("tree", CheckpointsConfig(git=str(wrapper)), base=tmp_path / "checkpoints")

    class Folder:
        path = work
        root = str(work)

        def take(self, watch=True):
            return store.take("tree", "step", [self.root], [], watch=watch)

        def runs(self):
            return len(log.read_text().splitlines()) if log.exists() else 0

        def files(self, commit):
            """path -> (mode, content) of a checkpoint, read by the real git."""
            git = [GIT, "--git-dir", str(store.git(self.root).gitdir)]
            env = {**os.environ, "GIT_OBJECT_DIRECTORY": str(store.path / "objects")}
            listed = subprocess.run([*git, "ls-tree", "-r", "-z", commit], capture_output=True, env=env, check=True)
            found = {}
            for line in filter(None, listed.stdout.split(b"\0")):
                head, _, name = line.partition(b"\t")
                mode, _, blob = head.decode().split()
                content = subprocess.run([*git, "cat-file", "blob", blob], capture_output=True, env=env, check=True)
                found[name.decode()] = (mode, content.stdout)
            return found

        def tree(self, commit):
            git = [GIT, "--git-dir", str(store.git(self.root).gitdir), "rev-parse", f"{commit}^{{tree}}"]
            env = {**os.environ, "GIT_OBJECT_DIRECTORY": str(store.path / "objects")}
            return subprocess.run(git, capture_output=True, text=True, env=env, check=True).stdout.strip()

        def fsck(self):
            git = [GIT, "--git-dir", str(store.git(self.root).gitdir), "fsck", "--strict", "--no-dangling"]
            env = {**os.environ, "GIT_OBJECT_DIRECTORY": str(store.path / "objects")}
            return subprocess.run(git, capture_output=True, text=True, env=env)

    found = Folder()
    found.take()
    found.take()  # the folders are watched from the first one on: the second asks git once more
    yield found
    store.take("tree", "end", [found.root], [])


def test_a_checkpoint_where_nothing_changed_starts_no_process_and_stores_nothing(folder):
    before = folder.runs()
    first = folder.take()
    second = folder.take()
    assert first.roots == second.roots and folder.runs() == before


def test_changed_files_are_checkpointed_without_git_and_hold_the_tree_git_would_make(folder):
    work = folder.path
    before = folder.runs()
    (work / "src" / "a.py").write_text("a2\n")
    (work / "b.txt").unlink()
    entry = folder.take()
    (work / "src" / "a.py").chmod(0o755)
    executable = folder.take()
    (work / "src" / "a.py").unlink()
    (work / "src" / "a.py").symlink_to("../elsewhere")
    linked = folder.take()
    assert folder.runs() == before, "no git process for changed, removed, chmodded and relinked files"
    assert folder.files(entry.roots[folder.root]) == {".gitignore": ("100644", b"build/\n"),
                                                      "src/a.py": ("100644", b"a2\n")}
    assert folder.files(executable.roots[folder.root])["src/a.py"] == ("100755", b"a2\n")
    assert folder.files(linked.roots[folder.root])["src/a.py"] == ("120000", b"../elsewhere")
    by_git = folder.take(watch=False)
    assert folder.tree(by_git.roots[folder.root]) == folder.tree(linked.roots[folder.root])
    checked = folder.fsck()
    assert checked.returncode == 0, checked.stderr


def test_what_the_events_cannot_tell_goes_to_git(folder):
    work = folder.path
    for change in (lambda: (work / "new.txt").write_text("n\n"), lambda: (work / "src" / "deep").mkdir(),
                   lambda: (work / ".gitignore").write_text("build/\n*.log\n")):
        before = folder.runs()
        change()
        folder.take()
        assert folder.runs() > before
    (work / "x.log").write_text("x\n")  # new: whether .gitignore excludes it is git's to say
    entry = folder.take()
    assert "new.txt" in folder.files(entry.roots[folder.root]) and "x.log" not in folder.files(entry.roots[folder.root])
    before = folder.runs()
    (work / "build" / "out.o").write_text("o\n")  # in an ignored folder, and a file git said is ignored
    (work / "x.log").write_text("more\n")
    folder.take()
    assert folder.runs() == before


def test_a_write_through_a_hard_link_in_an_ignored_folder_is_seen(folder):
    work = folder.path
    os.link(work / "src" / "a.py", work / "build" / "alias")
    folder.take()
    with open(work / "build" / "alias", "w") as alias:
        alias.write("changed through the alias\n")
    entry = folder.take()
    assert folder.files(entry.roots[folder.root])["src/a.py"] == ("100644", b"changed through the alias\n")


def test_a_fifo_in_place_of_a_file_is_left_out_on_the_fast_path_too(folder):
    work = folder.path
    (work / "b.txt").unlink()
    os.mkfifo(work / "b.txt")
    entry = folder.take()
    assert entry.left_out[folder.root]["special"] == ["b.txt"]
    assert "b.txt" not in folder.files(entry.roots[folder.root])
    (work / "b.txt").unlink()
    (work / "b.txt").write_text("back\n")
    back = folder.take()
    assert folder.files(back.roots[folder.root])["b.txt"] == ("100644", b"back\n")
    assert not back.left_out.get(folder.root, {}).get("special")


def test_a_file_over_the_size_limit_is_left_out_on_the_fast_path_too(folder):
    work = folder.path
    (work / "b.txt").write_bytes(b"x" * (CheckpointsConfig().max_file_bytes + 1))
    entry = folder.take()
    assert entry.left_out[folder.root]["too_big"] == [["b.txt", CheckpointsConfig().max_file_bytes + 1]]
    assert "b.txt" not in folder.files(entry.roots[folder.root])


def test_a_checkpoint_after_another_process_moved_the_store_on_asks_git(folder, tmp_path):
    work = folder.path
    other = CheckpointStore("tree", CheckpointsConfig(), base=tmp_path / "checkpoints")
    (work / "b.txt").write_text("by the other\n")
    moved = other.take("tree", "step", [folder.root], [])  # as `anges undo` in another process would
    (work / "src" / "a.py").write_text("a3\n")
    before = folder.runs()
    entry = folder.take()
    assert folder.runs() > before
    files = folder.files(entry.roots[folder.root])
    assert files["b.txt"] == ("100644", b"by the other\n") and files["src/a.py"] == ("100644", b"a3\n")
    assert entry.roots[folder.root] != moved.roots[folder.root]


def test_the_executable_bit_is_what_git_would_store(folder):
    work = folder.path
    (work / "b.txt").chmod(stat.S_IRWXU)
    fast = folder.take()
    by_git = folder.take(watch=False)
    assert folder.tree(fast.roots[folder.root]) == folder.tree(by_git.roots[folder.root])


OLD_STORE = Path(__file__).parent / "old_checkpoint_store.tar.gz"
"""A run of three steps (a file changed and one added, then one removed and the first changed again), recorded by
anges before the fast path (commit 8402ae0), in /tmp/anges-old-store/work."""
OLD_ROOT, OLD_UID = "/tmp/anges-old-store/work", "dbEnUOmSdpie"


def test_a_store_written_before_the_fast_path_is_diffed_undone_and_continued(tmp_path, anges_home):
    with tarfile.open(OLD_STORE) as archive:
        archive.extractall(tmp_path, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    work = tmp_path / "work"
    root = str(work.resolve())
    checkpoints = tmp_path / "home" / "data" / "checkpoints" / OLD_UID
    timeline = checkpoints / "logs" / f"{OLD_UID}.jsonl"
    timeline.write_text(timeline.read_text().replace(OLD_ROOT, root))  # the folder moved: its key is its path's
    (checkpoints / "roots" / root_key(OLD_ROOT)).rename(checkpoints / "roots" / root_key(root))
    (checkpoints / "roots" / root_key(root) / "root").write_text(root + "\n")
    shutil.copytree(tmp_path / "home" / "data", anges_home / "data", dirs_exist_ok=True)

    shown = anges("diff", OLD_UID, cwd=work)
    assert shown.returncode == 0, shown.stderr
    assert "-one" in shown.stdout and "+three" in shown.stdout and "+new" in shown.stdout and "-keep" in shown.stdout
    undone = anges("undo", OLD_UID, "--to", "2", "--yes", cwd=work)
    assert undone.returncode == 0, undone.stderr
    assert (work / "app.py").read_text() == "one\n" and (work / "notes.txt").read_text() == "keep\n"
    assert not (work / "added.txt").exists()

    store = CheckpointStore(OLD_UID, CheckpointsConfig())
    for step in range(4):  # two asked of git while the folder starts being watched, then the fast path
        (work / "app.py").write_text(f"step {step}\n")
        entry = store.take(OLD_UID, "step", [root], [], watch=True)
    store.take(OLD_UID, "end", [root], [])
    git = [GIT, "--git-dir", str(store.git(root).gitdir)]
    env = {**os.environ, "GIT_OBJECT_DIRECTORY": str(store.path / "objects")}
    content = subprocess.run([*git, "show", f"{entry.roots[root]}:app.py"], capture_output=True, text=True, env=env)
    assert content.stdout == "step 3\n"
    checked = subprocess.run([*git, "fsck", "--strict"], capture_output=True, text=True, env=env)
    assert checked.returncode == 0, checked.stderr


def test_in_the_agent_loop_git_runs_only_while_the_folder_starts_being_watched_and_at_the_end(tmp_path):
    from test_checkpoints import complete, run, shell

    from anges.config.loading import load_config

    log = tmp_path / "git-runs"
    wrapper = tmp_path / "bin" / "git"
    wrapper.parent.mkdir()
    wrapper.write_text(f"#!/bin/sh\necho \"$*\" >> {log}\nexec {GIT} \"$@\"\n")
    wrapper.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    (work / "a.txt").write_text("0\n")
    steps = [shell(f"echo {n} > a.txt") for n in range(1, 7)]
    agent = run(work, *steps, complete(), config=load_config(overrides={"checkpoints": {"git": str(wrapper)}}))
    looks = [line for line in log.read_text().splitlines() if " status --porcelain" in line]
    assert len(looks) == 3, "the first two steps' checkpoints and the run's end; the other four none"
    assert len(agent.checkpoints.steps()) == 6
    agent.checkpoints.undo(to=5)
    assert (work / "a.txt").read_text() == "3\n"
