"""The one clipping helper: head and tail around one omission marker, by characters and by lines."""

import re

from anges.util.clipping import clip, clip_lines, clipped, omission, one_line, shorten

MARK = re.compile(r"\n\.\.\. \[(\d+) (characters|bytes) cut\] \.\.\.\n")


def test_a_one_megabyte_line_is_cut_to_the_limit_and_the_marker_counts_what_went():
    text = "y" * 1_000_000
    cut = clip(text, 5000, lines=100)
    marker = MARK.search(cut)
    assert len(cut) <= 5000 and marker is not None
    head, tail = cut[: marker.start()], cut[marker.end():]
    assert set(head + tail) == {"y"} and abs(len(head) - len(tail)) <= 1
    assert int(marker.group(1)) == len(text) - len(head) - len(tail)


def test_many_lines_are_cut_by_lines_keeping_head_and_tail():
    text = "\n".join(f"line {i}" for i in range(1000))
    cut, count = clipped(text, 100_000, lines=10)
    kept = MARK.split(cut)
    assert kept[0].splitlines() == [f"line {i}" for i in range(5)]
    assert kept[-1].splitlines() == [f"line {i}" for i in range(995, 1000)]
    assert count == int(kept[1]) == len(text) - len(kept[0]) - len(kept[-1])


def test_a_cut_by_characters_keeps_whole_lines_where_it_can():
    """A history cut mid-line would split `EXIT CODE: 0 after 0.02 s` from its number (and a replay could not tell
    the time apart from a real difference): the head ends and the tail starts at a line boundary."""
    text = "\n".join(f"EXIT CODE: 0 after 0.0{i % 10} s" for i in range(200))
    for limit in range(300, 400, 7):
        cut, count = clipped(text, limit)
        marker = MARK.search(cut)
        head, tail = cut[: marker.start()], cut[marker.end():]
        assert len(cut) <= limit and int(marker.group(1)) == count == len(text) - len(head) - len(tail)
        assert text.startswith(head + "\n") and text.endswith("\n" + tail), limit
        assert all(re.fullmatch(r"EXIT CODE: 0 after 0\.0\d s", line) for line in (head + "\n" + tail).splitlines())


def test_text_within_both_limits_is_untouched_and_zero_means_no_limit():
    assert clipped("short\ntext", 20, lines=5) == ("short\ntext", 0)
    assert clip("x" * 10_000) == "x" * 10_000
    assert clip("x\n" * 10, 0, lines=0) == "x\n" * 10


def test_a_limit_too_small_for_the_marker_cuts_plainly():
    assert clipped("a" * 50, 20) == ("a" * 20, 30)


def test_every_model_facing_cut_uses_the_same_marker():
    assert MARK.fullmatch(omission(12)) and MARK.fullmatch(omission(7, "bytes"))
    assert MARK.search(clip("z" * 1000, 100)).group(1) == str(1000 - len(MARK.sub("", clip("z" * 1000, 100))))


def test_terminal_lines_keep_their_ends_with_a_marker_of_their_own():
    lines = [str(i) for i in range(30)]
    shown = clip_lines(lines, 8, lambda n: f"<{n} more>")
    assert shown == ["0", "1", "2", "3", "<22 more>", "26", "27", "28", "29"]
    assert clip_lines(lines[:9], 8, lambda n: "never") == lines[:9]  # the marker would take the line it saves


def test_labels_are_shortened_with_an_ellipsis_within_the_limit():
    assert shorten("abcdef", 4) == "abc…" and shorten("abc", 4) == "abc"
    assert one_line("  a\n\tb   c  ", 10) == "a b c"
    assert len(one_line("word " * 100, 80)) == 80
