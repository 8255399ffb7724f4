"""A trial's output as the user reads it in its logs: lines split where a terminal would end them."""

from __future__ import annotations

from det_airflow.trial_process import LineSplitter


def split(chunks: list[bytes], *, max_line: int | None = None) -> list[str]:
    lines: list[str] = []
    splitter = LineSplitter("stdout", lambda line, stream: lines.append(line), max_line=max_line)
    for chunk in chunks:
        splitter.feed(chunk)
    splitter.close()
    return lines


def test_chunks_are_joined_and_progress_bars_split() -> None:
    chunks = [b"fir", b"st\nsec", b"ond\r", b"\n10%\r20%\r", "é\n".encode()[:1], "é\n".encode()[1:], b"tail"]

    assert split(chunks) == ["first", "second", "10%", "20%", "é", "tail"]


def test_a_carriage_return_at_the_end_ends_the_last_line_without_an_empty_one() -> None:
    assert split([b"a\r\n", b"b\r"]) == ["a", "b"]
    assert split([b"\r\r"]) == []


def test_a_line_longer_than_max_line_comes_in_pieces() -> None:
    assert split([b"abcdefg", b"h\nij"], max_line=3) == ["abc", "def", "gh", "ij"]


def test_the_stream_is_named_with_each_line() -> None:
    seen: list[tuple[str, str]] = []
    splitter = LineSplitter("stderr", lambda line, stream: seen.append((line, stream)))
    splitter.feed(b"oops\n")
    splitter.close()

    assert seen == [("oops", "stderr")]
