"""Tests of kvcc_recorder against objects shaped like vLLM's KVConnectorOutput and
ModelRunnerOutput, and — when KVCC_BIN names a kvcc binary — that `kvcc conform` reads
what it writes (`cargo test` runs this file with KVCC_BIN set: tests/conform_recorder.rs).

Run: python3 -m unittest -v test_kvcc_recorder   (from recorder/)
"""

import json
import os
import subprocess
import tempfile
import unittest

import kvcc_recorder
from kvcc_recorder import MISSING, EngineRecorder, WorkerRecorder


class KVConnectorOutput:
    """Shaped like vLLM's: sets of request ids, None allowed, newer fields optional."""

    def __init__(self, finished_sending=None, finished_recving=None,
                 invalid_block_ids=None, **newer):
        self.finished_sending = finished_sending
        self.finished_recving = finished_recving
        self.invalid_block_ids = invalid_block_ids
        for name, value in newer.items():  # failed_recving, expected_finished_count
            setattr(self, name, value)


class ModelRunnerOutput:
    def __init__(self, kv_connector_output=None):
        self.kv_connector_output = kv_connector_output


def sent(*ids):
    return ModelRunnerOutput(KVConnectorOutput(finished_sending=set(ids)))


def idle():
    return ModelRunnerOutput(None)


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


KVCC = os.environ.get("KVCC_BIN")


def conform(*run_dirs):
    if not KVCC:
        raise unittest.SkipTest("KVCC_BIN is not set")
    done = subprocess.run(
        [KVCC, "conform", "--format", "json", *run_dirs],
        capture_output=True, text=True, check=False)
    reports = [json.loads(line) for line in done.stdout.splitlines()]
    return done.returncode, reports, done.stderr


class OutputLines(unittest.TestCase):
    def test_a_connector_output_becomes_a_line_with_vllm_field_names(self):
        out = KVConnectorOutput(finished_sending={"b", "a"}, finished_recving=None,
                                invalid_block_ids={7, 3}, failed_recving={"c"},
                                expected_finished_count=2)
        self.assertEqual(kvcc_recorder.output_line(4, out), {
            "step": 4,
            "finished_sending": ["a", "b"],
            "finished_recving": [],
            "failed_recving": ["c"],
            "invalid_block_ids": [3, 7],
            "expected_finished_count": 2,
        })

    def test_older_outputs_without_the_newer_fields(self):
        line = kvcc_recorder.output_line(0, KVConnectorOutput(finished_recving={"x"}))
        self.assertEqual(line["failed_recving"], [])
        self.assertEqual(line["expected_finished_count"], 0)

    def test_none_reports_nothing_and_missing_is_no_output(self):
        self.assertEqual(kvcc_recorder.output_line(1, None)["finished_sending"], [])
        self.assertEqual(kvcc_recorder.output_line(1, MISSING),
                         {"step": 1, "missing": True})

    def test_request_ids_must_be_strings(self):
        with self.assertRaises(TypeError):
            kvcc_recorder.output_line(0, KVConnectorOutput(finished_sending={1}))


class Recording(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self._tmp.cleanup)
        self.dir = self._tmp.name

    def prefill(self, name, **kw):
        args = dict(engine="prefill", world_size=2, kv_connector="NixlConnector",
                    kv_role="kv_producer", tp_size=1, pcp_size=2)
        args.update(kw)
        return EngineRecorder(os.path.join(self.dir, name), **args)

    def test_header_names_what_the_aggregator_was_built_from(self):
        with self.prefill("p", finished_count=None, transfer_ranks=[0]) as rec:
            pass
        with open(os.path.join(self.dir, "p", "header.json"), encoding="utf-8") as f:
            header = json.load(f)
        self.assertEqual(header["format_version"], 1)
        self.assertEqual(header["engine"], "prefill")
        self.assertEqual(header["world_size"], 2)
        self.assertIsNone(header["finished_count"])
        self.assertEqual(header["aggregator_policy"], "countdown")
        self.assertEqual(header["transfer_ranks"], [0])
        self.assertNotIn("pp_size", header)
        self.assertEqual(rec.step, 0)

    def test_a_recorded_run_is_never_overwritten(self):
        self.prefill("p").close()
        with self.assertRaises(FileExistsError):
            self.prefill("p")

    def test_events_carry_the_steps_aggregated_before_them(self):
        with self.prefill("p") as rec:
            rec.delay_freed("cmpl-a")
            rec.record_model_runner_outputs([sent("cmpl-a"), idle()])
            rec.record_model_runner_outputs([idle(), sent("cmpl-a")])
            rec.freed("cmpl-a")
            with self.assertRaises(ValueError):
                rec.event("finished", "cmpl-a")
        events = read_lines(os.path.join(self.dir, "p", "scheduler.jsonl"))
        self.assertEqual([(e["step"], e["event"]) for e in events],
                         [(0, "delay-freed"), (2, "freed")])
        rank1 = read_lines(os.path.join(self.dir, "p", "rank-1.jsonl"))
        self.assertEqual([l["step"] for l in rank1], [0, 1])
        self.assertEqual(rank1[1]["finished_sending"], ["cmpl-a"])

    def test_a_conforming_prefill_run_conforms(self):
        p = os.path.join(self.dir, "p")
        with self.prefill("p") as rec:
            rec.delay_freed("cmpl-a")
            rec.delay_freed("cmpl-b")
            rec.record_model_runner_outputs([sent("cmpl-a"), sent("cmpl-a", "cmpl-b")])
            rec.record_model_runner_outputs([sent("cmpl-b"), idle()])
            rec.freed("cmpl-a")
            rec.freed("cmpl-b")
        code, reports, stderr = conform(p)
        self.assertEqual(code, 0, stderr + json.dumps(reports))
        self.assertEqual(reports[0]["verdict"], "conforms")
        self.assertEqual(reports[0]["steps"], 2)
        self.assertEqual(reports[0]["events"], 4)

    def test_no_output_at_a_non_output_rank_is_flagged(self):
        # vLLM's aggregator reads every worker's connector output and raises on a None
        # from any rank but the output rank.
        p = os.path.join(self.dir, "p")
        with self.prefill("p") as rec:
            rec.delay_freed("cmpl-a")
            rec.record_model_runner_outputs([sent("cmpl-a"), sent("cmpl-a")])
            rec.record_model_runner_outputs([idle(), None])
            rec.freed("cmpl-a")
        code, reports, stderr = conform(p)
        self.assertEqual(code, 1, stderr + json.dumps(reports))
        self.assertEqual(reports[0]["properties"], ["engine-survives"])

    def test_the_59325_leak_is_flagged_with_the_silent_rank(self):
        # Replicated PCP rank 1's synthetic report is cleared: E = world_size = 2 reports
        # never arrive, and the request is never freed.
        p = os.path.join(self.dir, "p")
        with self.prefill("p", transfer_ranks=[0]) as rec:
            rec.delay_freed("cmpl-leak")
            rec.record_model_runner_outputs([idle(), idle()])
            rec.record_model_runner_outputs([sent("cmpl-leak"), idle()])
            rec.record_model_runner_outputs([idle(), idle()])
        code, reports, stderr = conform(p)
        self.assertEqual(code, 1, stderr)
        leak = [f for f in reports[0]["findings"] if f["property"] == "eventually-freed"]
        self.assertEqual(len(leak), 1, reports)
        self.assertEqual(leak[0]["request"], "cmpl-leak")
        self.assertEqual(leak[0]["ranks"], [1])
        self.assertTrue(leak[0]["at"][0].endswith("scheduler.jsonl:1"), leak[0])

    def test_decode_run_recorded_by_worker_processes(self):
        d = os.path.join(self.dir, "d")
        engine = EngineRecorder(d, engine="decode", world_size=2,
                                kv_connector="NixlConnector", kv_role="kv_consumer")
        workers = [WorkerRecorder(d, rank) for rank in range(2)]
        engine.waiting_for_remote_kvs("cmpl-ok")
        engine.waiting_for_remote_kvs("cmpl-bad")
        workers[0].record(KVConnectorOutput(finished_recving={"cmpl-ok"}))
        workers[1].record(KVConnectorOutput(finished_recving={"cmpl-ok", "cmpl-bad"},
                                            failed_recving={"cmpl-bad"},
                                            invalid_block_ids={12}))
        engine.step_aggregated()
        engine.woken("cmpl-ok")
        workers[0].record(KVConnectorOutput(finished_recving={"cmpl-bad"}))
        workers[1].record(None)
        engine.step_aggregated()
        engine.load_failed("cmpl-bad")
        for w in workers:
            w.close()
        engine.close()
        code, reports, stderr = conform(d)
        self.assertEqual(code, 0, stderr + json.dumps(reports))
        self.assertEqual(reports[0]["engine"], "decode")

    def test_a_duplicate_report_under_strict_names_the_second_line(self):
        p = os.path.join(self.dir, "p")
        with self.prefill("p", aggregator_policy="strict") as rec:
            rec.delay_freed("cmpl-a")
            rec.record_model_runner_outputs([sent("cmpl-a"), idle()])
            rec.record_model_runner_outputs([sent("cmpl-a"), idle()])
            rec.record_model_runner_outputs([idle(), sent("cmpl-a")])
            rec.freed("cmpl-a")
        code, reports, _ = conform(p)
        self.assertEqual(code, 1)
        finding = reports[0]["findings"][0]
        self.assertEqual((finding["property"], finding["clause"]),
                         ("exactly-once", "duplicate-report"))
        self.assertTrue(finding["at"][0].endswith("rank-0.jsonl:2"), finding)

    def test_aggregator_hook_records_every_call(self):
        class Aggregator:
            def __init__(self):
                self.calls = []

            def aggregate(self, outputs, output_rank=0):
                self.calls.append((len(outputs), output_rank))
                return outputs[output_rank]

        p = os.path.join(self.dir, "p")
        rec = self.prefill("p")
        remove = kvcc_recorder.install_aggregator_hook(Aggregator, rec)
        agg = Aggregator()
        rec.delay_freed("cmpl-h")
        agg.aggregate([sent("cmpl-h"), sent("cmpl-h")], output_rank=0)
        rec.freed("cmpl-h")
        remove()
        agg.aggregate([idle(), idle()])
        rec.close()
        self.assertEqual(agg.calls, [(2, 0), (2, 0)])
        self.assertEqual(rec.step, 1, "only the hooked call was recorded")
        code, reports, stderr = conform(p)
        self.assertEqual(code, 0, stderr + json.dumps(reports))


class PluginUnset(unittest.TestCase):
    """The vLLM plugin (kvcc_vllm_plugin) without KVCC_RECORD_DIR: vLLM calls it in every
    process, so it must then do nothing — here, where vLLM is not even installed.
    Inside vLLM it is tested by test_vllm_plugin.py (tests/e2e/recorder_plugin.rs)."""

    def test_register_without_the_variable_wraps_nothing(self):
        import kvcc_vllm_plugin
        saved = os.environ.pop(kvcc_vllm_plugin.DIR_ENV, None)
        try:
            self.assertIsNone(kvcc_vllm_plugin.register())
        finally:
            if saved is not None:
                os.environ[kvcc_vllm_plugin.DIR_ENV] = saved
        self.assertFalse(kvcc_vllm_plugin.installed())


if __name__ == "__main__":
    unittest.main()
