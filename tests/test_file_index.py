"""The project's files for `@` mentions: .gitignore rules as git reads them (nested, negated, folders), .git and
hidden places left out, links listed but never followed; the fuzzy search's order."""

import os

from anges.util.file_index import FileIndex, project_files


def test_gitignore_rules_nested_and_negated_and_folders_are_honoured(tmp_path):
    for path in ("app.py", "debug.log", "keep.log", "build/out.js", "src/main.py", "src/gen/big.py", "src/notes.tmp",
                 ".git/config", "docs/.gitignore", "docs/guide.md", "docs/draft.md"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("x")
    (tmp_path / ".gitignore").write_text("*.log\n!keep.log\nbuild/\n*.tmp\n")
    (tmp_path / "src" / ".gitignore").write_text("gen/\n")
    (tmp_path / "docs" / ".gitignore").write_text("draft.md\n")
    assert sorted(project_files(str(tmp_path))) == [".gitignore", "app.py", "docs/.gitignore", "docs/guide.md",
                                                    "keep.log", "src/.gitignore", "src/main.py"]


def test_a_hidden_folder_is_not_listed_and_a_link_to_a_folder_is_not_followed(tmp_path):
    (tmp_path / "work" / "secret").mkdir(parents=True)
    (tmp_path / "work" / "secret" / "key").write_text("x")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "far.txt").write_text("x")
    (tmp_path / "work" / "elsewhere").symlink_to(tmp_path / "outside")
    (tmp_path / "work" / "a.txt").write_text("x")
    hidden = str(tmp_path / "work" / "secret")
    assert project_files(str(tmp_path / "work"), skip=lambda path: path == hidden) == ["a.txt", "elsewhere"]


def test_the_fuzzy_search_puts_the_name_first_then_the_path_then_scattered_letters(tmp_path):
    index = FileIndex(["lib/tokenizer_test.py", "src/tokenizer.py", "tok/enizer.py", "docs/take_one_key.md",
                       "README.md"])
    assert index.search("tokenizer") == ["src/tokenizer.py", "lib/tokenizer_test.py", "tok/enizer.py"]
    assert index.search("tknz") == ["src/tokenizer.py", "lib/tokenizer_test.py", "tok/enizer.py"]
    assert index.search("tk") == ["src/tokenizer.py", "docs/take_one_key.md", "lib/tokenizer_test.py",
                                  "tok/enizer.py"]
    assert index.search("TKNZ") == index.search("tknz"), "any case"
    assert os.sep == "/" and index.search("zzz") == []
