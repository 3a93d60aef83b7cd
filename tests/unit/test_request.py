"""Request validation: the one definition of a bad request, shared by every front door."""
from __future__ import annotations

import pytest

from pd_serve.request import InvalidRequestError, check_against_model, make_request


@pytest.mark.parametrize("kwargs, message", [
    ({"prompt": ""}, "prompt is empty"),
    ({"prompt_token_ids": []}, "prompt_token_ids is empty"),
    ({}, "exactly one of prompt"),
    ({"prompt": "a", "prompt_token_ids": [1]}, "exactly one of prompt"),
    ({"prompt": 5}, "prompt must be a string"),
    ({"prompt_token_ids": "abc"}, "must be a list of integers"),
    ({"prompt_token_ids": [1, 2.5]}, "must be integers, got 2.5"),
    ({"prompt_token_ids": [1, True]}, "must be integers, got True"),
    ({"prompt": "a", "max_tokens": 0}, "max_tokens must be an integer >= 1, got 0"),
    ({"prompt": "a", "max_tokens": "3"}, "max_tokens must be an integer"),
    ({"prompt": "a", "temperature": -0.1}, "temperature must be a number >= 0"),
    ({"prompt": "a", "route": "fast"}, "unknown route 'fast'; allowed: auto, colocated, disaggregated"),
    ({"prompt": "a", "top_p": 0}, "top_p must be a number in"),
    ({"prompt": "a", "ignore_eos": "yes"}, "ignore_eos must be a boolean"),
])
def test_bad_requests_are_named(kwargs, message):
    with pytest.raises(InvalidRequestError, match=message):
        make_request(**kwargs)


def test_a_good_request_keeps_its_fields():
    r = make_request(prompt_token_ids=[1, 2, 3], max_tokens=4, temperature=0.5, route="colocated")
    assert r.prompt_token_ids == (1, 2, 3) and r.route == "colocated"
    assert r.sampling_params()["max_tokens"] == 4


def test_model_checks_vocabulary_and_length():
    check_against_model([0, 258], 4, vocab_size=259, max_model_len=16)
    with pytest.raises(InvalidRequestError, match=r"token id 259 is outside the vocabulary \[0, 259\)"):
        check_against_model([1, 259], 4, vocab_size=259, max_model_len=16)
    with pytest.raises(InvalidRequestError, match=r"token id -1 is outside"):
        check_against_model([-1], 4, vocab_size=259, max_model_len=16)
    with pytest.raises(InvalidRequestError, match="max_model_len is 16, so at most 15"):
        check_against_model(list(range(16)), 1, vocab_size=259, max_model_len=16)
    with pytest.raises(InvalidRequestError, match="exceeds max_model_len 16"):
        check_against_model(list(range(10)), 7, vocab_size=259, max_model_len=16)
