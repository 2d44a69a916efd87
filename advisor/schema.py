"""The config's JSON Schema and its reference page, read from the dataclasses that validate it
(`advisor.config`): their type hints are the types, their defaults the defaults, and the comment
beside each field its meaning. `advisor schema` prints the schema; docs/config.md is the page
`reference()` writes (a test holds the two together).
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import textwrap
import types
import typing
from typing import Any, Literal

from advisor.config import AdvisorConfig
from advisor.kinds import DEFAULT_KIND, SECTIONS

SCHEMA_URL = "https://json-schema.org/draft/2020-12/schema"
TRAINING = ("train", "lightning", "script")  # the kinds that run training steps (a distributed job is a train one)
# Which kinds read a field, where not every kind does: a comment that opens with one of these words says so.
KIND_WORDS = {"inference:": ("infer",), "training:": TRAINING, "pipelines:": ("pipeline",)}


def comments(cls: type) -> dict[str, str]:
    """Each field's meaning: the comment on its line, or on the lines just above it."""
    source = textwrap.dedent(inspect.getsource(cls))
    lines = source.splitlines()
    found = {}
    for node in ast.parse(source).body[0].body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        after = lines[node.end_lineno - 1].split("  # ", 1)
        above = []
        for line in reversed(lines[: node.lineno - 1]):
            if not line.strip().startswith("#"):
                break
            above.insert(0, line.strip().lstrip("#").strip())
        found[node.target.id] = (after[1].strip() if len(after) > 1 else " ".join(above)).strip()
    return found


def kinds_of(meaning: str, section_kinds: tuple[str, ...]) -> tuple[str, ...]:
    return next((kinds for word, kinds in KIND_WORDS.items() if meaning.lower().startswith(word)), section_kinds)


def default_of(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return dataclasses.MISSING
    return dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value


def type_schema(hint: Any) -> dict:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return {"anyOf": [type_schema(arg) for arg in args]}
    if origin is Literal:
        return {"enum": list(args)}
    if dataclasses.is_dataclass(hint):
        return section(hint)
    return {int: {"type": "integer"}, float: {"type": "number"}, bool: {"type": "boolean"}, str: {"type": "string"},
            dict: {"type": "object"}, type(None): {"type": "null"}}.get(hint, {})


def fields_of(cls: type) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(cls) if not f.metadata.get("internal")]


def section(cls: type) -> dict:
    """An object schema: every field with its type, default and meaning; no other keys."""
    hints, meanings = typing.get_type_hints(cls), comments(cls)
    properties, required = {}, []
    for f in fields_of(cls):
        prop = type_schema(hints[f.name])
        check = f.metadata.get("check")
        described = "; ".join(part for part in (meanings.get(f.name, ""), f"expected {check[1]}" if check else "") if part)
        if described:
            prop["description"] = described
        default = default_of(f)
        if default is dataclasses.MISSING:
            required.append(f.name)
        else:
            prop["default"] = default
        properties[f.name] = prop
    return {"type": "object", "properties": properties, "additionalProperties": False,
            **({"required": required} if required else {})}


def schema() -> dict:
    """The whole config's JSON Schema: the workload section is one of the kinds' sections."""
    top = section(AdvisorConfig)
    top["properties"]["workload"] = {"oneOf": [workload_section(kind) for kind in SECTIONS]}
    top["required"] = sorted({*top.get("required", []), "workload"})
    return {"$schema": SCHEMA_URL, "title": "advisor config", **top}


def workload_section(name: str) -> dict:
    shape = section(SECTIONS[name])
    shape["properties"]["kind"] = {**shape["properties"]["kind"], "const": name}
    if name != DEFAULT_KIND:  # a workload without `kind` is the default kind's
        shape["required"] = sorted({*shape.get("required", []), "kind"})
    return {"title": f"workload (kind: {name})", **shape}


def rows(cls: type, prefix: str, section_kinds: tuple[str, ...]) -> list[tuple[str, str, str, str, str]]:
    """(key, type, default, kinds, meaning) for every key of a section, nested sections flattened."""
    hints, meanings = typing.get_type_hints(cls), comments(cls)
    found = []
    for f in fields_of(cls):
        hint = hints[f.name]
        inner = [arg for arg in typing.get_args(hint) if dataclasses.is_dataclass(arg)]
        key = f"{prefix}{f.name}"
        meaning = meanings.get(f.name, "")
        kinds = kinds_of(meaning, section_kinds)
        if dataclasses.is_dataclass(hint) or inner:
            found.append((key, "mapping", "", ", ".join(kinds), meaning))
            found += rows(inner[0] if inner else hint, key + ".", kinds)
            continue
        default = default_of(f)
        shown = "required" if default is dataclasses.MISSING else json.dumps(default)
        check = f.metadata.get("check")
        found.append((key, type_words(hint), shown, ", ".join(kinds), "; ".join(
            part for part in (meaning, f"expected {check[1]}" if check else "") if part)))
    return found


def type_words(hint: Any) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_words(arg) for arg in args)
    if origin is Literal:
        return " \\| ".join(json.dumps(arg) for arg in args)
    return {int: "integer", float: "number", bool: "boolean", str: "string", dict: "mapping",
            type(None): "null"}.get(hint, "any")


def reference() -> str:
    """docs/config.md: every key of every section, its type, default, the kinds that read it and its meaning."""
    every = tuple(SECTIONS)
    lines = ["# The config, key by key", "",
             "Generated from the dataclasses that validate a config (`advisor/config.py`) by "
             "`python -m advisor.schema --markdown`; `advisor schema` prints the same as a JSON Schema, "
             "for an editor to check a config as you type. A test fails when this page and the code disagree.", ""]
    sections = [("workload", cls, (kind,)) for kind, cls in SECTIONS.items()]
    hints = typing.get_type_hints(AdvisorConfig)
    sections += [(f.name, hints[f.name], every) for f in fields_of(AdvisorConfig)
                 if dataclasses.is_dataclass(hints[f.name])]
    top = [(f"{f.name}", type_words(hints[f.name]), "required" if default_of(f) is dataclasses.MISSING
            else json.dumps(default_of(f)), ", ".join(every), comments(AdvisorConfig).get(f.name, ""))
           for f in fields_of(AdvisorConfig) if not dataclasses.is_dataclass(hints[f.name])]
    lines += table("top level", top)
    for name, cls, kinds in sections:
        title = f"`workload` (kind: {kinds[0]})" if name == "workload" else f"`{name}`"
        lines += table(title, rows(cls, f"{name}.", kinds))
    return "\n".join(lines) + "\n"


def table(title: str, entries: list[tuple[str, str, str, str, str]]) -> list[str]:
    return [f"## {title}", "", "| key | type | default | kinds | meaning |", "|---|---|---|---|---|",
            *(f"| `{key}` | {kind} | `{default}` | {kinds} | {meaning.replace('|', '/')} |" if default else
              f"| `{key}` | {kind} | | {kinds} | {meaning.replace('|', '/')} |"
              for key, kind, default, kinds, meaning in entries), ""]


def main() -> None:
    import sys

    print(reference() if "--markdown" in sys.argv[1:] else json.dumps(schema(), indent=2), end="")


if __name__ == "__main__":
    main()

