"""Streamed text: deltas concatenate to the full decode, and a character split across tokens
is held back until it is complete (never a U+FFFD in the stream)."""
from __future__ import annotations

from pd_serve.frontend.detokenizer import IncrementalDetokenizer

from .frontend_fakes import ByteTokenizer

TEXT = "héllo wörld ✓ done"


def test_deltas_concatenate_to_the_text_one_token_at_a_time():
    d = IncrementalDetokenizer(ByteTokenizer())
    deltas = [d.add([b]) for b in TEXT.encode()]
    assert "".join(deltas) + d.finish(TEXT) == TEXT
    assert not any("\ufffd" in x for x in deltas)


def test_a_split_character_waits_for_its_last_byte():
    d = IncrementalDetokenizer(ByteTokenizer())
    first, second = "é".encode()
    assert d.add([ord("a")]) == "a"
    assert d.add([first]) == ""        # half a character: nothing yet
    assert d.add([second]) == "é"


def test_several_tokens_at_once():
    d = IncrementalDetokenizer(ByteTokenizer())
    data = TEXT.encode()
    out = d.add(list(data[:5])) + d.add(list(data[5:]))
    assert out + d.finish(TEXT) == TEXT


def test_finish_flushes_what_was_held_back():
    d = IncrementalDetokenizer(ByteTokenizer())
    assert d.add([ord("x")]) == "x"
    assert d.add(["✓".encode()[0]]) == ""  # ends inside a three-byte character
    assert d.finish() == "\ufffd"        # without the full text: the decode as it stands
    assert d.emitted == "x\ufffd"


def test_finish_never_repeats_text_when_the_full_text_disagrees():
    d = IncrementalDetokenizer(ByteTokenizer())
    d.add(list(b"abc"))
    assert d.finish("xyz") == ""
