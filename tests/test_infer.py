"""`kind: infer`: requests replayed under load, latency percentiles, diagnosis of a service's
bottlenecks, outputs compared with the baseline's, and bad input in one line."""

import json
import math
import re

import pytest
import torch
from conftest import config_path, run_cli, side_by_side, write_config

from advisor import capacity
from advisor.diagnosis import diagnose
from advisor.evidence import Evidence
from advisor.harness.batches import concat
from advisor.kinds.infer.compare import compare_served
from advisor.kinds.infer.derive import derive_infer
from advisor.kinds.infer.loop import closed_loop, latency_summary, open_loop, poisson_arrivals, split_output
from advisor.measure import Measurement

SERVED = {
    "name": "served",
    "workload": {"kind": "infer", "model": "shapes:served_model", "requests": "shapes:served_requests"},
    "measure": {"warmup_requests": 2, "requests": 20, "profile_steps": 2, "timeout_s": 60},
    "search": {"precision": 0},  # verdicts stop once clear, for the suite's time (search.precision: test_verify)
}


def test_poisson_arrivals_are_seeded_at_their_rate():
    arrivals = poisson_arrivals(4000, 200.0, seed=3)
    assert arrivals == poisson_arrivals(4000, 200.0, seed=3) and arrivals != poisson_arrivals(4000, 200.0, seed=4)
    assert all(b > a for a, b in zip(arrivals, arrivals[1:]))
    assert len(arrivals) / arrivals[-1] == pytest.approx(200.0, rel=0.08)


def test_open_load_counts_queueing_and_batching_takes_what_arrived():
    """A 4 ms server under 400 requests/s (one every 2.5 ms) queues one by one; batching up to 8
    serves the same requests in fewer calls and far shorter waits."""
    import time

    def serve(batch):
        time.sleep(0.004)
        return [None] * len(batch)

    requests = list(range(120))
    one, services, sizes, arrivals, completions = open_loop([serve], requests, 400.0, 1, 0.0, seed=0)
    assert sizes == [1] * 120 and one[-1] > 0.1  # the queue grew: the last waited far longer than 4 ms
    batched, _, sizes, _, _ = open_loop([serve], requests, 400.0, 8, 0.002, seed=0)
    assert sum(sizes) == 120 and max(sizes) > 1 and len(sizes) < 100  # fewer calls than requests
    assert sorted(batched)[int(0.95 * 120)] < sorted(one)[int(0.95 * 120)] / 3
    summary = latency_summary(one, services, [1] * 120, 1.0, 5.0, 0.1, arrivals, completions)
    assert summary["p50_ms"] <= summary["p95_ms"] <= summary["p99_ms"] <= summary["max_ms"]
    assert summary["queue_share"] > 0.5
    assert summary["saturated"] and summary["served_per_s"] < 300, "a 4 ms server answers 250/s at most"


def test_full_load_is_the_most_a_plan_answers_whatever_the_rate_offered():
    """A 4 ms server: at 100/s offered it keeps up and answers about 100/s, at 400/s it falls
    behind and answers its limit; with every request queued at once it answers that limit
    (about 250/s) either way, and batching up to 8 per 4 ms call about 8 times as many: the
    figure a saturated baseline's claim is a ratio of, where what each plan answered at one
    offered rate would follow how fast the baseline ran."""
    import time

    from advisor.capacity import served_rate
    from advisor.kinds.infer.loop import full_load_rate

    def serve(batch):
        time.sleep(0.004)
        return [None] * len(batch)

    requests = list(range(160))
    rates = {}
    for offered in (100.0, 400.0):
        _, _, _, arrivals, completions = open_loop([serve], requests, offered, 1, 0.0, seed=0)
        rates[offered] = served_rate(arrivals, completions)
    one_at_a_time = full_load_rate([serve], requests, 1, 0.0, seed=0)
    assert rates[100.0] < 130 and 180 < one_at_a_time < 260, (rates, one_at_a_time)
    assert rates[400.0] == pytest.approx(one_at_a_time, rel=0.2), "a saturated server answers its limit"
    batched = full_load_rate([serve], requests, 8, 0.002, seed=0)
    assert 6 < batched / one_at_a_time < 8.5, (batched, one_at_a_time)


def test_the_best_p95_a_replay_can_reach_is_never_harsher_than_its_end():
    """An early hiccup: 5 of 120 requests slow, then the service keeps up. After 30 requests the
    p95 so far is the hiccup's (the pruner once stopped a winner on it); the best case, the rest
    answered at once, is never above the p95 at the end."""
    from advisor.kinds.infer.loop import best_case_p95
    from advisor.measure import percentile

    latencies = [0.1] * 5 + [0.001] * 115
    final = percentile(latencies, 95)
    assert percentile(latencies[:30], 95) > 50 * final, "so far, the hiccup"
    for done in range(1, 121):
        assert best_case_p95(latencies[:done], 120) <= final
    assert best_case_p95(latencies, 120) == final
    assert best_case_p95([0.1] * 7, 120) == pytest.approx(0.1), "7 slow of 120: over 5% whatever comes"


def test_a_replay_reports_what_a_plan_that_cannot_keep_up_can_still_reach(tmp_path):
    """A 4 ms server under 400 requests/s falls behind: the pruner hears, as it goes, the best
    1000 / p95 ms the replay can still end at, which falls as the queue grows and never passes
    what the replay ends at."""
    import json
    import time

    from advisor.kinds.infer.loop import best_case_p95, progress_reporter
    from advisor.measure import percentile

    def serve(batch):
        time.sleep(0.004)
        return [None] * len(batch)

    path, heard = tmp_path / "progress.json", []
    reporter = progress_reporter(str(path), "p95", 120)

    def spy(done, latencies, seconds):
        reporter(done, latencies, seconds)
        if path.exists() and (not heard or json.loads(path.read_text()) != heard[-1]):
            heard.append(json.loads(path.read_text()))

    latencies, *_ = open_loop([serve], list(range(120)), 400.0, 1, 0.0, seed=0, report=spy)
    assert len([h for h in heard if h["steps"] < 120]) >= 2 and all(h["of"] == 120 for h in heard)
    assert [h["steps"] for h in heard] == sorted({h["steps"] for h in heard}) and heard[-1]["steps"] <= 120
    for h in heard:
        assert h["best"] == pytest.approx(1.0 / best_case_p95(latencies[:h["steps"]], 120))
        assert h["best"] >= 1.0 / percentile(latencies, 95) - 1e-9, "never harsher than its end"
    assert heard[-1]["best"] < heard[0]["best"], "the queue grew"
    assert progress_reporter(None, "p95", 120) is None
    throughput = progress_reporter(str(path), "throughput", 120)
    throughput(50, latencies, 0.5)
    written = json.loads(path.read_text())
    assert "best" not in written and written["samples"] / written["seconds"] == pytest.approx(100.0)


@pytest.mark.integration
def test_a_service_run_tells_its_watcher_how_it_goes_and_stops_when_told(tmp_path):
    from advisor.harness import run_measurement
    from advisor.kinds import kind_of, load_config

    config = load_config(write_config(tmp_path, reduced_service("serve_batching")))
    plan = kind_of("infer").baseline_plan(config)
    heard = []
    whole = run_measurement(config, plan, "full", 1, 120, watch=lambda progress: heard.append(progress) or "")
    assert whole.ok, whole.reason
    assert heard and all(h["of"] == 300 and 0 < h["steps"] <= 300 and (h.get("best") or h["samples"]) > 0 for h in heard)
    stopped = run_measurement(config, plan, "full", 1, 120,
                              watch=lambda progress: "losing by far" if progress["steps"] >= 30 else "")
    assert not stopped.ok and stopped.reason == "pruned: losing by far"


def test_closed_load_clients_send_every_request_once():
    seen = []
    latencies, _, _ = closed_loop([lambda batch: seen.extend(batch) or [None]], list(range(30)), 3)
    assert sorted(seen) == list(range(30)) and len(latencies) == 30


def test_batched_outputs_split_back_per_request():
    requests = [{"x": torch.full((n, 2), float(n))} for n in (1, 2, 1)]
    joined = concat(requests)
    assert joined["x"].shape == (4, 2)
    parts = split_output((joined["x"] * 2, torch.tensor(7.0)), [1, 2, 1])
    assert [p[0].shape[0] for p in parts] == [1, 2, 1] and torch.equal(parts[1][0], torch.full((2, 2), 4.0))
    assert all(float(p[1]) == 7.0 for p in parts)


def test_outputs_compared_within_tolerance_and_top1(tmp_path):
    base = [[torch.tensor([[2.0, 1.0, 0.0]])] for _ in range(10)]
    close = [[t[0] * 1.001] for t in base]
    flipped = [[torch.tensor([[1.0, 2.0, 0.0]])]] + base[1:]
    for name, outputs in (("base", base), ("close", close), ("flipped", flipped)):
        torch.save(outputs, tmp_path / f"{name}.pt")
    path = lambda name: str(tmp_path / f"{name}.pt")  # noqa: E731
    assert compare_served(path("close"), path("base"), "tolerance", 1e-2, 0.99).passed
    assert not compare_served(path("close"), path("base"), "exact", 1e-2, 0.99).passed  # exact: to 0.1%
    loose = compare_served(path("flipped"), path("base"), "tolerance", 1.0, 0.95)
    assert not loose.passed and "top-1 agrees on 90.0% of rows" in loose.note


def served_evidence(**latency) -> Evidence:
    values = {"p50_ms": 10.0, "p95_ms": 12.0, "p99_ms": 13.0, "max_ms": 14.0, "mean_ms": 10.5, "throughput_per_s": 90.0,
              "cold_start_ms": 20.0, "load_s": 0.1, "service_ms_p50": 10.0, "service_ms_p95": 11.0, "queue_share": 0.0,
              "mean_batch": 1.0, "rate_per_s": None, **latency}
    full = Measurement("full", {}, "ok", samples=100, latency=values, peak_memory_mb=100.0)
    profile = Measurement("profile", {}, "ok", operators={"ops_per_step": 20, "substantial_op_share": 0.3,
                                                         "us_per_op": 50.0, "top": [], "time_basis": "cpu"})
    evidence = Evidence(full=full, profile=profile, kind="infer", max_memory_mb=10_000)
    return Evidence(full=full, profile=profile, kind="infer", max_memory_mb=10_000,
                    derived=derive_infer(evidence.full, evidence.profile))


def test_service_diagnoses_name_cold_start_queueing_and_under_batching():
    assert [d.bottleneck for d in diagnose(served_evidence())] == []
    cold = diagnose(served_evidence(cold_start_ms=400.0))
    assert cold[0].bottleneck == "cold-start" and cold[0].severity == "high" and cold[0].fixes == ("warmup",)
    settled = diagnose(served_evidence(cold_start_ms=400.0, capacity={"per_s": 80.0, "slo_ms": 50.0}))
    assert "cold-start" not in [d.bottleneck for d in settled], "a capacity is a settled service's: no cold start moves it"
    queued = diagnose(served_evidence(p95_ms=60.0, queue_share=0.6, rate_per_s=85.0, service_ms_p50=10.0))
    assert {d.bottleneck for d in queued} == {"tail", "under-batched"}
    assert "dynamic_batching" in queued[0].fixes and "queueing" in next(d for d in queued if d.bottleneck == "tail").summary


BAD = [
    ({"workload": {**SERVED["workload"], "requests_args": {"features": 5}}},
     "workload.requests: the model cannot take request 0, float32[1, 5]"),
    ({"workload": {**SERVED["workload"], "handler": "shapes:handler_raises"}},
     "workload.handler: it raised on request 0 (ValueError: the request's 'text' field is missing)"),
    ({"load": {"mode": "open", "rate_per_s": 0}}, "load.rate_per_s: expected a number > 0"),
    ({"search": {"objective": "throughput"}}, "search.objective: throughput needs constraints.p95_ms"),
    ({"search": {"objective": "capacity"}}, "search.objective: capacity needs constraints.p95_ms"),
    ({"search": {"objective": "capacity"}, "constraints": {"p95_ms": 0.001}},
     "constraints.p95_ms: 0.001 ms is broken by one request at a time, with no queue (the service's own p95 is"),
]


@pytest.fixture(scope="module")
def bad_service_runs(request, tmp_path_factory) -> dict:
    """`advisor diagnose` of every selected bad service, side by side (conftest's AT_ONCE)."""
    def run(changes, message):
        return run_cli("diagnose", str(write_config(tmp_path_factory.mktemp("bad"), {**SERVED, **changes})), timeout=120)

    return side_by_side(request, "test_bad_service_input_is_one_line_and_exit_2", run)


@pytest.mark.integration
@pytest.mark.parametrize("changes, message", BAD, ids=["request-shape", "handler-raises", "rate-0", "throughput-no-slo",
                                                      "capacity-no-slo", "slo-broken-alone"])
def test_bad_service_input_is_one_line_and_exit_2(bad_service_runs, request, changes, message):
    result = bad_service_runs[request.node.callspec.id]
    assert result.returncode == 2, result.stdout + result.stderr[-2000:]
    assert message in result.stderr.strip().splitlines()[-1] and "Traceback" not in result.stderr, result.stderr[-2000:]


@pytest.mark.integration
def test_a_service_is_replayed_request_by_request(tmp_path):
    from advisor.api import diagnose as run_diagnose

    path = write_config(tmp_path, SERVED)
    done = run_diagnose(path)
    latency = done.evidence.full.latency
    assert done.evidence.full.ok, done.evidence.full.reason
    assert done.evidence.full.samples == 20 and len(latency["latencies_ms"]) == 20
    assert 0 < latency["p50_ms"] <= latency["p95_ms"] <= latency["max_ms"]
    assert done.evidence.full.environment["grad_enabled_outputs"] is True
    assert done.evidence.profile.operators["ops_per_step"] > 0


def reduced_service(name: str) -> dict:
    import yaml

    config = yaml.safe_load(config_path(name).read_text())
    for key in ("model", "requests"):
        file, attr = config["workload"][key].rsplit(":", 1)
        config["workload"][key] = f"{(config_path(name).parent / file).resolve()}:{attr}"
    config["measure"] = {"warmup_requests": 10, "requests": 300, "fresh_rounds": False}  # the suite's time
    config["search"] = {**config["search"], "recipes": ["dynamic_batching"], "trials": 3, "verify_top": 1, "precision": 0}
    return config


def one_at_a_time_capacity(service: dict) -> float:
    """Requests per second the service's model answers one at a time on this machine, in process
    on one thread (its config's), timed after a warm-up: the open-load tests load it past this."""
    import time

    import torch
    from conftest import ROOT

    from advisor.workload import resolve_callable

    workload = service["workload"]
    model = resolve_callable(workload["model"], ROOT, "workload.model")(**workload.get("model_args", {})).eval()
    requests = resolve_callable(workload["requests"], ROOT, "workload.requests")(**workload.get("requests_args", {}))
    threads = torch.get_num_threads()
    torch.set_num_threads(workload.get("threads") or 1)
    try:
        with torch.inference_mode():
            for request in requests[:20]:
                model(request)
            started = time.perf_counter()
            for request in requests * 2:
                model(request)
            return 2 * len(requests) / (time.perf_counter() - started)
    finally:
        torch.set_num_threads(threads)


@pytest.mark.integration
def test_batching_is_verified_on_p95_for_an_under_batched_service(tmp_path):
    """The open-load reference, reduced: diagnosed under-batched; dynamic batching verified, its
    outputs equal to the baseline's within output_rtol, on requests answered a second, as the
    baseline saturates. Retune re-checks it while nothing changed, and names a changed model."""
    from advisor.api import as_config, optimize
    from advisor.fingerprint import describe_changes, fingerprint
    from advisor.retune import retune

    service = reduced_service("serve_batching")
    # past one-at-a-time capacity on this machine, whatever its speed: the queue grows (a fixed
    # 900/s was past it where the test was written, and under it on a machine that answers 1,190/s)
    service["load"] = {**service["load"], "rate_per_s": round(1.5 * one_at_a_time_capacity(service))}
    done = optimize(service, root=tmp_path)
    assert done.session.diagnoses[0].bottleneck == "under-batched"
    top = done.recommendations[0]
    assert top.recipes == ("dynamic_batching",) and top.verified and top.numerics["passed"], (top.speedup, top.interval, top.reason)
    # lower, not a set fraction lower: the baseline's p95 is its queue's, which grows with how long
    # a run lasts past capacity (12.8 ms against batching's 10.2 in one full-suite run);
    # the verdict's own bar is on the full-load rates, asserted below
    assert top.latency_ms["p95_ms"] < done.payload["baseline"]["latency_ms"]["p95_ms"]
    assert done.payload["unit"] == "/s (1000 / p95 ms)"
    # offered past one-at-a-time capacity (or, in its child runs, close to it): its p95 is queueing,
    # so the claim is of the most requests each answers a second, every request queued at once
    said = done.payload["baseline"]["latency_ms"]
    assert said["offered_per_s"] > 0.75 * said["full_load_per_s"], said
    assert top.speedup_basis == "answered", (said, top.speedup_basis)
    # what batching buys at full load depends on the CPU: 1.5x and more with AVX-512, 1.44x on a
    # 2-core EPYC without it; the verdict's own bar is checked by `verified` above
    assert top.latency_ms["full_load_per_s"] > 1.25 * said["full_load_per_s"], (top.latency_ms, said)
    assert top.speedup == pytest.approx(top.latency_ms["full_load_per_s"] / said["full_load_per_s"], rel=0.25)
    assert "speedups are of the most requests each plan answers a second" in (done.folder / "report.md").read_text()

    config = as_config(service, tmp_path)
    rechecked = retune(config, done.payload)  # judged on the estimate, not the bar
    assert not rechecked.changes and rechecked.verdict is not None and rechecked.verdict.speedup > 1.2, rechecked.detail
    wider = as_config({**service, "workload": {**service["workload"], "model_args": {"hidden": 1024}}}, tmp_path)
    environment = done.session.evidence.full.environment
    changes = describe_changes(done.payload["fingerprint_components"], fingerprint(wider, environment)["components"])
    assert any("workload.model_args.hidden" in change for change in changes), changes


@pytest.mark.integration
def test_batching_raises_throughput_within_the_slo_the_baseline_breaks(tmp_path):
    """Objective throughput under constraints.p95_ms: the overloaded baseline breaks the SLO (its
    trial infeasible, not a crash), is run once without it as the reference, and batching is
    verified on throughput with every round inside the SLO."""
    from advisor.api import optimize

    service = reduced_service("serve_batching_slo")
    # Throughput under open load is capped by the arrival rate, so the win is at most the rate over
    # the baseline's capacity: at 1.2x of it (900/s) that was 1.23x on a CI machine whose 5-round
    # interval (1.02x-1.48x) missed 1.05x; at 2.5x of it batching keeps up and the baseline cannot
    # (2.6-2.8x there). A fixed rate is not: 1800/s was under the SLO's reach on a faster machine.
    service["load"] = {**service["load"], "rate_per_s": round(2.5 * one_at_a_time_capacity(service))}
    done = optimize(service, root=tmp_path)
    base = next(t for t in done.session.trials if t.number == 0).measurement
    assert not base.ok and base.reason.startswith("over the p95 SLO"), base.reason
    assert done.payload["numerics_reference"] == "the baseline run once without the p95 SLO"
    top = done.recommendations[0]
    assert top.recipes == ("dynamic_batching",) and top.verified, (top.speedup, top.interval, top.reason)
    assert top.interval[0] > 1.05 and top.latency_ms["p95_ms"] <= 50 and top.failed_runs == 0
    said = done.payload["baseline"]["latency_ms"]  # the reference, overloaded: its p95 is the run's length
    assert said["saturated"] and said["served_per_s"] < service["load"]["rate_per_s"], said
    assert "saturates at" in (done.folder / "report.md").read_text()


@pytest.mark.integration
def test_capacity_under_the_slo_is_verified_with_its_load_curve(tmp_path):
    """Objective capacity on the batching reference, reduced: the baseline's and #1's capacity
    (the highest Poisson rate within the p95 SLO), dynamic batching's gain verified on their
    paired ratios, each load curve in recommendations.json, the report and MLflow (#1's, a
    batching plan's, at least 3 rates; the baseline's guided search ends where a rate that broke
    the SLO lies within PRECISION of one that kept it, or where the kept one's service times read
    off under PRECISION times it: `capacity.guided_bracket`); past its capacity the baseline
    saturates, said so."""
    import json

    from mlflow import MlflowClient

    from advisor.api import optimize

    service = reduced_service("serve_capacity")
    service["measure"]["requests"] = 150
    service["search"] = {**service["search"], "trials": 2}
    done = optimize(service, root=tmp_path)
    top, base = done.recommendations[0], done.payload["baseline"]["latency_ms"]
    assert top.recipes == ("dynamic_batching",) and top.verified, (top.speedup, top.interval, top.reason)
    assert top.latency_ms["capacity_per_s"] > 1.5 * base["capacity_per_s"] > 0
    curves = json.loads((done.folder / "recommendations.json").read_text())["load_curve"]
    assert curves["slo_ms"] == 20 and len(curves["#1"]) >= 3
    kept = [p["offered_per_s"] for p in curves["baseline"] if not p["saturated"] and p["p95_ms"] <= 20]
    broke = [p["offered_per_s"] for p in curves["baseline"] if p["saturated"] or p["p95_ms"] > 20]
    read_off = [p["reads_off_per_s"] for p in curves["baseline"] if p["offered_per_s"] == max(kept)]
    assert (min(broke, default=math.inf) <= capacity.PRECISION * max(kept)
            or (read_off[0] is not None and read_off[0] < capacity.PRECISION * max(kept))), curves["baseline"]
    for point in curves["baseline"] + curves["#1"]:
        assert (point["p95_ms"] is None) == point["saturated"] and point["served_per_s"] > 0
        assert point["saturated"] or point["p50_ms"] <= point["p95_ms"] <= point["p99_ms"]
    report = (done.folder / "report.md").read_text()
    assert "![load_curve](load_curve.png)" in report and "x capacity" in report
    saturated = [p["offered_per_s"] for p in curves["baseline"] if p["saturated"]]  # a rate may break the SLO unsaturated
    assert ("the baseline saturates at" in report) == bool(base["saturates_at_per_s"]) == bool(saturated)
    client = MlflowClient(done.payload["mlflow"]["uri"])
    logged = {a.path for a in client.list_artifacts(done.payload["mlflow"]["session_run_id"])}
    assert "load_curve.json" in logged, logged


def test_a_dtype_clash_between_autocast_and_int8_layers_names_both_recipes():
    from advisor.harness.child import failure_reason
    from advisor.kinds.infer.loop import make_server, prepare_model

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, batch_first=True), 1, enable_nested_tensor=False),
        torch.nn.Linear(16, 4))
    plan = {"amp.dtype": "bfloat16", "quantize_dynamic.dtype": "qint8", "inference_mode.enabled": True}
    serve = make_server(prepare_model(model, plan, torch.device("cpu")), None, plan, torch.device("cpu"))
    with pytest.raises(RuntimeError) as crash:
        serve([torch.randn(1, 8, 16)])
    assert re.search(r"amp \(bfloat16 autocast\) and quantize_dynamic do not run together",
                     failure_reason(crash.value, plan)), "the child's reason names both recipes"
    assert "quantize_dynamic" not in failure_reason(crash.value, {"amp.dtype": "bfloat16"}), "not without the pair"
    # either recipe alone serves
    for alone in ({"amp.dtype": "bfloat16", "inference_mode.enabled": True}, {"quantize_dynamic.dtype": "qint8"}):
        served = make_server(prepare_model(model, alone, torch.device("cpu")), None, alone, torch.device("cpu"))
        assert served([torch.randn(1, 8, 16)])[0].shape == (1, 8, 4)


def test_a_nan_answer_never_matches_finite_outputs(tmp_path):
    """max(worst, nan) keeps the old value, and one score a row has no top-1 to compare: an
    all-NaN answer of shape [8, 1] once passed as "outputs match", for exact and tolerance alike."""
    base = [[torch.randn(8, 1)] for _ in range(4)]
    nan = [[torch.full((8, 1), float("nan"))] for _ in range(4)]
    one_inf = [[t[0].clone()] for t in base]
    one_inf[2][0][3, 0] = float("inf")
    for name, outputs in (("base", base), ("nan", nan), ("inf", one_inf)):
        torch.save(outputs, tmp_path / f"{name}.pt")
    path = lambda name: str(tmp_path / f"{name}.pt")  # noqa: E731
    for risk in ("exact", "tolerance"):
        found = compare_served(path("nan"), path("base"), risk, 1e-2, 0.95)
        assert not found.passed and "8 of 8 outputs are NaN or infinite where the baseline's outputs are finite" in found.note
    found = compare_served(path("inf"), path("base"), "tolerance", 1e-2, 0.95)
    assert not found.passed and found.note.startswith("request 2: 1 of 8")
    assert compare_served(path("base"), path("base"), "exact", 1e-2, 0.95).passed


def test_the_batching_snippet_returns_each_request_its_own_rows():
    """The snippet is what was verified: requests of several rows each get their rows back, as
    the harness split them (`split_output`), not one row each."""
    import queue

    from advisor.recipes.dynamic_batching import snippet

    code = snippet({"dynamic_batching.max_batch": 4, "dynamic_batching.max_wait_ms": 50.0})
    namespace = {"model": lambda x: x * 2}
    exec(code, namespace)
    replies = [queue.Queue() for _ in range(3)]
    inputs = [torch.full((rows, 2), float(rows)) for rows in (1, 3, 2)]
    for x, reply in zip(inputs, replies):
        namespace["requests"].put((x, reply))
    outputs = [reply.get(timeout=10) for reply in replies]
    assert [tuple(o.shape) for o in outputs] == [(1, 2), (3, 2), (2, 2)]
    assert all(torch.equal(o, x * 2) for o, x in zip(outputs, inputs))


def test_a_nondeterministic_service_is_said_and_no_plan_is_verified_on_its_outputs(tmp_path):
    """A service that answers the same request differently (dropout left on) once had even its
    exact fixes rejected as "outputs differ by 113%". The baseline is compared with itself
    first: the comparison then says the service is nondeterministic and verifies nothing on
    its outputs, where a service that repeats itself is compared as before."""
    from shapes import dropout_served_model, served_model, served_requests

    from advisor.kinds import parse_config
    from advisor.kinds.infer import KIND
    from advisor.kinds.infer.body import serving_body
    from advisor.kinds.infer.loop import InferJob, run
    from advisor.outputs import output_path

    config = parse_config({**SERVED, "measure": {**SERVED["measure"], "requests": 8}}, tmp_path / "advisor.yaml")
    kept = {}
    for name, build in (("dropout", dropout_served_model), ("steady", served_model)):
        done = run(config, lambda build=build: InferJob(build(), served_requests()), {}, "full",
                   output_path=str(output_path(config, {"service": name}, ".pt")))
        kept[name] = Measurement.from_dict({"mode": "full", "status": "ok", "plan": {}, **done})
    assert kept["steady"].output["repeat_difference"] == 0.0
    assert kept["dropout"].output["repeat_difference"] > 0.05
    for risk in ("exact", "tolerance"):
        found = KIND.compare(kept["dropout"], kept["dropout"], risk, config)
        assert not found.passed and found.note.startswith("the service is nondeterministic: the baseline answers")
        assert "eval mode" in found.note
        assert KIND.compare(kept["steady"], kept["steady"], risk, config).passed
    said = "\n".join(serving_body(Evidence(full=kept["dropout"], profile=kept["dropout"]), []))
    assert "the service is nondeterministic" in said


@pytest.mark.integration
def test_a_plan_that_answers_nan_faster_is_never_verified(tmp_path):
    """End to end: inference mode makes this service fast and every answer NaN. Its trial wins
    on speed; the comparison with the baseline's finite outputs rejects it, in those words."""
    from advisor.api import optimize

    service = {**SERVED, "workload": {**SERVED["workload"], "model": "shapes:nan_when_fast_model"},
               "search": {**SERVED["search"], "recipes": ["inference_mode"], "trials": 2}}
    done = optimize(service, root=tmp_path)
    fast = [t for t in done.session.trials if t.plan.get("inference_mode.enabled") and t.measurement.ok]
    assert fast and fast[0].samples_per_s > 1.5 * done.session.baseline_samples_per_s, "its trial won on speed"
    assert not [r for r in done.recommendations if r.verified], [(r.recipes, r.reason) for r in done.recommendations]
    said = json.dumps(done.payload["rejected"]) + json.dumps(done.payload["recommendations"])
    assert "outputs are NaN or infinite where the baseline's outputs are finite" in said, said[:3000]
