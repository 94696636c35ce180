"""MemwireConnector: vLLM's KVConnectorBase_V1 over memwire, loaded by name
(``kv_connector_module_path: memwire.vllm``). vLLM makes one per role: the scheduler's half
decides, the worker's half moves bytes (scheduler.py, worker.py)."""

from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1, KVConnectorRole

try:  # vLLM 0.32 and 0.33 report failed loads beside finished ones; older: get_finished alone
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorTransferResults
except ImportError:  # pragma: no cover - older vLLM
    KVConnectorTransferResults = None

from .config import ConnectorConfig
from .metadata import MemwireConnectorMetadata
from .scheduler import SchedulerHalf


class MemwireConnector(KVConnectorBase_V1):
    def __init__(self, vllm_config, role, kv_cache_config=None):
        super().__init__(vllm_config, role, kv_cache_config)
        self.config = ConnectorConfig.from_vllm(vllm_config)
        transfer = vllm_config.kv_transfer_config
        if kv_cache_config is not None and len(kv_cache_config.kv_cache_groups) > 1:
            raise ValueError("MemwireConnector moves one KV cache group (full attention); "
                             "hybrid models need the HMA support not built yet")
        self._scheduler = None
        self._worker = None
        if role == KVConnectorRole.SCHEDULER:
            self._scheduler = SchedulerHalf(self.config, vllm_config.cache_config.block_size)
        else:
            from .worker import WorkerHalf  # numpy and the native module: worker processes only

            num_blocks = kv_cache_config.num_blocks if kv_cache_config is not None else None
            self._worker = WorkerHalf(self.config, producer=transfer.is_kv_producer,
                                      consumer=transfer.is_kv_consumer, num_blocks=num_blocks)

    # --- scheduler side ---

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        return self._scheduler.get_num_new_matched_tokens(request, num_computed_tokens)

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        self._scheduler.update_state_after_alloc(request, blocks, num_external_tokens)

    def build_connector_meta(self, scheduler_output):
        return self._scheduler.build_connector_meta(scheduler_output)

    def on_new_request(self, request):
        self._scheduler.on_new_request(request)

    def update_connector_output(self, connector_output):
        self._scheduler.update_connector_output(connector_output)

    def request_finished(self, request, block_ids):
        return self._scheduler.request_finished(request, block_ids)

    # --- worker side ---

    def register_kv_caches(self, kv_caches):
        self._worker.register_kv_caches(kv_caches)

    def start_load_kv(self, forward_context, **kwargs):
        meta = self._get_connector_metadata() if self.has_connector_metadata() else None
        if isinstance(meta, MemwireConnectorMetadata):
            self._worker.start_load_kv(meta)

    def wait_for_layer_load(self, layer_name):
        pass  # loads are asynchronous (pull and push): a request runs once all of its KV is in

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        if self.config.push:  # push mode: this layer goes out now; pull: decode reads later
            meta = self._get_connector_metadata() if self.has_connector_metadata() else None
            self._worker.save_kv_layer(layer_name, meta if isinstance(meta, MemwireConnectorMetadata) else None)

    def wait_for_save(self):
        pass

    def get_finished(self, finished_req_ids):
        sending, recving, _ = self._worker.get_transfer_results()
        return sending or None, recving or None

    def get_transfer_results(self, finished_req_ids):
        sending, recving, failed = self._worker.get_transfer_results()
        return KVConnectorTransferResults(finished_sending=sending, finished_recving=recving,
                                          failed_recving=failed)

    def get_block_ids_with_load_errors(self):
        return self._worker.get_block_ids_with_load_errors()

    def counters(self):
        """The worker half's counts (worker.COUNTERS: loads, bytes, grants and how they ended);
        empty on the scheduler's half."""
        return self._worker.counters() if self._worker is not None else {}

    def shutdown(self):
        if self._worker is not None:
            self._worker.shutdown()
