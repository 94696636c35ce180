"""One whole vLLM engine in a process of its own, driven over a pipe: vllm.LLM with its engine
core, executor and CPU worker, the model runner, the CPU attention and GEMM kernels, the weights
read from disk, and (when configured) MemwireConnector loaded by name. The full-engine smoke
(test_vllm_cpu_smoke.py) runs a prefill, a decode and a single engine of these.

Commands: generate (token-id prompts, greedy, one kv_transfer_params per prompt or None; with
vLLM's count of those prompts' tokens by where their KV came from), connector (the class of the
worker's connector and what it moved, asked of the worker process itself), stop.
"""

import multiprocessing
import os
import time

BLOCK_SIZE = 32  # vLLM's CPU backend takes KV blocks of a multiple of 32 tokens
KV_CACHE_BYTES = 64 << 20  # 64 MiB of KV cache: a fixed size, not a share of this host's memory
MAX_MODEL_LEN = 2048
START_SECONDS = 600  # an engine's start on 2 busy cores (imports, weights, KV cache) stays below
CALL_SECONDS = 300  # one command's answer


def _worker_connector(worker):
    """Runs in the worker process (collective_rpc): the class vLLM's factory made for the
    worker's half and what it moved."""
    from vllm.distributed.kv_transfer import get_kv_transfer_group, has_kv_transfer_group

    if not has_kv_transfer_group():
        return None
    connector = get_kv_transfer_group()
    kind = f"{type(connector).__module__}.{type(connector).__name__}"
    counters = connector.counters() if hasattr(connector, "counters") else {}
    return {"class": kind, "counters": counters}


def _prompt_tokens_by_source(llm):
    """vLLM's own count of prompt tokens by where their KV came from (local_compute,
    local_cache_hit, external_kv_transfer), over every request so far."""
    counts = {}
    for metric in llm.get_metrics():
        if metric.name == "vllm:prompt_tokens_by_source":
            source = metric.labels.get("source", "")
            counts[source] = counts.get(source, 0) + int(metric.value)
    return counts


def _serve(conn, model, kv_transfer_config):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # collective_rpc sends _worker_connector (a function, pickled) to the worker.
    os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"
    from vllm import LLM, SamplingParams
    from vllm.config import KVTransferConfig
    from vllm.inputs import TokensPrompt

    if kv_transfer_config is not None:
        kv_transfer_config = KVTransferConfig(**kv_transfer_config)

    llm = LLM(model=model, skip_tokenizer_init=True, dtype="float32", block_size=BLOCK_SIZE, seed=0,
              max_model_len=MAX_MODEL_LEN, enforce_eager=True, max_num_seqs=8,
              # Off, so every token a request did not compute came over the connector.
              enable_prefix_caching=False, kv_cache_memory_bytes=KV_CACHE_BYTES,
              kv_transfer_config=kv_transfer_config, disable_log_stats=False)
    conn.send(("ready", None))
    try:
        while True:
            command, args = conn.recv()
            if command == "generate":
                prompts, max_tokens, params = args
                sampling = [SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True,
                                           detokenize=False,
                                           extra_args={"kv_transfer_params": p} if p else None)
                            for p in params]
                before, began = _prompt_tokens_by_source(llm), time.monotonic()
                outputs = llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts],
                                       sampling, use_tqdm=False)
                seconds, after = time.monotonic() - began, _prompt_tokens_by_source(llm)
                sources = {k: after.get(k, 0) - before.get(k, 0) for k in after}
                answers = [dict(tokens=list(o.outputs[0].token_ids), finish_reason=o.outputs[0].finish_reason,
                                kv_transfer_params=o.kv_transfer_params) for o in outputs]
                conn.send(("generate", dict(outputs=answers, prompt_tokens_by_source=sources, seconds=seconds)))
            elif command == "connector":
                (answer,) = llm.collective_rpc(_worker_connector, timeout=CALL_SECONDS)  # TP 1
                conn.send(("connector", answer))
            elif command == "stop":
                break
    finally:
        llm.llm_engine.engine_core.shutdown(timeout=30)  # vLLM force-kills after 5 s otherwise
    conn.send(("stopped", None))


class LlmProcess:
    """The parent's handle on one engine process. Every wait is bounded: a hung engine is an
    error that names it, never a hang."""

    def __init__(self, name, model, kv_transfer_config=None):
        """Starts the engine's process; wait_ready() waits for it. ``kv_transfer_config``:
        vLLM's KVTransferConfig as a dict, or None for an engine without a connector."""
        self.name = name
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        # Not a daemon: vLLM starts its engine core and worker as this process's children.
        self._process = context.Process(target=_serve, args=(child, model, kv_transfer_config),
                                        name=f"vllm-{name}")
        self._process.start()
        child.close()  # the child's end lives in the child alone: its death reads as EOF here
        self._began = time.monotonic()
        self.started_in = None

    def wait_ready(self):
        """Until the engine is up (engines start side by side, then each is waited for)."""
        if self.started_in is None:
            self._expect("ready", max(1.0, START_SECONDS - (time.monotonic() - self._began)))
            self.started_in = time.monotonic() - self._began
        return self

    def generate(self, prompts, max_tokens, params=None):
        self._conn.send(("generate", (prompts, max_tokens, params or [None] * len(prompts))))
        return self._expect("generate", CALL_SECONDS)

    def connector(self):
        self._conn.send(("connector", None))
        return self._expect("connector", CALL_SECONDS)

    def stop(self):
        if self._process.is_alive():
            try:
                self._conn.send(("stop", None))
                self._expect("stopped", 60)
            except (OSError, EOFError, RuntimeError):
                pass
        self._process.join(30)
        if self._process.is_alive():
            self._process.kill()
            self._process.join(10)

    def _expect(self, what, seconds):
        if not self._conn.poll(seconds):
            raise RuntimeError(f"{self.name}: no answer to {what} within {seconds} s")
        try:
            kind, value = self._conn.recv()
        except EOFError:
            raise RuntimeError(f"{self.name}: the engine process ended (exit code "
                               f"{self._process.exitcode}) before answering {what}") from None
        if kind != what:
            raise RuntimeError(f"{self.name}: answered {kind} to {what}")
        return value
