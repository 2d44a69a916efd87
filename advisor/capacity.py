"""A service's capacity under its latency SLO: the highest open-load arrival rate whose p95
stays within `constraints.p95_ms`, and the load curve the search leaves behind.

Pure functions: the harness replays one arrival rate at a time (`Point`); these choose the
rates (doubling from a start until one breaks the SLO, then bisecting between the highest that
kept it and the lowest that broke it; or, from a queue model's prediction, aiming each replay
just under the capacity the last one's own service times read off), and tell a queue that
grows without bound (saturation) from one that merely waits. A saturated replay's p95 measures how long the run lasted, not
the service: it breaks the SLO whatever it reads, and the curve shows no percentile for it.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import asdict, dataclass
from typing import Callable, Iterator, Optional, Sequence

from advisor.measure import percentile

# Bracketing stops once the rate that broke the SLO is within 10% of the one that kept it: near the
# edge a p95 over a few hundred requests moves more than that between replays (the 25 ms encoder
# of experiments/capacity_time.py read 56, 61, 67 and 72 ms at 14.3-16.4/s, in no order), so
# narrower brackets chased the noise, a full replay of 10-15 s each (4%: 6 full replays a plan)
PRECISION = 1.1
MAX_POINTS = 14  # rates replayed at most, per capacity
HALVINGS = 4  # below its start rate / 2**4 a plan is said to keep the SLO at no rate
SERVED_SHARE = 0.9  # saturated: fewer answers than this share of the arrivals, over the same window ...
GROWTH = 1.5  # ... and the last quarter's median latency this many times the first quarter's
# While the bracket is open (doubling or halving, far from the edge) a replay offers about
# OPEN_S of arrivals, MIN_REQUESTS at least, OPEN_MOST_S at most; bisecting, where the p95
# decides the figure, every timed request (a queue near its limit needs them to show its tail:
# at 3 s a replay, the 20 ms encoder of experiments/capacity_time.py read 40/s where 200 requests read 22-28/s)
OPEN_S, OPEN_MOST_S = 1.0, 5.0
MIN_REQUESTS = 40
# A full replay offers every timed request, but at most FULL_MOST_S of arrivals (FULL_LEAST
# requests at least: a p95 on the slowest 3): a service whose p95 barely fits its SLO keeps it only
# at a few requests a second, where 200 requests took 110 s a replay and the search 234 s a plan
FULL_MOST_S, FULL_LEAST = 20.0, 60
# From a predicted capacity (`predicted_capacity`), where a replay read no capacity off, the search
# steps this factor up or down, in full replays (short ones over-read near the edge, where a guided
# search's replays all are), the step squared after each move the same way: a prediction a few tens
# of percent off costs a step or two, where doubling from the configured rate walked down in full
# replays of seconds each
GUIDED_STEP = 1.2
AIM = math.sqrt(PRECISION)  # a guided replay's rate: this much under the capacity read off, so that it keeps the SLO
READ_OFF_AGREEMENT = 0.05  # a replay's read-off counts where its queue model hits its p95 within this share


@dataclass(frozen=True)
class Point:
    """One rate's replay: what was offered, what was answered while requests arrived, the
    latency percentiles (None when saturated), whether the queue grew without bound, and the
    capacity its own service times read off (None where they could not: `read_off`)."""

    offered_per_s: float
    served_per_s: float
    p50_ms: Optional[float]
    p95_ms: Optional[float]
    p99_ms: Optional[float]
    saturated: bool
    reads_off_per_s: Optional[float] = None  # the capacity its own service times read off (`read_off`)

    def within(self, slo_ms: float) -> bool:
        return not self.saturated and self.p95_ms is not None and self.p95_ms <= slo_ms

    def to_dict(self) -> dict:
        return asdict(self)


def saturated(arrivals: list[float], completions: list[float], latencies_ms: list[float]) -> bool:
    """Whether the server fell behind for good: over the arrivals' last three quarters, it
    answered under 90% as many requests as arrived, and the latest requests waited clearly
    longer than the first. A queue that is long but steady answers as fast as requests arrive."""
    count = len(arrivals)
    if count < 8:
        return False
    window_start, window_end = arrivals[count // 4], arrivals[-1]
    arrived = count - count // 4
    answered = sum(1 for done in completions if window_start < done <= window_end)
    quarter = max(1, count // 4)
    first, last = sorted(latencies_ms[:quarter]), sorted(latencies_ms[-quarter:])
    growing = last[len(last) // 2] > GROWTH * first[len(first) // 2]
    return answered < SERVED_SHARE * arrived and growing


def served_rate(arrivals: list[float], completions: list[float]) -> float:
    """Requests answered per second from the first arrival to the last answer."""
    span = max(completions) - arrivals[0]
    return len(completions) / span if span > 0 else 0.0


def requests_at(rate_per_s: float, full: bool, most: int, left_s: float = math.inf) -> int:
    """How many of the `most` timed requests a replay at this rate offers: all of them where it
    decides the capacity (`full`; `FULL_MOST_S` of arrivals at most, `FULL_LEAST` at least), else
    about `OPEN_S` of arrivals (`MIN_REQUESTS` at least, `OPEN_MOST_S` at most). The open bracket
    so costs seconds at any start rate, where the full count took minutes at a low one (400
    requests at 20/s: 20 s a replay). Nor does a replay run past the search's deadline, `left_s`
    away, by more than `MIN_REQUESTS` need: a replay begun just before it once ran 80 s past."""
    if full:
        wanted = max(FULL_LEAST, math.ceil(rate_per_s * FULL_MOST_S))
    else:
        wanted = min(max(MIN_REQUESTS, math.ceil(rate_per_s * OPEN_S)), math.ceil(rate_per_s * OPEN_MOST_S))
    in_time = most if math.isinf(left_s) else max(MIN_REQUESTS, math.ceil(rate_per_s * max(left_s, 0.0)))
    return max(1, min(most, wanted, in_time))


def queued_p95_ms(service_s: Sequence[float], rate_per_s: float, unit_arrivals: Sequence[float], servers: int = 1) -> float:
    """The p95 of a request's time in the system (ms) where `servers` serve in arrival order, one
    request at a time in the service times `service_s` (taken in turn), the replay's seeded
    arrivals (`unit_arrivals`, at 1 a second) scaled to `rate_per_s`. A pure function."""
    free = [0.0] * servers
    sojourns = []
    for index, arrival in enumerate(unit_arrivals):
        arrival /= rate_per_s
        start = max(arrival, heapq.heappop(free))
        done = start + service_s[index % len(service_s)]
        heapq.heappush(free, done)
        sojourns.append(done - arrival)
    return percentile(sojourns, 95) * 1000


def predicted_capacity(service_s: Sequence[float], slo_ms: float, unit_arrivals: Sequence[float],
                       servers: int = 1) -> Optional[float]:
    """Where a capacity search starts: the highest arrival rate at which the measured service
    times, queued in the replay's own seeded arrivals (`queued_p95_ms`), keep the p95 within
    `slo_ms`. Each request's time only grows with the rate, so bisection finds it. None where
    even one at a time breaks the SLO. A guess from the service alone, never a figure: the
    replays decide."""
    if not service_s or not unit_arrivals:
        return None
    low, high = 0.0, servers * len(service_s) / math.fsum(service_s)  # past it, the queue grows for good
    if queued_p95_ms(service_s, high * 1e-6, unit_arrivals, servers) > slo_ms:
        return None
    for _ in range(40):
        middle = (low + high) / 2
        low, high = (middle, high) if queued_p95_ms(service_s, middle, unit_arrivals, servers) <= slo_ms else (low, middle)
    return low  # above 0: the rates under high * 1e-6 keep the SLO


def read_off(service_s: Sequence[float], rate_per_s: float, p95_ms: float, slo_ms: float,
             unit_arrivals: Sequence[float], servers: int = 1) -> Optional[float]:
    """The capacity a replay's own service times read off: the rate at which they, queued in
    the same arrivals, reach the SLO (`predicted_capacity`; 0.0 where they break it at any
    rate). `p95_ms`: the replay's over the requests it answered, the first len(`service_s`) to
    arrive (all but where it stopped early, `open_loop`). None where that queue, over those
    arrivals, misses it by more than `READ_OFF_AGREEMENT`:
    then the model does not describe the service (servers that share cores, work that is not
    one request at a time) and only replays may say. On the encoders of
    experiments/capacity_time.py the queue read each replay's p95 within 0.5%, so the host's
    noise is in the service times, which the read-off carries, not in the queueing."""
    if not service_s or not p95_ms:
        return None
    answered = unit_arrivals[:len(service_s)]
    if abs(queued_p95_ms(service_s, rate_per_s, answered, servers) - p95_ms) > READ_OFF_AGREEMENT * p95_ms:
        return None
    return predicted_capacity(service_s, slo_ms, unit_arrivals, servers) or 0.0


def bracket(measure_at: Callable[[float, bool], Point], slo_ms: float, start_per_s: float,
            out_of_time: Callable[[], bool] = lambda: False, guided: bool = False) -> tuple[float, list[Point]]:
    """The highest rate found to keep the SLO (0.0: none down to the start / 2**HALVINGS), and
    every point replayed, by rate. Doubles from `start_per_s` until a rate breaks the SLO (or
    halves, when the start already does), in short replays; replays the highest rate that kept
    the SLO again in full, halving while a full replay breaks it; then narrows the bracket in
    full replays until the two are within `PRECISION`, each other step at the rate the two ends'
    p95 point to (`toward_the_slo`), the others at the geometric middle (a p95 barely over the SLO
    would otherwise hold every step near its end). The
    rate it reports kept the SLO in a full replay. At most `MAX_POINTS` replays in all, and none begun once `out_of_time` says so
    (the rate that last kept the SLO in full is then the figure, less precise). While doubling,
    a rate that breaks the SLO is replayed once more before it bounds the search: one stall in
    one replay (a p95 over a few hundred requests rests on its slowest few) would otherwise
    halve the figure. `guided`: the start is a predicted capacity (`predicted_capacity`): the
    search is `guided_bracket`'s. `measure_at(rate, full)`: `full`, over every timed request
    (`requests_at`)."""
    if guided:
        return guided_bracket(measure_at, slo_ms, start_per_s, out_of_time)
    points: list[Point] = []
    confirmed = [0.0]  # the rates that kept the SLO in a full replay
    p95_at: dict[float, Optional[float]] = {}  # each rate's p95 (None: saturated), a full replay's over a short one's

    def keeps(rate: float, full: bool = False) -> bool:
        if out_of_time():
            return False
        points.append(measure_at(rate, full))
        kept = points[-1].within(slo_ms)
        if full or rate not in p95_at:
            p95_at[rate] = points[-1].p95_ms
        if kept and full:
            confirmed.append(rate)
        return kept

    low, high, rate = 0.0, math.inf, start_per_s
    steps = step_factors(2.0)
    while high == math.inf and len(points) < MAX_POINTS and not out_of_time():
        if keeps(rate) or (low > 0 and keeps(rate)):  # a hiccup must not halve the capacity
            low, rate = rate, rate * next(steps)
        else:
            high = rate
    steps = step_factors(2.0)
    while low == 0.0 and high > start_per_s / 2 ** HALVINGS and len(points) < MAX_POINTS and not out_of_time():
        rate = high / next(steps)
        if keeps(rate):
            low = rate
        else:
            high = rate
    while low > 0 and low not in confirmed and len(points) < MAX_POINTS and not out_of_time():  # the open bracket's, in full
        if not keeps(low, full=True):
            high, low = low, (low / 2 if low / 2 >= start_per_s / 2 ** HALVINGS else 0.0)
    read_off = True
    while low > 0 and high / low > PRECISION and len(points) < MAX_POINTS and not out_of_time():
        middle = toward_the_slo(low, high, p95_at.get(low), p95_at.get(high), slo_ms) if read_off else math.sqrt(low * high)
        kept = keeps(middle, full=True)
        low, high = (middle, high) if kept else (low, middle)
        read_off = not read_off  # read off, then a plain bisection: the bracket halves (in log) every two steps at least
    return max(confirmed), sorted(points, key=lambda p: p.offered_per_s)


def guided_bracket(measure_at: Callable[[float, bool], Point], slo_ms: float, predicted_per_s: float,
                   out_of_time: Callable[[], bool] = lambda: False) -> tuple[float, list[Point]]:
    """`bracket` from a predicted capacity, in full replays (short ones over-read near the edge,
    where these all are): the first a little under the prediction (by `AIM`: one request at a
    time reads a little fast), each next a little under what the last replay's own service
    times read off (`read_off`), inside the bracket; where a replay read nothing off, a step of
    GUIDED_STEP (squared after each move the same way), and after a break never further down
    than that step: a break bounds the search at once, and a stall (a replay whose service
    times stalled read off 2/s between reads of 13/s on a slow hour) costs a step, not a long
    replay far under the edge. Done once a rate that kept the SLO and one that
    broke it are within PRECISION, or a rate that kept it reads off less than PRECISION times
    itself: the next step up breaks the SLO in that replay's own service times. On the 24 ms
    encoder of experiments/capacity_time.py that took two full replays (23-27 s a plan) where
    stepping took three or four (29-43 s).
    The figure is a rate that kept the SLO in a replay (0.0: none down to the prediction /
    2**HALVINGS)."""
    points: list[Point] = []
    low, high, rate = 0.0, math.inf, predicted_per_s / AIM
    ups, downs = step_factors(GUIDED_STEP), step_factors(GUIDED_STEP)
    while len(points) < MAX_POINTS and rate >= predicted_per_s / 2 ** HALVINGS and not out_of_time():
        points.append(measure_at(rate, True))
        kept, said = points[-1].within(slo_ms), points[-1].reads_off_per_s
        low, high = (rate, high) if kept else (low, rate)
        if low and (high / low <= PRECISION or (kept and said is not None and said < rate * PRECISION)):
            break
        step = rate * next(ups) if kept else rate / next(downs)
        aim = said / AIM if said else step
        if not kept:  # one stalled replay's read-off moves the search down a step, no more
            aim = max(aim, step)
        if not low < aim < high:
            aim = math.sqrt(low * high) if low and high < math.inf else step
        rate = aim
    return low, sorted(points, key=lambda p: p.offered_per_s)


def step_factors(step: float) -> Iterator[float]:
    """The factors a bracket moves by, one move after another the same way: `step`, squared
    after each move, up to 2 (2: doubling each time)."""
    while True:
        yield step
        step = min(2.0, step * step)


def toward_the_slo(low: float, high: float, low_p95: Optional[float], high_p95: Optional[float], slo_ms: float) -> float:
    """The next rate to replay between `low` (kept the SLO) and `high` (broke it): where the SLO
    falls, read off the two ends' p95 (only to choose the rate: the figure rests on full
    replays), whose reciprocal falls about linearly with the arrival rate as a queue fills (one
    server: 1 / sojourn time = service rate - arrival rate); the geometric middle where a p95 is
    unknown (a saturated replay shows none). Kept inside the bracket's inner 80% (in log), so
    that a step always narrows it. A pure function."""
    middle = math.sqrt(low * high)
    if not low_p95 or not high_p95 or high_p95 <= low_p95:
        return middle
    share = (1 / low_p95 - 1 / slo_ms) / (1 / low_p95 - 1 / high_p95)
    rate = low + share * (high - low)
    return min(max(rate, low * (high / low) ** 0.1), low * (high / low) ** 0.9)


def saturates_at(points: list[Point]) -> Optional[float]:
    """The lowest offered rate whose replay saturated: from there on the queue grows without
    bound. (What a saturated replay answered a second is on its point: with the drain after the
    last arrival, it can read under a capacity measured in another run.)"""
    offered = [p.offered_per_s for p in points if p.saturated]
    return min(offered) if offered else None


def capacity_sentence(capacity_per_s: float, slo_ms: float, points: int, baseline_per_s: Optional[float] = None) -> str:
    """'serves 410 requests/s within 50 ms p95 (baseline 160/s): 2.6x capacity'."""
    text = f"serves {capacity_per_s:,.0f} requests/s within {slo_ms:g} ms p95"
    if baseline_per_s:
        text += f" (baseline {baseline_per_s:,.0f}/s): {capacity_per_s / baseline_per_s:.2f}x capacity"
    return text + f" ({rates_replayed(points)})"


def rates_replayed(count: int) -> str:
    """'1 rate replayed', '4 rates replayed'."""
    return f"{count} {'rate' if count == 1 else 'rates'} replayed"
