"""kvcc's recorder as a vLLM plugin: a vLLM engine records itself, with no edit to vLLM.

``pip install ./recorder`` declares ``register`` under vLLM's ``vllm.general_plugins``
entry-point group (recorder/pyproject.toml). vLLM calls every general plugin once per
process — the front end, each engine core, each worker — through
``vllm.plugins.load_general_plugins()``. When ``KVCC_RECORD_DIR`` names a directory,
``register`` wraps methods of vLLM's ``Scheduler`` and ``KVOutputAggregator`` so that
every engine with a KV connector writes a recorded run (docs/recorded-run.md) into
``$KVCC_RECORD_DIR/<engine>/``, which ``kvcc conform`` reads. Unset, ``register`` does
nothing and imports nothing: installing the plugin costs an engine nothing.

What each wrapped method records (written against vLLM 0.34.0; see docs/vllm.md):

=================================  ==================================================
``KVOutputAggregator.aggregate``   every rank's connector output for the step, before
                                   vLLM counts it (a rank without output: ``missing``)
``Scheduler.update_from_output``   the step itself when no aggregator ran: with one
                                   worker vLLM's executor hands its output straight on
``Scheduler._connector_finished``  ``delay-freed``: the connector took over the free
``Scheduler.schedule``             ``waiting-for-remote-kvs``: admitted to load
``_update_from_kv_xfer_finished``  ``woken`` / ``load-failed``: a load completed
``Scheduler.finish_requests``      ``aborted``: a client abort
``Scheduler._free_blocks``         ``freed``: the scheduler let go of the blocks
=================================  ==================================================

``KVOutputAggregator.from_connector`` ties the engine's aggregator to its scheduler
(through the connector both hold), so several engines in one process record apart.

Environment:

``KVCC_RECORD_DIR``     where to record; each engine writes a subdirectory of its own
``KVCC_RECORD_ENGINE``  ``prefill`` or ``decode``: which engine this is, when its
                        ``kv_role`` does not say (``kv_both``, recorded as ``prefill``
                        unless told)
"""

import logging
import os
import threading

import kvcc_recorder

DIR_ENV = "KVCC_RECORD_DIR"
ENGINE_ENV = "KVCC_RECORD_ENGINE"

# The engine a kv_role records as. kv_both engines do both a P's work (delay their
# frees) and a load's, so they record as prefill, whose monitors follow both, unless
# KVCC_RECORD_ENGINE says otherwise.
ENGINE_OF_ROLE = {"kv_producer": "prefill", "kv_consumer": "decode", "kv_both": "prefill"}

# What the plugin wraps (vLLM 0.34.0's names).
SCHEDULER_METHODS = (
    "__init__", "schedule", "update_from_output", "_connector_finished",
    "_update_from_kv_xfer_finished", "finish_requests", "_free_blocks", "shutdown",
)
AGGREGATOR_METHODS = ("from_connector", "aggregate")

# The attribute that ties a scheduler, its connector and its aggregator to a recording.
ATTR = "_kvcc_recording"

# vLLM configures the "vllm" logger; a child of it prints in vLLM's own format.
logger = logging.getLogger("vllm.kvcc_recorder")

_installed = False
_install_lock = threading.Lock()


def register():
    """vLLM's general-plugin hook (entry point ``kvcc_recorder``)."""
    if not os.environ.get(DIR_ENV):
        return
    install()


def install():
    """Wraps vLLM's scheduler and aggregator methods, once per process."""
    global _installed
    with _install_lock:
        if _installed:
            return
        # Imported here, not at the top: a process that records nothing must not pay
        # for importing vLLM's scheduler, and the module must import without vLLM.
        from vllm.distributed.kv_transfer.kv_connector.utils import KVOutputAggregator
        from vllm.v1.core.sched.scheduler import Scheduler
        from vllm.v1.request import RequestStatus

        # Every method looked up before any is wrapped: a vLLM without one of them is
        # refused whole, never half recorded.
        for cls, names in ((Scheduler, SCHEDULER_METHODS),
                           (KVOutputAggregator, AGGREGATOR_METHODS)):
            for name in names:
                _method(cls, name)
        _wrap_scheduler(Scheduler, RequestStatus)
        _wrap_aggregator(KVOutputAggregator)
        _installed = True
    logger.info("kvcc recorder: recording engines into %s", os.environ.get(DIR_ENV))


def installed():
    """Whether this process's vLLM classes are wrapped."""
    return _installed


class Recording:
    """One engine's recorded run while it is written.

    The header is written at the engine's first step, when the aggregator's call names
    the output rank vLLM's executor uses; scheduler events before it (none in a fresh
    engine, which steps once it holds a request) wait in memory until then."""

    def __init__(self, run_dir, engine, facts):
        self.run_dir = run_dir
        self.engine = engine
        self.facts = facts  # header fields known when the scheduler is built
        self.world_size = None  # from KVOutputAggregator.from_connector
        self.finished_count = None
        self.recorder = None  # kvcc_recorder.EngineRecorder, from the first step
        self.output_rank = None  # the header's, from the first step
        self.pending = []  # events before the first step
        self.aggregated = False  # an aggregate call recorded the step in flight
        self.waiting = set()  # requests seen in WAITING_FOR_REMOTE_KVS
        self.failing = set()  # loads vLLM failed before they completed
        self.closed = False
        self.lock = threading.RLock()

    def bind(self, world_size, finished_count):
        with self.lock:
            self.world_size = int(world_size)
            self.finished_count = finished_count

    def _start(self, output_rank, aggregated):
        if self.world_size is None:
            raise RuntimeError(
                "kvcc recorder: %s: the engine stepped before vLLM built its "
                "KVOutputAggregator (KVOutputAggregator.from_connector), so its world "
                "size is unknown; this vLLM builds engines in an order the recorder "
                "does not know" % self.run_dir
            )
        self.recorder = kvcc_recorder.EngineRecorder(
            self.run_dir,
            engine=self.engine,
            world_size=self.world_size,
            # With one worker vLLM's executor does not aggregate: every report reaches
            # the scheduler as it is, a countdown of one whatever the connector
            # announces.
            finished_count=self.finished_count if aggregated else None,
            output_rank=output_rank,
            **self.facts,
        )
        self.output_rank = output_rank
        for kind, request_id in self.pending:
            self.recorder.event(kind, request_id)
        self.pending = []
        logger.info("kvcc recorder: recording this %s engine into %s",
                    self.engine, self.run_dir)

    def step(self, outputs, output_rank, aggregated):
        """One engine step's per-rank model runner outputs (None: no output)."""
        with self.lock:
            if self.closed:
                return
            if self.recorder is None:
                self._start(output_rank, aggregated)
            elif output_rank != self.output_rank:
                raise RuntimeError(
                    "kvcc recorder: %s: vLLM aggregated a step with output rank %d, "
                    "earlier ones with %d" % (self.run_dir, output_rank, self.output_rank)
                )
            self.recorder.record_model_runner_outputs(outputs)

    def event(self, kind, request_id):
        with self.lock:
            if self.closed:
                return
            if self.recorder is None:
                self.pending.append((kind, request_id))
            else:
                self.recorder.event(kind, request_id)

    def close(self):
        with self.lock:
            if self.closed:
                return
            self.closed = True
            if self.recorder is None:
                logger.warning(
                    "kvcc recorder: the engine ran no step: nothing recorded in %s",
                    self.run_dir,
                )
                return
            self.recorder.close()


def _recording_for(vllm_config):
    """A new engine's recording, or None when it has nothing to record."""
    base = os.environ.get(DIR_ENV)
    if not base:
        return None
    kv = vllm_config.kv_transfer_config
    if kv is None or kv.kv_connector is None:
        logger.warning(
            "kvcc recorder: %s is set but this engine has no KV connector: nothing to "
            "record", DIR_ENV)
        return None
    told = os.environ.get(ENGINE_ENV)
    if told and told not in kvcc_recorder.ENGINES:
        raise ValueError("kvcc recorder: %s=%r: an engine is %s" % (
            ENGINE_ENV, told, " or ".join(kvcc_recorder.ENGINES)))
    engine = told or ENGINE_OF_ROLE.get(kv.kv_role)
    if engine is None:
        raise ValueError(
            "kvcc recorder: kv_role %r does not say whether this engine is prefill or "
            "decode: set %s" % (kv.kv_role, ENGINE_ENV))
    parallel = vllm_config.parallel_config
    name = engine
    # Data-parallel engine cores each run a scheduler of their own.
    if parallel.data_parallel_size > 1:
        name = "%s-dp%d" % (engine, parallel.data_parallel_rank)
    run_dir = os.path.join(base, name)
    os.makedirs(base, exist_ok=True)
    try:
        # Claimed when the engine is built, atomically, so that two engines told the
        # same directory part at startup rather than when the second one first steps.
        os.mkdir(run_dir)
    except FileExistsError:
        raise FileExistsError(
            "kvcc recorder: %s already exists (a run recorded before, or another "
            "engine recording): point %s at a new directory%s" % (
                run_dir, DIR_ENV,
                "" if told else ", or set %s=decode on the engine that decodes when "
                "both are kv_both" % ENGINE_ENV)) from None
    facts = {
        "kv_connector": kv.kv_connector,
        "kv_role": kv.kv_role,
        "tp_size": parallel.tensor_parallel_size,
        "pp_size": parallel.pipeline_parallel_size,
        "pcp_size": getattr(parallel, "prefill_context_parallel_size", None),
    }
    return Recording(run_dir, engine, facts)


def _of(obj):
    return getattr(obj, ATTR, None)


def _method(cls, name):
    """``cls``'s own ``name``, or an error naming what this vLLM lacks."""
    original = cls.__dict__.get(name)
    if original is None:
        import vllm

        raise RuntimeError(
            "kvcc recorder: vLLM %s's %s has no method %s to record from; the recorder "
            "is written against vLLM 0.34.0 (unset %s to run without it)"
            % (vllm.__version__, cls.__name__, name, DIR_ENV))
    return original


def _wraps(cls, name, make):
    """Replaces ``cls.name`` by ``make(original)``, keeping the original reachable."""
    original = _method(cls, name)
    wrapper = make(original)
    wrapper.__wrapped__ = original
    wrapper.__name__ = name
    wrapper.__qualname__ = "%s.%s" % (cls.__name__, name)
    setattr(cls, name, wrapper)


def _wrap_scheduler(Scheduler, RequestStatus):
    WAITING = RequestStatus.WAITING_FOR_REMOTE_KVS

    def init(original):
        def __init__(self, *args, **kwargs):
            original(self, *args, **kwargs)
            recording = _recording_for(self.vllm_config)
            if recording is not None:
                setattr(self, ATTR, recording)
                # The executor builds the aggregator from this connector.
                setattr(self.connector, ATTR, recording)
        return __init__

    def schedule(original):
        def schedule(self, *args, **kwargs):
            out = original(self, *args, **kwargs)
            rec = _of(self)
            if rec is not None:
                # A request enters WAITING_FOR_REMOTE_KVS only while vLLM schedules.
                waiting = {rid for rid, r in self.requests.items() if r.status == WAITING}
                for rid in sorted(waiting - rec.waiting):
                    rec.event("waiting-for-remote-kvs", rid)
                rec.waiting = waiting
            return out
        return schedule

    def update_from_output(original):
        def update_from_output(self, scheduler_output, model_runner_output, *a, **kw):
            rec = _of(self)
            if rec is not None:
                with rec.lock:
                    if rec.aggregated:
                        rec.aggregated = False
                    elif (rec.world_size or 1) == 1:
                        rec.step([model_runner_output], output_rank=0, aggregated=False)
                    else:
                        raise RuntimeError(
                            "kvcc recorder: %s: a step of %d workers reached the "
                            "scheduler without passing vLLM's KVOutputAggregator, so "
                            "its per-rank reports cannot be recorded"
                            % (rec.run_dir, rec.world_size))
            return original(self, scheduler_output, model_runner_output, *a, **kw)
        return update_from_output

    def connector_finished(original):
        def _connector_finished(self, request, *a, **kw):
            result = original(self, request, *a, **kw)
            rec = _of(self)
            if rec is not None and result[0]:
                rec.event("delay-freed", request.request_id)
            return result
        return _connector_finished

    def kv_xfer_finished(original):
        def _update_from_kv_xfer_finished(self, kv_connector_output, *a, **kw):
            rec = _of(self)
            if rec is None:
                return original(self, kv_connector_output, *a, **kw)
            loading = []
            for rid in kv_connector_output.finished_recving or ():
                request = self.requests.get(rid)
                if request is not None and request.status == WAITING:
                    loading.append(rid)
                elif rid in rec.failing:
                    # vLLM failed this load before it completed; it completes now, and
                    # vLLM frees the blocks in this call.
                    rec.failing.discard(rid)
                    rec.event("load-failed", rid)
            result = original(self, kv_connector_output, *a, **kw)
            for rid in loading:
                # vLLM holds a completed load in one of two sets until it schedules the
                # request again; the failed set means the load completed as a failure
                # (kv_load_failure_policy "recompute").
                if rid in self.failed_recving_kv_req_ids:
                    rec.event("load-failed", rid)
                elif rid in self.finished_recving_kv_req_ids:
                    rec.event("woken", rid)
            return result
        return _update_from_kv_xfer_finished

    def finish_requests(original):
        def finish_requests(self, request_ids, finished_status, *a, **kw):
            rec = _of(self)
            if rec is not None:
                if request_ids is None:
                    ids = list(self.requests)
                elif isinstance(request_ids, str):
                    ids = [request_ids]
                else:
                    ids = list(request_ids)
                for rid in ids:
                    request = self.requests.get(rid)
                    # vLLM ignores ids it does not hold or has finished already.
                    if request is None or request.is_finished():
                        continue
                    if finished_status == RequestStatus.FINISHED_ABORTED:
                        rec.event("aborted", rid)
                    elif (finished_status == RequestStatus.FINISHED_ERROR
                          and request.status == WAITING):
                        # A failed load (policy "fail"): the format logs it when the
                        # load completes, which may be this step or a later one.
                        rec.failing.add(rid)
            return original(self, request_ids, finished_status, *a, **kw)
        return finish_requests

    def free_blocks(original):
        def _free_blocks(self, request, *a, **kw):
            result = original(self, request, *a, **kw)
            rec = _of(self)
            if rec is not None:
                rec.failing.discard(request.request_id)
                rec.event("freed", request.request_id)
            return result
        return _free_blocks

    def shutdown(original):
        def shutdown(self, *a, **kw):
            try:
                return original(self, *a, **kw)
            finally:
                rec = _of(self)
                if rec is not None:
                    rec.close()
        return shutdown

    _wraps(Scheduler, "__init__", init)
    _wraps(Scheduler, "schedule", schedule)
    _wraps(Scheduler, "update_from_output", update_from_output)
    _wraps(Scheduler, "_connector_finished", connector_finished)
    _wraps(Scheduler, "_update_from_kv_xfer_finished", kv_xfer_finished)
    _wraps(Scheduler, "finish_requests", finish_requests)
    _wraps(Scheduler, "_free_blocks", free_blocks)
    _wraps(Scheduler, "shutdown", shutdown)


def _wrap_aggregator(KVOutputAggregator):
    from_connector = _method(KVOutputAggregator, "from_connector").__func__

    def bound(cls, connector, world_size, *a, **kw):
        aggregator = from_connector(cls, connector, world_size, *a, **kw)
        rec = _of(connector)
        if rec is not None:
            rec.bind(world_size, connector.get_finished_count())
            setattr(aggregator, ATTR, rec)
        return aggregator

    bound.__wrapped__ = from_connector
    KVOutputAggregator.from_connector = classmethod(bound)

    def aggregate(original):
        def aggregate(self, outputs, output_rank=0, *a, **kw):
            rec = _of(self)
            if rec is not None:
                outputs = list(outputs)
                # A call where no worker produced output (vLLM's executor collects
                # execute_model's replies, None when sampling comes in a second call)
                # delivers nothing and counts nothing: it is not an engine step.
                if any(o is not None for o in outputs):
                    with rec.lock:
                        rec.step(outputs, output_rank, aggregated=True)
                        rec.aggregated = True
            return original(self, outputs, output_rank, *a, **kw)
        return aggregate

    _wraps(KVOutputAggregator, "aggregate", aggregate)
