"""The "hf" rollout backend of the CPU path (dara.verl.cpu): transformers generate, token ids and log-probs out,
trainer weights in.

Generation is checked against a teacher-forced forward pass of the same model on each prompt + response
(no padding), which is how verl's trainer computes log-probs (log-softmax of logits / temperature).
"""

from __future__ import annotations

import asyncio

import pytest
import torch

from dara.verl.cpu.hf_generate import SamplingSettings, generate_batch, sampling_settings
from data_prep.tiny_model import tiny_qwen2

EOS, PAD, VOCAB = 1, 0, 48


@pytest.fixture(scope="module")
def tiny_model():
    shape = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "max_position_embeddings": 128}
    model = tiny_qwen2(VOCAB, shape=shape, seed=0, eos_token_id=EOS, pad_token_id=PAD).eval()
    with torch.no_grad():  # sharper logits than the random init, so samples differ between rows and settings
        model.lm_head.weight.mul_(8.0)
    return model


def teacher_forced_logprobs(model, prompt: list[int], response: list[int], temperature: float) -> torch.Tensor:
    """Per-token log p(response_t | prompt, response_<t) at the given temperature: one unpadded forward pass."""
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
    return torch.log_softmax(logits / temperature, dim=-1).gather(-1, torch.tensor(response)[:, None])[:, 0]


PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [12, 13], [20, 21, 22, 23]]


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_batched_logprobs_match_teacher_forcing(tiny_model, temperature):
    torch.manual_seed(1)
    settings = SamplingSettings(max_new_tokens=12, temperature=temperature)
    results = generate_batch(tiny_model, PROMPTS, settings, eos_token_ids=[EOS], pad_token_id=PAD)
    assert len(results) == len(PROMPTS)
    for prompt, result in zip(PROMPTS, results, strict=True):
        assert 1 <= len(result.token_ids) == len(result.log_probs) <= settings.max_new_tokens
        expected = teacher_forced_logprobs(tiny_model, prompt, result.token_ids, temperature)
        torch.testing.assert_close(torch.tensor(result.log_probs), expected, atol=2e-5, rtol=0)


def test_stops_at_first_eos_and_keeps_it(tiny_model):
    torch.manual_seed(2)
    settings = SamplingSettings(max_new_tokens=40, temperature=1.5)
    results = generate_batch(tiny_model, PROMPTS * 4, settings, eos_token_ids=[EOS], pad_token_id=PAD)
    for result in results:
        assert EOS not in result.token_ids[:-1]
        if result.finished_by_stop_token:
            assert result.token_ids[-1] == EOS
        else:
            assert len(result.token_ids) == settings.max_new_tokens


def test_stop_token_ids_end_generation(tiny_model):
    torch.manual_seed(3)
    stop = tuple(range(2, VOCAB, 2))  # half the vocabulary: every sample stops within a few tokens
    settings = SamplingSettings(max_new_tokens=30, temperature=1.0, stop_token_ids=stop)
    for result in generate_batch(tiny_model, PROMPTS, settings, eos_token_ids=[EOS], pad_token_id=PAD):
        assert result.finished_by_stop_token
        assert result.token_ids[-1] in set(stop) | {EOS}
        assert not (set(result.token_ids[:-1]) & (set(stop) | {EOS}))


def test_greedy_follows_argmax_and_reports_temperature_one(tiny_model):
    settings = SamplingSettings(max_new_tokens=8, temperature=0.0)
    results = generate_batch(tiny_model, PROMPTS, settings, eos_token_ids=[EOS], pad_token_id=PAD)
    for prompt, result in zip(PROMPTS, results, strict=True):
        ids = prompt + result.token_ids
        with torch.no_grad():
            logits = tiny_model(input_ids=torch.tensor([ids])).logits[0, len(prompt) - 1 : -1]
        assert result.token_ids == logits.argmax(-1).tolist()
        expected = teacher_forced_logprobs(tiny_model, prompt, result.token_ids, 1.0)
        torch.testing.assert_close(torch.tensor(result.log_probs), expected, atol=2e-5, rtol=0)


def test_top_k_one_is_greedy_with_certain_processed_logprobs(tiny_model):
    torch.manual_seed(4)
    sampled = generate_batch(
        tiny_model, PROMPTS, SamplingSettings(max_new_tokens=6, temperature=1.0, top_k=1),
        eos_token_ids=[EOS], pad_token_id=PAD,
    )
    greedy = generate_batch(
        tiny_model, PROMPTS, SamplingSettings(max_new_tokens=6, temperature=0.0), eos_token_ids=[EOS], pad_token_id=PAD
    )
    for top1, argmax in zip(sampled, greedy, strict=True):
        assert top1.token_ids == argmax.token_ids
        assert max(abs(lp) for lp in top1.log_probs) < 1e-6  # the filtered distribution puts all mass on one token
    raw = generate_batch(
        tiny_model, PROMPTS, SamplingSettings(max_new_tokens=6, temperature=1.0, top_k=1),
        eos_token_ids=[EOS], pad_token_id=PAD, logprobs_mode="raw_logprobs",
    )
    for prompt, result in zip(PROMPTS, raw, strict=True):
        expected = teacher_forced_logprobs(tiny_model, prompt, result.token_ids, 1.0)
        torch.testing.assert_close(torch.tensor(result.log_probs), expected, atol=2e-5, rtol=0)


def test_sampling_settings_reads_vllm_style_params():
    settings = sampling_settings(
        {"temperature": 0.5, "top_p": 0.9, "top_k": -1, "repetition_penalty": 1.0, "max_tokens": 500,
         "stop_token_ids": [7, 3, 7]},
        default_max_new_tokens=64, max_possible_tokens=100,
    )
    assert settings == SamplingSettings(max_new_tokens=100, temperature=0.5, top_p=0.9, top_k=-1, stop_token_ids=(3, 7))
    assert sampling_settings({}, default_max_new_tokens=64, max_possible_tokens=100).max_new_tokens == 64
    with pytest.raises(ValueError, match="no room"):
        sampling_settings({}, default_max_new_tokens=64, max_possible_tokens=0)


def test_bad_inputs_are_refused(tiny_model):
    settings = SamplingSettings(max_new_tokens=4)
    with pytest.raises(ValueError, match="logprobs_mode"):
        generate_batch(tiny_model, PROMPTS, settings, eos_token_ids=[EOS], pad_token_id=PAD, logprobs_mode="x")
    with pytest.raises(ValueError, match="at least one token"):
        generate_batch(tiny_model, [[]], settings, eos_token_ids=[EOS], pad_token_id=PAD)


# ------------------------------------------------------------------------------------------------------------
# the server (run in-process here; verl runs it as a Ray actor)
# ------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def server(tiny_model, tmp_path_factory):
    """The server on the tiny model saved as an HF folder (no tokenizer: verl's model config may skip it)."""
    from omegaconf import OmegaConf

    from dara.verl.cpu.hf_server import HFRolloutServer

    model_dir = tmp_path_factory.mktemp("tiny_qwen2")
    tiny_model.generation_config.eos_token_id = [EOS]
    tiny_model.save_pretrained(model_dir)
    rollout = OmegaConf.create({
        "name": "hf", "prompt_length": 64, "response_length": 16, "dtype": "float32", "tensor_model_parallel_size": 1,
        "engine_kwargs": {"hf": {"batch_wait_s": 0.05}},
    })
    model = OmegaConf.create({"path": str(model_dir), "load_tokenizer": False,
                              "override_config": {"attn_implementation": "sdpa"}})
    return HFRolloutServer(rollout, model, replica_rank=0)


def test_server_batches_concurrent_requests_and_tags_weight_version(server):
    prompts = PROMPTS + [[30, 31, 32, 33, 34, 35]]

    async def ask_all():
        await server.set_global_steps(7)
        params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}
        return await asyncio.gather(*[server.generate(p, dict(params), request_id=str(i)) for i, p in enumerate(prompts)])

    before = server.get_stats()
    outputs = asyncio.run(ask_all())
    after = server.get_stats()
    assert after["requests"] - before["requests"] == len(prompts)
    assert after["batches"] - before["batches"] == 1  # gathered into one generate call
    for prompt, output in zip(prompts, outputs, strict=True):
        assert output.extra_fields["global_steps"] == 7
        assert 1 <= len(output.token_ids) == len(output.log_probs) <= 16
        expected = teacher_forced_logprobs(server.model, prompt, list(output.token_ids), 1.0)
        torch.testing.assert_close(torch.tensor(output.log_probs), expected, atol=2e-5, rtol=0)


def test_server_takes_trainer_weights_and_refuses_partial_or_unknown_ones(server):
    original = server.get_state_dict()
    names = [name for name, _ in server.model.named_parameters()]
    new = {name: original[name] + 0.01 for name in names}

    async def sync(pairs, check=True):
        await server.begin_weight_update()
        try:
            for start in range(0, len(pairs), 3):  # several buckets
                await server.load_weights(pairs[start : start + 3])
        except Exception:
            await server.finish_weight_update(check_complete=False)
            raise
        return await server.finish_weight_update(global_steps=3, check_complete=check)

    asyncio.run(sync(list(new.items())))
    served = server.get_state_dict()
    for name in names:
        torch.testing.assert_close(served[name], new[name])
    assert server.get_stats()["global_steps"] == 3

    with pytest.raises(ValueError, match="stale"):
        asyncio.run(sync(list(new.items())[:-1]))
    with pytest.raises(KeyError, match="not in the rollout model"):
        asyncio.run(sync([("model.no_such.weight", torch.zeros(1))]))
    with pytest.raises(ValueError, match="shape"):
        asyncio.run(sync([(names[0], torch.zeros(3))]))

    asyncio.run(sync(list(original.items())))  # generation still works after failed syncs (lock released)
    output = asyncio.run(server.generate([3, 4, 5], {"temperature": 0.0, "logprobs": True}, request_id="x"))
    assert len(output.token_ids) >= 1
