"""The answer parser: the last "Answer: N", range-checked, failures explicit, rationale kept."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from balms.agents.parsing import parse_answer

# Prose without any "answer" word, digits allowed (rationales cite numbers).
prose = st.text(alphabet=st.sampled_from(list("abcdefghijklmnopqrstuvwxyz .,;\n0123456789()%")),
                max_size=200).filter(lambda s: "answer" not in s.lower())
scales = st.sampled_from([(1, 5), (0, 3), (0, 6), (1, 10)])


@pytest.mark.parametrize("text,expected", [
    ("Answer: 3", 3),
    ("**Answer:** 3", 3),
    ("**Answer**: 4", 4),
    ("Answer: 3/5", 3),
    ("answer: 2 out of 5", 2),
    ("Final answer: 3", 3),
    ("Final Answer: **5**", 5),
    ("so the answer is 3.", 3),
    ("The answer is **4**", 4),
    ("Answer = 1", 1),
    ("Answer: I estimate 2", 2),
    ("Sleep fell to 310 minutes on day 12.\nAnswer: 4\n", 4),
    ("Answer: 2\nOn reflection...\nAnswer: 5", 5),
])
def test_accepted_forms(text, expected):
    got = parse_answer(text, 1, 5)
    assert got.value == expected and got.error is None


@pytest.mark.parametrize("text,needle", [
    ("Answer: 226", "out of range"),
    ("Answer: 0", "out of range"),
    ("Answer: 3.5", "non-integer"),
    ("Answer: 3-4", "range"),
    ("I think stress is moderate.", "no 'Answer"),
    ("Answer: <int>", "no 'Answer"),
    ("", "no 'Answer"),
])
def test_failures_are_explicit(text, needle):
    got = parse_answer(text, 1, 5)
    assert got.value is None
    assert needle in got.error


def test_rationale_is_text_before_answer_line():
    text = "Step 1: sleep dropped from 420 to 300 minutes.\nStep 2: resting HR rose.\n**Answer:** 4"
    got = parse_answer(text, 1, 5)
    assert got.value == 4
    assert got.rationale == "Step 1: sleep dropped from 420 to 300 minutes.\nStep 2: resting HR rose."


def test_none_text_is_a_parse_failure():
    assert parse_answer(None, 1, 5).value is None


@given(rationale=prose, scale=scales, data=st.data())
@settings(max_examples=300, deadline=None)
def test_in_range_answer_after_prose_is_parsed(rationale, scale, data):
    lo, hi = scale
    n = data.draw(st.integers(lo, hi))
    form = data.draw(st.sampled_from(["Answer: {n}", "**Answer:** {n}", "Final answer: {n}",
                                      "Answer: {n}/{hi}", "The answer is {n}."]))
    text = rationale + "\n" + form.format(n=n, hi=hi)
    got = parse_answer(text, lo, hi)
    assert got.value == n, (text, got)
    assert got.rationale == rationale.strip()


@given(rationale=prose, scale=scales, n=st.integers(-1000, 1000))
@settings(max_examples=300, deadline=None)
def test_out_of_range_is_none_with_error(rationale, scale, n):
    lo, hi = scale
    got = parse_answer(f"{rationale}\nAnswer: {n}", lo, hi)
    if lo <= n <= hi:
        assert got.value == n
    else:
        assert got.value is None and "out of range" in got.error


@given(first=st.integers(1, 5), last=st.integers(1, 5), middle=prose)
@settings(max_examples=200, deadline=None)
def test_last_answer_wins(first, last, middle):
    got = parse_answer(f"Answer: {first}\n{middle}\nAnswer: {last}", 1, 5)
    assert got.value == last


@given(text=prose, scale=scales)
@settings(max_examples=300, deadline=None)
def test_text_without_answer_never_parses(text, scale):
    got = parse_answer(text, *scale)
    assert got.value is None and got.error and got.rationale == text.strip()


def test_out_of_range_answers_are_read_back_for_counting():
    from balms.agents.parsing import out_of_range_value

    assert out_of_range_value(parse_answer("Answer: 0", 1, 5).error) == 0
    assert out_of_range_value(parse_answer("Answer: 226", 1, 5).error) == 226
    assert out_of_range_value(parse_answer("Answer: -1", 0, 3).error) == -1
    for other in (parse_answer("no answer here", 1, 5).error, parse_answer("Answer: 3.5", 1, 5).error, None):
        assert out_of_range_value(other) is None
    assert parse_answer("Answer: 3", 1, 5).error is None
