"""One vLLM engine on CPU, driven as EngineCore drives it, with MemwireConnector loaded by name.

vLLM's own code runs every part but the model's forward: its config and KV cache planning
(get_kv_cache_configs), its KV cache allocation (allocate_kv_cache: per-layer [B, H, N, C]
views of one buffer), its Scheduler (async loads, WAITING_FOR_REMOTE_KVS, delayed frees,
kv_load_failure_policy), the connector factory, and the worker-side connector lifecycle
(KVConnectorModelRunnerMixin). The stand-in forward writes, for every token it computes,
bytes that follow from (the token prefix, the layer) into that token's KV slots, and before
it computes anything for a request it checks every slot the request holds already (loaded
from a prefill or hit in the prefix cache) against the same function: one wrong byte is a
mismatch the tests see.

Run as a process (serve()): commands come over a pipe, finished requests go back.
"""

import hashlib
import json
import os
import tempfile
import time

import numpy as np
import torch

VOCAB = 1024
LAYERS = 2
HEADS = 2
HEAD_DIM = 32


def tiny_model_dir():
    """A model config vLLM can plan for (no weights: the forward is ours)."""
    folder = os.path.join(tempfile.gettempdir(), "memwire-vllm-tiny-llama")
    os.makedirs(folder, exist_ok=True)
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": HEADS * HEAD_DIM,
        "intermediate_size": 128, "num_attention_heads": HEADS, "num_key_value_heads": HEADS,
        "head_dim": HEAD_DIM, "num_hidden_layers": LAYERS, "vocab_size": VOCAB,
        "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "torch_dtype": "float32",
    }
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    return folder


def make_config(role, extra, block_size=32, policy="fail", max_num_seqs=16, max_batched=8192,
                max_model_len=8192, connector=("MemwireConnector", "memwire.vllm")):
    from vllm.config import (CacheConfig, DeviceConfig, KVTransferConfig, ModelConfig,
                             SchedulerConfig, VllmConfig)

    model = ModelConfig(model=tiny_model_dir(), skip_tokenizer_init=True, dtype="float32", seed=0,
                        max_model_len=max_model_len)
    scheduler = SchedulerConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=max_batched,
                                max_model_len=max_model_len, enable_chunked_prefill=True,
                                is_encoder_decoder=False)
    cache = CacheConfig(block_size=block_size, gpu_memory_utilization=0.9, cache_dtype="auto",
                        enable_prefix_caching=True)
    transfer = KVTransferConfig(kv_connector=connector[0], kv_connector_module_path=connector[1],
                                kv_role=role, kv_connector_extra_config=extra, kv_buffer_device="cpu",
                                kv_load_failure_policy=policy)
    return VllmConfig(model_config=model, scheduler_config=scheduler, cache_config=cache,
                      kv_transfer_config=transfer, device_config=DeviceConfig("cpu"))


def _free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def slot_values(prefix_digest, layer, width):
    """The int32 values a token's KV slot holds in `layer`, from its prefix's digest."""
    seed = hashlib.blake2b(prefix_digest + bytes([layer]), digest_size=16).digest()
    return np.resize(np.frombuffer(seed, dtype=np.int32), width)


class Engine:
    def __init__(self, role, extra, num_blocks=512, block_size=32, policy="fail", step_seconds=0.0,
                 connector=("MemwireConnector", "memwire.vllm")):
        from vllm.distributed.kv_transfer import get_kv_transfer_group
        from vllm.distributed.kv_transfer.kv_transfer_state import ensure_kv_transfer_initialized
        from vllm.utils.hashing import sha256
        from vllm.v1.attention.backends.utils import resolve_kv_cache_layout
        from vllm.v1.core.kv_cache_planning import get_global_kv_cache_groups, get_kv_cache_configs
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
        from vllm.v1.core.sched.scheduler import Scheduler
        from vllm.v1.kv_cache_interface import FullAttentionSpec
        from vllm.v1.structured_output import StructuredOutputManager
        from vllm.v1.worker.utils import allocate_kv_cache

        # A small cache serves shorter requests only: vLLM checks that one fits.
        self.config = make_config(role, extra, block_size=block_size, policy=policy,
                                  max_model_len=min(8192, (num_blocks - 1) * block_size),
                                  connector=tuple(connector))
        self.block_size = block_size
        self.step_seconds = step_seconds  # the stand-in forward's compute time per step
        spec = FullAttentionSpec(block_size=block_size, num_kv_heads=HEADS, head_size=HEAD_DIM,
                                 dtype=torch.float32)
        specs = [{f"model.layers.{i}.self_attn.attn": spec for i in range(LAYERS)}]
        # The layout, resolved as EngineCore resolves it (the CPU backend's preference; a
        # connector's own preference would be heard here).
        resolve_kv_cache_layout(self.config, [["LBHNC", "LBNHC"]], specs[0].values())
        groups = get_global_kv_cache_groups(self.config, specs)
        memory = num_blocks * spec.page_size_bytes * LAYERS
        kv_cache_config = get_kv_cache_configs(self.config, specs, [memory], groups)[0]
        self.config.cache_config.num_gpu_blocks = kv_cache_config.num_blocks
        self.scheduler = Scheduler(vllm_config=self.config, kv_cache_config=kv_cache_config,
                                   structured_output_manager=StructuredOutputManager(self.config),
                                   block_size=block_size, log_stats=False)
        # The worker half, made and registered as vLLM's CPU worker does: its process groups
        # first (TP 1, gloo), then the connector.
        from vllm.config import set_current_vllm_config
        from vllm.distributed.parallel_state import (ensure_model_parallel_initialized,
                                                     init_distributed_environment)

        with set_current_vllm_config(self.config):
            init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                         distributed_init_method=f"tcp://127.0.0.1:{_free_port()}")
            ensure_model_parallel_initialized(1, 1)
            ensure_kv_transfer_initialized(self.config, kv_cache_config)
        self.connector = get_kv_transfer_group()
        self.kv_caches = allocate_kv_cache(kv_cache_config, torch.device("cpu"),
                                           self.config.cache_config.get_resolved_kv_cache_layout())
        self.layer_names = sorted(self.kv_caches)
        self.layers = [self.kv_caches[name].view(torch.int32) for name in self.layer_names]
        self.connector.register_kv_caches(self.kv_caches)
        # As EngineCore does after the workers registered: their handshake metadata (keyed by
        # (pp_rank, tp_rank)) to the scheduler's connector (NixlConnector's listener serves it).
        handshake = self.connector.get_handshake_metadata()
        if handshake is not None:
            self.scheduler.connector.set_xfer_handshake_metadata_pp_aware({(0, 0): handshake})
        init_none_hash(sha256)
        self._hasher = get_request_block_hasher(block_size, sha256)
        self._digests = {}  # request id -> prefix digests, one per token
        self._checked = {}  # request id -> [slots checked, mismatched] at its first forward
        self._first_forward = {}  # request id -> when its first forward began (its KV was in)
        self.finished = []  # (request id, dict) of requests that ended

    # --- requests ---

    def add(self, request_id, prompt, params, max_tokens):
        from vllm import SamplingParams
        from vllm.v1.request import Request

        sampling = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
        request = Request(request_id=request_id, prompt_token_ids=list(prompt),
                          sampling_params=sampling, pooling_params=None, block_hasher=self._hasher)
        request.kv_transfer_params = params
        self.scheduler.add_request(request)

    def abort(self, request_id):
        from vllm.v1.request import RequestStatus

        # EngineCore reports an abort to its client itself: the scheduler emits no output for it.
        if self.scheduler.finish_requests(request_id, RequestStatus.FINISHED_ABORTED):
            checked, mismatched = self._checked.pop(request_id, (0, 0))
            self._digests.pop(request_id, None)
            self.finished.append((request_id, dict(finish_reason="abort", kv_transfer_params=None,
                                                   checked=checked, mismatched=mismatched)))

    def free_blocks(self):
        return self.scheduler.kv_cache_manager.block_pool.get_num_free_blocks()

    # --- one step, as EngineCore.step ---

    def step(self):
        from vllm.forward_context import set_forward_context
        from vllm.v1.outputs import ModelRunnerOutput
        from vllm.v1.worker.kv_connector_model_runner_mixin import KVConnectorModelRunnerMixin

        out = self.scheduler.schedule()
        if out.total_num_scheduled_tokens == 0:
            runner_output = KVConnectorModelRunnerMixin.kv_connector_no_forward(out, self.config)
        else:
            with set_forward_context(None, self.config):
                with KVConnectorModelRunnerMixin.maybe_get_kv_connector_output(out) as kv_output:
                    sampled = self._forward(out)
            ids = list(sampled)
            runner_output = ModelRunnerOutput(req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
                                              sampled_token_ids=[sampled[r] for r in ids],
                                              kv_connector_output=kv_output)
        outputs = self.scheduler.update_from_output(out, runner_output)
        for engine_outputs in outputs.values():
            for o in engine_outputs.outputs:
                if o.finish_reason is not None:
                    checked, mismatched = self._checked.pop(o.request_id, (0, 0))
                    self._digests.pop(o.request_id, None)
                    self.finished.append((o.request_id, dict(
                        finish_reason=o.finish_reason.name.lower(), kv_transfer_params=o.kv_transfer_params,
                        checked=checked, mismatched=mismatched,
                        first_forward_at=self._first_forward.pop(o.request_id, None))))
        return out.total_num_scheduled_tokens

    def _forward(self, out):
        """Layer by layer, as a model's forward runs: before a layer, vLLM's wait for its load;
        after it, vLLM's save of it (what a push-mode connector streams)."""
        if self.step_seconds:
            time.sleep(self.step_seconds)  # compute time, as a real model's forward takes
        sampled, work = {}, []
        for request_id, count in out.num_scheduled_tokens.items():
            request = self.scheduler.requests[request_id]
            end = request.num_computed_tokens  # the scheduler advanced it already
            start = end - count
            blocks = self.scheduler.kv_cache_manager.get_block_ids(request_id)[0]
            tokens = request.all_token_ids
            digests = self._digests_of(request_id, tokens, end)
            if request_id not in self._checked:  # its first forward: what it holds must be exact
                self._first_forward[request_id] = time.monotonic()  # its KV is in
                self._checked[request_id] = self._check(blocks, digests, start)
            work.append((blocks, digests, start, end))
            if end >= len(tokens):  # a token is sampled once the request's tokens are all in
                sampled[request_id] = [int.from_bytes(digests[end - 1][:4], "little") % VOCAB]
            else:
                sampled[request_id] = []
        for layer, name in enumerate(self.layer_names):
            self.connector.wait_for_layer_load(name)
            for blocks, digests, start, end in work:
                for position in range(start, end):
                    self._write(layer, blocks, position, digests[position])
            self.connector.save_kv_layer(name, self.kv_caches[name], None)
        return sampled

    def _digests_of(self, request_id, tokens, end):
        digests = self._digests.setdefault(request_id, [])
        previous = digests[-1] if digests else b""
        for position in range(len(digests), end):
            previous = hashlib.blake2b(previous + int(tokens[position]).to_bytes(4, "little"),
                                       digest_size=16).digest()
            digests.append(previous)
        return digests

    def _slot(self, layer, blocks, position):
        block, offset = divmod(position, self.block_size)
        return self.layers[layer][blocks[block], :, offset, :]

    def _write(self, layer, blocks, position, digest):
        slot = self._slot(layer, blocks, position)
        slot.copy_(torch.from_numpy(slot_values(digest, layer, slot.numel()).reshape(slot.shape)))

    def _check(self, blocks, digests, held):
        mismatched = 0
        for position in range(held):
            for layer in range(LAYERS):
                slot = self._slot(layer, blocks, position)
                expected = slot_values(digests[position], layer, slot.numel()).reshape(slot.shape)
                if not np.array_equal(slot.numpy(), expected):
                    mismatched += 1
        return held * LAYERS, mismatched


def serve(conn, role, extra, options):
    """The engine's process: commands from the pipe, finished requests back to it. ``options``
    may carry ``env``: variables set before vLLM is imported (a peer connector's settings)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.update(options.pop("env", None) or {})
    engine = Engine(role, extra, **options)
    conn.send(("ready", None))
    stopping, ran = False, True
    while not stopping:
        busy = engine.scheduler.has_requests()
        # Idle: wait for a command. Busy but nothing ran last step (loads in flight): a short
        # wait on the pipe instead of spinning on two CPUs.
        while conn.poll(0 if busy and ran else (0.002 if busy else None)):
            command, *args = conn.recv()
            if command == "add":
                engine.add(*args)
            elif command == "abort":
                engine.abort(*args)
            elif command == "free_blocks":
                conn.send(("free_blocks", engine.free_blocks()))
            elif command == "connectors":  # what vLLM's factory made for each half
                halves = (engine.scheduler.connector, engine.connector)
                conn.send(("connectors", [f"{type(c).__module__}.{type(c).__name__}" for c in halves]))
            elif command == "stop":
                stopping = True
                break
            busy = engine.scheduler.has_requests()
        if stopping:
            break
        if engine.scheduler.has_requests():
            ran = engine.step() > 0
        for request_id, result in engine.finished:
            conn.send(("finished", (request_id, result, time.monotonic())))
        engine.finished.clear()
    engine.connector.shutdown()
    conn.send(("stopped", None))
