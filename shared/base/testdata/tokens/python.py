"""Summarise CSV exports of sensor readings into daily statistics."""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Iterator


@dataclass
class DayStats:
    count: int = 0
    values: list[float] = field(default_factory=list)
    flagged: int = 0

    def add(self, value: float, flagged: bool) -> None:
        self.count += 1
        self.values.append(value)
        if flagged:
            self.flagged += 1

    def summary(self) -> dict[str, float | int]:
        vals = sorted(self.values)
        return {
            "count": self.count,
            "min": vals[0],
            "max": vals[-1],
            "mean": round(statistics.fmean(vals), 3),
            "median": statistics.median(vals),
            "p95": vals[min(len(vals) - 1, int(0.95 * len(vals)))],
            "flagged_pct": round(100.0 * self.flagged / self.count, 1),
        }


def read_rows(paths: Iterable[Path]) -> Iterator[dict[str, str]]:
    for path in paths:
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            missing = {"timestamp", "sensor", "value"} - set(reader.fieldnames or [])
            if missing:
                raise ValueError(f"{path}: missing columns {sorted(missing)}")
            yield from reader


def parse_ts(raw: str) -> datetime:
    # Accept both "2024-03-01T12:00:00Z" and unix seconds.
    if raw.isdigit():
        return datetime.fromtimestamp(int(raw), tz=timezone.utc)
    return datetime.fromisoformat(raw.replace("Z", "+00:00"))


def aggregate(rows: Iterable[dict[str, str]], threshold: float) -> dict[tuple[str, str], DayStats]:
    out: dict[tuple[str, str], DayStats] = defaultdict(DayStats)
    for row in rows:
        try:
            value = float(row["value"])
        except ValueError:
            continue
        day = parse_ts(row["timestamp"]).date().isoformat()
        out[(row["sensor"], day)].add(value, value > threshold)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--threshold", type=float, default=42.0)
    parser.add_argument("--sensor", action="append", default=[])
    args = parser.parse_args(argv)

    stats = aggregate(read_rows(args.files), args.threshold)
    writer = csv.writer(sys.stdout)
    writer.writerow(["sensor", "day", "count", "min", "max", "mean", "median", "p95", "flagged_pct"])
    for (sensor, day), s in sorted(stats.items()):
        if args.sensor and sensor not in args.sensor:
            continue
        summary = s.summary()
        writer.writerow([sensor, day, *summary.values()])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
