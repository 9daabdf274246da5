"""The code-version A/B's early stop on seeded paired rounds with a known true ratio: it stops as soon as the
verdict is decided, and an early stop is on the wrong side of a boundary no more often than the rule states."""
from __future__ import annotations

import numpy as np
import pytest

from pytest_s2st.ab.estimators import median_interval
from pytest_s2st.ab.stopping import ALPHA, EVERY, FIRST_LOOK, StoppingRule, first_look
from pytest_s2st.limits import compare_limits
from pytest_s2st.ab.estimators import compare_pair_sets
from pytest_s2st.significance import SAME, SLOWER


def _trials(truth: float, rule: StoppingRule, n: int = 300, sd: float = 0.03, seed: int = 7, pairs: int = 2):
    """(rounds run, final change) of n simulated A/Bs: ``pairs`` worker pairs, each round's log time N(0, sd), each
    pair's process layout N(0, 0.3 %) on its head side."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        sets = []
        for _pair in range(pairs):
            base = np.exp(rng.normal(0, sd, rule.rounds))
            head = base * truth * np.exp(rng.normal(0, 0.003) + rng.normal(0, sd, rule.rounds))
            sets.append((list(base), list(head)))
        done = next((r for r in range(1, rule.rounds + 1)
                     if rule.settled(r, [(b[:r], h[:r]) for b, h in sets])), rule.rounds)
        out.append((done, compare_pair_sets([(b[:done], h[:done]) for b, h in sets])))
    return out


def test_the_boundaries_are_the_percent_runtime_limits_else_the_word():
    rule = StoppingRule.for_limits(20, compare_limits("runtime_s:5%,flops:1%"))
    assert rule.bounds == (1.05,) and rule.looks == (6, 8, 10, 12, 14, 16, 18)
    assert StoppingRule.for_limits(20).bounds == (0.98, 1.02)
    assert rule.confidence == pytest.approx(1 - ALPHA / 7)
    assert StoppingRule.for_limits(20, compare_limits("runtime_s:2ms")).looks == ()  # seconds: no ratio, no stop
    assert StoppingRule.for_limits(FIRST_LOOK).looks == ()  # the fixed design is as short as the first look


@pytest.mark.parametrize("rounds, pairs, first", [(20, 2, 6), (20, 1, 8), (40, 1, 10), (20, 4, 6), (6, 1, 6)])
def test_the_first_look_is_the_first_that_could_stop(rounds, pairs, first):
    """One pair of 6 rounds has no order-statistic interval at the looks' level (2 / 2^6 > 5 % / 7): its first look
    is later, where pairs x rounds ratios have one (8 rounds of 20: 2 / 2^8 <= 5 % / 6)."""
    assert first_look(rounds, pairs) == first
    if first < rounds:
        level = 1 - ALPHA / len(range(first, rounds, EVERY))
        assert median_interval(pairs * first, level) is not None
        if first > FIRST_LOOK:
            earlier = 1 - ALPHA / len(range(first - 1, rounds, EVERY))
            assert median_interval(pairs * (first - 1), earlier) is None
    assert StoppingRule.for_limits(rounds, compare_limits("runtime_s:5%"), pairs=pairs).looks[:1] == (
        (first,) if first < rounds else ())


def test_a_clear_change_stops_at_the_first_look_with_the_fixed_designs_verdict():
    rule = StoppingRule.for_limits(20)
    trials = _trials(1.10, rule)
    assert sum(done == FIRST_LOOK for done, _ in trials) >= 0.95 * len(trials)
    assert all(c.word == SLOWER and abs(c.ratio / 1.10 - 1) < 0.03 for _, c in trials)


def test_a_quiet_a_a_stops_early_and_says_no_change():
    trials = _trials(1.0, StoppingRule.for_limits(20), sd=0.01)
    assert sum(done <= 8 for done, _ in trials) >= 0.9 * len(trials)
    assert all(c.word == SAME for _, c in trials)


def test_under_a_limit_a_noisy_a_a_stops_at_the_first_look_and_passes_it():
    """3 % noise a round: the word's +-2 % needs most rounds, a 5 % limit is settled at the first look; an early
    stop past the limit on an A/A (a FAIL) would be the rule's error, bounded by its 5 %."""
    rule = StoppingRule.for_limits(20, compare_limits("runtime_s:5%"))
    trials = _trials(1.0, rule)
    assert sum(done == FIRST_LOOK for done, _ in trials) >= 0.9 * len(trials)
    assert sum(c.ratio > 1.05 and c.word == SLOWER for _, c in trials) <= 0.01 * len(trials)
    at_limit = _trials(1.05, rule)
    assert sum(done < rule.rounds for done, _ in at_limit) <= 0.03 * len(at_limit)


def test_one_pair_stops_at_its_first_look_on_a_clear_change_and_under_a_limit():
    """One worker pair: x1.10 and a 1 %-noise A/A under a 5 % limit are settled at its first look (8 rounds), with
    the fixed design's verdict; an A/A is never past the limit."""
    rule = StoppingRule.for_limits(20, compare_limits("runtime_s:5%"), pairs=1)
    clear = _trials(1.10, rule, sd=0.01, pairs=1)
    assert sum(done == 8 for done, _ in clear) >= 0.95 * len(clear)
    assert all(c.word == SLOWER and abs(c.ratio / 1.10 - 1) < 0.03 for _, c in clear)
    same = _trials(1.0, rule, sd=0.01, pairs=1)
    assert sum(done == 8 for done, _ in same) >= 0.95 * len(same)
    assert not any(c.ratio > 1.05 and c.word == SLOWER for _, c in same)


def test_a_ratio_on_a_boundary_rarely_stops_early():
    """At a true x1.02 the interval holds the boundary unless it misses the truth: with the Bonferroni level an
    early stop is 1 % of trials here (each look at 95 % instead: 10 %)."""
    rule = StoppingRule.for_limits(20)
    early = sum(done < rule.rounds for done, _ in _trials(1.02, rule))
    assert early <= 0.03 * 300, early
