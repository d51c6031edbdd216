"""Record a vLLM P/D deployment in kvcc's recorded-run format, for `kvcc conform`.

Standard library only; nothing here imports vLLM. Installed into vLLM's environment
(``pip install ./recorder``) it also records an engine by itself: the vLLM plugin
kvcc_vllm_plugin calls it from vLLM's own methods when ``KVCC_RECORD_DIR`` is set. By
hand, it is used as follows. The format (docs/recorded-run.md,
version 1) is one directory per engine:

    header.json       what the engine's KVOutputAggregator was built from
    rank-<N>.jsonl    per worker rank, one line per engine step: its connector output
    scheduler.jsonl   the scheduler's view of requests: delay-freed, waiting for remote KV,
                      woken, failed load, aborted, freed

Two ways to capture the worker outputs:

* in the engine process, where vLLM's executor hands the outputs of every worker for a
  step to its aggregator together: ``EngineRecorder.record_model_runner_outputs`` (or
  ``install_aggregator_hook`` to wrap the aggregator's ``aggregate`` method);
* in each worker process, with one ``WorkerRecorder`` per rank calling ``record`` once
  per step.

Scheduler events come from the engine process: call ``EngineRecorder.delay_freed`` where
``request_finished`` returned True, ``waiting_for_remote_kvs`` where a request enters
WAITING_FOR_REMOTE_KVS, ``woken`` / ``load_failed`` where an aggregated receive
completes, ``aborted`` on a client abort and ``freed`` where the scheduler frees a
request's blocks. An event's step is the number of engine steps aggregated before it:
the recorder counts them (``record_*`` advances it; with ``WorkerRecorder``s, call
``step_aggregated`` once per step).

Connector outputs are duck-typed: any object with ``finished_sending``,
``finished_recving`` and ``invalid_block_ids`` (each an iterable or None) and optionally
``failed_recving`` and ``expected_finished_count`` — the shape of vLLM's
``KVConnectorOutput``. ``None`` is an output with nothing to report; ``MISSING`` marks a
rank that produced no output at all for the step (the aggregator then never sees it).
"""

import json
import os
import threading

FORMAT_VERSION = 1

ENGINES = ("prefill", "decode")
POLICIES = ("countdown", "strict")
EVENTS = (
    "delay-freed",
    "aborted",
    "waiting-for-remote-kvs",
    "woken",
    "load-failed",
    "freed",
)


class _Missing:
    """The rank produced no output this step."""

    def __repr__(self):
        return "MISSING"


MISSING = _Missing()


def _ids(values, field):
    if values is None:
        return []
    ids = []
    for value in values:
        if not isinstance(value, str):
            raise TypeError(
                "%s holds %r: vLLM request ids are strings" % (field, value))
        ids.append(value)
    return sorted(set(ids))


def output_line(step, output):
    """The JSON object of one rank's output for one step."""
    if output is MISSING:
        return {"step": step, "missing": True}
    get = (lambda name: getattr(output, name, None)) if output is not None else (
        lambda name: None)
    expected = get("expected_finished_count")
    return {
        "step": step,
        "finished_sending": _ids(get("finished_sending"), "finished_sending"),
        "finished_recving": _ids(get("finished_recving"), "finished_recving"),
        "failed_recving": _ids(get("failed_recving"), "failed_recving"),
        "invalid_block_ids": sorted({int(b) for b in (get("invalid_block_ids") or ())}),
        "expected_finished_count": int(expected or 0),
    }


def _dumps(obj):
    return json.dumps(obj, separators=(", ", ": ")) + "\n"


class _LineFile:
    """A JSON Lines file written a whole line at a time, so that a crash leaves at worst
    a truncated last line, which `kvcc conform` reports rather than misreads."""

    def __init__(self, path, flush_every_line):
        # "x": never append to, or overwrite, another run's file.
        self._file = open(path, "x", encoding="utf-8")
        self._flush = flush_every_line
        self._lock = threading.Lock()

    def write(self, obj):
        line = _dumps(obj)
        with self._lock:
            self._file.write(line)
            if self._flush:
                self._file.flush()

    def close(self):
        with self._lock:
            if not self._file.closed:
                self._file.close()


def _write_header(run_dir, header):
    path = os.path.join(run_dir, "header.json")
    if os.path.exists(path):
        raise FileExistsError(
            "%s already holds a recorded run; record into a new directory" % run_dir)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(header, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


class EngineRecorder:
    """One engine (P or D): its header, its scheduler events, and — when the worker
    outputs are captured in the engine process — every rank's output per step."""

    def __init__(self, run_dir, engine, world_size, kv_connector, output_rank=0,
                 finished_count=None, aggregator_policy="countdown",
                 transfer_ranks=None, kv_role=None, tp_size=None, pp_size=None,
                 pcp_size=None, flush_every_step=True):
        if engine not in ENGINES:
            raise ValueError("engine must be one of %s" % (ENGINES,))
        if aggregator_policy not in POLICIES:
            raise ValueError("aggregator_policy must be one of %s" % (POLICIES,))
        if not 1 <= int(world_size) <= 65536:
            raise ValueError("world_size must be in 1..65536")
        if not 0 <= int(output_rank) < int(world_size):
            raise ValueError("output_rank must be a rank of the world")
        self.run_dir = run_dir
        self.world_size = int(world_size)
        self.step = 0
        self._flush = flush_every_step
        self._ranks = None
        self._lock = threading.Lock()
        header = {
            "format_version": FORMAT_VERSION,
            "engine": engine,
            "kv_connector": str(kv_connector),
            "world_size": self.world_size,
            "output_rank": int(output_rank),
            "finished_count": None if finished_count is None else int(finished_count),
            "aggregator_policy": aggregator_policy,
        }
        optional = {
            "kv_role": kv_role,
            "transfer_ranks": None if transfer_ranks is None else sorted(
                int(r) for r in transfer_ranks),
            "tp_size": tp_size,
            "pp_size": pp_size,
            "pcp_size": pcp_size,
        }
        header.update({k: v for k, v in optional.items() if v is not None})
        os.makedirs(run_dir, exist_ok=True)
        _write_header(run_dir, header)
        self._scheduler = _LineFile(
            os.path.join(run_dir, "scheduler.jsonl"), flush_every_step)

    # Scheduler events -------------------------------------------------------------

    def event(self, kind, request_id):
        """A scheduler event, before the next engine step is aggregated."""
        if kind not in EVENTS:
            raise ValueError("unknown event %r (one of %s)" % (kind, EVENTS))
        if not isinstance(request_id, str):
            raise TypeError("request ids are strings, got %r" % (request_id,))
        with self._lock:
            step = self.step
        self._scheduler.write(
            {"step": step, "event": kind, "request_id": request_id})

    def delay_freed(self, request_id):
        """``request_finished`` returned True: the connector owns the free."""
        self.event("delay-freed", request_id)

    def waiting_for_remote_kvs(self, request_id):
        """The request entered WAITING_FOR_REMOTE_KVS."""
        self.event("waiting-for-remote-kvs", request_id)

    def woken(self, request_id):
        """Its remote load completed: it is schedulable again."""
        self.event("woken", request_id)

    def load_failed(self, request_id):
        """Its remote load completed as a failure."""
        self.event("load-failed", request_id)

    def aborted(self, request_id):
        """A client aborted it."""
        self.event("aborted", request_id)

    def freed(self, request_id):
        """The scheduler freed its blocks."""
        self.event("freed", request_id)

    # Worker outputs, captured in the engine process ------------------------------------

    def record_step(self, outputs):
        """One engine step: ``outputs[rank]`` is that rank's connector output, None (no
        connector output) or MISSING (no output at all). Advances the step."""
        outputs = list(outputs)
        if len(outputs) != self.world_size:
            raise ValueError("a step has %d outputs, one per rank; got %d"
                             % (self.world_size, len(outputs)))
        lines = []
        with self._lock:
            step = self.step
        for output in outputs:
            lines.append(output_line(step, output))
        with self._lock:
            if self._ranks is None:
                self._ranks = [
                    _LineFile(os.path.join(self.run_dir, "rank-%d.jsonl" % r),
                              self._flush)
                    for r in range(self.world_size)
                ]
            for rank, line in enumerate(lines):
                self._ranks[rank].write(line)
            self.step += 1

    def record_model_runner_outputs(self, outputs):
        """``record_step`` from what vLLM's executor hands its aggregator: a list of
        per-rank model runner outputs (None when a rank produced none), each carrying
        ``kv_connector_output`` (None when the connector had nothing to say)."""
        self.record_step(
            MISSING if o is None else getattr(o, "kv_connector_output", None)
            for o in outputs)

    def step_aggregated(self):
        """With ``WorkerRecorder``s writing the rank files: one engine step was
        aggregated (events from now on belong before the next one)."""
        with self._lock:
            self.step += 1

    def close(self):
        self._scheduler.close()
        for rank in self._ranks or ():
            rank.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class WorkerRecorder:
    """One worker rank, in its own process: one line per engine step. The engine's
    ``EngineRecorder`` writes the header and scheduler log in the same directory."""

    def __init__(self, run_dir, rank, flush_every_step=True):
        os.makedirs(run_dir, exist_ok=True)
        self.rank = int(rank)
        self.step = 0
        self._file = _LineFile(
            os.path.join(run_dir, "rank-%d.jsonl" % self.rank), flush_every_step)

    def record(self, output):
        """This rank's connector output for the next step (None: nothing to report)."""
        self._file.write(output_line(self.step, output))
        self.step += 1

    def record_missing(self):
        """This rank produced no output for the next step."""
        self.record(MISSING)

    def close(self):
        self._file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def install_aggregator_hook(aggregator_cls, recorder, method="aggregate"):
    """Wraps ``aggregator_cls.<method>(self, outputs, output_rank=...)`` so that every
    call first records ``outputs`` (per-rank model runner outputs) with ``recorder``.
    Pass vLLM's ``KVOutputAggregator`` in the engine process whose run you record.
    Returns a function that removes the hook."""
    original = getattr(aggregator_cls, method)

    def recording(self, outputs, *args, **kwargs):
        outputs = list(outputs)
        recorder.record_model_runner_outputs(outputs)
        return original(self, outputs, *args, **kwargs)

    recording.__wrapped__ = original
    setattr(aggregator_cls, method, recording)

    def remove():
        setattr(aggregator_cls, method, original)

    return remove
