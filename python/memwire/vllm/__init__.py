"""memwire as vLLM's KV connector: prefill -> decode KV over memwire pools, under leases that
cannot be outlived.

    vllm serve MODEL --kv-transfer-config '{"kv_connector": "MemwireConnector",
        "kv_connector_module_path": "memwire.vllm", "kv_role": "kv_both",
        "kv_connector_extra_config": {"side_channel_port": 5700}}'

Importing this module imports vLLM (``import memwire`` alone does not). See README "vLLM".
"""

from .connector import MemwireConnector
from .metadata import MemwireConnectorMetadata

__all__ = ["MemwireConnector", "MemwireConnectorMetadata"]
