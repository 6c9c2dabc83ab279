"""The retry policy on its own (the providers' use of it is tested through the SDKs), and pricing."""

import email.utils

import pytest

from anges.config.types import Price, RetryConfig
from anges.exceptions import ModelError, ModelSetupError
from anges.models.base import Usage
from anges.models.pricing import BUILT_IN, cost, price_for
from anges.models.retry import (
    Failure,
    backoff,
    call_with_retry,
    retry_after_seconds,
    transport_failure,
)


class FakeTime:
    """A clock that only moves when someone sleeps."""

    def __init__(self):
        self.now = 0.0
        self.waits = []

    def sleep(self, seconds):
        self.waits.append(seconds)
        self.now += seconds

    def clock(self):
        return self.now


def always(failure):
    def attempt():
        raise RuntimeError("attempt failed")
    return attempt, (lambda exc: failure)


@pytest.mark.parametrize(("headers", "seconds"), [
    ({"Retry-After": "3"}, 3.0),
    ({"retry-after": "1.5"}, 1.5),
    ({"RETRY-AFTER-MS": "1500"}, 1.5),
    ({"Retry-After": "-4"}, 0.0),
    ({"Retry-After": "soon"}, None),
    ({}, None),
    (None, None),
])
def test_retry_after_in_seconds(headers, seconds):
    assert retry_after_seconds(headers) == seconds


def test_retry_after_as_an_http_date():
    now = 1_700_000_000.0
    header = email.utils.formatdate(now + 10, usegmt=True)
    assert retry_after_seconds({"Retry-After": header}, now=now) == pytest.approx(10, abs=1)
    assert retry_after_seconds({"Retry-After": email.utils.formatdate(now - 60, usegmt=True)}, now=now) == 0.0


def test_backoff_doubles_with_jitter_up_to_the_cap():
    config = RetryConfig(initial_backoff=1, max_backoff=5)
    assert [backoff(n, config, rand=lambda: 1.0) for n in (1, 2, 3, 4)] == [1, 2, 4, 5]
    assert [backoff(n, config, rand=lambda: 0.0) for n in (1, 2, 3, 4)] == [0.5, 1, 2, 2.5]


def test_retries_stop_at_max_attempts():
    time = FakeTime()
    attempt, classify = always(Failure.transient("server error (500)", 500))

    with pytest.raises(ModelError, match=r"m: gave up after 4 attempts in \d+\.\ds; last: server error \(500\)"):
        call_with_retry(attempt, classify, RetryConfig(4, 1000, 1, 60), label="m", sleep=time.sleep, clock=time.clock)
    assert len(time.waits) == 3


def test_retries_stop_before_passing_max_total_seconds():
    time = FakeTime()
    attempt, classify = always(Failure.transient("overloaded (503)", 503, retry_after=4))

    with pytest.raises(ModelError) as caught:
        call_with_retry(attempt, classify, RetryConfig(100, 10, 1, 60), sleep=time.sleep, clock=time.clock)
    assert time.waits == [4, 4]  # a third wait would end at 12 s
    assert "gave up after 3 attempts in 8.0s" in str(caught.value)
    assert "max_total_seconds" in str(caught.value)
    assert isinstance(caught.value.__cause__, RuntimeError)


def test_success_after_failures_returns_the_value():
    time = FakeTime()
    outcomes = iter([RuntimeError("a"), RuntimeError("b"), "done"])

    def attempt():
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    result = call_with_retry(attempt, lambda exc: Failure.transient("timed out"), RetryConfig(5, 60, 1, 60),
                             sleep=time.sleep, clock=time.clock)
    assert result == "done" and len(time.waits) == 2


def test_a_setup_failure_is_raised_at_once():
    time = FakeTime()
    attempt, classify = always(Failure.setup("rejected the API key (401). Check OPENAI_API_KEY.", 401))

    with pytest.raises(ModelSetupError, match="^m: rejected the API key"):
        call_with_retry(attempt, classify, RetryConfig(), label="m", sleep=time.sleep, clock=time.clock)
    assert time.waits == []


def test_an_unclassified_exception_passes_through():
    def attempt():
        raise KeyError("a bug")

    with pytest.raises(KeyError):
        call_with_retry(attempt, lambda exc: None, RetryConfig(), sleep=FakeTime().sleep)


def test_transport_failures_are_found_in_the_cause_chain():
    try:
        try:
            raise ConnectionResetError("peer reset")
        except ConnectionResetError as inner:
            raise ValueError("wrapped") from inner
    except ValueError as exc:
        wrapped = exc
    assert transport_failure(wrapped).retryable
    assert transport_failure(TimeoutError()).reason == "timed out"
    assert transport_failure(ValueError("no")) is None


PRICES = {
    "gpt-4.1": Price(input=2.0, output=8.0, cached_input=0.5),
    "deepseek-chat": Price(input=0.27, output=1.1),
}


def test_cost_prices_cached_input_at_its_own_rate():
    usage = Usage(input_tokens=1_000_000, output_tokens=100_000, cached_tokens=400_000)
    assert cost(usage, "gpt-4.1", PRICES) == pytest.approx(0.6 * 2.0 + 0.4 * 0.5 + 0.1 * 8.0)


def test_cached_input_without_its_own_rate_costs_as_input():
    usage = Usage(input_tokens=1_000_000, output_tokens=0, cached_tokens=500_000)
    assert cost(usage, "deepseek-chat", PRICES) == pytest.approx(0.27)


@pytest.mark.parametrize("model_id", ["gpt-4.1-2025-04-14", "openai:gpt-4.1", "openai/gpt-4.1", "gpt-4.1"])
def test_snapshots_prefixes_and_paths_find_the_price(model_id):
    assert price_for(model_id, PRICES) is PRICES["gpt-4.1"]


def test_unknown_prices_or_usage_give_none():
    assert cost(Usage(10, 10), "my-own-model", PRICES) is None
    assert cost(Usage(10, 10), "qwen2.5-coder", {}) is None
    assert cost(None, "gpt-4.1", PRICES) is None


@pytest.mark.parametrize("model_id", ["gpt-4.1-mini", "openai:gpt-4.1-mini-2025-04-14", "claude-sonnet-4-5-20250929",
                                      "anthropic/claude-sonnet-4.5", "gemini-2.5-flash", "deepseek-chat"])
def test_well_known_models_have_a_built_in_price(model_id):
    usage = Usage(input_tokens=1_000_000, output_tokens=1_000_000)
    assert cost(usage, model_id, {}) == pytest.approx(BUILT_IN[price_key(model_id)].input
                                                       + BUILT_IN[price_key(model_id)].output)


def test_a_configured_price_wins_over_the_built_in_one():
    usage = Usage(input_tokens=1_000_000, output_tokens=0)
    assert cost(usage, "gpt-4.1", {"gpt-4.1": Price(input=1.0, output=4.0)}) == pytest.approx(1.0)
    assert cost(usage, "gpt-4.1", {}) == pytest.approx(2.0), "what OpenAI's page says (dated in pricing.py)"


def price_key(model_id):
    return {"openai:gpt-4.1-mini-2025-04-14": "gpt-4.1-mini", "claude-sonnet-4-5-20250929": "claude-sonnet-4-5",
            "anthropic/claude-sonnet-4.5": "claude-sonnet-4-5"}.get(model_id, model_id)
