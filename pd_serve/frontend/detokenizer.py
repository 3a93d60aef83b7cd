"""Streamed text for the HTTP front door: token ids in, text deltas out.

Decoding a token alone is wrong for byte-level and sentencepiece tokenizers (a character may
span tokens; a leading space depends on the previous token), so each step decodes a short
window and emits only what became stable, holding back an incomplete UTF-8 sequence (U+FFFD)
until the next token completes it (the method of HF text-generation-inference and vLLM).
"""
from __future__ import annotations

from typing import Protocol, Sequence

REPLACEMENT_CHAR = "\ufffd"


class Tokenizer(Protocol):
    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = ...) -> str: ...


class IncrementalDetokenizer:
    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer = tokenizer
        self.token_ids: list[int] = []
        self.emitted = ""       # all text handed out so far
        self._prefix_offset = 0  # window start: tokens before it never change the text again
        self._read_offset = 0    # tokens up to here are already in `emitted`

    def add(self, token_ids: Sequence[int]) -> str:
        """Append tokens; return the text that is now stable (may be empty)."""
        self.token_ids.extend(token_ids)
        window = self.token_ids[self._prefix_offset:]
        prefix = self._decode(self.token_ids[self._prefix_offset:self._read_offset])
        text = self._decode(window)
        if len(text) <= len(prefix) or text.endswith(REPLACEMENT_CHAR):
            return ""
        delta = text[len(prefix):]
        self._prefix_offset, self._read_offset = self._read_offset, len(self.token_ids)
        self.emitted += delta
        return delta

    def finish(self, full_text: str | None = None) -> str:
        """The rest of the text at the end. With `full_text` (the router's decode of all tokens)
        the concatenated deltas equal it whenever what was emitted is a prefix of it."""
        if full_text is None:
            full_text = self._decode(self.token_ids)
        if full_text.startswith(self.emitted):
            delta = full_text[len(self.emitted):]
        else:  # windowed decoding differed from the full decode (rare): never repeat text
            delta = ""
        self.emitted += delta
        return delta

    def _decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True) if ids else ""
