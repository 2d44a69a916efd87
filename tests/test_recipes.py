"""One contract test over every recipe, and each recipe applied for real in a child process."""

import ast
import itertools
import math

import pytest
from conftest import TINY, config_path, merged, write_config

from advisor.harness import run_measurement
from advisor.harness.train import steady_steps
from advisor.kinds import baseline_plan, load_config
from advisor.plan import PLAN_KEYS
from advisor.recipes import RECIPES, Context, IntRange, by_name
from advisor.recipes.base import RISKS

BOTTLENECKS = {"input-fetch", "input-prep", "transfer", "compute", "overhead", "memory", "parse", "io", "python",
               "cold-start", "tail", "under-batched", "network"}  # services: see diagnose.SERVING_RULES; network: DISTRIBUTED_RULES
TRAIN_RECIPES = [r for r in RECIPES if "train" in r.kinds]
PIPELINE_RECIPES = [r for r in RECIPES if "pipeline" in r.kinds]

SERVING = [  # services: each inference recipe applies to one of them
    Context(device=device, cores=2, default_threads=2, blocks=0, cpu_bf16=True, bottlenecks=("compute", "tail"),
            kind="infer", grad_enabled=True, open_load=True, batchable=True, linear_layers=3, conv_layers=conv)
    for device, conv in (("cpu", 0), ("cpu", 2), ("cuda", 2))
]
CONTEXTS = SERVING + [
    Context(device=device, cores=cores, default_threads=cores, blocks=blocks, cpu_bf16=bf16, bottlenecks=bottlenecks)
    for device, cores, blocks, bf16, bottlenecks in itertools.product(
        ("cpu", "cuda"), (1, 2, 16), (0, 8), (False, True), (("input-fetch",), ("input-prep", "compute"))
    )
] + [
    Context(device="cpu", cores=cores, default_threads=1, blocks=0, cpu_bf16=False, bottlenecks=("parse", "memory"),
            kind="pipeline", source_format=fmt, partition_safe=safe, rows=100_000, columns=("a", "b", "c"),
            used_columns=used, category_columns=categories, dask_scheduler=scheduler,
            rewrites=(("a.py:3", "def f_columns(frame):\n    return frame['a'] * 2\n"),) if used == ("a", "b") else (),
            missing_text_columns=("c",) if fmt == "jsonl" else ())
    for cores, fmt, safe, used, categories, scheduler in itertools.product(
        (1, 2), ("csv", "jsonl", "parquet"), (False, True), (("a", "b"), ("a", "b", "c")), ((), ("c",)),
        (None, "tcp://127.0.0.1:8786"),
    )
]


def in_space(value, param) -> bool:
    if isinstance(param, IntRange):
        return isinstance(value, int) and param.low <= value <= param.high
    return value in param.options


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.name)
def test_recipe_contract(recipe):
    assert recipe.summary and recipe.risk in RISKS
    assert set(recipe.targets) <= BOTTLENECKS and recipe.targets
    assert set(recipe.keys) <= set(PLAN_KEYS)
    for context in CONTEXTS:
        reason = recipe.why_not(context)
        if reason is not None:
            assert isinstance(reason, str) and reason
            continue
        space = recipe.space(context)
        assert space and set(space) <= set(recipe.keys)
        for param in space.values():
            assert (param.low <= param.high) if isinstance(param, IntRange) else param.options
        textbook = recipe.textbook(context)
        assert set(textbook) <= set(space), "the textbook setting lies in the search space"
        assert all(in_space(value, space[key]) for key, value in textbook.items())
        baseline = {**{key: None for key in PLAN_KEYS}, "dataloader.num_workers": 0, "dataloader.prefetch_factor": 2,
                    "dataloader.persistent_workers": False, "dataloader.pin_memory": False,
                    "threads.intra_op": context.default_threads, "threads.inter_op": context.default_threads,
                    "checkpointing.share": 0.0, "allocator.keep_mb": 0, "dataloader.fetch_threads": 1,
                    "grad_accumulation.micro_batches": 1,
                    "pipeline.parquet_cache": False, "pipeline.format": context.source_format or None,
                    "inference_mode.enabled": False, "warmup.requests": 0, "dynamic_batching.max_batch": 1,
                    "dynamic_batching.max_wait_ms": 0.0, "channels_last.enabled": False, "tf32.enabled": False,
                    "cudnn_benchmark.enabled": False, "fused_optimizer.enabled": False,
                    "ddp.bucket_cap_mb": context.bucket_cap_mb, "ddp.gradient_as_bucket_view": False,
                    "ddp.static_graph": False, "ddp.find_unused_parameters": context.find_unused_parameters,
                    "serving.instances": 1, "serving.mode": "thread"}
        off = {key: baseline[key] for key in space}
        assert all(in_space(value, space[key]) for key, value in off.items()), "the search can turn it off"
        plan = {**baseline, **textbook}
        assert recipe.active(plan, baseline) or recipe.name == "threads"
        ast.parse(recipe.snippet(plan))


# A value for each fold that a recipe at its off settings must hand back as it came (the loader's
# options are built from the user's own settings, which are never off).
FOLD_VALUES = {"process": None, "grad_scaler": None, "micro_batches": 1, "queued_batches": 0, "non_blocking": False,
               "request": object(), "batching": (1, 0.0), "warm_requests": 0, "failure": "", "read_options": {},
               "after_read": object(), "execute": object(), "ddp": {"bucket_cap_mb": 25.0}, "comm_hook": None,
               "dataset": object(), "instances": (1, "thread"), "batch": object()}


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.name)
def test_a_recipe_at_its_off_settings_leaves_the_run_as_it_was(recipe):
    """Every hook is called for every recipe that has it: one whose keys are off (or absent, in
    another kind's plan) must change nothing; and what it declares beside its hooks stays in
    its own keys."""
    import types

    import torch

    from advisor.recipes import CONTEXTS as CONTEXT_HOOKS
    from advisor.recipes import FOLDS

    assert set(recipe.hooks) <= FOLDS | CONTEXT_HOOKS, "a hook the loops never call"
    assert set(recipe.off) <= set(recipe.keys) and set(recipe.settings_off()) == set(recipe.keys)
    model = torch.nn.Linear(2, 2)
    for plan in (recipe.settings_off(), {}):
        assert recipe.idle({**plan, **{key: 1 for key in PLAN_KEYS if key not in plan}}) <= set(PLAN_KEYS)
        for hook, apply in recipe.hooks.items():
            if hook in CONTEXT_HOOKS:
                with apply(plan, device_type="cpu"):
                    pass
            elif hook in ("model", "compiled"):
                assert apply(model, plan) is model
            elif hook == "optimizer":
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                assert apply(optimizer, plan) is optimizer
            elif hook == "prepare":
                run = types.SimpleNamespace(fmt="csv", files=["a.csv"], plan=plan)
                assert apply(run, plan) is run and run.fmt == "csv" and run.files == ["a.csv"]
            elif hook == "failure":
                assert apply("", plan, text="expected scalar type Float") == ""
            elif hook in ("read_options", "after_read"):
                value = FOLD_VALUES[hook]
                assert all(apply(value, plan, fmt=fmt) is value or apply(value, plan, fmt=fmt) == value
                           for fmt in ("csv", "jsonl", "parquet"))
            elif hook == "grad_scaler":
                assert apply(None, plan, device_type="cpu") is None
            elif hook != "loader":
                value = FOLD_VALUES[hook]
                assert apply(value, plan) == value or apply(value, plan) is value, hook


@pytest.mark.parametrize("reference", ["quickstart", "serve_encoder", "parse_bound"])
def test_a_recipes_off_settings_are_its_kinds_baseline(reference):
    """Where a kind's baseline spells a recipe's key that the user cannot set, it is off there as
    the recipe declares it: so a recipe newer than the kind joins the baseline at its off settings."""

    from advisor.kinds import kind_of

    config = load_config(config_path(reference))
    plan = kind_of(config.kind).baseline_plan(config, None)
    users = {"threads.intra_op", "threads.inter_op", "pipeline.engine", "pipeline.dtype_backend"}  # the config may set them
    compared = 0
    for recipe in RECIPES:
        for key, off in recipe.settings_off().items():
            if key in plan and key not in users and not key.startswith("dataloader."):
                assert plan[key] == off, (recipe.name, key)
                compared += 1
    assert compared >= 3


def test_recipes_are_listed_once():
    names = [r.name for r in RECIPES]
    assert len(names) == len(set(names)) and by_name("amp").name == "amp"


def test_when_recipes_do_not_apply():
    cpu = Context(device="cpu", cores=2, default_threads=2, blocks=0, cpu_bf16=False)
    assert "bfloat16" in by_name("amp").why_not(cpu)
    assert "blocks" in by_name("checkpointing").why_not(cpu)
    assert "float16" not in by_name("amp").space(Context("cpu", 2, 2, 0, True))["amp.dtype"].options
    assert "float16" in by_name("amp").space(Context("cuda", 2, 2, 0, True))["amp.dtype"].options
    assert "dataloader.pin_memory" not in by_name("dataloader").space(cpu)
    assert "dataloader.pin_memory" in by_name("dataloader").space(Context("cuda", 2, 2, 0, True))


def test_a_service_also_tunes_inter_op_threads():
    assert set(by_name("threads").space(SERVING[0])) == {"threads.intra_op", "threads.inter_op"}
    assert set(by_name("threads").space(Context("cpu", 2, 2, 0, True))) == {"threads.intra_op"}
    assert "set_num_interop_threads(1)" in by_name("threads").snippet({"threads.intra_op": 2, "threads.inter_op": 1})


def test_fetch_stalls_search_past_the_core_count():
    fetch = Context("cpu", 2, 2, 0, True, bottlenecks=("input-fetch",))
    prep = Context("cpu", 2, 2, 0, True, bottlenecks=("input-prep",))
    space = by_name("dataloader").space
    assert space(fetch)["dataloader.num_workers"].high > 2 * fetch.cores
    assert space(prep)["dataloader.num_workers"].high == prep.cores


def test_checkpointing_wraps_a_share_and_keeps_results():
    import torch

    from advisor.recipes.checkpointing import checkpointed_class, wrap

    def make():
        torch.manual_seed(0)
        return torch.nn.Sequential(*[torch.nn.Linear(8, 8) for _ in range(16)])

    x = torch.randn(4, 8)
    reference = make()
    expected = reference(x).sum()
    expected.backward()
    model = wrap(make(), 0.5)
    wrapped = [m for m in model if isinstance(m, checkpointed_class())]
    assert len(wrapped) == 2 and sum(len(m.inner) for m in wrapped) == 8
    got = model(x).sum()
    got.backward()
    assert torch.allclose(got, expected)
    first = wrapped[0].inner[0]
    assert torch.allclose(first.weight.grad, reference[0].weight.grad)


def test_grad_accumulation_is_the_full_batch_step_in_parts():
    """Micro-batches (7 does not divide 30) give the full batch's losses and parameters, up to
    float reordering; a model with BatchNorm is left out."""
    import torch

    from advisor.harness.train import default_loss, make_train_step

    def train(micro: int) -> tuple[list[float], torch.nn.Module]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.GELU(), torch.nn.Linear(16, 3))
        step = make_train_step(model, torch.optim.SGD(model.parameters(), lr=0.1), default_loss,
                               torch.device("cpu"), {"grad_accumulation.micro_batches": micro})
        generator = torch.Generator().manual_seed(1)
        batches = [(torch.randn(30, 6, generator=generator), torch.randint(0, 3, (30,), generator=generator))
                   for _ in range(5)]
        return [float(step(batch)) for batch in batches], model

    full_losses, full = train(1)
    part_losses, parts = train(7)
    assert part_losses == pytest.approx(full_losses, rel=1e-5)
    assert full_losses[-1] < full_losses[0]  # it trained
    for a, b in zip(full.parameters(), parts.parameters()):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)
    assert by_name("grad_accumulation").why_not(Context("cpu", 2, 2, 0, True, batch_stat_layers=2))


@pytest.mark.integration
@pytest.mark.parametrize("recipe", TRAIN_RECIPES, ids=lambda r: r.name)
def test_recipe_runs_in_the_harness(tmp_path, recipe):
    path = write_config(tmp_path, merged(TINY, {"workload": {"model": "broken:small_mlp", "dataset": "broken:trouble_dataset"}}))
    config = load_config(path)
    context = Context("cpu", 2, 2, 5, True)
    baseline = baseline_plan(config)
    plan = {**baseline, **recipe.textbook(context)}
    run = run_measurement(config, plan, "full", 4, 240)
    assert run.ok, run.reason
    assert len(run.losses) == steady_steps(4, plan) and all(math.isfinite(loss) for loss in run.losses)


@pytest.mark.integration
@pytest.mark.parametrize("recipe", [r for r in PIPELINE_RECIPES if r.name != "vectorise"], ids=lambda r: r.name)
def test_pipeline_recipe_runs_and_keeps_the_output(tmp_path, recipe):
    # vectorise needs row-wise code, which this transform has none of: tests/test_vectorise.py runs it in a child
    """Each pipeline recipe at its textbook setting, in a real child: the output equals the baseline's."""
    import json

    import tables

    from advisor.kinds.pipeline.compare import compare_frames

    tables.write_sales(tmp_path / "sales.csv", 8_000)
    config = {"name": "tables", "workload": {
        "kind": "pipeline", "source": {"path": "sales.csv"}, "transform": "tables:total_by_key",
        "partition_safe": True, "combine": "tables:combine_totals", "order_matters": False}}
    config = load_config(write_config(tmp_path, json.loads(json.dumps(config))))
    context = Context("cpu", 2, 1, 0, False, kind="pipeline", source_format="csv", partition_safe=True, rows=8_000,
                      columns=("key", "city", "amount", "unused", "note"), used_columns=("key", "amount"),
                      category_columns=("city", "note"))
    assert recipe.why_not(context) is None
    baseline = baseline_plan(config)
    outputs = {name: tmp_path / f"{name}.pkl" for name in ("baseline", "recipe")}
    base = run_measurement(config, baseline, "full", 1, 120, output_path=outputs["baseline"], fresh=True)
    run = run_measurement(config, {**baseline, **recipe.textbook(context)}, "full", 1, 120,
                          output_path=outputs["recipe"], fresh=True)
    assert base.ok and run.ok, run.reason
    assert run.samples == 8_000
    same = compare_frames(str(outputs["recipe"]), str(outputs["baseline"]), recipe.risk, 1e-9, order_matters=False)
    assert same.passed, same.note


def test_timed_window_outlasts_the_dataloader_queue():
    assert steady_steps(15, {"dataloader.num_workers": 6, "dataloader.prefetch_factor": 8}) == 96
    assert steady_steps(15, {"dataloader.num_workers": 2, "dataloader.prefetch_factor": None}) == 15
    assert steady_steps(15, {"dataloader.num_workers": 0, "dataloader.prefetch_factor": 8}) == 15


def test_arrow_dtypes_are_not_tried_on_text_with_missing_values():
    """Arrow strings make a missing note NA, and `frame[frame.note != "x"]` then fails or drops it."""
    missing = Context("cpu", 2, 1, 0, False, kind="pipeline", missing_text_columns=("note",))
    assert "note" in by_name("dtypes").why_not(missing) and "NA" in by_name("dtypes").why_not(missing)
    with_categories = Context("cpu", 2, 1, 0, False, kind="pipeline", missing_text_columns=("note",),
                              category_columns=("region",))
    assert set(by_name("dtypes").space(with_categories)) == {"pipeline.categories"}


def test_dynamic_quantization_leaves_torchs_transformer_layers_in_float():
    """torch's Transformer layers and attention read their Linear weights as tensors, and a
    quantized layer's weight is a method: quantizing them crashed the encoder service
    ("'function' object has no attribute 'device'"). The head is quantized, they are not, the
    model runs, and the snippet the user pastes makes the same choice."""
    import torch

    from advisor.recipes import quantize_dynamic

    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    model = torch.nn.Sequential(torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False),
                                torch.nn.Linear(16, 3)).eval()
    assert quantize_dynamic.quantizable(model) == {"1"}
    inputs = torch.randn(4, 5, 16)
    with torch.inference_mode():
        expected = model(inputs)
        quantized = quantize_dynamic.quantize(model, "qint8")
        got = quantized(inputs)
        assert type(quantized[1]) is not torch.nn.Linear, "the head is quantized"
        assert type(quantized[0].layers[0].linear1) is torch.nn.Linear
        assert torch.allclose(got, expected, atol=0.1)
        pasted = {"torch": torch, "model": model}
        exec(quantize_dynamic.snippet({"quantize_dynamic.dtype": "qint8"}), pasted)
        assert type(pasted["model"][1]) is type(quantized[1]) and pasted["model"](inputs).shape == expected.shape
    assert by_name("quantize_dynamic").why_not(Context("cpu", 2, 2, 0, True, kind="infer", linear_layers=0))


def test_a_one_off_cost_is_one_shape_the_report_renders_whatever_the_recipe():
    """A recipe fills its own one-off cost; the session keeps it by the recipe's name and the
    report prints it without knowing which recipe it is."""
    from advisor.measure import Measurement
    from advisor.report import one_off_line

    def run(**fields):
        return Measurement(mode="full", plan={}, status="ok", **fields)

    costs = {recipe.name: recipe.one_off_cost([run(step_ms_mean=10.0, warmup_ms=(900.0, 10.0), stages={"wall_s": 1.0})],
                                              [run(step_ms_mean=12.0, stages={"wall_s": 3.0})], "step")
             for recipe in RECIPES if recipe.one_off_cost}
    assert {"compile", "cudnn_benchmark", "parquet_cache"} <= set(costs)
    for name, cost in costs.items():
        assert set(cost) == {"what", "seconds", "paid_back_after", "per"}, name
        assert one_off_line(cost).startswith(f"     one-off: {cost['what']} took {cost['seconds']:.1f} s, paid back after")
    assert costs["compile"]["paid_back_after"] == pytest.approx(445.0)
    assert one_off_line({**costs["compile"], "paid_back_after": None}).endswith("never (no faster per step)")


def test_fixes_to_try_are_the_recipes_that_target_the_bottleneck():
    """A diagnosis's fixes come from the recipes' own `targets` (the rule's likeliest first), so a
    recipe that targets compute is named under a compute diagnosis without a hand list."""
    import json

    from conftest import FIXTURES

    from advisor.diagnosis import diagnose
    from advisor.evidence import Evidence
    from advisor.kinds import kind_of
    from advisor.recipes import fixes_for

    found = 0
    for path in sorted((FIXTURES / "evidence").glob("*.json")):
        evidence = Evidence.from_dict(json.loads(path.read_text()))
        family = kind_of(evidence.kind).recipe_family
        for diagnosis in diagnose(evidence):
            targeting = [r.name for r in RECIPES if diagnosis.bottleneck in r.targets and family in r.kinds]
            assert set(diagnosis.fixes) == set(targeting), (path.stem, diagnosis.bottleneck)
            assert diagnosis.fixes == fixes_for(diagnosis.bottleneck, family, first=diagnosis.fixes)
            found += 1
    assert found >= 8
    compute = fixes_for("compute", "train")
    assert "allocator" in compute and "inference_mode" not in compute


def test_every_fix_a_rule_names_first_targets_what_it_diagnoses():
    """The rules' likeliest fixes are a preference among the recipes that target the bottleneck,
    never a recipe that does not (the hand list that drifted)."""
    import json

    from conftest import FIXTURES

    from advisor.evidence import Evidence
    from advisor.findings import THRESHOLDS
    from advisor.kinds import kind_of

    for path in sorted((FIXTURES / "evidence").glob("*.json")):
        evidence = Evidence.from_dict(json.loads(path.read_text()))
        kind = kind_of(evidence.kind)
        for rule in kind.rules():
            found = rule(evidence, THRESHOLDS)
            for name in found.fixes if found else ():
                recipe = by_name(name)
                assert found.bottleneck in recipe.targets and kind.recipe_family in recipe.kinds, (rule.__name__, name)


def test_a_compiles_one_off_cost_comes_from_the_runs_that_compiled_not_those_that_found_it_cached():
    """A script's runs share a compile cache: the first run of a plan compiles (often its trial),
    the rest load the graphs. The cost is the compiling runs' (the trial's too); what the cached
    runs paid is said beside it; where every run was cached, the cost says so."""
    from advisor.measure import Measurement
    from advisor.recipes import by_name
    from advisor.report import one_off_line
    from advisor.session.verification import _one_off_costs

    def run(warmup_ms, hits, misses):
        return Measurement(mode="full", plan={}, status="ok", step_ms_mean=10.0, warmup_ms=warmup_ms,
                           compile_cache={"hits": hits, "misses": misses} if hits or misses else {})

    recipes, base = (by_name("compile"),), [Measurement(mode="full", plan={}, status="ok", step_ms_mean=12.0)]
    cold, warm = run((18_010.0, 10.0), 0, 4), run((2_010.0, 10.0), 4, 0)
    cost = _one_off_costs(recipes, [warm, warm], base, "step", trial_run=cold)["compile"]
    assert cost["seconds"] == pytest.approx(18.0) and cost["cached_seconds"] == pytest.approx(2.0)
    assert "took 18.0 s (2.0 s from the session's compile cache)" in one_off_line(cost)
    alone = _one_off_costs(recipes, [warm], base, "step", trial_run=warm)["compile"]
    assert alone["cached"] and alone["seconds"] == pytest.approx(2.0)
    assert "took 2.0 s from the session's compile cache" in one_off_line(alone)
    assert _one_off_costs(recipes, [cold], base, "step")["compile"]["seconds"] == pytest.approx(18.0)
    assert "cached_seconds" not in _one_off_costs(recipes, [cold], base, "step")["compile"]
