"""Model instances served side by side (the `serving` recipe): N copies of the model, each
answering one call at a time, with the cores split between them (instances x intra-op threads
<= cores).

  thread   copies in this process, one serving thread each: torch releases the GIL inside its
           operators, so large operators overlap; Python between them does not.
  process  the served model forked into N processes, one call at a time each over a pipe:
           nothing shared but the pages the fork left unwritten, so Python overlaps too, at
           the price of pickling each request and output.

Each forked instance asks for SIGKILL when the measurement child dies (`die_with_parent`),
so none outlives it.
"""

from __future__ import annotations

import copy
import os
import pickle
from typing import Any, Callable

import torch

from advisor.harness.batches import map_tensors
from advisor.harness.lifetime import die_with_parent

Serve = Callable[[list], list]


def threads_each(count: int) -> int:
    """The intra-op threads each of `count` instances gets: the cores split between them, and
    never more than the process had."""
    return max(1, min(torch.get_num_threads(), (os.cpu_count() or 1) // count))


def model_copies(model: Any, count: int) -> list:
    """The user's model and `count - 1` deep copies of it, made before anything prepares them
    (a compiled model does not copy)."""
    return [model] + [copy.deepcopy(model) for _ in range(count - 1)]


def forked(serve: Serve, count: int) -> tuple[list[Serve], Callable[[], None]]:
    """`count` processes forked from this one, each serving with `serve` (its own copy of the
    model, by the fork); returns a serve function per process and the function that stops them."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    threads = threads_each(count)
    ends, processes = [], []
    for _ in range(count):
        mine, theirs = context.Pipe()
        process = context.Process(target=_serve_forever, args=(theirs, serve, threads), daemon=True)
        process.start()
        theirs.close()
        ends.append(mine)
        processes.append(process)

    def stop() -> None:
        for end, process in zip(ends, processes):
            try:
                end.send_bytes(pickle.dumps(None))
            except OSError:
                pass
            process.join(timeout=2)
            if process.is_alive():
                process.kill()

    return [_through(end) for end in ends], stop


def _serve_forever(connection, serve: Serve, threads: int) -> None:
    die_with_parent()
    torch.set_num_threads(threads)
    while True:
        batch = pickle.loads(connection.recv_bytes())
        if batch is None:
            return
        try:
            outputs = [map_tensors(output, lambda t: t.detach()) for output in serve(batch)]
            connection.send_bytes(pickle.dumps(("ok", outputs)))
        except Exception as exc:  # the parent raises it as this instance's failure
            connection.send_bytes(pickle.dumps(("error", f"{type(exc).__name__}: {exc}")))


def _through(connection) -> Serve:
    """A serve function that hands the batch to one forked instance and waits for its answer.
    Plain pickle: torch's own reduction would move every tensor through shared memory."""
    def serve(batch: list) -> list:
        connection.send_bytes(pickle.dumps(batch))
        status, value = pickle.loads(connection.recv_bytes())
        if status == "error":
            raise RuntimeError(f"a forked model instance failed: {value}")
        return value

    return serve
