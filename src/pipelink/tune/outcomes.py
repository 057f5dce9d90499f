"""What a tune search found: each configuration's outcome, each bucket's, the whole search's (tune/search.py
makes them; tune/distributed.py fills them from Ray tasks)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .space import Config


@dataclass
class Outcome:
    config: Config
    status: str = "pending"   # linked | link failed | wrong | hung | crashed | timed | timing failed
    reason: str = ""
    median_ms: float | None = None
    link_s: float = 0.0
    timing: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"spec": str(self.config.spec), "facts": dict(self.config.facts),
                "settings": dict(self.config.settings), "status": self.status,
                "reason": self.reason, "median_ms": self.median_ms, "link_s": round(self.link_s, 3),
                "timing": self.timing}


@dataclass
class BucketResult:
    shape: dict[str, int]
    bucket: dict[str, int]
    outcomes: list[Outcome]
    winner: Outcome | None = None
    where: str = "here"         # where it was verified and timed: this machine, or a Ray task's GPU
    # The bucket's low end: the operands' bound dimensions at the smallest size the bucket serves
    # ([{"param", "dim", "size"}]); each configuration is timed there too (search._pick).
    low_end: list = field(default_factory=list)

    def to_json(self) -> dict:
        return {"shape": self.shape, "bucket": self.bucket, "winner": self.winner.to_json() if self.winner else None,
                "where": self.where, "low_end": self.low_end, "outcomes": [o.to_json() for o in self.outcomes]}


@dataclass
class TuneResult:
    spec: str
    device: dict
    link_only: bool
    buckets: list[BucketResult]
    cache: str | None = None
    rebuilt: str | None = None
    seconds: float = 0.0

    def to_json(self) -> dict:
        return {"spec": self.spec, "device": self.device, "link_only": self.link_only, "cache": self.cache,
                "rebuilt": self.rebuilt, "seconds": round(self.seconds, 3),
                "buckets": [b.to_json() for b in self.buckets]}
