import errno
import json
import os
import stat
import subprocess
import sys

import pytest

from anges.exceptions import AngesError
from anges.tools.fileedit import EditError, EditResult, apply_edit

SEVEN_LINES = "one\ntwo\nthree\nfour\nfive\nsix\nseven\n"


@pytest.fixture
def seven(tmp_path):
    path = tmp_path / "foo.py"
    path.write_text(SEVEN_LINES)
    return path


def edit(tmp_path, directive: str, content: str = "", old_text: str | None = None) -> EditResult:
    return apply_edit(directive, content, base_dir=tmp_path, old_text=old_text)


def leftovers(directory) -> list[str]:
    return [name for name in os.listdir(directory) if name.endswith(".tmp")]


# NEW_FILE


def test_new_file_creates_parents_and_ends_with_a_newline(tmp_path):
    result = edit(tmp_path, "NEW_FILE pkg/sub/mod.py", "x = 1\ny = 2")

    path = tmp_path / "pkg" / "sub" / "mod.py"
    assert path.read_text() == "x = 1\ny = 2\n"
    assert result.created
    assert result.operation == "NEW_FILE"
    assert result.path == str(path)
    assert result.diff.splitlines()[:2] == ["--- /dev/null", "+++ b/pkg/sub/mod.py"]
    assert "+x = 1\n+y = 2\n" in result.diff


def test_new_file_with_empty_content_creates_an_empty_file(tmp_path):
    result = edit(tmp_path, "NEW_FILE empty.txt", "")

    assert (tmp_path / "empty.txt").read_bytes() == b""
    assert result.created


def test_new_file_overwrites_and_the_diff_shows_it(tmp_path, seven):
    result = edit(tmp_path, "NEW_FILE foo.py", "replaced\n")

    assert seven.read_text() == "replaced\n"
    assert not result.created
    assert result.diff.splitlines()[:2] == ["--- a/foo.py", "+++ b/foo.py"]
    assert "-one\n" in result.diff and "+replaced\n" in result.diff


@pytest.mark.parametrize("written", ["my notes/a file.txt", '"my notes/a file.txt"', "'my notes/a file.txt'"])
def test_new_file_path_may_have_spaces_and_quotes(tmp_path, written):
    edit(tmp_path, f"NEW_FILE   {written}  ", "hi")

    assert (tmp_path / "my notes" / "a file.txt").read_text() == "hi\n"


def test_new_file_new_mode_follows_the_umask(tmp_path):
    old_umask = os.umask(0o027)
    try:
        edit(tmp_path, "NEW_FILE made.txt", "x")
    finally:
        os.umask(old_umask)

    assert stat.S_IMODE((tmp_path / "made.txt").stat().st_mode) == 0o640


def test_absolute_and_home_paths(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    base = tmp_path / "base"
    base.mkdir()

    from_home = apply_edit("NEW_FILE ~/notes.txt", "a", base_dir=base)
    absolute = apply_edit(f"NEW_FILE {elsewhere}/abs.txt", "b", base_dir=base)

    assert (home / "notes.txt").read_text() == "a\n"
    assert (elsewhere / "abs.txt").read_text() == "b\n"
    assert absolute.path == str(elsewhere / "abs.txt")
    assert f"+++ {elsewhere}/abs.txt" in absolute.diff
    assert from_home.path == str(home / "notes.txt")


def test_base_dir_may_be_a_string(tmp_path):
    result = apply_edit("NEW_FILE a.txt", "x", base_dir=str(tmp_path))

    assert result.path == str(tmp_path / "a.txt")


# INSERT_LINES


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("0", "new\none\ntwo\nthree\n"),
        ("1", "new\none\ntwo\nthree\n"),
        ("2", "one\nnew\ntwo\nthree\n"),
        ("3", "one\ntwo\nnew\nthree\n"),
        ("4", "one\ntwo\nthree\nnew\n"),
        ("-1", "one\ntwo\nthree\nnew\n"),
    ],
)
def test_insert_lines_before_line_n(tmp_path, line, expected):
    path = tmp_path / "f.txt"
    path.write_text("one\ntwo\nthree\n")

    result = edit(tmp_path, f"INSERT_LINES f.txt {line}", "new")

    assert path.read_text() == expected
    assert result.operation == "INSERT_LINES"
    assert not result.created
    assert "+new\n" in result.diff


def test_insert_several_lines_with_trailing_newline(tmp_path, seven):
    edit(tmp_path, "INSERT_LINES foo.py 3", "a\nb\n")

    assert seven.read_text().splitlines()[:5] == ["one", "two", "a", "b", "three"]


def test_insert_keeps_blank_lines_in_content(tmp_path, seven):
    edit(tmp_path, "INSERT_LINES foo.py 2", "a\n\nb")

    assert seven.read_text().startswith("one\na\n\nb\ntwo\n")


@pytest.mark.parametrize("line", ["0", "1", "-1"])
def test_insert_into_an_empty_file(tmp_path, line):
    path = tmp_path / "empty.txt"
    path.write_text("")

    edit(tmp_path, f"INSERT_LINES empty.txt {line}", "first")

    assert path.read_text() == "first\n"


def test_insert_at_end_of_file_without_final_newline_keeps_lines_apart(tmp_path):
    path = tmp_path / "f.txt"
    path.write_text("one\ntwo")

    result = edit(tmp_path, "INSERT_LINES f.txt -1", "three")

    assert path.read_text() == "one\ntwo\nthree"
    assert "\\ No newline at end of file" in result.diff


def test_insert_into_a_crlf_file_uses_crlf(tmp_path):
    path = tmp_path / "win.txt"
    path.write_bytes(b"one\r\ntwo\r\n")

    edit(tmp_path, "INSERT_LINES win.txt 2", "mid\nmore")

    assert path.read_bytes() == b"one\r\nmid\r\nmore\r\ntwo\r\n"


def test_append_to_a_crlf_file_without_final_newline(tmp_path):
    path = tmp_path / "win.txt"
    path.write_bytes(b"one\r\ntwo")

    edit(tmp_path, "INSERT_LINES win.txt -1", "three")

    assert path.read_bytes() == b"one\r\ntwo\r\nthree"


def test_insert_into_a_path_with_spaces(tmp_path):
    path = tmp_path / "my file 2.txt"
    path.write_text("a\n")

    edit(tmp_path, "INSERT_LINES my file 2.txt 1", "z")

    assert path.read_text() == "z\na\n"


def test_only_newlines_split_lines(tmp_path):
    path = tmp_path / "f.txt"
    path.write_text("a\x0cb\nc\n")

    edit(tmp_path, "INSERT_LINES f.txt 2", "new")

    assert path.read_text() == "a\x0cb\nnew\nc\n"


# REMOVE_LINES


@pytest.mark.parametrize(
    ("span", "expected"),
    [
        ("2-3", "one\nfour\nfive\nsix\nseven\n"),
        ("4-4", "one\ntwo\nthree\nfive\nsix\nseven\n"),
        ("1-7", ""),
        ("7-7", "one\ntwo\nthree\nfour\nfive\nsix\n"),
        ("6 - 7", "one\ntwo\nthree\nfour\nfive\n"),
    ],
)
def test_remove_lines_inclusive_range(tmp_path, seven, span, expected):
    result = edit(tmp_path, f"REMOVE_LINES foo.py {span}")

    assert seven.read_text() == expected
    assert result.operation == "REMOVE_LINES"
    assert "+" not in "".join(line[0] for line in result.diff.splitlines()[2:] if line)


def test_remove_last_line_of_file_without_final_newline(tmp_path):
    path = tmp_path / "f.txt"
    path.write_text("one\ntwo\nthree")

    edit(tmp_path, "REMOVE_LINES f.txt 3-3")

    assert path.read_text() == "one\ntwo"


def test_remove_lines_with_dashes_in_the_path(tmp_path):
    path = tmp_path / "notes 2024-01.txt"
    path.write_text("a\nb\nc\n")

    edit(tmp_path, "REMOVE_LINES notes 2024-01.txt 2-3")

    assert path.read_text() == "a\n"


# REPLACE_LINES


def test_replace_lines_with_more_lines(tmp_path, seven):
    result = edit(tmp_path, "REPLACE_LINES foo.py 2-3", "TWO\nTHREE\nEXTRA")

    assert seven.read_text() == "one\nTWO\nTHREE\nEXTRA\nfour\nfive\nsix\nseven\n"
    assert "-two\n-three\n+TWO\n+THREE\n+EXTRA\n" in result.diff
    assert result.to_data()["lines_added"] == 3
    assert result.to_data()["lines_removed"] == 2


def test_replace_lines_with_fewer_lines(tmp_path, seven):
    edit(tmp_path, "REPLACE_LINES foo.py 1-6", "only\n")

    assert seven.read_text() == "only\nseven\n"


def test_replace_lines_with_empty_content_removes_them(tmp_path, seven):
    edit(tmp_path, "REPLACE_LINES foo.py 1-5", "")

    assert seven.read_text() == "six\nseven\n"


def test_replace_last_line_keeps_missing_final_newline(tmp_path):
    path = tmp_path / "f.txt"
    path.write_text("one\ntwo")

    edit(tmp_path, "REPLACE_LINES f.txt 2-2", "TWO\n")

    assert path.read_text() == "one\nTWO"


# REPLACE_TEXT


def test_replace_text_replaces_the_unique_occurrence(tmp_path):
    path = tmp_path / "app.py"
    path.write_text("def f():\n    return 1\n\ndef g():\n    return 2\n")

    result = edit(tmp_path, "REPLACE_TEXT app.py", "def g():\n    return 3\n", old_text="def g():\n    return 2\n")

    assert path.read_text() == "def f():\n    return 1\n\ndef g():\n    return 3\n"
    assert result.operation == "REPLACE_TEXT"
    assert "-    return 2\n+    return 3\n" in result.diff


def test_replace_text_within_a_line(tmp_path):
    path = tmp_path / "c.cfg"
    path.write_text("port = 80\nhost = x\n")

    edit(tmp_path, "REPLACE_TEXT c.cfg", "8080", old_text="80\n")

    assert path.read_text() == "port = 8080host = x\n"


def test_replace_text_matches_lf_old_text_in_a_crlf_file(tmp_path):
    path = tmp_path / "win.txt"
    path.write_bytes(b"a\r\nb\r\nc\r\n")

    edit(tmp_path, "REPLACE_TEXT win.txt", "B\nBB\n", old_text="b\n")

    assert path.read_bytes() == b"a\r\nB\r\nBB\r\nc\r\n"


def test_replace_text_with_no_change_writes_nothing(tmp_path):
    path = tmp_path / "same.txt"
    path.write_text("keep\n")
    os.utime(path, (1, 1))

    result = edit(tmp_path, "REPLACE_TEXT same.txt", "keep", old_text="keep")

    assert result.diff == ""
    assert path.stat().st_mtime == 1


# errors


@pytest.mark.parametrize(
    ("directive", "content", "old_text", "message"),
    [
        ("EDIT_LINES foo.py 1", "x", None, "Unknown edit directive 'EDIT_LINES foo.py 1'"),
        ("", "x", None, "NEW_FILE, INSERT_LINES, REMOVE_LINES, REPLACE_LINES, REPLACE_TEXT"),
        ("REMOVE_LINES foo.py 5-9", "", None, "REMOVE_LINES range 5-9 is outside foo.py, which has 7 lines"),
        ("REPLACE_LINES foo.py 8-8", "x", None, "REPLACE_LINES range 8-8 is outside foo.py, which has 7 lines"),
        ("REMOVE_LINES foo.py 5-2", "", None, "start must not be after the end"),
        ("REMOVE_LINES foo.py 0-2", "", None, "numbered from 1"),
        ("REMOVE_LINES foo.py", "", None, "REMOVE_LINES needs a path and <x>-<y>"),
        ("REMOVE_LINES foo.py 3", "", None, "`REMOVE_LINES <path> <x>-<y>`"),
        ("REMOVE_LINES foo.py a-b", "", None, "REMOVE_LINES needs a path and <x>-<y>"),
        ("REPLACE_LINES 2-3", "x", None, "REPLACE_LINES needs a path and <x>-<y>"),
        ("INSERT_LINES foo.py", "x", None, "INSERT_LINES needs a path and <N>"),
        ("INSERT_LINES foo.py two", "x", None, "INSERT_LINES needs a path and <N>"),
        ("INSERT_LINES foo.py 9", "x", None, "INSERT_LINES line 9 is outside foo.py, which has 7 lines; use 1-8"),
        ("INSERT_LINES foo.py -2", "x", None, "INSERT_LINES line -2 is outside foo.py"),
        ("INSERT_LINES foo.py 1", "", None, "INSERT_LINES needs content"),
        ("REPLACE_TEXT foo.py", "x", None, "REPLACE_TEXT needs old_text"),
        ("REPLACE_TEXT foo.py", "x", "", "REPLACE_TEXT needs old_text"),
        ("REPLACE_TEXT foo.py", "x", "eleven", "old_text was not found in foo.py"),
        ("REPLACE_TEXT foo.py", "x", "e\n", "old_text occurs 3 times in foo.py"),
        ("NEW_FILE", "x", None, "NEW_FILE needs a path"),
        ("NEW_FILE ''", "x", None, "NEW_FILE needs a path"),
    ],
)
def test_errors_say_what_is_wrong_and_leave_the_file_unchanged(tmp_path, seven, directive, content, old_text, message):
    before = seven.read_bytes()

    with pytest.raises(EditError) as caught:
        edit(tmp_path, directive, content, old_text=old_text)

    assert message in str(caught.value)
    assert seven.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["foo.py"]


@pytest.mark.parametrize(
    "directive",
    ["INSERT_LINES gone.py 1", "REMOVE_LINES gone.py 1-1", "REPLACE_LINES gone.py 1-1", "REPLACE_TEXT gone.py"],
)
def test_editing_a_missing_file_is_an_error_and_creates_nothing(tmp_path, directive):
    with pytest.raises(EditError, match="gone.py does not exist; .* NEW_FILE creates one"):
        edit(tmp_path, directive, "x", old_text="y")

    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("directive", ["NEW_FILE sub", "INSERT_LINES sub 1", "REPLACE_TEXT sub"])
def test_a_directory_is_not_a_file(tmp_path, directive):
    (tmp_path / "sub").mkdir()

    with pytest.raises(EditError, match="sub is a directory"):
        edit(tmp_path, directive, "x", old_text="y")


@pytest.mark.parametrize(
    ("data", "message"), [(b"\x89PNG\r\n\x1a\n\x00\x00", "binary file"), (b"caf\xe9\n", "not UTF-8 text")]
)
@pytest.mark.parametrize("directive", ["INSERT_LINES blob 1", "NEW_FILE blob", "REPLACE_TEXT blob"])
def test_binary_or_undecodable_files_are_refused_untouched(tmp_path, data, message, directive):
    path = tmp_path / "blob"
    path.write_bytes(data)

    with pytest.raises(EditError, match=message):
        edit(tmp_path, directive, "x", old_text="caf")

    assert path.read_bytes() == data


def test_write_failure_is_an_edit_error_and_leaves_no_temp_file(tmp_path):
    # The parent of the target is a file, so its directory cannot be created.
    (tmp_path / "plain").write_text("x\n")

    with pytest.raises(EditError, match="Cannot write plain/child.txt"):
        edit(tmp_path, "NEW_FILE plain/child.txt", "y")

    assert (tmp_path / "plain").read_text() == "x\n"
    assert leftovers(tmp_path) == []


def test_edit_error_is_an_anges_error():
    assert issubclass(EditError, AngesError)


# file properties


def test_edits_preserve_the_file_mode(tmp_path, seven):
    seven.chmod(0o751)

    edit(tmp_path, "REPLACE_LINES foo.py 1-1", "#!/bin/sh")
    edit(tmp_path, "NEW_FILE foo.py", "#!/bin/sh\necho hi")

    assert stat.S_IMODE(seven.stat().st_mode) == 0o751
    assert seven.read_text() == "#!/bin/sh\necho hi\n"


def test_edits_are_atomic_replacements_that_leave_no_temp_files(tmp_path, seven):
    inode = seven.stat().st_ino

    edit(tmp_path, "INSERT_LINES foo.py 1", "zero")

    assert seven.stat().st_ino != inode
    assert leftovers(tmp_path) == []


def test_editing_through_a_symlink_changes_the_target_and_keeps_the_link(tmp_path, seven):
    link = tmp_path / "link.py"
    link.symlink_to(seven)

    edit(tmp_path, "REMOVE_LINES link.py 2-7")

    assert link.is_symlink()
    assert seven.read_text() == "one\n"


def test_lowercase_directive_is_accepted(tmp_path, seven):
    edit(tmp_path, "remove_lines foo.py 1-6")

    assert seven.read_text() == "seven\n"


def test_to_data_is_json_facts(tmp_path):
    result = edit(tmp_path, "NEW_FILE a.txt", "1\n2\n")

    data = json.loads(json.dumps(result.to_data()))

    assert data == {
        "path": str(tmp_path / "a.txt"),
        "operation": "NEW_FILE",
        "created": True,
        "lines_added": 2,
        "lines_removed": 0,
        "size": 4,
    }


# concurrent edits and the file's identity

INSERTER = """
import sys
from anges.tools.fileedit import apply_edit
base, writer = sys.argv[1], sys.argv[2]
for i in range(50):
    apply_edit("INSERT_LINES shared.txt -1", f"{writer}-{i}", base_dir=base)
"""


def test_concurrent_edits_from_four_processes_lose_nothing(tmp_path):
    shared = tmp_path / "shared.txt"
    shared.write_text("start\n")
    writers = [subprocess.Popen([sys.executable, "-c", INSERTER, str(tmp_path), f"w{n}"]) for n in range(4)]
    assert [writer.wait(timeout=120) for writer in writers] == [0, 0, 0, 0]

    lines = shared.read_text().splitlines()
    assert lines[0] == "start" and len(lines) == 201
    assert sorted(lines[1:]) == sorted(f"w{n}-{i}" for n in range(4) for i in range(50))
    for n in range(4):  # each writer's lines in its own order
        assert [line for line in lines if line.startswith(f"w{n}-")] == [f"w{n}-{i}" for i in range(50)]
    assert leftovers(tmp_path) == []


def test_an_edit_keeps_hard_links(tmp_path, seven):
    other = tmp_path / "other-name.py"
    os.link(seven, other)
    inode = seven.stat().st_ino

    edit(tmp_path, "REPLACE_LINES foo.py 1-1", "ONE")

    assert seven.stat().st_ino == inode and seven.stat().st_nlink == 2
    assert other.read_text() == seven.read_text() == SEVEN_LINES.replace("one", "ONE", 1)
    assert leftovers(tmp_path) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_an_edit_by_root_keeps_the_owner_group_and_mode(tmp_path, seven):
    os.chown(seven, 4321, 4322)
    seven.chmod(0o640)

    edit(tmp_path, "INSERT_LINES foo.py 0", "zero")
    edit(tmp_path, "NEW_FILE foo.py", "replaced")

    info = seven.stat()
    assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (4321, 4322, 0o640)
    assert seven.read_text() == "replaced\n"


def test_a_dangling_symlink_cannot_create_directories_outside_the_working_directory(tmp_path):
    work, outside = tmp_path / "work", tmp_path / "outside"
    work.mkdir()
    outside.mkdir()
    (work / "link").symlink_to(outside / "made" / "by-link" / "file.txt")

    with pytest.raises(EditError, match="through a symlink, outside the working directory"):
        apply_edit("NEW_FILE link", "x", base_dir=work)

    assert list(outside.iterdir()) == []


def test_a_symlink_may_lead_to_new_directories_inside_the_working_directory(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "real")

    edit(tmp_path, "NEW_FILE alias/sub/new.txt", "inside")

    assert (tmp_path / "real" / "sub" / "new.txt").read_text() == "inside\n"


def test_a_fifo_is_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "pipe")

    with pytest.raises(EditError, match="not a regular file"):
        edit(tmp_path, "INSERT_LINES pipe 0", "x")


def test_a_path_written_outside_the_working_directory_may_still_create_its_directories(tmp_path):
    work, outside = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir()
    (tmp_path / "alias").symlink_to(outside.parent)  # an absolute path the model chose, through a symlink

    apply_edit(f"NEW_FILE {tmp_path / 'alias' / 'elsewhere' / 'deep' / 'f.txt'}", "x", base_dir=work)

    assert (outside / "deep" / "f.txt").read_text() == "x\n"


# the path checked is the path written: no symlink is followed after the check

SWAPPER = """
import os, sys
os.chdir(sys.argv[1])
while True:
    os.symlink(sys.argv[2], "t1"); os.replace("t1", "d")
    os.symlink("real", "t2"); os.replace("t2", "d")
"""


def test_an_edit_refuses_a_path_that_changed_after_it_was_checked(tmp_path):
    work, outside = tmp_path / "work", tmp_path / "outside"
    (work / "real").mkdir(parents=True)
    outside.mkdir()
    (work / "d").symlink_to("real")
    checked = os.path.realpath(work / "d" / "evil.sh")
    (work / "d").unlink()
    (work / "d").symlink_to(outside)  # swapped between the check and the edit

    with pytest.raises(EditError, match="changed after it was checked"):
        apply_edit("NEW_FILE d/evil.sh", "echo pwned", base_dir=work, resolved=checked)

    assert list(outside.iterdir()) == [] and list((work / "real").iterdir()) == []


def test_the_walk_to_a_checked_path_follows_no_symlink(tmp_path):
    from anges.util.paths import open_directory, open_nofollow

    work, outside = tmp_path / "work", tmp_path / "outside"
    (work / "real").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.txt").write_text("KEY MATERIAL\n")
    (work / "real" / "secret.txt").write_text("ordinary\n")
    checked_dir, checked_file = str(work / "real"), str(work / "real" / "secret.txt")
    os.rename(work / "real", work / "gone")
    (work / "real").symlink_to(outside)  # swapped in after the paths were resolved and checked

    with pytest.raises(OSError) as walked:
        open_directory(checked_dir)
    with pytest.raises(OSError):
        open_nofollow(checked_file)
    with pytest.raises(EditError, match="changed after it was checked"):
        apply_edit("REPLACE_LINES real/secret.txt 1-1", "x", base_dir=work, resolved=checked_file)

    assert walked.value.errno in (errno.ENOTDIR, errno.ELOOP)
    assert (outside / "secret.txt").read_text() == "KEY MATERIAL\n"


def test_racing_symlink_swaps_never_let_agent_edits_land_outside(tmp_path):
    from anges.agents import DefaultAgent
    from anges.config.loading import load_config
    from anges.models.scripted import ScriptedModel

    work, outside = tmp_path / "work", tmp_path / "outside"
    (work / "real").mkdir(parents=True)
    outside.mkdir()
    (work / "d").symlink_to("real")
    edits = [{"analysis": "", "reasoning": "r", "actions": [
        {"action_type": "EDIT_FILE", "directive_line": f"NEW_FILE d/evil{n}.sh", "content": "echo pwned"}]}
        for n in range(200)]
    done = {"analysis": "", "reasoning": "r", "actions": [{"action_type": "TASK_COMPLETE", "content": "done"}]}
    swapper = subprocess.Popen([sys.executable, "-c", SWAPPER, str(work), str(outside)])
    try:
        agent = DefaultAgent(inference_func=ScriptedModel([*edits, done]), cmd_init_dir=work, approval="deny",
                             config=load_config(overrides={"safety": {"sandbox": "off"}}))
        stream = agent.run_with_new_request("race")
    finally:
        swapper.kill()
        swapper.wait()

    written = [e for e in stream.events_list if e.type == "edit_file" and "error" not in e.data]
    assert list(outside.iterdir()) == [], "an edit landed outside the working directory"
    assert written and len(list((work / "real").iterdir())) == len(written)


def test_a_link_swapped_while_the_person_reads_the_prompt_does_not_redirect_the_edit(tmp_path):
    from anges.agents import DefaultAgent
    from anges.config.loading import load_config
    from anges.models.scripted import ScriptedModel

    work, outside = tmp_path / "work", tmp_path / "outside"
    (work / "real").mkdir(parents=True)
    outside.mkdir()
    (work / "d").symlink_to("real")
    requests = []

    def swap_then_approve(request):  # what a command left running in the background could do meanwhile
        requests.append(request)
        (work / "d").unlink()
        (work / "d").symlink_to(outside)
        return "allow"

    edit = {"action_type": "EDIT_FILE", "directive_line": "NEW_FILE d/run.sh", "content": "echo pwned"}
    steps = [{"analysis": "", "reasoning": "r", "actions": [edit]},
             {"analysis": "", "reasoning": "r", "actions": [{"action_type": "TASK_COMPLETE", "content": "done"}]}]
    rules = [{"action": "EDIT_FILE", "match": "*.sh", "decision": "ask", "reason": "scripts are reviewed"}]
    agent = DefaultAgent(inference_func=ScriptedModel(steps), cmd_init_dir=work, approval=swap_then_approve,
                         config=load_config(overrides={"safety": {"rules": rules}}))
    stream = agent.run_with_new_request("edit")

    [request] = requests
    assert request.subject == str(work / "real" / "run.sh")  # what the person approved
    assert list(outside.iterdir()) == []
    [event] = [e for e in stream.events_list if e.type == "edit_file"]
    assert "changed after it was checked" in event.content and "the file was not edited" in event.content
