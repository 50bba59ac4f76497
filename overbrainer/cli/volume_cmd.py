"""``volume ls``, ``volume du NAME``, ``volume prune NAME --checkpoints-older-than SPAN`` and
``volume rm NAME``: the account's network volumes (the logic is
``overbrainer.targets.runpod.volume_cmds``)."""

import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from overbrainer.cli.context import current
from overbrainer.cli.declare import command, group

if TYPE_CHECKING:
    from overbrainer.runpod.models import NetworkVolume
    from overbrainer.runpod.volume_usage import Usage
    from overbrainer.targets.runpod.pods import PodContext
    from overbrainer.targets.runpod.volume_cmds import S3Opener

app = group("volume")


def clock() -> datetime:
    """This machine's time now, which checkpoints' ages are measured against (tests
    replace it)."""
    return datetime.now(UTC)


def _s3() -> "S3Opener":
    from overbrainer.config.load import load_settings
    from overbrainer.targets.runpod.volume_cmds import s3_opener

    invocation = current()
    return s3_opener(load_settings(invocation.project_dir, invocation.environ()).runpod)


async def _volume(ctx: "PodContext", name: str) -> "NetworkVolume":
    from overbrainer.targets.runpod.volume_cmds import named_volume

    return named_volume(await ctx.client.list_network_volumes(), name)


def _asked(question: str, yes: bool, again: str) -> bool:
    """Whether to go on: ``yes``, or the user said so on a terminal. Elsewhere nothing
    can be asked: a usage error names the command with --yes."""
    if yes:
        return True
    from overbrainer.errors import UsageError

    if not sys.stdin.isatty():
        raise UsageError(
            f"{question.rstrip('?')}: not asked, as no terminal can answer; nothing was "
            f"deleted. Run `{again} --yes` to do it"
        )
    answer = input(f"{question} [y/N] ")
    return answer.strip().lower() in ("y", "yes")


@command(app, "volume", "ls")
async def ls(*, json: bool = False) -> int:
    from overbrainer.cli.common import print_json
    from overbrainer.cli.pod_cmd import pod_context
    from overbrainer.projections.spend import money
    from overbrainer.projections.words import size_text
    from overbrainer.targets.runpod.volume_cmds import list_volumes

    s3 = _s3()
    async with pod_context(read_only=True) as (ctx, front):
        states = list(
            (await ctx.session.journal.matching(lambda s: s.pod.volume is not None)).values()
        )
        rows = await list_volumes(ctx, s3, states)
        if json:
            for row in rows:
                print_json(row.to_json())
            return 0
        if not rows:
            print("no network volume on this Runpod account", file=sys.stderr)
            return 0
        heads = ["NAME", "ID", "DATA CENTER", "SIZE", "USED", "$/MONTH", "RUNS"]
        table = []
        for row in rows:
            v, monthly = row.volume, row.monthly
            table.append(
                [
                    v.name or "-",
                    v.id,
                    v.data_center or "?",
                    f"{v.size_gb} GB" if v.size_gb is not None else "?",
                    size_text(row.used) if row.used is not None else row.unknown,
                    money(monthly) if monthly is not None else "?",
                    ", ".join(row.runs) or "-",
                ]
            )
        widths = [max(len(h), *(len(t[i]) for t in table)) for i, h in enumerate(heads)]
        out = ["  ".join(h.ljust(w) for h, w in zip(heads, widths, strict=True)).rstrip()]
        out += [
            "  ".join(c.ljust(w) for c, w in zip(t, widths, strict=True)).rstrip() for t in table
        ]
        front.result("\n".join(out))
    return 0


def _du_lines(volume: "NetworkVolume", usage: "Usage", steps: dict[str, list[int]]) -> list[str]:
    from overbrainer.plurals import plural
    from overbrainer.projections.words import size_text
    from overbrainer.runpod.volume_layout import (
        ROOT,
        blob_key,
        hf_home_key,
        prepared_key,
        run_output_key,
    )

    size = f" of {volume.size_gb} GB" if volume.size_gb is not None else ""
    lines = [
        f"network volume {volume.name} ({volume.id}) in {volume.data_center or '?'}: "
        f"{size_text(usage.total)} used{size}"
    ]
    data_dir = blob_key("0" * 64).rsplit("/", 1)[0]
    parts = [
        ("model cache", usage.cache, hf_home_key()),
        ("prepared data", usage.prepared, prepared_key()),
        ("data from home", usage.data, data_dir),
    ]
    for run_id, size_of in usage.runs.items():
        found = steps.get(run_id, [])
        held = f", {plural(len(found), 'checkpoint')}" if found else ""
        parts.append((f"run {run_id}{held}", size_of, run_output_key(run_id)))
    parts.append(("not overbrainer's", usage.other, f"outside {ROOT}/"))
    width = max(len(p[0]) for p in parts)
    for what, count, where in parts:
        lines.append(f"  {what.ljust(width)}  {size_text(count):>10}  {where}")
    return lines


@command(app, "volume", "du")
async def du(name: str, /, *, json: bool = False) -> int:
    from overbrainer.cli.common import print_json
    from overbrainer.cli.pod_cmd import pod_context
    from overbrainer.runpod.volume_usage import checkpoints_of
    from overbrainer.targets.runpod.volume_cmds import usage

    s3 = _s3()
    async with pod_context(read_only=True) as (ctx, front):
        volume = await _volume(ctx, name)
        found, objects = await usage(s3, volume)
        steps: dict[str, list[int]] = {}
        for checkpoint in checkpoints_of(objects):
            steps.setdefault(checkpoint.run_id, []).append(checkpoint.step)
        if json:
            print_json(
                {
                    "name": volume.name,
                    "id": volume.id,
                    "data_center": volume.data_center,
                    "size_gb": volume.size_gb,
                    "used_bytes": found.total,
                    "cache_bytes": found.cache,
                    "prepared_bytes": found.prepared,
                    "data_bytes": found.data,
                    "other_bytes": found.other,
                    "runs": {
                        run_id: {"bytes": count, "checkpoints": steps.get(run_id, [])}
                        for run_id, count in found.runs.items()
                    },
                }
            )
            return 0
        front.result("\n".join(_du_lines(volume, found, steps)))
    return 0


@command(app, "volume", "prune")
async def prune(
    name: str, /, *, checkpoints_older_than: str | None = None, yes: bool = False
) -> int:
    from overbrainer.cli.pod_cmd import pod_context
    from overbrainer.errors import UsageError
    from overbrainer.lifecycle.removal import parse_age
    from overbrainer.plurals import plural
    from overbrainer.projections.words import size_text
    from overbrainer.targets.runpod.volume_cmds import plan_pruning, usage
    from overbrainer.targets.runpod.volume_cmds import prune as prune_volume
    from overbrainer.utc import iso_utc

    option = "--checkpoints-older-than"
    if checkpoints_older_than is None:
        raise UsageError(f"volume prune needs {option} SPAN (like 30d): which checkpoints go")
    try:
        span = parse_age(checkpoints_older_than, option)
    except ValueError as error:
        raise UsageError(str(error)) from None
    s3 = _s3()
    async with pod_context(unchanged="nothing was deleted") as (ctx, front):
        volume = await _volume(ctx, name)
        _, objects = await usage(s3, volume)
        plan = await plan_pruning(ctx, objects, older_than=span, now=clock())
        for checkpoint, why in plan.kept:
            if why != "not old enough":
                front.info(f"volume prune: keeping {_checkpoint_text(checkpoint)}: {why}")
        if not plan.delete:
            front.result(
                f"volume prune: no checkpoint on {volume.name} may go (none but those kept was "
                f"written more than {checkpoints_older_than.strip()} ago); nothing deleted"
            )
            return 0
        for checkpoint in plan.delete:
            when = iso_utc(checkpoint.modified)[:16] if checkpoint.modified else "?"
            when = when.replace("T", " ")
            front.info(f"volume prune: {_checkpoint_text(checkpoint)}, written {when} UTC")
        what = f"{plural(len(plan.delete), 'checkpoint')} ({size_text(plan.freed)})"
        again = (
            f"overbrainer volume prune {volume.name or volume.id} {option} "
            f"{checkpoints_older_than.strip()}"
        )
        if not _asked(f"delete {what} from network volume {volume.name}?", yes, again):
            front.result("volume prune: nothing deleted")
            return 0
        freed = await prune_volume(s3, volume, plan)
        front.result(
            f"volume prune: deleted {plural(len(plan.delete), 'checkpoint')} from network "
            f"volume {volume.name} ({volume.id}), {size_text(freed)} freed"
        )
        return ctx.session.interrupts.finish(0)


def _checkpoint_text(checkpoint: object) -> str:
    from overbrainer.projections.words import size_text
    from overbrainer.runpod.volume_usage import Checkpoint

    assert isinstance(checkpoint, Checkpoint)
    return f"checkpoint-{checkpoint.step} of run {checkpoint.run_id} ({size_text(checkpoint.size)})"


@command(app, "volume", "rm")
async def rm(name: str, /, *, yes: bool = False) -> int:
    from overbrainer.cli.pod_cmd import pod_context
    from overbrainer.errors import OverbrainerError
    from overbrainer.targets.runpod.volume_cmds import delete_volume, refusal, users_of

    async with pod_context(unchanged="nothing was deleted") as (ctx, front):
        volume = await _volume(ctx, name)
        attached = await ctx.session.journal.matching(
            lambda s: s.pod.volume is not None and s.pod.volume["id"] == volume.id
        )
        users = await users_of(ctx, volume, attached)
        if users:
            raise OverbrainerError(refusal(volume, users))
        size = f", {volume.size_gb} GB" if volume.size_gb is not None else ""
        question = (
            f"delete network volume {volume.name} ({volume.id}{size}) in "
            f"{volume.data_center or '?'} and everything on it?"
        )
        if not _asked(question, yes, f"overbrainer volume rm {volume.name or volume.id}"):
            front.result("volume rm: nothing deleted")
            return 0
        await delete_volume(ctx, volume)
        front.result(
            f"volume rm: network volume {volume.name} ({volume.id}) deleted; Runpod no longer "
            "lists it"
        )
        return ctx.session.interrupts.finish(0)
