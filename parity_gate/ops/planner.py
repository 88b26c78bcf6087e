"""Catalogue + filters → units → batch jobs, and the cases skipped without running.

Units are grouped by dtype before chunking: the failures of one dtype
(bfloat16 kernels a provider lacks, integer types a spec forbids) then stay
in their own batches, where isolation is cheap, instead of splitting every
batch of the run.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field

from parity_gate.errors import UserError
from parity_gate.model.findings import OpCase
from parity_gate.model.keys import CaseKey, matches
from parity_gate.model.outcomes import Outcome
from parity_gate.model.results import CaseResult
from parity_gate.ops.jobs import DEFAULT_SOURCES, OpBatchJob, Unit
from parity_gate.ops.records import DTYPES, OpVariant, user_op, variant_case_id
from parity_gate.plan.sharding import Shard

DEFAULT_BATCH = 160


@dataclass
class Selection:
    """`--select` globs (case ids or variant ids), `--dtype`, `--family`, providers."""

    select: list[str] = field(default_factory=list)
    dtypes: list[str] = field(default_factory=list)
    families: list[str] = field(default_factory=list)
    providers: list[str] = field(default_factory=lambda: ["cpu"])

    def wants_variant(self, v: OpVariant) -> bool:
        return not self.families or v.family in self.families

    def wants(self, v: OpVariant, key: CaseKey) -> bool:
        if self.dtypes and key.dtype not in self.dtypes:
            return False
        # The one case-id rule, plus: a pattern may name variants (`atan2`, `sum.*`).
        return not self.select or any(matches(key.id, p) or matches(v.id, p)
                                      for p in self.select)


@dataclass
class OpPlan:
    jobs: list[OpBatchJob]
    skipped: list[CaseResult]
    variants: dict[str, OpVariant]
    fingerprint: str = ""  # of the whole sweep before sharding (see fingerprint())

    @property
    def total(self) -> int:
        return sum(len(j.cases) for j in self.jobs) + len(self.skipped)

    @property
    def unit_count(self) -> int:
        return sum(len(j.units) for j in self.jobs)


def validate(selection: Selection, variants: dict[str, OpVariant]) -> None:
    bad = [d for d in selection.dtypes if d not in DTYPES]
    if bad:
        raise UserError(f"--dtype: unknown dtype {bad[0]!r} (expected some of "
                        f"{', '.join(DTYPES)})")
    families = sorted({v.family for v in variants.values()})
    bad = [f for f in selection.families if f not in families]
    if bad:
        raise UserError(f"--family: unknown family {bad[0]!r} (expected some of "
                        f"{', '.join(families)})")


def base_op(v: OpVariant, op: str | None = None) -> OpCase:
    """What every case carries even when no worker reported it (crash, skip): no ATen ops
    seen, the blamed op `op` (one a worker saw for the variant) or a static guess."""
    return OpCase(variant=v.id, family=v.family, call=v.call, op=op or guess_aten(v),
                  user_op=user_op(v.call))


def guess_aten(v: OpVariant) -> str:
    """Best static guess of the ATen name; workers replace it with the op they saw.
    OpInfo ids (`oi.nn.functional.conv2d.3`) name the op before the sample number."""
    if v.id.startswith("oi."):
        return f"aten.{v.id.rsplit('.', 1)[0].rsplit('.', 1)[-1]}"
    return f"aten.{v.id.split('.')[0]}"


def units_of(variants: Iterable[OpVariant], selection: Selection,
             accepted: dict[str, tuple[str, ...]] | None = None
             ) -> tuple[list[Unit], list[CaseResult]]:
    """`accepted`: the dtypes eager accepts per variant (ops.accepted); default: all the
    record allows."""
    units: list[Unit] = []
    skipped: list[CaseResult] = []
    for v in variants:
        if not selection.wants_variant(v):
            continue
        allowed = accepted.get(v.id, v.dtypes) if accepted is not None else v.dtypes
        for dtype in (d for d in v.dtypes if d in allowed):
            for cls in v.classes_for(dtype):
                unit = Unit(v.id, dtype, cls)
                keys = [k for k in (unit.key(p) for p in selection.providers)
                        if selection.wants(v, k)]
                if not keys:
                    continue
                skip = v.expectation("skip", dtype, cls)
                if skip is not None:
                    skipped += [CaseResult(k, Outcome.SKIPPED, f"skip: {skip.reason}",
                                           op=base_op(v)) for k in keys]
                else:
                    units.append(unit)
    return units, skipped


def case_ids(variants: dict[str, OpVariant], providers: list[str],
             accepted: dict[str, tuple[str, ...]] | None = None) -> set[str]:
    """Every case id of the whole catalogue on these providers, before any filter.

    Baseline entries are judged stale against this, so `--select` or `--family`
    does not call the entries of the ops it left out stale.
    """
    units, skipped = units_of(variants.values(), Selection(providers=list(providers)), accepted)
    return {u.key(p).id for u in units for p in providers} | {c.id for c in skipped}


def shard_of(units: list[Unit], skipped: list[CaseResult], shard: Shard
             ) -> tuple[list[Unit], list[CaseResult]]:
    """One part of a `--shard K/N` matrix: whole variants (their isolation stays in one
    worker), assigned longest first to the least-loaded shard, ties by id, so every
    runner computes the same split from the same plan (plan.sharding's rule for modules).
    """
    load: dict[str, int] = {}
    for u in units:
        load[u.variant] = load.get(u.variant, 0) + 1
    for c in skipped:
        vid = variant_of_key(c.key)
        load[vid] = load.get(vid, 0) + 1
    totals = [0] * shard.count
    mine: set[str] = set()
    for vid, n in sorted(load.items(), key=lambda kv: (-kv[1], kv[0])):
        k = min(range(shard.count), key=lambda i: (totals[i], i))
        totals[k] += n
        if k == shard.index - 1:
            mine.add(vid)
    return ([u for u in units if u.variant in mine],
            [c for c in skipped if variant_of_key(c.key) in mine])


def plan(variants: dict[str, OpVariant], selection: Selection, *,
         batch_size: int = DEFAULT_BATCH, sources: tuple[str, ...] = DEFAULT_SOURCES,
         seed: int = 0, accepted: dict[str, tuple[str, ...]] | None = None,
         shard: Shard | None = None) -> OpPlan:
    validate(selection, variants)
    units, skipped = units_of(variants.values(), selection, accepted)
    digest = fingerprint(units, skipped, variants, seed)
    if shard is not None:
        units, skipped = shard_of(units, skipped, shard)
    order = {d: i for i, d in enumerate(DTYPES)}
    units.sort(key=lambda u: (order[u.dtype], variants[u.variant].family, u.variant,
                              u.input_class))
    jobs: list[OpBatchJob] = []
    for dtype in DTYPES:
        chunk = [u for u in units if u.dtype == dtype]
        for start in range(0, len(chunk), max(1, batch_size)):
            part = chunk[start:start + batch_size]
            jobs.append(job_for(f"{dtype}#{start // batch_size}", part, selection, sources,
                                seed))
    jobs.sort(key=lambda j: -len(j.units))
    return OpPlan(jobs, skipped, variants, digest)


def fingerprint(units: list[Unit], skipped: list[CaseResult], variants: dict[str, OpVariant],
                seed: int) -> str:
    """What the shards of one sweep must share to merge: the same cases from the same
    definitions (an OpInfo sample's values included) and seed. Runners that built
    different OpInfo variants, or whose eager accepts other dtypes, split the sweep
    differently; their merge is refused on this digest, naming the shard."""
    h = hashlib.sha256(f"parity-gate ops plan\nseed {seed}\n".encode())
    for unit in sorted(units):
        h.update(f"{unit.variant}|{unit.dtype}|{unit.input_class}\n".encode())
    for case in sorted(skipped, key=lambda c: c.id):
        h.update(f"skip {case.id}\n".encode())
    for vid in sorted({u.variant for u in units}):
        h.update(repr(variants[vid]).encode())
    return h.hexdigest()


def job_for(name: str, units: list[Unit], selection: Selection, sources: tuple[str, ...],
            seed: int, generation: int = 0) -> OpBatchJob:
    """Deadline: enough for a worker's warm-up plus a batch whose every case needs isolating."""
    return OpBatchJob(name, units, list(selection.providers), sources, seed,
                      timeout=180.0 + 3.0 * len(units), generation=generation)


def variant_of_key(key: CaseKey) -> str:
    prefix = variant_case_id("")
    return key.module[len(prefix):] if key.module.startswith(prefix) else key.module
