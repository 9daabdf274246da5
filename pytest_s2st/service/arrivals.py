"""Open-loop arrival schedules: when each measured request of a level is due.

Copied in behaviour from ``vllm bench serve`` (vllm/benchmarks/serve.py, ``get_request``):
inter-arrival gaps ~ Gamma(shape=burstiness, scale=1 / (rate * burstiness)), so their mean is 1/rate
whatever the burstiness (1 = exponential gaps, a Poisson process; < 1 burstier; > 1 more even;
inf = constant 1/rate); the first request also waits its gap; the cumulative offsets are then scaled
so that the last one lands exactly on n / rate (vLLM's "close the 1-2 % gap" step, which makes the
asked rate the schedule's rate). rate = inf sends everything at once (the closed loop).

Unlike vLLM (numpy's global seed), the schedule has its own generator, seeded: the same (n, rate,
burstiness, seed) gives the same offsets in every run, so request ids and their arrival offsets are
stable across runs.

Each arrival process is one object (``Arrival``): its parameters a frozen dataclass, registered by name in
``ARRIVALS`` (``register_arrival``). ``LoadOptions.arrival`` carries it whole; the client asks it for the due
times, the level entry, the asked rate and the methods line, the parts for their share, the level's bound for
its span. ``--s2st-request-rate R`` (with ``--s2st-burstiness``) is the gamma process; ``NAME:K=V,...``
chooses any registered one (``from_settings``).
"""
from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

import numpy as np

from ..inputs import show

DEFAULT_SEED = 0
METHOD = ("gamma(shape=burstiness, scale=1/(rate*burstiness)) gaps, cumulated, scaled so the last is n/rate "
          "(as vllm bench serve's get_request); seeded numpy Generator (PCG64)")


MIN_RATE = 1 / 3600  # requests per second: one an hour; slower, a 12-request level would take half a day
MAX_RATE = 1e6  # past it every gap is below the event loop's resolution: use inf (the closed loop)
BURSTINESS_RANGE = (1e-3, 1e3)  # gamma shapes outside it give gaps of 0 or overflow; inf = evenly spaced


def _positive_or_inf(value, expected: str, low: float, high: float) -> float:
    if isinstance(value, bool):
        raise ValueError(f"must be {expected}, got {value!r}")
    try:
        out = float(str(value).strip().lower())
    except ValueError:
        raise ValueError(f"must be {expected}, got {value!r}") from None
    if math.isnan(out) or out <= 0 or not math.isinf(out) and not low <= out <= high:
        raise ValueError(f"must be {expected}, got {value!r}")
    return out


def parse_rate(value) -> float:
    """--s2st-request-rate: requests per second in [MIN_RATE, MAX_RATE], or inf (closed loop). ValueError otherwise."""
    return _positive_or_inf(value, f"requests per second in {MIN_RATE:.3g}-{MAX_RATE:g} (one an hour to a million) "
                                   "or inf", MIN_RATE, MAX_RATE)


def parse_burstiness(value) -> float:
    """--s2st-burstiness: the gamma shape in BURSTINESS_RANGE (1 = Poisson), or inf (evenly spaced)."""
    low, high = BURSTINESS_RANGE
    return _positive_or_inf(value, f"a number in {low:g}-{high:g} (1 = Poisson arrivals) or inf", low, high)


def schedule(n: int, rate: float, burstiness: float = 1.0, seed: int = DEFAULT_SEED) -> list[float]:
    """Offsets (seconds from the phase start) at which requests 0..n-1 are due; all 0 when rate is inf."""
    if n <= 0:
        return []
    rate, burstiness = parse_rate(rate), parse_burstiness(burstiness)
    if math.isinf(rate):
        return [0.0] * n
    if math.isinf(burstiness):
        gaps = np.full(n, 1.0 / rate)
    else:
        gaps = np.random.Generator(np.random.PCG64(seed)).gamma(shape=burstiness, scale=1.0 / (rate * burstiness),
                                                                 size=n)
    offsets = np.cumsum(gaps)
    if offsets[-1] > 0:
        offsets *= (n / rate) / offsets[-1]
    return [float(x) for x in offsets]


def achieved_rate(n: int, wall_s: float | None) -> tuple[float | None, str | None]:
    """Measured requests / measured wall seconds, or None with the reason."""
    if not n:
        return None, "no measured requests"
    if wall_s is None or not wall_s > 0 or not math.isfinite(wall_s):
        return None, f"wall_s={wall_s!r} is not a positive duration"
    return n / wall_s, None


# the level entry's keys every process writes (record.LevelEntry spreads them where they always stood)
ARRIVAL_KEYS = ("request_rate", "burstiness", "arrival_seed", "arrivals_method")
CLOSED_LOOP = "closed loop: each worker sends its next request when its last ends"


def rate_json(rate: float) -> float | str:
    """A rate as the saved JSON spells it: "inf" (JSON has no infinity) or a float."""
    return "inf" if math.isinf(rate) else float(rate)


@dataclass(frozen=True)
class Arrival:
    """One arrival process: a frozen dataclass of its parameters, a ``name`` (its key in ARRIVALS) and
    ``method`` (how its schedule is drawn). A subclass gives ``schedule`` and ``mean_rate``; the rest has
    defaults it may override. ``rate_fields``: the parameters in requests per second, divided among level parts."""
    name: ClassVar[str] = ""
    method: ClassVar[str] = ""
    rate_fields: ClassVar[tuple[str, ...]] = ()

    def schedule(self, count: int) -> list[float]:
        """Offsets (seconds from the measured phase's start) at which requests 0..count-1 are due."""
        raise NotImplementedError

    def mean_rate(self) -> float:
        """Requests per second over the schedule; inf: the closed loop (no schedule)."""
        raise NotImplementedError

    @property
    def closed(self) -> bool:
        return math.isinf(self.mean_rate())

    def checked(self) -> "Arrival":
        """This process, its parameters checked (ValueError naming the expected form) and normalised."""
        return self

    def asked_rate(self) -> float | str:
        """The summary's ``request_rate`` (set_rates): what the table's "rate asked" column reads."""
        return rate_json(self.mean_rate())

    def level_entry(self) -> dict[str, Any]:
        """What it writes into the level's entry of summary.json: ARRIVAL_KEYS first, then its own keys."""
        return {"request_rate": self.asked_rate(), "burstiness": None, "arrival_seed": None,
                "arrivals_method": None if self.closed else self.method, "arrival": self.spec()}

    def describe(self) -> str:
        """Its one line in the level's ``methods`` (how the load was shaped)."""
        if self.closed:
            return CLOSED_LOOP
        return f"open loop, {self.spec()}: {self.method}; the concurrency cap still applies"

    def split(self, parts: int) -> "Arrival":
        """One of ``parts`` level parts' share: every rate parameter divided evenly (the seed is shared)."""
        return dataclasses.replace(self, **{f: getattr(self, f) / parts for f in self.rate_fields})

    def span_s(self, count: int) -> float:
        """How long the schedule of ``count`` requests lasts (0 in the closed loop): the level's time bound adds it."""
        return count / self.mean_rate()

    def spec(self) -> str:
        """``NAME:K=V,...``: how --s2st-request-rate spells it (parse_spec reads it back)."""
        params = ",".join(f"{f.name}={getattr(self, f.name):g}" if isinstance(getattr(self, f.name), float)
                          else f"{f.name}={getattr(self, f.name)}" for f in dataclasses.fields(self))
        return f"{self.name}:{params}"

    def __str__(self) -> str:  # a case's settings are saved as JSON: the process as its spec
        return self.spec()


ARRIVALS: dict[str, type[Arrival]] = {}


def register_arrival(cls: type[Arrival]) -> type[Arrival]:
    """Add an arrival process to ARRIVALS under its ``name`` (a class decorator); a taken name is refused."""
    if not cls.name or ":" in cls.name or "," in cls.name:
        raise ValueError(f"arrival process {cls.__name__}: needs a name without ':' or ','")
    if ARRIVALS.get(cls.name, cls) is not cls:
        raise ValueError(f"arrival process {cls.name!r} is already registered ({ARRIVALS[cls.name].__name__})")
    ARRIVALS[cls.name] = cls
    return cls


@register_arrival
@dataclass(frozen=True)
class Gamma(Arrival):
    """vLLM's arrivals (module docstring): gamma gaps at ``rate`` (inf: the closed loop), shape ``burstiness``
    (1: Poisson; inf: evenly spaced), seeded by ``seed``."""
    name: ClassVar[str] = "gamma"
    method: ClassVar[str] = METHOD
    rate_fields: ClassVar[tuple[str, ...]] = ("rate",)
    rate: float = math.inf
    burstiness: float = 1.0
    seed: int = DEFAULT_SEED

    def schedule(self, count: int) -> list[float]:
        return schedule(count, self.rate, self.burstiness, self.seed)

    def mean_rate(self) -> float:
        return float(self.rate)

    def checked(self) -> "Gamma":
        parse_rate(self.rate)
        parse_burstiness(self.burstiness)
        return dataclasses.replace(self, rate=float(self.rate), burstiness=float(self.burstiness))

    def level_entry(self) -> dict[str, Any]:
        return {"request_rate": self.asked_rate(),
                "burstiness": "inf" if math.isinf(self.burstiness) else self.burstiness, "arrival_seed": self.seed,
                "arrivals_method": None if self.closed else self.method}

    def describe(self) -> str:
        if self.closed:
            return CLOSED_LOOP
        return f"open loop at {self.rate:g} req/s: {self.method}; the concurrency cap still applies"


def parse_spec(text: str) -> Arrival:
    """``NAME:K=V,...`` -> that registered process, each value converted to its field's type, then checked.
    ValueError (one line) on an unknown name or parameter, or a bad value."""
    name, _, params = str(text).strip().partition(":")
    cls = ARRIVALS.get(name.strip().lower())
    if cls is None:
        raise ValueError(f"unknown arrival process '{show(name.strip())}'; registered: {', '.join(sorted(ARRIVALS))}")
    types = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls)}
    values: dict[str, Any] = {}
    for pair in filter(None, (p.strip() for p in params.split(","))):
        key, eq, value = (x.strip() for x in pair.partition("="))
        if not eq or key not in fields:
            raise ValueError(f"arrival process {cls.name}: '{show(pair)}' is not K=V of its parameters "
                             f"({', '.join(sorted(fields))})")
        if key in values:
            raise ValueError(f"arrival process {cls.name}: {key} is given twice")
        kind = types.get(key)
        try:
            values[key] = int(value) if kind is int else float(value) if kind is float else value
        except ValueError:
            raise ValueError(f"arrival process {cls.name}: {key}='{show(value)}' is not a number") from None
    return cls(**values).checked()


def parse_request_rate(value: Any) -> float | str | Arrival:
    """--s2st-request-rate: requests per second of the gamma process, "inf" (the closed loop; JSON has no
    infinity), or ``NAME:K=V,...`` of a registered process, as its object."""
    if isinstance(value, Arrival):
        return value.checked()
    if isinstance(value, str) and ":" in value:
        return parse_spec(value)
    return rate_json(parse_rate(value))


def from_settings(settings: Mapping[str, Any]) -> Arrival:
    """The level's arrival process from its settings: a process the request_rate setting names, else the gamma
    process at request_rate (unset: inf) with the burstiness setting (unset: 1). Unchecked: LoadOptions.checked
    refuses a bad one in one line."""
    rate = settings.get("request_rate")
    if isinstance(rate, Arrival):
        return rate
    if isinstance(rate, str) and ":" in rate:
        return parse_spec(rate)
    return Gamma(rate=float(rate or "inf"), burstiness=float(settings.get("burstiness") or 1.0))
