"""The code-version A/B's early stop on seeded paired rounds with a known true ratio: it stops as soon as the
verdict is decided, and an early stop is on the wrong side of a boundary no more often than the rule states."""
from __future__ import annotations

import numpy as np
import pytest

from pytest_s2st.ab.estimators import median_interval
from pytest_s2st.ab.stopping import ALPHA, FIRST_LOOK, StoppingRule, first_look, held, looks_from, precise
from pytest_s2st.limits import compare_limits
from pytest_s2st.ab.estimators import compare_pair_sets
from pytest_s2st.significance import FASTER, SAME, SLOWER, Change


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
    assert rule.bounds == (1.05,) and rule.looks == (6, 8, 10, 13, 17)
    assert StoppingRule.for_limits(20).bounds == (0.98, 1.02)
    assert rule.confidence == pytest.approx(1 - ALPHA / 5)
    assert StoppingRule.for_limits(20, compare_limits("runtime_s:2ms")).looks == ()  # seconds: no ratio, no stop
    assert StoppingRule.for_limits(FIRST_LOOK).looks == ()  # the fixed design is as short as the first look


def test_the_looks_grow_geometrically_so_their_count_grows_with_the_log_of_the_rounds():
    """Each look a quarter more rounds than the last (at least one more): 160 rounds take 12 looks from 10, not 75,
    so each look is judged at 1 - 5 %/12."""
    assert looks_from(10, 160) == (10, 13, 17, 22, 28, 35, 44, 55, 69, 87, 109, 137)
    assert looks_from(6, 20) == (6, 8, 10, 13, 17)
    assert looks_from(1, 5) == (1, 2, 3, 4)  # at least one round more
    assert looks_from(20, 20) == ()  # the last round is the fixed design's


@pytest.mark.parametrize("rounds, pairs, first", [(20, 2, 6), (20, 1, 8), (40, 1, 9), (160, 1, 10), (20, 4, 6),
                                                  (6, 1, 6)])
def test_the_first_look_is_the_first_that_could_stop(rounds, pairs, first):
    """One pair of 6 rounds has no order-statistic interval at the looks' level (2 / 2^6 > 5 % / 5): its first look
    is later, where pairs x rounds ratios have one (8 rounds of 20: 2 / 2^8 <= 5 % / 4)."""
    assert first_look(rounds, pairs) == first
    if first < rounds:
        level = 1 - ALPHA / len(looks_from(first, rounds))
        assert median_interval(pairs * first, level) is not None
        if first > FIRST_LOOK:
            earlier = 1 - ALPHA / len(looks_from(first - 1, rounds))
            assert median_interval(pairs * (first - 1), earlier) is None
    assert StoppingRule.for_limits(rounds, compare_limits("runtime_s:5%"), pairs=pairs).looks[:1] == (
        (first,) if first < rounds else ())


def test_a_clear_change_stops_once_its_size_is_measured():
    """x1.10 at 3 % noise a round is past the word's 1.02 at the first look; the rounds go on until its 95 % interval
    is within +-2 % of its ratio, so the size a user reads is within 2 % of the truth in >= 95 % of A/Bs."""
    rule = StoppingRule.for_limits(20)
    trials = _trials(1.10, rule)
    assert all(c.word == SLOWER for _, c in trials)
    assert sum(abs(c.ratio / 1.10 - 1) < 0.02 for _, c in trials) >= 0.95 * len(trials)
    early = [c for done, c in trials if done < rule.rounds]
    assert len(early) >= 0.5 * len(trials) and all(precise(c) for c in early)
    assert sum(done == FIRST_LOOK for done, _ in trials) < 0.5 * len(trials)  # decided, not yet measured


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


def test_one_pair_stops_at_its_first_look_under_a_limit_and_soon_after_on_a_clear_change():
    """One worker pair: a 1 %-noise A/A under a 5 % limit is settled at its first look (8 rounds); x1.10 soon after
    (its interval within +-2 % by 13 rounds), both with the fixed design's verdict; an A/A is never past the limit."""
    rule = StoppingRule.for_limits(20, compare_limits("runtime_s:5%"), pairs=1)
    clear = _trials(1.10, rule, sd=0.01, pairs=1)
    assert all(8 <= done <= 13 for done, _ in clear)
    assert all(c.word == SLOWER and abs(c.ratio / 1.10 - 1) < 0.02 for _, c in clear)
    same = _trials(1.0, rule, sd=0.01, pairs=1)
    assert sum(done == 8 for done, _ in same) >= 0.95 * len(same)
    assert not any(c.ratio > 1.05 and c.word == SLOWER for _, c in same)


def test_precise_is_the_interval_within_two_percent_of_the_ratio():
    assert precise(Change(1.10, low=1.10 * 0.981, high=1.10 * 1.019))
    assert not precise(Change(1.10, low=1.10 * 0.97, high=1.10 * 1.01))
    assert not precise(Change(1.10, low=1.10 * 0.99, high=1.10 * 1.021))
    assert not precise(Change(1.10)) and not precise(Change(None))


def test_a_ratio_on_a_boundary_rarely_stops_early():
    """At a true x1.02 the interval holds the boundary unless it misses the truth: with the Bonferroni level an
    early stop is 1 % of trials here (each look at 95 % instead: 10 %)."""
    rule = StoppingRule.for_limits(20)
    early = sum(done < rule.rounds for done, _ in _trials(1.02, rule))
    assert early <= 0.03 * 300, early


def test_a_word_after_an_early_stop_holds_at_the_looks_level():
    """At load 3, 20 A/As stopped early under a 5 % limit: two said `faster` at 95 % (x0.968 [0.955, 0.985] after 17
    rounds), neither at the looks' level. Simulated: one pair, 160 rounds, 5 % noise a round and a process offset of
    sd 0.75 %: 95 % words in 5 % of A/As, held ones in at most 2 %; every x1.10 keeps its `slower`."""
    rule = StoppingRule.for_limits(160, compare_limits("runtime_s:5%"), pairs=1)
    rng = np.random.default_rng(11)
    words = {"95%": 0, "held": 0}
    for truth in [1.0] * 400 + [1.10] * 100:
        base = np.exp(rng.normal(0, 0.05, rule.rounds))
        head = base * truth * np.exp(rng.normal(0, 0.0075) + rng.normal(0, 0.05, rule.rounds))
        done = next((r for r in rule.looks if rule.settled(r, [(base[:r], head[:r])])), rule.rounds)
        sets = [(list(base[:done]), list(head[:done]))]
        change = compare_pair_sets(sets)
        kept = held(change, compare_pair_sets(sets, rule.confidence)) if done < rule.rounds else change
        if truth == 1.0:
            words["95%"] += change.significant
            words["held"] += kept.significant
        else:
            assert kept.word == SLOWER
    assert words["held"] <= 8 and words["held"] < words["95%"] / 2, words


def test_held_keeps_a_word_the_looks_level_also_says_and_drops_one_it_does_not():
    faster = Change(0.968, 0.955, 0.985, FASTER, pairs=17)
    assert held(faster, Change(0.968, 0.926, 1.046, SAME, pairs=17)) == Change(0.968, 0.955, 0.985, SAME, pairs=17)
    assert held(faster, Change(0.968, 0.940, 0.990, FASTER, pairs=17)) is faster
    same = Change(1.0, 0.98, 1.02, SAME, pairs=10)
    assert held(same, Change(1.0, 0.9, 1.1, SAME, pairs=10)) is same
