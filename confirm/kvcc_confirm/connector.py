"""The connector kvcc registers with vLLM's KVConnectorFactory.

It is vLLM's NixlConnector (pull mode), and its scheduler side is the real one: which
requests delay their free (`request_finished`), which load asynchronously
(`get_num_new_matched_tokens`), what goes to the workers (`build_connector_meta`). The
one scripted fact is `get_finished_count`: the count the recorded run's header states
(`finished_count`, passed in `kv_connector_extra_config`), so that a run can play a count
vLLM's NixlConnector does not announce itself (a proposed fix's world_size // pcp). The
workers are never built: their outputs come from the recorded run.

A second scripted fact, per request: a connector that saves while it loads (LMCache with
`kv_role = "kv_both"`) takes over the free of a request aborted during its load, for its
save (vLLM #46240); NIXL does not. The recorded run says so (`delay-freed` right after
`aborted`), and the player names such requests in `saving` before vLLM's abort path asks
`request_finished`; what vLLM's scheduler then does with the two completions is its own.
"""

from vllm.distributed.kv_transfer.kv_connector.v1.nixl.connector import (
    NixlPullConnector,
)

NAME = "KvccScriptedNixlConnector"
# The kv_connector_extra_config key holding the header's finished_count (absent: null).
FINISHED_COUNT_KEY = "kvcc_finished_count"


class KvccScriptedNixlConnector(NixlPullConnector):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Ids of requests whose free this connector takes over at an abort, for a save,
        # and those vLLM then asked (`request_finished`), whose free it did take over.
        self.saving = set()
        self.took_over = set()

    def get_finished_count(self):
        extra = self._kv_transfer_config.kv_connector_extra_config or {}
        return extra.get(FINISHED_COUNT_KEY)

    def _takes_over(self, request):
        if request.request_id not in self.saving:
            return False
        self.took_over.add(request.request_id)
        return True

    def request_finished(self, request, block_ids):
        if self._takes_over(request):
            return True, None
        return super().request_finished(request, block_ids)

    def request_finished_all_groups(self, request, block_ids):
        if self._takes_over(request):
            return True, None
        return super().request_finished_all_groups(request, block_ids)
