"""Sampling one builder every second while a fleet run builds: CPU (user, system,
iowait), memory, disk and network traffic from psutil, and the compiler cache's counters.

The host figures are rates over the interval since the previous sample (psutil keeps
cumulative counters; a sample stores the difference and the interval it covers), so a
late tick stretches one interval instead of inventing a spike. The first sample is taken
when sampling starts and the last when it stops, so a run of D seconds has at least
``floor(D) + 2`` samples at a one-second interval.

The cache counters are cumulative over the run (what a build has hit, missed and stored
so far), read through a callable that the run supplies: the sampler knows nothing of
cache directories.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import psutil

DEFAULT_INTERVAL = 1.0

CacheCounters = Callable[[], Mapping[str, int] | None]
SampleSink = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class _Totals:
    at: float
    disk_read: int
    disk_write: int
    net_rx: int
    net_tx: int


def _totals(now: float) -> _Totals:
    disk = psutil.disk_io_counters()
    net = psutil.net_io_counters()
    return _Totals(
        at=now,
        disk_read=disk.read_bytes if disk else 0,
        disk_write=disk.write_bytes if disk else 0,
        net_rx=net.bytes_recv if net else 0,
        net_tx=net.bytes_sent if net else 0,
    )


def _rate(after: int, before: int, seconds: float) -> float:
    # Counters can wrap or reset (a device going away): never a negative rate.
    return round(max(after - before, 0) / seconds, 1) if seconds > 0 else 0.0


class Sampler:
    """A thread that hands one sample dict to ``sink`` every ``interval`` seconds.

    ``running`` tells how many builds are running at the time of a sample (the run's
    own count, so a plot can shade the time when something was building).
    """

    def __init__(
        self,
        builder: str,
        sink: SampleSink,
        *,
        interval: float = DEFAULT_INTERVAL,
        cache_counters: CacheCounters | None = None,
        running: Callable[[], int] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.builder = builder
        self.sink = sink
        self.interval = interval
        self.cache_counters = cache_counters
        self.running = running
        self.clock = clock
        self.count = 0
        self.started_at = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._previous: _Totals | None = None
        self.error: BaseException | None = None

    def sample(self) -> dict[str, Any]:
        """One sample now (also used for the first and the last one)."""
        now = self.clock()
        cpu = psutil.cpu_times_percent(interval=None)
        memory = psutil.virtual_memory()
        totals = _totals(now)
        previous = self._previous or totals
        seconds = totals.at - previous.at
        self._previous = totals
        iowait = float(getattr(cpu, "iowait", 0.0))
        cache = self.cache_counters() if self.cache_counters is not None else None
        sample: dict[str, Any] = {
            "t": round(now, 3),
            "elapsed": round(now - self.started_at, 3),
            "builder": self.builder,
            "interval": round(seconds, 3),
            "cpu": {
                "user": round(cpu.user + getattr(cpu, "nice", 0.0), 1),
                "system": round(cpu.system, 1),
                "iowait": round(iowait, 1),
                "busy": round(max(0.0, 100.0 - cpu.idle - iowait), 1),
            },
            "memory": {"used_bytes": int(memory.total - memory.available),
                       "percent": round(memory.percent, 1)},
            "disk": {"read_bytes_per_s": _rate(totals.disk_read, previous.disk_read, seconds),
                     "write_bytes_per_s": _rate(totals.disk_write, previous.disk_write, seconds)},
            "net": {"rx_bytes_per_s": _rate(totals.net_rx, previous.net_rx, seconds),
                    "tx_bytes_per_s": _rate(totals.net_tx, previous.net_tx, seconds)},
            "cache": dict(cache) if cache is not None else None,
            "running": self.running() if self.running else None,
        }
        self.count += 1
        self.sink(sample)
        return sample

    def start(self) -> None:
        self.started_at = self.clock()
        psutil.cpu_times_percent(interval=None)  # the baseline the first sample is taken against
        self._previous = _totals(self.started_at)
        time.sleep(0.05)  # cpu_times_percent over a zero interval is all zeros
        self.sample()
        self._thread = threading.Thread(target=self._loop, name=f"sampler-{self.builder}",
                                        daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        next_tick = time.monotonic() + self.interval
        try:
            while not self._stop.wait(max(0.0, next_tick - time.monotonic())):
                self.sample()
                next_tick += self.interval
                # A stalled machine: skip the ticks that passed rather than bursting.
                next_tick = max(next_tick, time.monotonic())
        except BaseException as exc:  # reported by stop(); a run must not die of its sampler
            self.error = exc

    def stop(self) -> None:
        """Stop the thread, then take the last sample."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.error is None:
            self.sample()
