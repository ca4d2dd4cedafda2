"""Run a reader over many inputs in forked worker processes so that one crashing input cannot kill the batch.

libdarshan-util can abort() on corrupt logs (e.g. "munmap_chunk(): invalid pointer" on a truncated one).
Each worker reads one input at a time; when it dies or overruns the timeout, that input is reported with
the reason and a fresh worker takes its place. Workers are recycled every `tasks_per_worker` inputs so a
leak in the C library cannot grow without bound.
"""

from __future__ import annotations

import contextlib
import faulthandler
import multiprocessing as mp
import signal
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Any

from surge_tune.errors import TuneError


@dataclass
class Outcome:
    item: Any
    ok: bool
    value: Any = None  # the reader's result when ok
    reason: str = ""  # why the input was rejected when not ok (without the input's name)


def _serve(fn: Callable[[Any], Any], conn) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    faulthandler.disable()  # a crash is reported by the parent in one line, not a traceback dump
    while True:
        item = conn.recv()
        if item is None:
            return
        try:
            conn.send(("ok", fn(item)))
        except TuneError as e:
            conn.send(("error", str(e)))
        except Exception as e:  # a reader bug on one input must still not stop the batch
            conn.send(("error", f"{type(e).__name__}: {e}"))


class _Worker:
    def __init__(self, ctx, fn):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(fn, child), daemon=True)
        self.proc.start()
        child.close()
        self.item = None
        self.started = 0.0
        self.done = 0

    def stop(self, kill: bool = False) -> None:
        if kill:
            self.proc.kill()
        else:
            with contextlib.suppress(BrokenPipeError, OSError):
                self.conn.send(None)
        self.proc.join(timeout=5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
        self.conn.close()


def _death_reason(proc) -> str:
    code = proc.exitcode
    if code is not None and code < 0:
        try:
            return f"reader crashed with {signal.Signals(-code).name} (corrupt log?)"
        except ValueError:
            return f"reader crashed with signal {-code}"
    return f"reader exited with status {code}"


def imap_isolated(
    fn: Callable[[Any], Any],
    items: Iterable[Any],
    workers: int = 1,
    timeout: float = 300.0,
    tasks_per_worker: int = 200,
) -> Iterator[Outcome]:
    """Yield one Outcome per item, in completion order."""
    ctx = mp.get_context("fork")  # fork: workers inherit already-imported modules, start in milliseconds
    pending = iter(items)
    idle = [_Worker(ctx, fn) for _ in range(max(1, workers))]
    busy: list[_Worker] = []
    exhausted = False
    try:
        while True:
            while idle and not exhausted:
                item = next(pending, _END)
                if item is _END:
                    exhausted = True
                    break
                w = idle.pop()
                w.item, w.started = item, time.monotonic()
                w.conn.send(item)
                busy.append(w)
            if not busy:
                return
            ready = wait([w.conn for w in busy] + [w.proc.sentinel for w in busy], timeout=1.0)
            now = time.monotonic()
            for w in list(busy):
                outcome = None
                if w.conn in ready or w.proc.sentinel in ready:
                    try:
                        if w.conn.poll():
                            status, payload = w.conn.recv()
                            outcome = Outcome(
                                w.item,
                                status == "ok",
                                payload if status == "ok" else None,
                                "" if status == "ok" else _without_name(payload, w.item),
                            )
                    except (EOFError, OSError):
                        pass
                    if outcome is None and not w.proc.is_alive():
                        w.proc.join()
                        outcome = Outcome(w.item, False, reason=_death_reason(w.proc))
                if outcome is None and now - w.started > timeout:
                    outcome = Outcome(w.item, False, reason=f"reader timed out after {timeout:.0f} s")
                    w.proc.kill()
                    w.proc.join()
                if outcome is None:
                    continue
                busy.remove(w)
                w.done += 1
                # After a failure the C library's heap may be corrupt (a later, valid log then aborts):
                # never reuse that worker.
                if outcome.ok and w.proc.is_alive() and w.done < tasks_per_worker:
                    idle.append(w)
                else:
                    w.stop(kill=not w.proc.is_alive())
                    idle.append(_Worker(ctx, fn))
                yield outcome
    finally:
        for w in idle + busy:
            w.stop(kill=w in busy)


_END = object()


def _without_name(reason: str, item) -> str:
    return reason.removeprefix(f"{item}: ") if isinstance(item, str) else reason
