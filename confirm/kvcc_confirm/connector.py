"""The connector kvcc registers with vLLM's KVConnectorFactory.

It is vLLM's NixlConnector (pull mode), and its scheduler side is the real one: which
requests delay their free (`request_finished`), which load asynchronously
(`get_num_new_matched_tokens`), what goes to the workers (`build_connector_meta`). The
one scripted fact is `get_finished_count`: the count the recorded run's header states
(`finished_count`, passed in `kv_connector_extra_config`), so that a run can play a count
vLLM's NixlConnector does not announce itself (a proposed fix's world_size // pcp). The
workers are never built: their outputs come from the recorded run.
"""

from vllm.distributed.kv_transfer.kv_connector.v1.nixl.connector import (
    NixlPullConnector,
)

NAME = "KvccScriptedNixlConnector"
# The kv_connector_extra_config key holding the header's finished_count (absent: null).
FINISHED_COUNT_KEY = "kvcc_finished_count"


class KvccScriptedNixlConnector(NixlPullConnector):
    def get_finished_count(self):
        extra = self._kv_transfer_config.kv_connector_extra_config or {}
        return extra.get(FINISHED_COUNT_KEY)
