"""Untrusted text for people, models and JSON: nothing hidden reaches a person, nothing active a terminal."""

from __future__ import annotations

import json
import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fmdoctor.safety.text import dumps_json, strip_invisible, visible

HIDDEN = [
    ("\u202e", "\\u202e"),  # right-to-left override (Trojan Source)
    ("\u2066", "\\u2066"),  # left-to-right isolate
    ("\u200b", "\\u200b"),  # zero-width space
    ("\ufeff", "\\ufeff"),  # zero-width no-break space
    ("\U000e0041", "\\U000e0041"),  # tag letter A (invisible ASCII smuggling)
    ("\ufe0f", "\\ufe0f"),  # variation selector
    ("\u2028", "\\u2028"),  # line separator
    ("\x1b", "\\x1b"),  # ESC: starts a terminal escape sequence
    ("\x9b", "\\x9b"),  # CSI, the 8-bit form
    ("\r", "\\x0d"),  # carriage return: overwrites the line on a terminal
    ("\x08", "\\x08"),
    ("\x7f", "\\x7f"),
    ("\ud800", "\\ud800"),  # a lone surrogate (JSON can carry one) cannot be written to a terminal at all
]


@pytest.mark.parametrize(("char", "shown"), HIDDEN)
def test_visible_shows_hidden_and_control_characters_as_escapes(char, shown):
    assert visible(f"step-1{char}00") == f"step-1{shown}00"


def test_visible_keeps_lines_unless_asked_not_to():
    assert visible("a\n\tb") == "a\n\tb"
    assert visible("a\n\tb", lines=False) == "a\\x0a\\x09b"


def test_visible_keeps_every_visible_character():
    text = "Knoten überlastet: 東京 ✓ — 🚀 ⟨evidence⟩"
    assert visible(text) == text and visible(text, lines=False) == text


def test_an_escape_sequence_cannot_reach_the_terminal():
    shown = visible("ckpt\x1b]8;;https://evil\x07click\x1b]8;;\x07\x1b[2J")
    assert "\x1b" not in shown and "\x07" not in shown and shown.startswith("ckpt\\x1b]8;;")


def test_strip_invisible_removes_what_visible_shows():
    assert strip_invisible("gpu-1\u202e\x1b[31m\U000e0041 idle") == "gpu-1 idle"


@given(st.text())
def test_nothing_hidden_survives_visible_and_json_is_exact(text):
    shown = visible(text)
    assert all(c in "\n\t" or unicodedata.category(c) not in ("Cc", "Cf", "Zl", "Zp") for c in shown)
    encoded = dumps_json({"key": text})
    assert json.loads(encoded) == {"key": text}
    assert not any(c == "\x1b" or c == "\x7f" or 0x202A <= ord(c) <= 0x202E or 0xE0000 <= ord(c) <= 0xE007F
                   for c in encoded)


def test_json_keeps_readable_unicode_and_escapes_only_what_hides():
    text = dumps_json({"name": "東京\u202egpu"}, indent=2)
    assert "東京\\u202egpu" in text and json.loads(text)["name"] == "東京\u202egpu"
    assert dumps_json({"astral": "\U000e0041"}) == '{"astral": "\\udb40\\udc41"}'
