"""One session a study: an optimize session claims its study before it diagnoses anything, so a
second `advisor optimize` of the same config, started beside it, says in one line that a
session is running and how to join it, rather than diagnosing the baseline again and ranking
on its own. The claim lives in the study's storage (journal, sqlite, PostgreSQL): what every
process of the study can read, on whichever machine."""

from __future__ import annotations

import time
from typing import Optional

import optuna

from advisor import search
from advisor.config import AdvisorConfig
from advisor.errors import UserError
from advisor.harness.lifetime import machine, owner, owner_gone

SESSION_ATTR = "session"  # {"owner": machine:pid, "since": epoch s}: the optimize session running the study
CLAIM_SETTLE_S = 2.0  # a study just made, its claim not yet written: how long to wait before reading it
OTHER_MACHINE_STALE_S = 3600.0  # another machine's pid cannot be checked: its claim lapses after this long


def holder_alive(holder: Optional[dict], now: float) -> bool:
    """Whether a recorded claim names a session that still runs: this machine's by its pid,
    another machine's by its age."""
    if not isinstance(holder, dict) or not holder.get("owner"):
        return False
    recorded = str(holder["owner"])
    if recorded.rpartition(":")[0] == machine():
        return not owner_gone(recorded)
    return now - float(holder.get("since", 0)) < OTHER_MACHINE_STALE_S


def running_elsewhere(config: AdvisorConfig, holder: dict) -> UserError:
    host, _, pid = str(holder["owner"]).rpartition(":")
    where = f"process {pid}" if host == machine() else f"process {pid} on another machine"
    minutes = (time.time() - float(holder.get("since", time.time()))) / 60
    return UserError(f"a session of study '{config.name}' is running ({where}, started {minutes:.0f} min ago); "
                     f"join it with: advisor worker {config.path}, or wait for it to end")


def held_by_another(holder: Optional[dict]) -> bool:
    """Whether a recorded claim names a live session other than this process."""
    return holder_alive(holder, time.time()) and holder.get("owner") != owner()


def check_none_running(config: AdvisorConfig) -> None:
    """Raises UserError where a live session holds the workload's study (before `--fresh` removes it)."""
    study = search.find_study(config)
    holder = study.user_attrs.get(SESSION_ATTR) if study is not None else None
    if held_by_another(holder):
        raise running_elsewhere(config, holder)


def claim_study(config: AdvisorConfig) -> optuna.Study:
    """The workload's study, made where there is none, held by this session from now on.
    Raises UserError where a live session holds it."""
    study, made = search.find_study(config), False
    if study is None:
        try:
            study = optuna.create_study(study_name=config.name, storage=search.open_storage(search.storage_url(config)),
                                        sampler=search.make_sampler(config), direction="maximize")
            made = True
        except optuna.exceptions.DuplicatedStudyError:  # another made it this instant
            study = search.find_study(config)
    if not made:  # `user_attrs` reads the storage anew each time: what other processes wrote since
        holder = study.user_attrs.get(SESSION_ATTR)
        if holder is None and search.SPACE_ATTR not in study.user_attrs:  # made this instant: its maker claims it next
            time.sleep(CLAIM_SETTLE_S)
            holder = study.user_attrs.get(SESSION_ATTR)
        if held_by_another(holder):
            raise running_elsewhere(config, holder) from None
    mine = {"owner": owner(), "since": time.time()}
    study.set_user_attr(SESSION_ATTR, mine)
    holder = study.user_attrs.get(SESSION_ATTR)  # two that took it at once: the last one holds it
    if holder != mine:
        raise running_elsewhere(config, holder)
    return study


def release_unplanned(config: AdvisorConfig, study: optuna.Study) -> None:
    """Removes a claimed study that was never planned (the diagnosis failed, or found nothing to
    search), as if it had never been made: the next session diagnoses afresh, and a session
    refused while diagnosing leaves no file behind (a journal holds this one study: it goes)."""
    if search.SPACE_ATTR in study.user_attrs:
        return
    search.remove_study(config)
