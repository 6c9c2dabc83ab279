"""Token counts: estimated by kind of text and learned from the counts servers report, or counted exactly with a
server's own tokenizer, one piece of the prompt at a time.

Text is measured in four kinds, each with its own rate: words (letters, spaces, anything else), symbols (ASCII
punctuation, dense in command output and code), digits (many tokenizers read numbers digit by digit) and the
UTF-8 bytes of characters beyond ASCII. Each rate starts on the safe side (more tokens than most tokenizers make)
and is fitted to the counts reported so far, so a prompt full of numbers corrects the digits' rate, not the
instructions' (docs/models.md).
"""

from __future__ import annotations

import logging
import math
import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable

from anges.util.waiting import wait_for

logger = logging.getLogger(__name__)

KINDS = ("words", "symbols", "digits", "wide")
PRIOR = (1 / 3.3, 1 / 1.2, 1.0, 0.5)
"""Tokens per character of each kind (wide: per UTF-8 byte) before any count: on the safe side of the tokenizers of
common local models (SmolLM2, Qwen, Llama): about 3.4 characters a token on anges' instructions, a token per digit."""
LEAST = (1 / 6.0, 1 / 4.0, 1 / 3.5, 1 / 4.0)
"""The fewest tokens per character any ordinary tokenizer gives each kind: the floor of a fitted rate, and what a
count must stay above not to look like a prompt the server cut."""
MOST = (1.0, 1.0, 1.5, 1.0)
"""The most tokens per character of each kind: the ceiling of a fitted rate (a digit's may be more than one: the
space before a short number is often a token of its own)."""
PRIOR_WEIGHT = 2_000
"""The prior counts as much as this many characters of each kind seen at its rate."""
DECAY = 0.9
"""What an older count still weighs when a new one comes (the fit follows the run)."""
SAFETY = 1.08
"""Estimates are this much above the fitted rates: they err high."""
CUT_MARGIN = 1.35
"""A reported count this far below the fitted estimate (of the kinds seen enough) means the server cut the prompt."""
MIN_SAMPLE_CHARS = 2_000
"""Shorter prompts neither count as cut nor as flat (a chat template's few tokens dominate)."""
_SYMBOLS = bytes(range(33, 48)) + bytes(range(58, 65)) + bytes(range(91, 97)) + bytes(range(123, 127))
_DIGITS = b"0123456789"
_WIDE = bytes(range(128, 256))


def features(text: str) -> tuple[int, int, int, int]:
    """The characters of each kind in `text`: words, symbols, digits, and the UTF-8 bytes of non-ASCII characters."""
    data = text.encode("utf-8", "replace")
    symbols = len(data) - len(data.translate(None, _SYMBOLS))
    digits = len(data) - len(data.translate(None, _DIGITS))
    wide = len(data) - len(data.translate(None, _WIDE))
    return len(data) - wide - symbols - digits, symbols, digits, wide


class TokenGauge:
    """Token counts estimated from the kinds of characters in a text, erring high, and fitted to the counts servers
    report (a ridge regression of tokens on the four kinds, pulled towards the safe prior)."""

    def __init__(self) -> None:
        self._gram = [[0.0] * 4 for _ in range(4)]
        self._moment = [0.0] * 4
        self._seen = [0.0] * 4
        self._weights = PRIOR
        self.counts = 0
        """Counts taken in so far."""
        self._lock = threading.Lock()

    @property
    def rates(self) -> dict[str, float]:
        """Characters per token of each kind as estimates use them now (wide: bytes per token)."""
        return {kind: 1 / (weight * SAFETY) for kind, weight in zip(KINDS, self._weights)}

    def estimate(self, text: str) -> int:
        """The estimated tokens of `text` (on the high side)."""
        return self.tokens_of(features(text))

    def tokens_of(self, counts: tuple[int, ...]) -> int:
        return math.ceil(sum(c * w for c, w in zip(counts, self._weights)) * SAFETY)

    def chars(self, tokens: int, sample: str = "") -> int:
        """The characters that fit in `tokens` tokens: at the rate of `sample` (text like what is to fit), else at
        the rate of words."""
        estimated = self.estimate(sample) if len(sample) >= 200 else 0
        rate = len(sample) / estimated if estimated else 1 / (self._weights[0] * SAFETY)
        return int(tokens * rate)

    def observe(self, text: str, tokens: int, exact: bool = False) -> None:
        """Take in a count a server reported (or its tokenizer made, `exact`) for `text`; a count no tokenizer would
        give is left out."""
        counts = features(text)
        if tokens <= 0 or (not exact and (len(text) < MIN_SAMPLE_CHARS or self._below_least(counts, tokens))):
            return
        with self._lock:
            for i in range(4):
                self._moment[i] = self._moment[i] * DECAY + counts[i] * tokens
                self._seen[i] = self._seen[i] * DECAY + counts[i]
                for j in range(4):
                    self._gram[i][j] = self._gram[i][j] * DECAY + counts[i] * counts[j]
            self._weights = self._fit()
            self.counts += 1

    def cut_short(self, text: str, tokens: int) -> bool:
        """Whether `tokens`, reported for `text`, is too few: the server read less than was sent. Only words are
        taken at their fitted rate (once seen enough); the other kinds, whose rates differ most between tokenizers,
        at their least, so a dense text read whole never counts as cut."""
        if len(text) < MIN_SAMPLE_CHARS or tokens <= 0:
            return False
        counts = features(text)
        if self._below_least(counts, tokens):
            return True
        words = self._weights[0] if self._seen[0] >= PRIOR_WEIGHT and self.counts else LEAST[0]
        return tokens * CUT_MARGIN < counts[0] * words + sum(c * least for c, least in zip(counts[1:], LEAST[1:]))

    @staticmethod
    def _below_least(counts: tuple[int, ...], tokens: int) -> bool:
        return tokens * 1.25 < sum(c * least for c, least in zip(counts, LEAST))

    def _fit(self) -> tuple[float, float, float, float]:
        prior = PRIOR_WEIGHT * PRIOR_WEIGHT
        matrix = [[self._gram[i][j] + (prior if i == j else 0.0) for j in range(4)] + [
            self._moment[i] + prior * PRIOR[i]] for i in range(4)]
        solved = _solve(matrix)
        return tuple(min(max(w, low), high) for w, low, high in zip(solved, LEAST, MOST))  # type: ignore[return-value]


def _solve(matrix: list[list[float]]) -> list[float]:
    """The solution of a small linear system given as its augmented matrix (Gaussian elimination, partial pivots)."""
    size = len(matrix)
    for col in range(size):
        pivot = max(range(col, size), key=lambda row: abs(matrix[row][col]))
        matrix[col], matrix[pivot] = matrix[pivot], matrix[col]
        for row in range(col + 1, size):
            factor = matrix[row][col] / matrix[col][col]
            for k in range(col, size + 1):
                matrix[row][k] -= factor * matrix[col][k]
    solution = [0.0] * size
    for row in range(size - 1, -1, -1):
        rest = sum(matrix[row][k] * solution[k] for k in range(row + 1, size))
        solution[row] = (matrix[row][size] - rest) / matrix[row][row]
    return solution


PIECE_CHARS = 2_000
"""Paragraphs are counted in pieces of up to about this many characters (a piece is counted once, then remembered)."""
MAX_PIECE_CHARS = 16_000
CACHE_CHARS = 4_000_000
"""The most characters of counted pieces kept (the least recently used go first)."""


def pieces(text: str) -> list[str]:
    """`text` in pieces that end at a blank line: a piece ends after a paragraph chosen by its own content (or once
    it is PIECE_CHARS long), so text that is the same as before gives the same pieces wherever it now starts."""
    result: list[str] = []
    start = end = 0
    while end < len(text):
        stop = text.find("\n\n", end)
        paragraph_end = len(text) if stop < 0 else stop + 2
        if paragraph_end - start > MAX_PIECE_CHARS:
            paragraph_end = start + MAX_PIECE_CHARS
        paragraph = text[end:paragraph_end]
        end = paragraph_end
        if end - start >= PIECE_CHARS or (end - start >= 200 and zlib.crc32(paragraph.encode()) % 4 == 0):
            result.append(text[start:end])
            start = end
    if start < len(text):
        result.append(text[start:])
    return result


class PieceCounter:
    """A text's tokens by a server's tokenizer: the sum of its pieces' counts (and a token for each seam, where
    the whole could tokenize differently), each piece sent once; the counts also teach `gauge`."""

    def __init__(self, count: Callable[[str], int], gauge: TokenGauge | None = None, name: str = "the server"):
        self._count = count
        self.gauge = gauge
        self.name = name
        self.failed = ""
        """Why the tokenizer stopped being asked (empty: it works)."""
        self.sent = 0
        """Pieces sent to the tokenizer so far."""
        self._cache: OrderedDict[str, int] = OrderedDict()
        self._cached_chars = 0
        self._lock = threading.Lock()

    def count(self, text: str, stop: Callable[[], bool] = lambda: False) -> int | None:
        """The tokens of `text`; None once the tokenizer has failed (or when `stop()` interrupts the count)."""
        total = 0
        parts = pieces(text)
        for piece in parts:
            tokens = self._known(piece)
            if tokens is None:
                if self.failed or stop():
                    return None
                tokens = self._ask(piece, stop)
                if tokens is None:
                    return None
            total += tokens
        return total + max(len(parts) - 1, 0)

    def _known(self, piece: str) -> int | None:
        with self._lock:
            tokens = self._cache.get(piece)
            if tokens is not None:
                self._cache.move_to_end(piece)
            return tokens

    def _ask(self, piece: str, stop: Callable[[], bool]) -> int | None:
        answer: dict[str, int | BaseException] = {}
        done = threading.Event()

        def ask() -> None:  # on a thread of its own: a stop does not wait for the server (its timeout is seconds)
            try:
                answer["tokens"] = self._count(piece)
            except Exception as exc:  # noqa: BLE001  (handed to the waiting thread)
                answer["error"] = exc
            finally:
                done.set()

        threading.Thread(target=ask, name="anges-tokens", daemon=True).start()
        if wait_for(done.wait, stop) != "done":
            return None  # stopped: this prompt is not sent; the tokenizer has not failed
        tokens = answer.get("tokens")
        if not isinstance(tokens, int):  # any failure of the tokenizer: estimates take over, and it is said once
            exc = answer.get("error")
            self.failed = f"{type(exc).__name__}: {exc}"
            logger.warning("%s stopped counting tokens (%s): prompts are sized by the estimate", self.name,
                           self.failed)
            return None
        self.sent += 1
        if self.gauge is not None:
            self.gauge.observe(piece, tokens, exact=True)
        with self._lock:
            self._cache[piece] = tokens
            self._cached_chars += len(piece)
            while self._cached_chars > CACHE_CHARS and self._cache:
                old, _ = self._cache.popitem(last=False)
                self._cached_chars -= len(old)
        return tokens
