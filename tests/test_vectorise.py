"""The vectorise recipe: row functions rewritten over columns on their source, each rewrite
compared with the row-wise values, the failing ones rejected with the row that differs; and
Dask reading text as pandas does, missing values included."""

import ast
import io
import shutil
import sys

import numpy as np
import pandas as pd
import pytest
from conftest import ROOT, write_config

from advisor.harness import run_measurement
from advisor.harness.vectorised import callbacks_vectorised, with_vectorised
from advisor.kinds import baseline_plan, load_config
from advisor.kinds.pipeline.compare import compare_frames
from advisor.vectorise import Unsupported, function_at, rewrite

PIPELINES = ROOT / "experiments" / "pipelines"
sys.path.insert(0, str(PIPELINES))
import pipeline_data  # noqa: E402


def rewritten(source: str, mode: str = "row") -> str:
    return rewrite(function_at(source, 1), source, mode).text


# ------------------------------------------------------------------ the rewriter, on source


def test_conditions_become_where_and_select():
    assert "np.where(frame['a'] > 1, frame['b'], 0)" in rewritten("def f(row):\n    return row['b'] if row['a'] > 1 else 0\n")
    chain = rewritten("def f(row):\n    t = row.a * 2\n    if t > 9:\n        return 'hi'\n"
                      "    elif t > 3 and not row.b:\n        return 'mid'\n    return 'lo'\n")
    assert "t = frame['a'] * 2" in chain
    assert "np.select([t > 9, (t > 3) & ~frame['b'].astype('bool')], ['hi', 'mid'], default='lo')" in chain


def test_strings_lookups_and_membership():
    assert "values.str.strip().str.upper().str[:3]" in rewritten("f = lambda s: s.strip().upper()[:3]\n", "value")
    lookup = rewritten("def f(row):\n    return RATES.get(row['k'], 0.5)\n")
    assert "frame['k'].map(RATES).where(frame['k'].isin(list(RATES)), 0.5)" in lookup
    assert "frame['k'].isin(['a', 'b'])" in rewritten("def f(row):\n    return row['k'] in ('a', 'b')\n")


@pytest.mark.parametrize("body, construct", [
    ("total = 0\n    for x in row:\n        total += x\n    return total", "For"),
    ("return helper(row['a'])", "helper()"),
    ("return row", "whole row"),
    ("return [row['a'], 1]", "tuple of row values"),
])
def test_unsupported_constructs_are_named(body, construct):
    with pytest.raises(Unsupported, match=construct.replace("(", r"\(").replace(")", r"\)")):
        rewritten(f"def f(row):\n    {body}\n")


def test_max_keeps_pythons_missing_value_semantics_where_np_maximum_does_not():
    """Python's max(a, b) is a unless b > a: with a missing b it is a, where np.maximum gives NaN.
    advisor's rewrite is the comparison; the naive one really differs."""
    frame = pd.DataFrame({"a": [1.0, 5.0, 2.0], "b": [3.0, np.nan, 1.0]})
    python = frame.apply(lambda row: max(row["a"], row["b"]), axis=1)
    naive = np.maximum(frame["a"], frame["b"])
    text = rewritten("def f(row):\n    return max(row['a'], row['b'])\n")
    assert "np.where(frame['b'] > frame['a'], frame['b'], frame['a'])" in text
    namespace = {"np": np}
    exec(text, namespace)
    assert not naive.equals(python)
    assert pd.Series(namespace["f_columns"](frame)).equals(python.reset_index(drop=True))


def test_no_rewrite_no_vectorise_candidate():
    from advisor.recipes import Context, by_name

    vectorise = by_name("vectorise")
    plain = Context("cpu", 2, 1, 0, False, kind="pipeline")
    assert vectorise.why_not(plain) == "no row-wise Python function in the transform"
    refused = Context("cpu", 2, 1, 0, False, kind="pipeline", rewrite_problems=("label (a.py:3): values differ",))
    assert "label (a.py:3): values differ" in vectorise.why_not(refused)
    rewritten_one = Context("cpu", 2, 1, 0, False, kind="pipeline", rewrites=(("a.py:3", "def f_columns(frame): ..."),))
    assert vectorise.why_not(rewritten_one) is None
    assert vectorise.space(rewritten_one)["pipeline.vectorise"].options == (None, "a.py:3")


LOOPS = '''
def transform(frame):
    net = []
    for row in frame.itertuples():
        if row.quantity > 3:
            net.append(row.quantity * row.price)
        else:
            net.append(0.0)
    frame["net"] = net
    labels = []
    for index, row in frame.iterrows():
        labels.append(f"{index}-{row['quantity']}")
    frame["label"] = labels
    return frame
'''


def test_loops_that_build_a_column_are_rewritten_and_checked(tmp_path):
    """An itertuples loop appending per row becomes one extend of its column form, checked on
    the sample; a loop that uses the row's index (or an f-string) is named, and left as it is."""
    import importlib.util

    from advisor.harness.vectorised import loop_verdicts, with_vectorised

    (tmp_path / "loops.py").write_text(LOOPS)
    spec = importlib.util.spec_from_file_location("loops", tmp_path / "loops.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    frame = pd.DataFrame({"quantity": [1, 5, 7, 2], "price": [2.0, 30.0, np.nan, 4.5]})
    verdicts = {v["line"]: v for v in loop_verdicts(module.transform, frame, 1e-9)}
    assert verdicts[4]["status"] == "equal", verdicts[4]
    assert "net.extend(pd.Series(loop_4_columns(frame), index=frame.index).tolist())" in verdicts[4]["rewrite"]
    assert verdicts[11]["status"] == "unsupported" and "JoinedStr" in verdicts[11]["detail"]
    assert with_vectorised(module.transform, "loops.py:4")(frame.copy()).equals(module.transform(frame.copy()))


# ------------------------------------------------------------------ checked on a sample, run in a child


def notes_config(folder, rows: int = 6_000):
    pipeline_data.notes(np.random.default_rng(1), rows).to_csv(folder / "notes.csv", index=False)
    shutil.copy(PIPELINES / "row_functions.py", folder / "row_functions.py")
    shutil.copy(PIPELINES / "pipeline_data.py", folder / "pipeline_data.py")
    return write_config(folder, {
        "name": "notes",
        "workload": {"kind": "pipeline", "source": {"path": "notes.csv"}, "transform": "row_functions:transform",
                     "partition_safe": True},
        "search": {"trials": 3, "verify_top": 1, "precision": 0},
    })


def test_rewrites_checked_beside_the_row_wise_calls():
    """Each rewrite is computed beside the user's row-wise call and compared; the label's naive
    str() rewrite differs on a missing note, and the first differing row is named."""
    import row_functions

    as_written = pipeline_data.notes(np.random.default_rng(2), 3_000).to_csv(index=False)
    frame = pd.read_csv(io.StringIO(as_written))  # parsed, as the pipeline reads it: empty notes are missing
    checks = callbacks_vectorised(check=lambda file: file.startswith(str(PIPELINES)))
    with checks:
        expected = row_functions.transform(frame)
    verdicts = {v["name"]: v for v in checks.found.values()}
    assert {n for n, v in verdicts.items() if v["status"] == "equal"} == {"shipping", "tier", "region_code", "tax"}
    assert verdicts["label"]["status"] == "differs" and "first at row" in verdicts["label"]["detail"]
    assert '-    return str(row["note"]).upper()' in verdicts["label"]["diff"]  # the user's own text, as written
    assert "+    return frame['note'].astype('str').str.upper()" in verdicts["label"]["diff"]
    chosen = ",".join(v["where"] for v in verdicts.values() if v["status"] == "equal")
    assert with_vectorised(row_functions.transform, chosen)(frame).equals(expected)
    ast.parse(verdicts["tier"]["rewrite"])


@pytest.mark.integration
def test_vectorised_plans_run_in_a_child_and_the_equality_check_decides(tmp_path):
    """In real children: the profile finds the five row functions; the four equal rewrites give
    the baseline's output; adding the label's rewrite changes it, and the comparison rejects it
    naming the column and the first row that differs. A Dask plan reads the missing notes as
    pandas does and gives the baseline's output too."""
    path = notes_config(tmp_path)
    config = load_config(path)
    base = baseline_plan(config)

    def run(mode, name, **changes):
        return run_measurement(config, {**base, **changes}, mode, 1, 180, output_path=str(tmp_path / f"{name}.pkl"),
                               fresh=True)

    profile = run("profile", "profile")
    found = {f["name"]: f for f in profile.environment["row_functions"]}
    equal = ",".join(f["where"] for f in found.values() if f["status"] == "equal")
    assert len(equal.split(",")) == 4 and found["label"]["status"] == "differs"
    assert run("full", "base").ok
    good = run("full", "good", **{"pipeline.vectorise": equal})
    assert good.ok and compare_frames(str(tmp_path / "good.pkl"), str(tmp_path / "base.pkl"), "exact", 1e-9, True).passed
    naive = run("full", "naive", **{"pipeline.vectorise": f"{equal},{found['label']['where']}"})
    verdict = compare_frames(str(tmp_path / "naive.pkl"), str(tmp_path / "base.pkl"), "exact", 1e-9, True)
    assert naive.ok and not verdict.passed and "column 'label'" in verdict.note and "first at row" in verdict.note
    dask = run("full", "dask", **{"pipeline.dask_workers": 2, "pipeline.dask_scheduler": "processes"})
    assert dask.ok, dask.reason
    assert compare_frames(str(tmp_path / "dask.pkl"), str(tmp_path / "base.pkl"), "tolerance", 1e-9, True).passed
