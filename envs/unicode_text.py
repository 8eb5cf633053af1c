"""A Gymnasium text space that holds any Unicode text, for envs whose observations are problem statements and
program output in any language ("Écrivez la réponse — 分数で").

Gymnasium's `Text` space holds only the characters of a finite charset, and an env must return observations
inside its space (`check_env` asserts it). The math envs first used ASCII plus a few math symbols and escaped
everything else to escapes such as `\\u00e9`, so a French or Japanese problem, or a program printing one, reached the model as
escapes it cannot read. Every alprl tokenizer is byte-level (any string round-trips), so nothing downstream needs
the restriction: `UnicodeText` contains every `str` within its length bounds that UTF-8 can encode (no lone
surrogates, which no tokenizer accepts). Its charset is only what `sample()` draws from.
"""

from __future__ import annotations

import string
from typing import Any

from gymnasium import spaces

SAMPLE_CHARSET = string.printable + "×÷·√π∞≤≥≠≈±−²³éèàçüñßøÉ—–“”‘’…€£¥分数答案です¿¡"
"""What `UnicodeText.sample()` draws from: ASCII, math symbols, accented letters, punctuation, CJK."""


def utf8_clean(text: str) -> str:
    """`text` with each lone surrogate (which UTF-8 cannot encode) replaced by U+FFFD."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "".join("\ufffd" if "\ud800" <= ch <= "\udfff" else ch for ch in text)
    return text


class UnicodeText(spaces.Text):
    """`Text(max_length, min_length=...)` over all of Unicode: contains any UTF-8-encodable `str` of a length in
    bounds; samples from `SAMPLE_CHARSET`."""

    def __init__(self, max_length: int, *, min_length: int = 0, seed: Any = None):
        super().__init__(max_length, min_length=min_length, charset=SAMPLE_CHARSET, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length and utf8_clean(x) is x

    def __repr__(self) -> str:
        return f"UnicodeText({self.min_length}, {self.max_length})"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, UnicodeText) and (self.min_length, self.max_length) == (other.min_length,
                                                                                        other.max_length)
