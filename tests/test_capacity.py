"""Objective capacity: the bracketing search over arrival rates, saturation told from a long
but steady queue, and model instances serving side by side (threads, and forked processes)."""

import dataclasses
import math
import os
import time

import psutil
import pytest
import torch

from advisor import capacity
from advisor.harness import instances
from advisor.kinds.infer.loop import latency_summary, open_loop
from advisor.measure import percentile


def service_with_capacity(limit: float, calls: list):
    """A synthetic service whose p95 stays at 5 ms up to `limit` requests/s and saturates past it."""
    def measure_at(rate: float, full: bool = False) -> capacity.Point:
        calls.append(rate)
        if rate > limit:
            return capacity.Point(rate, limit, None, None, None, True)
        return capacity.Point(rate, rate, 2.0, 5.0, 6.0, False)

    return measure_at


@pytest.mark.parametrize("start", [10.0, 90.0, 4000.0])
def test_the_bracketing_search_lands_within_its_precision_below_the_limit(start):
    calls = []
    found, points = capacity.bracket(service_with_capacity(437.0, calls), 50.0, start)
    assert 437.0 / capacity.PRECISION <= found <= 437.0, (found, calls)
    assert len(points) == len(calls) <= capacity.MAX_POINTS and len(points) >= 4
    assert [p.offered_per_s for p in points] == sorted(calls)
    assert 437.0 < capacity.saturates_at(points) <= 437.0 * capacity.PRECISION, "the lowest rate offered that saturated"


def test_one_stall_while_doubling_does_not_halve_the_capacity():
    """The first replay at 320/s stalls (a p95 over the SLO), the second keeps it: the search
    doubles on; without the second look the capacity would read under 320/s."""
    calls, steady = [], service_with_capacity(1000.0, [])

    def stalls_once(rate: float, full: bool = False) -> capacity.Point:
        calls.append(rate)
        if rate == 320.0 and calls.count(320.0) == 1:
            return capacity.Point(rate, rate, 2.0, 80.0, 90.0, False)
        return steady(rate)

    found, _ = capacity.bracket(stalls_once, 50.0, 10.0)
    assert found > 900.0 and calls.count(320.0) == 2, calls


def test_no_rate_within_the_slo_is_capacity_zero_after_a_few_halvings():
    calls = []
    found, points = capacity.bracket(lambda rate, full: calls.append(rate) or capacity.Point(rate, rate, 9, 90, 99, False),
                                     50.0, 100.0)
    assert found == 0.0 and min(calls) == 100.0 / 2 ** capacity.HALVINGS and len(points) == len(calls)


def test_the_open_bracket_replays_briefly_and_the_capacity_kept_the_slo_in_a_full_replay():
    """Replays are short while the bracket is open, full where they decide; a service whose queue
    shows its tail only over the full replay (short ones keep the SLO up to 60/s, full ones up
    to 40/s) is reported at what the full replays kept, in seconds of arrivals a plan."""
    for start in (5.0, 20.0, 400.0):
        replays = []

        def queue(rate: float, full: bool) -> capacity.Point:
            requests = capacity.requests_at(rate, full, 200)
            replays.append((rate, requests / rate, full))
            return service_with_capacity(40.0 if full else 60.0, [])(rate, full)

        found, _ = capacity.bracket(queue, 50.0, start)
        assert 40.0 / capacity.PRECISION <= found <= 40.0, replays
        assert any(full for rate, _, full in replays if rate == found), "the capacity rests on a full replay"
        assert sum(seconds for _, seconds, full in replays if not full) <= 15.0, replays
        assert sum(seconds for _, seconds, _ in replays) <= 45.0, replays
    assert capacity.requests_at(1000.0, True, 400) == 400 and capacity.requests_at(10.0, False, 400) == capacity.MIN_REQUESTS
    assert capacity.requests_at(1.0, False, 400) == 5, "a rate far under any service's edge: seconds, not minutes"


def test_a_full_replay_at_a_few_requests_a_second_lasts_seconds_and_none_runs_far_past_the_deadline():
    """A service whose p95 barely fits its SLO keeps it only at a few requests a second: there all
    of 200 timed requests took 110 s a replay. A full replay spans FULL_MOST_S of arrivals at most
    (FULL_LEAST requests at least), and one begun near the search's deadline offers what fits."""
    assert capacity.requests_at(50.0, True, 200) == 200, "where 200 requests arrive within the bound, every one"
    assert capacity.requests_at(5.0, True, 200) == math.ceil(5.0 * capacity.FULL_MOST_S)
    assert capacity.requests_at(1.0, True, 200) == capacity.FULL_LEAST, "a p95 on its slowest few, not on one"
    assert capacity.requests_at(50.0, True, 200, left_s=2.0) == 100, "2 s left at 50/s: what arrives by the deadline"
    assert capacity.requests_at(50.0, True, 200, left_s=-5.0) == capacity.MIN_REQUESTS, "past it: the least a p95 needs"
    assert capacity.requests_at(50.0, False, 200, left_s=0.1) == capacity.MIN_REQUESTS


def test_the_bracket_narrows_where_the_two_p95s_point_and_takes_fewer_full_replays():
    """A queue with one server (100 requests/s): its p95 is ln(20) / (100/s - the arrival rate),
    so its capacity within 60 ms is 50.07/s. Each full replay's rate is read off the two ends' p95
    (the reciprocal falls linearly with the rate): 4 full replays where a plain bisection took 6,
    about 4 s each on a service of 25 ms."""
    replays = []

    def one_server(rate: float, full: bool) -> capacity.Point:
        replays.append((rate, full))
        if rate >= 100.0:
            return capacity.Point(rate, 100.0, None, None, None, True)
        p95 = 1000 * math.log(20) / (100.0 - rate)
        return capacity.Point(rate, rate, p95 / 3, p95, 1.5 * p95, False)

    found, points = capacity.bracket(one_server, 60.0, 20.0)
    limit = 100.0 - 1000 * math.log(20) / 60.0  # 50.07/s
    assert limit / capacity.PRECISION <= found <= limit, replays
    assert len([rate for rate, full in replays if full]) <= 4, replays
    assert capacity.toward_the_slo(40.0, 80.0, None, 150.0, 60.0) == pytest.approx(math.sqrt(40.0 * 80.0)), "saturated"
    assert capacity.toward_the_slo(40.0, 80.0, 59.9, 500.0, 60.0) == pytest.approx(40.0 * 2 ** 0.1), "inside the bracket"


def test_a_capacity_search_past_its_time_reports_what_kept_the_slo_in_full_and_begins_no_replay():
    """On a machine busy enough that replays take long, the search stops at its own time, not at
    the run's limit (where it would be "hung"): its figure is the last rate a full replay kept."""
    calls = []
    found, points = capacity.bracket(service_with_capacity(437.0, calls), 50.0, 100.0, lambda: len(calls) >= 6)
    assert len(points) == len(calls) == 6
    assert found in [p.offered_per_s for p in points] and found <= 437.0, calls
    none_in_time, nothing = capacity.bracket(service_with_capacity(437.0, []), 50.0, 100.0, lambda: True)
    assert none_in_time == 0.0 and nothing == []


def test_the_capacity_predicted_from_one_at_a_time_keeps_the_slo_there_and_breaks_it_past():
    """A queue of requests served in 25 ms each, arriving as the replay's seeded arrivals do: the
    prediction is the rate where the simulated p95 crosses the SLO (so a slower service, or a
    tighter SLO, predicts less, and two servers more than one); one that breaks the SLO one at a
    time predicts nothing."""
    from advisor.kinds.infer.loop import poisson_arrivals

    unit = poisson_arrivals(200, 1.0, seed=0)
    one = capacity.predicted_capacity([0.025] * 50, 60.0, unit)
    assert 10.0 < one < 40.0, one
    assert capacity.predicted_capacity([0.030] * 50, 60.0, unit) < one > capacity.predicted_capacity([0.025] * 50, 45.0, unit)
    assert capacity.predicted_capacity([0.025] * 50, 60.0, unit, servers=2) > 1.5 * one
    assert capacity.predicted_capacity([0.070] * 50, 60.0, unit) is None
    fast = capacity.predicted_capacity([0.005] * 50, 12.0, unit)  # a 5 ms server, 12 ms p95: about 2 s a replay
    latencies, _, _, _, _ = open_loop([sleeper(0.005)], list(range(200)), 0.9 * fast, 1, 0.0, seed=0)
    assert percentile([1000 * x for x in latencies], 95) <= 12.0 * 1.25, "the real queue sits near the prediction"


def test_a_search_guided_by_a_prediction_replays_in_full_from_it_and_lands_in_few_steps():
    """From a prediction 15% over the capacity (40/s), or twice it, or a third of it: every
    replay is full (short ones over-read near the edge, where a guided search's replays are),
    the figure lands within PRECISION under the limit, in 3 full replays from the close guess and
    no more than 7 from the far ones; a break bounds the search at once (no second look)."""
    for start, most in ((46.0, 3), (80.0, 7), (13.0, 7)):
        replays = []

        def queue(rate: float, full: bool) -> capacity.Point:
            replays.append((rate, full))
            return service_with_capacity(40.0, [])(rate, full)

        found, _ = capacity.bracket(queue, 50.0, start, guided=True)
        assert 40.0 / capacity.PRECISION <= found <= 40.0, replays
        assert all(full for _, full in replays) and len(replays) <= most, (start, replays)
        assert len({rate for rate, _ in replays}) == len(replays), "no rate replayed twice"


def test_a_replay_reads_off_the_capacity_only_where_its_queue_model_hits_its_own_p95():
    """A replay's own service times, queued in its arrivals, read off the rate where they reach
    the SLO: that of `predicted_capacity`, where the queue reproduces the replay's p95; nothing
    where it misses it by more than READ_OFF_AGREEMENT (the model does not describe that
    service); 0.0 where those times break the SLO at any rate."""
    from advisor.kinds.infer.loop import poisson_arrivals

    unit, service = poisson_arrivals(200, 1.0, seed=0), [0.025] * 200
    p95 = capacity.queued_p95_ms(service, 20.0, unit)
    assert capacity.read_off(service, 20.0, p95, 60.0, unit) == capacity.predicted_capacity(service, 60.0, unit)
    assert capacity.read_off(service, 20.0, p95 * 1.02, 60.0, unit) is not None
    assert capacity.read_off(service, 20.0, p95 * (1 + 2 * capacity.READ_OFF_AGREEMENT), 60.0, unit) is None
    assert capacity.read_off([0.070] * 200, 5.0, capacity.queued_p95_ms([0.070] * 200, 5.0, unit), 60.0, unit) == 0.0
    assert capacity.queued_p95_ms(service, 30.0, unit) > p95 > 25.0, "a request's time grows with the rate"
    first = capacity.queued_p95_ms(service[:80], 20.0, unit[:80])  # a replay stopped after 80 answers: checked on those
    assert capacity.read_off(service[:80], 20.0, first, 60.0, unit) == capacity.predicted_capacity(service[:80], 60.0, unit)


def test_a_real_replay_reads_off_the_queues_capacity_whether_it_kept_the_slo_or_stopped_breaking_it():
    """A 10 ms server and a 40 ms SLO: a replay under the queue's capacity and one past it (stopped
    once its p95 is sure to break the SLO) both read off about the capacity their service times
    predict; a batching replay reads nothing off (its service time is not one request's)."""
    from advisor.kinds.infer.loop import open_replay, poisson_arrivals

    expected = capacity.predicted_capacity([0.0101] * 200, 40.0, poisson_arrivals(200, 1.0, seed=0))
    for rate, kept in ((0.8 * expected, True), (1.3 * expected, False)):
        summary = open_replay([sleeper(0.01)], list(range(200)), rate, 1, 0.0, 0, 0.0, 0.0, slo_ms=40.0)
        assert (summary["p95_ms"] <= 40.0) == kept and not summary["saturated"], summary["p95_ms"]
        assert (len(summary["latencies_ms"]) == 200) == kept, "past the capacity the replay stopped early"
        assert abs(summary["reads_off_per_s"] / expected - 1) < 0.15, (rate, summary["reads_off_per_s"], expected)
    summary = open_replay([sleeper(0.01)], list(range(200)), 0.8 * expected, 4, 0.002, 0, 0.0, 0.0, slo_ms=40.0)
    assert "reads_off_per_s" not in summary


def test_a_guided_search_stops_after_one_replay_whose_service_times_read_the_edge_just_over_it():
    """Each replay aimed just under what the last one read off (by AIM): a service whose replays
    read off 40/s is done in one full replay, at the prediction / AIM, once that keeps the SLO and
    reads off less than PRECISION times its rate; a first replay that reads off far more moves to
    just under that, in full, and stops there; one whose reads are missing steps as before."""
    def reading(said):
        def measure_at(rate: float, full: bool) -> capacity.Point:
            replays.append((rate, full))
            point = service_with_capacity(40.0, [])(rate, full)
            return dataclasses.replace(point, reads_off_per_s=None if point.saturated else said(rate))
        return measure_at

    replays = []
    found, points = capacity.bracket(reading(lambda rate: 40.0), 50.0, 40.0, guided=True)
    assert replays == [(40.0 / capacity.AIM, True)] and found == 40.0 / capacity.AIM and len(points) == 1
    replays = []
    found, _ = capacity.bracket(reading(lambda rate: 40.0), 50.0, 20.0, guided=True)
    assert [rate for rate, _ in replays] == [20.0 / capacity.AIM, 40.0 / capacity.AIM], replays
    assert all(full for _, full in replays) and found == 40.0 / capacity.AIM
    replays = []
    found, _ = capacity.bracket(reading(lambda rate: None), 50.0, 20.0, guided=True)
    assert 40.0 / capacity.PRECISION <= found <= 40.0 and len(replays) > 2, replays
    def stalls_first(rate: float, full: bool) -> capacity.Point:  # its first replay stalls: over the SLO, reading 4/s
        replays.append((rate, full))
        if len(replays) == 1:
            return capacity.Point(rate, rate, 30.0, 80.0, 90.0, False, 4.0)
        if rate > 40.0:
            return capacity.Point(rate, 40.0, None, None, None, True)
        return capacity.Point(rate, rate, 2.0, 5.0, 6.0, False, 40.0)

    replays = []
    found, _ = capacity.bracket(stalls_first, 50.0, 40.0, guided=True)
    assert replays[1][0] == pytest.approx(replays[0][0] / capacity.GUIDED_STEP), "one stalled read-off moves a step, no more"
    assert replays[0][0] / capacity.PRECISION <= found <= 40.0 and len(replays) <= 3, replays  # the stall bounds it


def test_a_replay_stops_once_its_p95_is_sure_to_break_the_slo():
    """A 20 ms server offered 100 requests/s falls behind: once enough requests have waited past
    a 50 ms SLO that the p95 over all 200 must break it, the replay stops, its p95 over the
    requests kept (answered, or waiting past the SLO) breaking it too. A 5 ms server offered 25/s
    keeps the SLO, and every request is answered."""
    from advisor.kinds.infer.loop import sure_over

    assert sure_over(200) == 11 and sure_over(20) == 2 and sure_over(1) == 1
    started = time.perf_counter()
    latencies, _, _, arrivals, _ = open_loop([sleeper(0.02)], list(range(200)), 100.0, 1, 0.0, seed=0, slo_ms=50.0)
    assert len(latencies) < 60 and time.perf_counter() - started < 1.5, len(latencies)
    assert percentile([1000 * x for x in latencies], 95) > 50.0 and len(arrivals) == len(latencies)
    latencies, _, _, _, _ = open_loop([sleeper(0.005)], list(range(50)), 25.0, 1, 0.0, seed=0, slo_ms=50.0)
    assert len(latencies) == 50 and percentile([1000 * x for x in latencies], 95) <= 50.0


def sleeper(seconds: float):
    def serve(batch):
        time.sleep(seconds)
        return [None] * len(batch)

    return serve


def test_saturation_is_a_queue_that_grows_not_a_queue_that_waits():
    """A 4 ms server: at 400/s it falls behind for good (saturated, answering ~250/s); at 150/s
    requests still wait now and then, and the queue drains (not saturated)."""
    requests = list(range(200))
    for rate, expected in ((400.0, True), (150.0, False)):
        latencies, services, sizes, arrivals, completions = open_loop([sleeper(0.004)], requests, rate, 1, 0.0, seed=0)
        summary = latency_summary(latencies, services, sizes, 1.0, 0.0, 0.0, arrivals, completions)
        assert summary["saturated"] is expected, (rate, summary["served_per_s"])
    assert summary["served_per_s"] > 120


def test_two_instances_answer_what_one_cannot_keep_up_with():
    """Two 4 ms servers take 400/s (500/s between them) where one saturates; every request is
    answered once, in arrival order of taking."""
    requests, seen = list(range(200)), []

    def recording(batch):
        seen.extend(batch)
        time.sleep(0.004)
        return [None] * len(batch)

    latencies, _, _, arrivals, completions = open_loop([recording, sleeper(0.004)], requests, 400.0, 1, 0.0, seed=0)
    assert not capacity.saturated(arrivals, completions, [1000 * x for x in latencies])
    assert all(done >= arrived for done, arrived in zip(completions, arrivals))
    assert seen == sorted(seen) and 0 < len(seen) < 200, "the first server took its share, in order"


def test_forked_instances_answer_as_the_model_does_and_stop_with_no_process_left():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3).eval()

    def serve(batch):
        with torch.inference_mode():
            return [model(x) for x in batch]

    before = {child.pid for child in psutil.Process(os.getpid()).children()}
    servers, stop = instances.forked(serve, 2)
    children = [child for child in psutil.Process(os.getpid()).children() if child.pid not in before]
    try:
        requests = [torch.randn(1, 4) for _ in range(6)]
        for server in servers:
            outputs = server(requests)
            assert all(torch.equal(out, serve([x])[0]) for out, x in zip(outputs, requests))
        assert instances.threads_each(2) == max(1, min(torch.get_num_threads(), (os.cpu_count() or 1) // 2))
    finally:
        stop()
    assert len(children) == 2 and not any(child.is_running() and child.status() != psutil.STATUS_ZOMBIE
                                          for child in children)


def cold_per_request(cold_s: float, warm_s: float):
    """A server slow the first time it sees each request (a table built per input shape), fast after."""
    seen = set()

    def serve(batch):
        first = [request for request in batch if request not in seen]
        seen.update(first)
        time.sleep(cold_s if first else warm_s)
        return [None] * len(batch)

    return serve


def test_a_capacity_is_a_settled_services_whatever_its_cold_start():
    """A server 25 ms the first time it sees each of 100 requests and 2 ms after, under a 15 ms
    SLO: every request is served once before the search, so its figure is the warm service's, as
    a server warm from the start reads, not one that hangs on which requests the search's earlier
    replays warmed (served one at a time, the first 50 alone, the rest stayed cold for the replays)."""
    from types import SimpleNamespace

    from advisor.kinds.infer.loop import capacity_replay, poisson_arrivals

    config = SimpleNamespace(constraints=SimpleNamespace(p95_ms=15.0), measure=SimpleNamespace(timeout_s=120, seed=0),
                             load=SimpleNamespace(rate_per_s=None))
    timed = list(range(100))
    warm = capacity.predicted_capacity([0.0021] * 100, 15.0, poisson_arrivals(100, 1.0, seed=0))
    found = {}
    for name, server in (("cold", cold_per_request(0.025, 0.002)), ("warm", sleeper(0.002))):
        summary = capacity_replay([server], timed, config, 1, 0.0, 0.0, 0.0)["capacity"]
        assert summary["single_p95_ms"] < 15.0, (name, summary)
        found[name] = summary["per_s"]
    assert found["cold"] >= warm / capacity.PRECISION ** 3 and found["warm"] >= warm / capacity.PRECISION ** 3, (found, warm)


def test_settling_serves_each_distinct_request_once_on_each_instance_within_its_time():
    """The timed requests cycle the source's: each distinct one is served once on each instance,
    one at a time; a slow service's settling stops where its share of the run's time ends."""
    from advisor.kinds.infer.loop import settle

    source = [object() for _ in range(10)]
    timed = [source[index % len(source)] for index in range(30)]
    served = {0: [], 1: []}
    settle([lambda batch, i=i: served[i].extend(batch) for i in served], timed, time.monotonic() + 60)
    assert served[0] == source and served[1] == source
    slow = []
    started = time.monotonic()
    settle([lambda batch: (slow.extend(batch), time.sleep(0.05))], timed, started + 0.2)
    assert 2 <= len(slow) <= 6 and time.monotonic() - started < 0.5, len(slow)
