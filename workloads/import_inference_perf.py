"""An inference-perf config (its ``load`` and ``data`` sections) -> a kvsim workload.

- ``load.type``: ``constant`` and ``poisson`` stages (``rate``, ``duration``) become
  stages of ``constant`` / ``poisson`` arrivals bounded by ``duration_s``;
  ``concurrent`` stages (``num_requests``, ``concurrency_level``) become closed-loop
  stages. inference-perf lets a stage's requests finish before the next stage, then
  waits ``interval`` seconds (default 1): every stage after the first starts
  ``after_drain`` with ``delay_s: interval``. ``sweep`` (stages found by probing
  a server) and the trace load types cannot be rebuilt.
- ``load.request_timeout`` becomes ``timeout_s``; ``load.base_seed`` the seed.
- ``data.type: shared_prefix`` becomes a ``prompt_pool`` of ``groups``
  (``num_groups``, ``num_prompts_per_group``, ``system_prompt_len``, ``question_len``,
  ``output_len``; also under their aliases ``num_unique_system_prompts`` and
  ``num_users_per_system_prompt``), sent in ``shuffled`` order. inference-perf shuffles
  its prompts once and then cycles through them; kvsim reshuffles each cycle. Length
  distributions (``question_distribution``, ``output_distribution``), multi-turn chat
  and the other data types are not rebuilt.
"""

from __future__ import annotations

from typing import Any

from workloads.imported import ImportedWorkload, require

LOAD_TYPES = ("constant", "poisson", "concurrent")
ALIASES = {"num_unique_system_prompts": "num_groups",
           "num_users_per_system_prompt": "num_prompts_per_group"}  # fmt: skip
GROUP_FIELDS = ("num_groups", "num_prompts_per_group", "system_prompt_len", "question_len",
                "output_len")  # fmt: skip
DEFAULTS = {"num_groups": 10, "num_prompts_per_group": 10, "system_prompt_len": 100,
            "question_len": 50, "output_len": 50}  # fmt: skip
"""inference-perf's own defaults of its shared-prefix data."""


def inference_perf_workload(config: Any, file: str) -> ImportedWorkload:
    """The kvsim workload of a parsed inference-perf config (``file``: for messages).

    Raises:
        WorkloadError: naming ``file`` and the config field, for what kvsim cannot
            rebuild (with the allowed values).
    """
    require(isinstance(config, dict), file, "", "an inference-perf config is a YAML mapping")
    load = config.get("load")
    require(isinstance(load, dict), file, "load", "missing: the load section gives the stages")
    notes: list[str] = []
    data: dict[str, Any] = {"name": "inference-perf"}
    if isinstance(load.get("base_seed"), int) and load["base_seed"] >= 0:
        data["seed"] = load["base_seed"]
    data.update(_data_section(config.get("data"), file, notes))
    data["stages"] = _stages(load, file)
    timeout = load.get("request_timeout")
    if timeout is not None:
        require(
            isinstance(timeout, int | float) and timeout > 0,
            file,
            "load.request_timeout",
            f"must be a number > 0 (got {timeout!r})",
        )
        data["timeout_s"] = float(timeout)
    imported = ImportedWorkload(data, file, notes)
    imported.check(file)
    return imported


def _stages(load: dict[str, Any], file: str) -> list[dict[str, Any]]:
    kind = load.get("type", "constant")
    require(
        kind in LOAD_TYPES,
        file,
        "load.type",
        f"cannot rebuild load type {kind!r} (allowed: {', '.join(LOAD_TYPES)})",
    )
    require(
        load.get("sweep") is None,
        file,
        "load.sweep",
        "sweep stages come from probing a server's saturation; list the stages instead",
    )
    stages = load.get("stages")
    require(
        isinstance(stages, list) and len(stages) > 0,
        file,
        "load.stages",
        "give at least one stage",
    )
    interval = load.get("interval", 1.0)
    require(
        isinstance(interval, int | float) and not isinstance(interval, bool) and interval >= 0,
        file,
        "load.interval",
        f"must be a number >= 0 (got {interval!r})",
    )
    out = []
    keys = ("num_requests", "concurrency_level") if kind == "concurrent" else ("rate", "duration")
    for i, stage in enumerate(stages):
        where = f"load.stages[{i}]"
        require(isinstance(stage, dict), file, where, "a stage is a mapping")
        for key in keys:
            value = stage.get(key)
            require(
                isinstance(value, int | float) and not isinstance(value, bool) and value > 0,
                file,
                f"{where}.{key}",
                f"must be a number > 0 for load type {kind!r} (got {value!r})",
            )
        if kind == "concurrent":
            entry = {
                "arrival": {"type": "closed_loop", "concurrency": stage.get("concurrency_level")},
                "num_requests": stage.get("num_requests"),
            }
        else:
            entry = {
                "arrival": {"type": kind, "rate": stage.get("rate")},
                "duration_s": stage.get("duration"),
            }
        if i > 0:
            entry["start"] = "after_drain"
            if interval:
                entry["delay_s"] = float(interval)
        out.append(entry)
    return out


def _data_section(section: Any, file: str, notes: list[str]) -> dict[str, Any]:
    require(
        isinstance(section, dict) and section.get("type") == "shared_prefix",
        file,
        "data.type",
        f"only shared_prefix data can be rebuilt without its dataset (got "
        f"{section.get('type') if isinstance(section, dict) else section!r}; allowed: "
        "shared_prefix)",
    )
    given = section.get("shared_prefix") or {}
    require(isinstance(given, dict), file, "data.shared_prefix", "must be a mapping")
    groups = dict(DEFAULTS)
    for key, value in given.items():
        name = ALIASES.get(key, key)
        if name in GROUP_FIELDS:
            groups[name] = value
        elif key in ("question_distribution", "output_distribution") and value is not None:
            notes.append(f"data.shared_prefix.{key} is not rebuilt: fixed lengths used")
        elif key == "enable_multi_turn_chat" and value:
            notes.append("data.shared_prefix.enable_multi_turn_chat is not rebuilt")
    return {"prompt_pool": {"order": "shuffled", "groups": groups}}
