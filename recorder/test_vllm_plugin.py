"""The recorder plugin inside vLLM's real Scheduler and KVOutputAggregator.

The plugin is installed as a user installs it (tests/e2e/recorder_plugin.rs builds
./recorder into a throwaway --target directory) and loaded the way every vLLM process
loads it, by `vllm.plugins.load_general_plugins()`. Engines are kvcc_confirm's: vLLM's
own Scheduler with its NixlConnector scheduler side, on CPU, from a local model config
(confirm/kvcc_confirm/play.py). Only the workers are scripted: each rank reports a
transfer one step after the scheduler's connector metadata names it, the way a
NixlConnector worker learns of it — or, in a broken twin, drops or repeats its reports.
Each run is recorded through the plugin alone and read by this build's `kvcc conform`
(KVCC_BIN): the broken connectors must give their finding, the correct ones none.

Run (vLLM's Python; the plugin built into SITE, kvcc_confirm on the path, and -P so the
recorder/ sources do not shadow the installed copy):
    KVCC_PLUGIN_SITE=SITE KVCC_BIN=target/debug/kvcc PYTHONPATH=SITE:confirm \\
        python -P recorder/test_vllm_plugin.py -v
"""

import importlib.metadata
import json
import os
import subprocess
import sys
import tempfile
import unittest

# vLLM logs to stdout at INFO by default; its warnings about a machine without a GPU
# are noise here.
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

import vllm.plugins  # noqa: E402
from vllm.v1.outputs import KVConnectorOutput  # noqa: E402
from vllm.v1.request import RequestStatus  # noqa: E402

import kvcc_confirm  # noqa: E402
from kvcc_confirm import play  # noqa: E402

DIR_ENV = "KVCC_RECORD_DIR"
MODEL_DIR = os.path.join(os.path.dirname(os.path.abspath(kvcc_confirm.__file__)), "model")
KVCC = os.environ.get("KVCC_BIN")
SITE = os.environ.get("KVCC_PLUGIN_SITE")

_tmp = tempfile.TemporaryDirectory()


def setUpModule():
    if not KVCC or not SITE:
        raise RuntimeError("KVCC_BIN and KVCC_PLUGIN_SITE must be set (see the docstring)")
    # The plugin installs its hooks only when the variable is set as vLLM loads it;
    # each test then points it at a directory of its own before building its engine.
    os.environ[DIR_ENV] = os.path.join(_tmp.name, "unused")
    os.environ.pop("VLLM_PLUGINS", None)
    vllm.plugins.load_general_plugins()
    play.register()


def tearDownModule():
    _tmp.cleanup()


def conform(run_dir):
    done = subprocess.run(
        [KVCC, "conform", "--format", "json", run_dir],
        capture_output=True, text=True, check=False)
    reports = [json.loads(line) for line in done.stdout.splitlines()]
    return done.returncode, reports, done.stderr


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


class Workers:
    """A NixlConnector's worker side, scripted from what vLLM's scheduler sends it.

    A rank learns of a transfer from the step's connector metadata (`reqs_to_send` on
    P: blocks D will read; `reqs_to_recv` on D: a load to run) and reports it done the
    next step. `silent` ranks never report (#59325's regression clears the replicated
    PCP ranks' reports); `twice` ranks report every transfer in two consecutive steps;
    a load in `failing` is reported by the last rank as failed too."""

    def __init__(self, world, silent=(), twice=(), failing=(), unreported=()):
        self.world = world
        self.silent = set(silent)
        self.twice = set(twice)
        self.failing = set(failing)
        self.unreported = set(unreported)  # (rank, request) pairs dropped
        self.due = {}  # step -> [(rank, field, request id)]
        self.step = 0

    def _later(self, delay, rank, field, request_id):
        self.due.setdefault(self.step + delay, []).append((rank, field, request_id))

    def __call__(self, scheduled):
        meta = scheduled.kv_connector_metadata
        for field, told in (("finished_sending", getattr(meta, "reqs_to_send", {})),
                            ("finished_recving", getattr(meta, "reqs_to_recv", {}))):
            for request_id in told:
                for rank in range(self.world):
                    if rank in self.silent or (rank, request_id) in self.unreported:
                        continue
                    self._later(1, rank, field, request_id)
                    if rank in self.twice:
                        self._later(2, rank, field, request_id)
        fields = [{"finished_sending": set(), "finished_recving": set(),
                   "failed_recving": set()} for _ in range(self.world)]
        for rank, field, request_id in self.due.pop(self.step, []):
            fields[rank][field].add(request_id)
            if (field == "finished_recving" and request_id in self.failing
                    and rank == self.world - 1):
                fields[rank]["failed_recving"].add(request_id)
        self.step += 1
        return [KVConnectorOutput(
            finished_sending=f["finished_sending"] or None,
            finished_recving=f["finished_recving"] or None,
            failed_recving=f["failed_recving"]) for f in fields]


class PluginTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(dir=_tmp.name)
        self.run_dir = os.path.join(self.tmp, "run")

    def engine(self, engine, world, **header):
        """A vLLM engine recording into this test's directory, as the plugin sees it."""
        os.environ[DIR_ENV] = self.run_dir
        header = dict(engine=engine, world_size=world, **header)
        return play.Engine(header, MODEL_DIR)

    def run_steps(self, engine, workers, steps, aggregate=True):
        for _ in range(steps):
            engine.step(workers, aggregate=aggregate)

    def finish(self, engine):
        """Shuts the scheduler down (the plugin closes the run) and conforms it."""
        engine.scheduler.shutdown()
        return conform(self.run_dir)

    def events(self, engine_name):
        """Each request's recorded events, in log order. Across requests the order
        within a step follows vLLM's sets, which Python's hashing varies per process."""
        by_request = {}
        for e in read_lines(os.path.join(self.run_dir, engine_name, "scheduler.jsonl")):
            by_request.setdefault(e["request_id"], []).append((e["step"], e["event"]))
        return by_request


class Loading(PluginTest):
    def test_vllm_loads_the_plugin_from_its_entry_point(self):
        points = importlib.metadata.entry_points(group="vllm.general_plugins")
        ours = [p for p in points if p.name == "kvcc_recorder"]
        self.assertEqual([p.value for p in ours], ["kvcc_vllm_plugin:register"])
        import kvcc_vllm_plugin
        from vllm.distributed.kv_transfer.kv_connector.utils import KVOutputAggregator
        from vllm.v1.core.sched.scheduler import Scheduler

        # The installed copy, not the source tree's.
        self.assertTrue(kvcc_vllm_plugin.__file__.startswith(SITE), kvcc_vllm_plugin.__file__)
        self.assertTrue(kvcc_vllm_plugin.installed())
        for cls, names in ((Scheduler, kvcc_vllm_plugin.SCHEDULER_METHODS),
                           (KVOutputAggregator, kvcc_vllm_plugin.AGGREGATOR_METHODS)):
            for name in names:
                self.assertTrue(hasattr(getattr(cls, name), "__wrapped__"), name)

    def test_a_directory_holding_a_run_stops_the_engine_at_startup(self):
        self.engine("prefill", 1)
        with self.assertRaises(FileExistsError) as raised:
            self.engine("prefill", 1)
        # The first engine claimed the directory when it was built, before any step.
        self.assertIn(os.path.join(self.run_dir, "prefill"), str(raised.exception))
        self.assertIn(DIR_ENV, str(raised.exception))

    def test_an_unknown_engine_name_is_refused(self):
        os.environ["KVCC_RECORD_ENGINE"] = "mixed"
        try:
            with self.assertRaises(ValueError) as raised:
                self.engine("prefill", 1)
        finally:
            del os.environ["KVCC_RECORD_ENGINE"]
        self.assertIn("prefill or decode", str(raised.exception))


class Prefill(PluginTest):
    """P, two ranks (a replicated PCP pair, #59325's layout): E = world_size = 2."""

    def record(self, workers, requests=("cmpl-a", "cmpl-b")):
        e = self.engine("prefill", 2, kv_role="kv_producer")
        for request_id in requests:
            e.new_request(request_id)
        self.run_steps(e, workers, 6)
        held = sorted(r for r in requests if r in e.scheduler.requests)
        return e, held

    def test_a_correct_connector_conforms(self):
        e, held = self.record(Workers(2))
        self.assertEqual(held, [], "vLLM freed every request")
        code, reports, stderr = self.finish(e)
        self.assertEqual(code, 0, stderr + json.dumps(reports))
        self.assertEqual(reports[0]["verdict"], "conforms")
        self.assertEqual(reports[0]["engine"], "prefill")
        # One line per rank per engine step: aggregate recorded it, update_from_output
        # did not again.
        self.assertEqual(reports[0]["steps"], 6)
        # What vLLM did, step by step: both finished prefill in step 0 and had their
        # frees delayed; the workers heard of them in step 1 and reported in step 2.
        lifetime = [(1, "delay-freed"), (3, "freed")]
        self.assertEqual(self.events("prefill"), {"cmpl-a": lifetime, "cmpl-b": lifetime})
        with open(os.path.join(self.run_dir, "prefill", "header.json")) as f:
            header = json.load(f)
        self.assertEqual((header["world_size"], header["finished_count"]), (2, None))
        self.assertEqual(header["kv_connector"], "KvccScriptedNixlConnector")

    def test_dropped_replica_reports_59325_leave_a_request_vllm_never_frees(self):
        e, held = self.record(Workers(2, silent={1}), requests=("cmpl-leak",))
        self.assertEqual(held, ["cmpl-leak"], "vLLM still holds the blocks")
        code, reports, stderr = self.finish(e)
        self.assertEqual(code, 1, stderr)
        leaks = [f for f in reports[0]["findings"]
                 if (f["property"], f["clause"])
                 == ("eventually-freed", "delay-freed-request-never-freed")]
        self.assertEqual(len(leaks), 1, reports)
        self.assertEqual(leaks[0]["request"], "cmpl-leak")
        self.assertEqual(leaks[0]["ranks"], [1])

    def test_a_request_reported_twice_is_freed_before_every_rank_reported(self):
        # Rank 0 reports cmpl-a twice before rank 1 reports once: vLLM's countdown
        # counts rank 0 twice, frees the blocks while rank 1 still serves its read, and
        # rank 1's late report opens a countdown that never closes.
        w = Workers(2, twice={0}, unreported={(1, "cmpl-a")})
        e, held = self.record(w, requests=("cmpl-a",))
        self.assertEqual(held, [], "vLLM freed it on rank 0's two reports")
        code, reports, stderr = self.finish(e)
        self.assertEqual(code, 1, stderr)
        clauses = {(f["property"], f["clause"]) for f in reports[0]["findings"]}
        self.assertIn(("quorum-sound", "send-emitted-before-transfer-ranks-done"), clauses)


class Decode(PluginTest):
    """D, two ranks: loads woken, failed and aborted, through vLLM's own paths."""

    def record(self, workers):
        e = self.engine("decode", 2, kv_role="kv_consumer")
        for request_id in ("cmpl-ok", "cmpl-fails", "cmpl-aborted"):
            e.new_request(request_id)
        e.step(workers)  # admitted: all three wait for remote KV
        # A client abort while the load runs: vLLM keeps the blocks until it completes.
        e.scheduler.finish_requests("cmpl-aborted", RequestStatus.FINISHED_ABORTED)
        self.run_steps(e, workers, 4)
        return e

    def test_loads_woken_failed_and_aborted_conform(self):
        e = self.record(Workers(2, failing={"cmpl-fails"}))
        self.assertNotIn("cmpl-aborted", e.scheduler.requests)
        self.assertNotIn("cmpl-fails", e.scheduler.requests)
        code, reports, stderr = self.finish(e)
        self.assertEqual(code, 0, stderr + json.dumps(reports))
        self.assertEqual(reports[0]["engine"], "decode")
        # Admitted before step 0; step 1's reports complete all three loads.
        self.assertEqual(self.events("decode"), {
            "cmpl-ok": [(0, "waiting-for-remote-kvs"), (2, "woken")],
            "cmpl-fails": [(0, "waiting-for-remote-kvs"), (2, "load-failed"), (2, "freed")],
            "cmpl-aborted": [(0, "waiting-for-remote-kvs"), (1, "aborted"), (2, "freed")],
        })

    def test_a_rank_that_never_reports_a_load_leaves_it_waiting(self):
        w = Workers(2, failing={"cmpl-fails"}, unreported={(0, "cmpl-ok")})
        e = self.record(w)
        self.assertEqual(e.scheduler.requests["cmpl-ok"].status,
                         RequestStatus.WAITING_FOR_REMOTE_KVS)
        code, reports, stderr = self.finish(e)
        self.assertEqual(code, 1, stderr)
        never = [f for f in reports[0]["findings"]
                 if f["clause"] == "loader-never-woken"]
        self.assertEqual([(f["request"], f["ranks"]) for f in never], [("cmpl-ok", [0])])


class OneWorker(PluginTest):
    """vLLM's one-worker executor hands the output on without aggregating it: the plugin
    records the step at `update_from_output` instead."""

    def engine_with_a_request(self):
        e = self.engine("prefill", 1, kv_role="kv_producer")
        e.new_request("cmpl-a")
        return e

    def test_a_correct_connector_conforms(self):
        e = self.engine_with_a_request()
        self.run_steps(e, Workers(1), 4, aggregate=False)
        self.assertNotIn("cmpl-a", e.scheduler.requests)
        code, reports, stderr = self.finish(e)
        self.assertEqual(code, 0, stderr + json.dumps(reports))
        self.assertEqual(reports[0]["steps"], 4)
        with open(os.path.join(self.run_dir, "prefill", "header.json")) as f:
            header = json.load(f)
        self.assertEqual((header["world_size"], header["finished_count"]), (1, None))

    def test_a_second_report_kills_vllm_and_is_found(self):
        e = self.engine_with_a_request()
        # The second report of a freed request trips vLLM's assertion that the
        # scheduler still holds it: the engine would die here.
        with self.assertRaises(AssertionError):
            self.run_steps(e, Workers(1, twice={0}), 4, aggregate=False)
        code, reports, stderr = self.finish(e)
        self.assertEqual(code, 1, stderr)
        clauses = {(f["property"], f["clause"]) for f in reports[0]["findings"]}
        self.assertIn(("exactly-once", "emitted-twice"), clauses)


if __name__ == "__main__":
    unittest.main()
