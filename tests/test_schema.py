"""One config reference: the JSON Schema `advisor schema` prints and docs/config.md, both read
from the dataclasses that validate a config, and `advisor recipes`."""

import dataclasses
import json
import typing

import pytest
from conftest import ROOT, run_cli

from advisor.config import AdvisorConfig
from advisor.kinds import SECTIONS
from advisor.schema import fields_of, reference, schema


def keys_of(cls: type, prefix: str = "") -> set[str]:
    """Every key a config may hold under a section, nested sections spelled out."""
    hints, found = typing.get_type_hints(cls), set()
    for f in fields_of(cls):
        key = f"{prefix}{f.name}"
        found.add(key)
        inner = [hints[f.name], *typing.get_args(hints[f.name])]
        for section in (arg for arg in inner if dataclasses.is_dataclass(arg)):
            found |= keys_of(section, key + ".")
    return found


def test_the_reference_page_is_the_codes_and_names_every_key():
    page = (ROOT / "docs" / "config.md").read_text()
    assert page == reference(), "docs/config.md is stale: python -m advisor.schema --markdown > docs/config.md"
    keys = keys_of(AdvisorConfig) | {f"workload.{key}" for cls in SECTIONS.values() for key in keys_of(cls)}
    missing = [key for key in sorted(keys) if f"`{key}`" not in page]
    assert not missing and len(keys) > 60, missing


@pytest.mark.integration
def test_advisor_schema_prints_the_schema_and_it_holds_every_reference_config():
    printed = run_cli("schema")
    assert printed.returncode == 0 and json.loads(printed.stdout) == json.loads(json.dumps(schema()))
    shape = schema()
    assert shape["properties"]["search"]["properties"]["trials"] == {
        "type": "integer", "description": "distinct plans measured, the baseline's included; expected a number >= 1",
        "default": 24}
    kinds = [option["properties"]["kind"]["const"] for option in shape["properties"]["workload"]["oneOf"]]
    assert kinds == list(SECTIONS)
    import jsonschema  # noqa: PLC0415  (mlflow's dependency: here to check the schema as an editor would)
    import yaml

    for path in sorted([*(ROOT / "configs").glob("*.yaml"), *(ROOT / "experiments" / "configs").glob("*.yaml")]):
        jsonschema.validate(yaml.safe_load(path.read_text()), shape)
    bad = {"name": "x", "workload": {"model": "a:b", "dataset": "a:b"}, "measure": {"stepz": 3}}
    try:
        jsonschema.validate(bad, shape)
    except jsonschema.ValidationError as exc:
        assert "stepz" in exc.message
    else:
        raise AssertionError("an unknown key passed the schema")


@pytest.mark.integration
def test_advisor_recipes_lists_every_recipe():
    from advisor.recipes import RECIPES

    listed = run_cli("recipes")
    assert listed.returncode == 0
    for recipe in RECIPES:
        assert f"{recipe.name}: {recipe.summary}" in listed.stdout
    as_json = json.loads(run_cli("recipes", "--json").stdout)
    assert [r["name"] for r in as_json] == [r.name for r in RECIPES]
    fetch = next(r for r in as_json if r["name"] == "fetch_threads")
    assert fetch["risk"] == "exact" and fetch["knobs"] == ["dataloader.fetch_threads"] and "script" in fetch["kinds"]


def test_the_readmes_sample_output_has_the_columns_advisor_prints():
    """The README shows a real run's ranking table: when the printed columns change, so must it."""
    import re

    from advisor.report import table_header

    readme = (ROOT / "README.md").read_text()
    sample = re.search(r"## Run it on your script.*?```text\n(.*?)```", readme, re.S).group(1)
    header = table_header("95%")  # the level the sample's intervals were drawn at
    assert header in sample.splitlines(), f"the README's table header is not advisor's:\n{header}"
    assert re.search(r"^1    \S+ +\d+\.\d\dx  \d+\.\d\d-\d+\.\d\dx +yes +ok ", sample, re.M), "a verified #1 row, as printed"
    documented = re.findall(r"^\| `([^`]+)` \|", readme[readme.index("### What the columns mean"):], re.M)
    assert documented[:7] == ["rank", "fix", "speedup", "95% interval", "verified", "numerics", "peak MB"]
