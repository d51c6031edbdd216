"""Plays one recorded engine run (docs/recorded-run.md) into vLLM's own scheduler.

What is real: vLLM's `Scheduler`, its KV cache manager and block pool, its
NixlConnector scheduler side (kvcc_confirm.connector), `KVOutputAggregator` and the
`ModelRunnerOutput` / `KVConnectorOutput` types. What is played: the worker outputs of
each step (the recorded run's rank files: what each rank's connector reported) and the
scheduler's inputs from the scheduler log:

- `delay-freed` (P): the request arrives with `do_remote_decode` and is run through
  vLLM steps carrying no connector reports until its prefill finishes; vLLM decides
  whether to delay its free (NixlConnector.request_finished).
- `waiting-for-remote-kvs` (D): the request arrives with `do_remote_prefill` and is
  scheduled; vLLM decides whether it waits for remote KV.
- `waiting-for-remote-kvs` (P loading KV itself, `kv_role = "kv_both"`): the request
  arrives with `do_remote_prefill` (and the remote fields D's requests carry) and
  `do_remote_decode`, and is scheduled; vLLM decides whether it waits. P's aggregated
  `finished_recving` wakes it; at the log's `delay-freed` vLLM prefills what the load
  left (steps with no reports, as above) and decides whether to delay its free.
- `aborted`: vLLM's abort path, `Scheduler.finish_requests(..., FINISHED_ABORTED)`.
  An abort of P's own load followed at once by `delay-freed` is a connector that saves
  while it loads taking over the free for its save (kvcc_confirm.connector, `saving`);
  the player reports `delay-freed` when vLLM's abort path asked the connector and it
  delayed the free.

The other events of the log (`freed`, `woken`, `load-failed`) are the model's claims.
They are not played: the player reports the events vLLM's scheduler produced, stamped
the way the format stamps them (the number of recorded steps aggregated before), and
kvcc compares. An exception raised by vLLM's aggregator or scheduler ends the run, as it
would end the engine.
"""

import json
import os
import traceback

import torch

from vllm import SamplingParams
from vllm.config import (
    CacheConfig,
    DeviceConfig,
    KVTransferConfig,
    ModelConfig,
    SchedulerConfig,
    VllmConfig,
)
from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
from vllm.distributed.kv_transfer.kv_connector.utils import KVOutputAggregator
from vllm.utils.hashing import sha256
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
)
from vllm.v1.engine import FinishReason
from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput
from vllm.v1.request import Request, RequestStatus
from vllm.v1.structured_output import StructuredOutputManager

from . import connector

BLOCK_SIZE = 16
NUM_BLOCKS = 1024
PROMPT_TOKENS = 40
MAX_MODEL_LEN = 4096
# vLLM steps run with no reports to bring a request to the end of its prefill; more
# means vLLM never finished it.
PREFILL_STEPS_MAX = 8
TOKEN = 7  # a sampled token that is not EOS

_registered = False
_hash_ready = False


def register():
    """Registers kvcc's connector with vLLM's factory (once per process)."""
    global _registered, _hash_ready
    if not _registered:
        KVConnectorFactory.register_connector(
            connector.NAME, connector.__name__, connector.NAME
        )
        _registered = True
    if not _hash_ready:
        init_none_hash(sha256)
        _hash_ready = True


class RunError(Exception):
    """A recorded run kvcc_confirm cannot play (bad input, not a vLLM finding)."""


def read_run(directory):
    """The header, per-step per-rank outputs and scheduler events of an engine run."""
    try:
        with open(os.path.join(directory, "header.json")) as f:
            header = json.load(f)
        world = int(header["world_size"])
        ranks = []
        for rank in range(world):
            with open(os.path.join(directory, f"rank-{rank}.jsonl")) as f:
                ranks.append([json.loads(line) for line in f if line.strip()])
        with open(os.path.join(directory, "scheduler.jsonl")) as f:
            events = [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError, KeyError) as e:
        raise RunError(f"{directory}: {e}") from e
    steps = len(ranks[0]) if ranks else 0
    if any(len(r) != steps for r in ranks):
        raise RunError(f"{directory}: rank files of different lengths")
    return header, ranks, events, steps


def kv_output(line):
    """A rank's recorded line as what its worker hands the aggregator (None: missing)."""
    if line.get("missing"):
        return None
    return KVConnectorOutput(
        finished_sending=set(line.get("finished_sending") or ()) or None,
        finished_recving=set(line.get("finished_recving") or ()) or None,
        invalid_block_ids=set(line.get("invalid_block_ids") or ()),
        failed_recving=set(line.get("failed_recving") or ()),
        expected_finished_count=int(line.get("expected_finished_count") or 0),
    )


_model_configs = {}


def model_config(model_dir):
    """The local model's ModelConfig, built once per process (it reads config.json)."""
    if model_dir not in _model_configs:
        _model_configs[model_dir] = ModelConfig(
            model=model_dir,
            skip_tokenizer_init=True,
            dtype="float32",
            seed=0,
            max_model_len=MAX_MODEL_LEN,
        )
    return _model_configs[model_dir]


class Engine:
    """One vLLM engine: its scheduler and its aggregator, as the executor holds them."""

    def __init__(self, header, model_dir, failure_policy="fail"):
        self.prefill = header["engine"] == "prefill"
        self.world = int(header["world_size"])
        self.output_rank = int(header.get("output_rank") or 0)
        role = header.get("kv_role") or ("kv_producer" if self.prefill else "kv_consumer")
        extra = {}
        if header.get("finished_count"):
            extra[connector.FINISHED_COUNT_KEY] = int(header["finished_count"])
        model = model_config(model_dir)
        config = VllmConfig(
            model_config=model,
            scheduler_config=SchedulerConfig(
                max_num_seqs=64,
                max_num_batched_tokens=1024,
                max_model_len=MAX_MODEL_LEN,
                is_encoder_decoder=False,
                disable_hybrid_kv_cache_manager=True,
            ),
            cache_config=CacheConfig(
                block_size=BLOCK_SIZE,
                gpu_memory_utilization=0.9,
                enable_prefix_caching=True,
            ),
            kv_transfer_config=KVTransferConfig(
                kv_connector=connector.NAME,
                kv_role=role,
                engine_id=f"kvcc-{header['engine']}",
                kv_connector_extra_config=extra,
                kv_load_failure_policy=failure_policy,
            ),
            device_config=DeviceConfig("cpu"),
        )
        config.cache_config.num_gpu_blocks = NUM_BLOCKS
        cache = KVCacheConfig(
            num_blocks=NUM_BLOCKS,
            kv_cache_tensors=[],
            kv_cache_groups=[
                KVCacheGroupSpec(
                    ["layer"],
                    FullAttentionSpec(
                        block_size=BLOCK_SIZE,
                        num_kv_heads=1,
                        head_size=1,
                        dtype=torch.float32,
                    ),
                )
            ],
        )
        self.scheduler = Scheduler(
            vllm_config=config,
            kv_cache_config=cache,
            log_stats=False,
            structured_output_manager=StructuredOutputManager(config),
            block_size=BLOCK_SIZE,
        )
        # As vLLM's executor builds it: the connector's count, else world_size.
        self.aggregator = KVOutputAggregator.from_connector(
            self.scheduler.connector, self.world
        )
        self.expected = self.aggregator._expected_finished_count
        # What vLLM's own NixlConnector announces (kvcc's subclass states the header's).
        self.nixl_count = connector.NixlPullConnector.get_finished_count(
            self.scheduler.connector
        )
        self.serial = 0
        # Requests vLLM finished with an error (a failed load under policy "fail").
        self.errored = set()

    # -- requests -----------------------------------------------------------------

    def new_request(self, request_id, loads=False):
        """A request as the proxy sends it: P's with `do_remote_decode` (and, when P
        loads KV itself, `do_remote_prefill` too), D's with `do_remote_prefill`."""
        self.serial += 1
        prompt = [(self.serial * 1000 + i) % 250 + 3 for i in range(PROMPT_TOKENS)]
        params = {}
        if not self.prefill or loads:
            params = {
                "do_remote_prefill": True,
                # Where the KV is read from: P's engine for D; for P, another engine.
                "remote_engine_id": "kvcc-remote" if self.prefill else "kvcc-prefill",
                "remote_request_id": request_id,
                "remote_host": "localhost",
                "remote_port": 5600,
                "remote_block_ids": [0, 1, 2],
                "tp_size": 1,
            }
        if self.prefill:
            params["do_remote_decode"] = True
            max_tokens = 1
        else:
            max_tokens = MAX_MODEL_LEN - PROMPT_TOKENS - 8
        sampling = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
        request = Request(
            request_id=request_id,
            prompt_token_ids=prompt,
            sampling_params=sampling,
            pooling_params=None,
            block_hasher=get_request_block_hasher(BLOCK_SIZE, sha256),
        )
        request.kv_transfer_params = params
        self.scheduler.add_request(request)
        return request

    # -- steps --------------------------------------------------------------------

    def step(self, outputs, aggregate=True):
        """One engine step: schedule, the workers' outputs, aggregate, update.

        `outputs` holds each rank's KVConnectorOutput, or None for a rank that produced
        no output; None as a whole is a step with nothing reported by any rank. A
        callable is asked for them with the step's SchedulerOutput, as workers read what
        the scheduler sent them (the recorder plugin's tests script workers this way).
        `aggregate=False` is vLLM's one-worker executor, which hands its worker's output
        to the scheduler without aggregating it."""
        scheduled = self.scheduler.schedule()
        if callable(outputs):
            outputs = outputs(scheduled)
        req_ids = list(scheduled.num_scheduled_tokens)
        sampled = []
        for req_id in req_ids:
            request = self.scheduler.requests[req_id]
            done = request.num_computed_tokens >= request.num_tokens
            sampled.append([TOKEN] if done else [])
        if outputs is None:
            outputs = [KVConnectorOutput() for _ in range(self.world)]
        runner_outputs = []
        for rank, kv in enumerate(outputs):
            if kv is None:
                runner_outputs.append(None)
            elif rank == self.output_rank:
                runner_outputs.append(
                    ModelRunnerOutput(
                        req_ids=req_ids,
                        sampled_token_ids=sampled,
                        kv_connector_output=kv,
                    )
                )
            else:
                runner_outputs.append(ModelRunnerOutput(req_ids=[], kv_connector_output=kv))
        if aggregate:
            aggregated = self.aggregator.aggregate(runner_outputs, self.output_rank)
        else:
            aggregated = runner_outputs[self.output_rank]
        if aggregated is None:
            # No output from the output rank: vLLM's engine drops the step.
            return
        finished = self.scheduler.update_from_output(scheduled, aggregated)
        for outputs_of_client in finished.values():
            for out in outputs_of_client.outputs:
                if out.finish_reason == FinishReason.ERROR:
                    self.errored.add(out.request_id)

    # -- what vLLM's scheduler shows ----------------------------------------------

    def fact(self, request_id):
        """What vLLM's scheduler holds for a request: one of a few plain words."""
        s = self.scheduler
        request = s.requests.get(request_id)
        if request is None:
            return "absent"
        if request_id in s.failed_recving_kv_req_ids:
            return "load-failed"
        if request_id in s.finished_recving_kv_req_ids:
            return "woken"
        status = request.status
        if status == RequestStatus.WAITING_FOR_REMOTE_KVS:
            return "waiting-for-remote-kvs"
        if status == RequestStatus.FINISHED_ERROR:
            return "load-failed"
        if RequestStatus.is_finished(status):
            return "finished-blocks-held"
        if status in (RequestStatus.RUNNING, RequestStatus.WAITING, RequestStatus.PREEMPTED):
            return "running" if not self.prefill else "prefilling"
        return str(status).lower()


# What a change of fact means, as a scheduler event of the recorded-run format.
def _event(before, after, prefill):
    if before == after:
        return None
    if after == "absent":
        return "freed" if before != "unknown" else None
    if after == "load-failed":
        return "load-failed"
    if after == "woken" or (
        not prefill and before == "waiting-for-remote-kvs" and after == "running"
    ):
        return "woken"
    # P's request finishing its prefill (after its own load, if it had one).
    if after == "finished-blocks-held" and prefill and before in (
        "unknown",
        "prefilling",
        "woken",
    ):
        return "delay-freed"
    if after == "waiting-for-remote-kvs":
        return "waiting-for-remote-kvs"
    return None


# The log's events the player feeds to vLLM; the others are the model's claims.
INPUTS = ("delay-freed", "waiting-for-remote-kvs", "aborted")


def stamp_order(events):
    """The scheduler inputs logged before one step, in the order vLLM takes them, each
    with whether it is an abort a saving connector takes over (`delay-freed` right
    after it). vLLM's engine takes pending aborts before it schedules a step, and the
    prefill a `delay-freed` ends needs steps, which would prefill every other woken
    request too: so an abort that is the stamp's first input about its request comes
    first, as it can in vLLM; the model's order among one stamp's events is otherwise
    not observable."""
    saving = set()
    first = {}
    for i, ev in enumerate(events):
        if ev["event"] in INPUTS:
            first.setdefault(ev["request_id"], i)
        following = events[i + 1] if i + 1 < len(events) else {}
        if (
            ev["event"] == "aborted"
            and following.get("event") == "delay-freed"
            and following.get("request_id") == ev["request_id"]
        ):
            saving.add(i)
    early = [
        i for i, ev in enumerate(events)
        if ev["event"] == "aborted" and first[ev["request_id"]] == i
    ]
    late = [i for i in range(len(events)) if i not in early]
    return [(events[i], i in saving) for i in early + late]


class Player:
    """Plays one engine run and collects what vLLM did."""

    def __init__(self, directory, model_dir, quiet_steps, failure_policy="fail"):
        self.directory = directory
        self.header, self.ranks, self.events, self.steps = read_run(directory)
        self.engine = Engine(self.header, model_dir, failure_policy)
        self.quiet_steps = quiet_steps
        self.facts = {}  # request id -> last fact seen
        self.done = set()  # requests vLLM's log has nothing more for (freed, or D woken)
        self.observed = []  # [step, event, request id]
        self.error = None

    def observe(self, step):
        prefill = self.engine.prefill
        for request_id in list(self.facts):
            if request_id in self.done:
                continue
            before = self.facts[request_id]
            after = self.engine.fact(request_id)
            self.facts[request_id] = after
            event = _event(before, after, prefill)
            if event == "freed" and request_id in self.engine.errored:
                # Policy "fail": vLLM ends the request with an error and frees its
                # blocks in the same step; the format logs that as its load failing.
                event = "load-failed"
            if event is not None:
                self.observed.append([step, event, request_id])
            if after == "absent" or (
                not prefill and after in ("woken", "running", "load-failed")
            ):
                self.done.add(request_id)

    def apply(self, step, event, request_id, saving=False):
        """A scheduler input of the log, through vLLM's own path. `saving`: an abort the
        log follows with `delay-freed` (the connector saves while it loads)."""
        e = self.engine
        if event == "delay-freed" and e.prefill:
            if request_id not in self.facts:
                e.new_request(request_id)
                self.facts[request_id] = "unknown"
            elif e.fact(request_id) not in ("woken", "prefilling"):
                # Its own load not in (or vLLM already finished or freed it): vLLM
                # has nothing to prefill, and kvcc compares what it did instead.
                return
            self.finish_prefill(step, request_id)
        elif event == "waiting-for-remote-kvs":
            if request_id in self.facts:
                return
            e.new_request(request_id, loads=True)
            self.facts[request_id] = "unknown"
            e.step(None)
            self.observe(step)
        elif event == "aborted":
            if request_id not in self.facts and e.prefill:
                # Aborted while P still prefilled it: it existed in vLLM all along.
                e.new_request(request_id)
                self.facts[request_id] = "prefilling"
            self.observed.append([step, "aborted", request_id])
            connector = e.scheduler.connector
            if saving:
                connector.saving.add(request_id)
            e.scheduler.finish_requests(request_id, RequestStatus.FINISHED_ABORTED)
            connector.saving.discard(request_id)
            self.observe(step)
            if request_id in connector.took_over and e.fact(request_id) != "absent":
                self.observed.append([step, "delay-freed", request_id])

    def finish_prefill(self, step, request_id):
        """vLLM steps with no reports until it finishes the request's prefill: the
        model's prefill takes what time it takes, and ends at the log's stamp."""
        e = self.engine
        for _ in range(PREFILL_STEPS_MAX):
            self.observe(step)
            request = e.scheduler.requests.get(request_id)
            if request is None or RequestStatus.is_finished(request.status):
                break
            e.step(None)
        self.observe(step)

    def play(self):
        by_step = {}
        for ev in self.events:
            by_step.setdefault(int(ev["step"]), []).append(ev)
        where = "setup"
        try:
            for step in range(self.steps + 1):
                where = f"scheduler input before step {step}"
                for ev, saving in stamp_order(by_step.get(step, [])):
                    if ev["event"] in INPUTS:
                        self.apply(step, ev["event"], ev["request_id"], saving)
                if step == self.steps:
                    break
                where = f"step {step}"
                outputs = [kv_output(self.ranks[r][step]) for r in range(self.engine.world)]
                self.engine.step(outputs)
                self.observe(step + 1)
            for quiet in range(self.quiet_steps):
                where = f"quiet step {quiet}"
                self.engine.step(None)
                self.observe(self.steps + 1 + quiet)
        except Exception as e:  # vLLM's own exception: the engine would die here
            tb = traceback.extract_tb(e.__traceback__)
            frame = next(
                (f for f in reversed(tb) if "/vllm/" in f.filename),
                tb[-1] if tb else None,
            )
            self.error = {
                "at": where,
                "type": type(e).__name__,
                "message": str(e),
                "where": (
                    f"{frame.filename.split('site-packages/')[-1]}:{frame.lineno} ({frame.name})"
                    if frame
                    else ""
                ),
            }

    def report(self):
        e = self.engine
        return {
            "format_version": 1,
            "run": self.directory,
            "engine": self.header["engine"],
            "world_size": e.world,
            "expected": e.expected,
            "nixl_finished_count": e.nixl_count,
            "steps": self.steps,
            "quiet_steps": self.quiet_steps,
            "events": self.observed,
            "error": self.error,
            # Each request's last fact: after the run and its quiet steps.
            "facts": {r: e.fact(r) for r in sorted(self.facts)},
            # What vLLM's aggregator still counts down (reports to go per request).
            "aggregator_pending": {
                "finished_sending": dict(sorted(e.aggregator._send_remaining_count.items())),
                "finished_recving": dict(sorted(e.aggregator._recv_remaining_count.items())),
            },
        }
