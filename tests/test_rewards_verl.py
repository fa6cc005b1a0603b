"""The verl seam: rewards.verl_entry.compute_score and the registered "dara_parallel" reward manager,
run through verl 0.9.1's own RewardLoopWorker on a real DataProto built with a real tokenizer."""

import functools

import numpy as np
import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

from dara import SAMPLE_DATA
from dara.verl import reward_manager as manager_module
from rewards import verl_entry
from rewards.verl_entry import RewardOptions, compute_score, step_metrics

TOOLRL_TEST = str(SAMPLE_DATA / "toolrl" / "rlla_4k_test.parquet")
POOL_OPTIONS = {"timeout_s": 3.0, "num_processes": 2}  # one for the module: the shared pool is built once


# ----------------------------------------------------------------------------- compute_score
def test_compute_score_keys_and_total_per_task():
    ground_truth = pd.read_parquet(TOOLRL_TEST)["reward_model"][0]["ground_truth"]
    assert compute_score("rlla", ground_truth, ground_truth) == {"score": 4.0, "format": 1.0, "correctness": 3.0}
    three = compute_score("rlla", ground_truth, ground_truth, toolrl_length_channel=True)
    assert set(three) == {"score", "format", "correctness", "length"}
    assert three["score"] == sum(v for k, v in three.items() if k != "score")
    math = compute_score("aime24", "\\boxed{33}", "33", {"response_tokens": 5000}, **POOL_OPTIONS)
    assert math == {"score": 1.0, "correctness": 1.0, "length": 0.0}
    assert compute_score("rlla", "x", "<think></think>", reward_router_address=None)["format"] == 0.0  # verl's, ignored
    conditioned = compute_score("deepscaler", "\\boxed{1}", "2", {"response_tokens": 5}, math_length_conditioned=True)
    assert conditioned == {"score": 0.0, "correctness": 0.0, "length": 0.0}
    assert verl_entry.channel_names("rlla") == ("format", "correctness")
    assert verl_entry.channel_names("minerva") == ("correctness", "length")


@pytest.mark.parametrize(("args", "kwargs", "error", "message"), [
    pytest.param(("gsm8k", "x", "1"), {}, ValueError, "unknown data_source 'gsm8k'", id="unknown-source"),
    pytest.param(("rlla", "x", "<think></think>"), {"toolrl_length": True}, TypeError, "unknown reward option",
                 id="misspelt-option"),
    pytest.param(("math500", "\\boxed{1}", "1", {}), {}, ValueError, "response_tokens", id="math-without-tokens"),
])
def test_compute_score_errors_name_the_problem(args, kwargs, error, message):
    with pytest.raises(error, match=message):
        compute_score(*args, **kwargs)


def test_step_metrics_match_a_plain_loop():
    rng = np.random.default_rng(0)
    extra = {"format": rng.integers(0, 2, 37).astype(float).tolist(), "correctness": rng.uniform(-3, 3, 37).tolist(),
             "reward_timeout": [0.0] * 35 + [1.0, 1.0], "reward_error": [0.0] * 37}
    metrics = step_metrics(extra, ["format", "correctness"])
    for channel in ("format", "correctness"):
        assert metrics[f"reward/{channel}/mean"] == pytest.approx(sum(extra[channel]) / 37)
    assert metrics["reward/timeouts"] == 2.0 and metrics["reward/errors"] == 0.0


# ----------------------------------------------------------------------------- the verl reward manager
# (tokenizer_dir, tokenizer: tests/conftest.py)
def verl_config(tokenizer_dir, **reward_kwargs):
    return OmegaConf.create({
        "actor_rollout_ref": {"model": {"path": tokenizer_dir, "tokenizer_path": None}},
        "trainer": {"experiment_name": "test"},
        "reward": {"num_workers": 1, "reward_kwargs": {**POOL_OPTIONS, **reward_kwargs},
                   "custom_reward_function": {"path": None, "name": "compute_score"},
                   "reward_manager": {"source": "register", "name": "dara_parallel", "module": {"path": None}},
                   "reward_model": {"enable": False}, "sandbox_fusion": {"url": None}}})


IMPORTLIB_MANAGER = {"source": "importlib", "name": "DaraParallelRewardManager",
                     "module": {"path": "pkg://dara.verl.reward_manager", "name": "DaraParallelRewardManager"}}


def by_file(config, manager=None, path=verl_entry.__file__, **entry_kwargs):
    """`config` with compute_score by file path with its reward_kwargs (as conf/task/*.yaml), and `manager`."""
    config.reward.custom_reward_function = {"path": path, "name": "compute_score", "reward_kwargs": entry_kwargs}
    if manager is not None:
        config.reward.reward_manager = manager
    return config


def make_batch(tokenizer, rows, padding=3):
    """A verl rollout batch: prompts left-padded, responses (each ending in <|im_end|>) right-padded."""
    from verl import DataProto

    pad = tokenizer.pad_token_id
    prompt = [pad, pad, *tokenizer("question", add_special_tokens=False)["input_ids"]]
    encoded = [tokenizer(row["text"] + "<|im_end|>", add_special_tokens=False)["input_ids"] for row in rows]
    width = max(map(len, encoded)) + padding
    prompts = torch.tensor([prompt] * len(rows))
    responses = torch.tensor([ids + [pad] * (width - len(ids)) for ids in encoded])
    masks = torch.tensor([[0, 0] + [1] * (len(prompt) - 2 + len(ids)) + [0] * (width - len(ids)) for ids in encoded])
    non_tensors = {"data_source": [row["source"] for row in rows], "extra_info": [{"index": i} for i in range(len(rows))],
                   "reward_model": [{"style": "rule", "ground_truth": row["truth"]} for row in rows]}
    return DataProto.from_dict(
        tensors={"prompts": prompts, "responses": responses, "input_ids": torch.cat([prompts, responses], dim=1),
                 "attention_mask": masks},
        non_tensors={key: np.array(values, dtype=object) for key, values in non_tensors.items()})


def run_reward_loop(config, data):
    """verl's own RewardLoopWorker (what each Ray reward worker runs), in-process on the loop verl bound it to."""
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

    worker = RewardLoopWorker(config)
    return worker, worker.loop.run_until_complete(worker.compute_score_batch(data))


def toolrl_rows():
    truths = [r["ground_truth"] for r in pd.read_parquet(TOOLRL_TEST)["reward_model"][:3]]
    texts = [truths[0], truths[1], "<think> x </think>\n<tool_call>\n{bad json}\n</tool_call>", "no format at all"]
    return [{"source": "rlla", "text": text, "truth": truth}
            for text, truth in zip(texts, [*truths, truths[0]], strict=True)]


NAIVE_MANAGER = {"source": "register", "name": "naive", "module": {"path": None}}


@pytest.mark.parametrize("manager", [None, IMPORTLIB_MANAGER, NAIVE_MANAGER], ids=["registered", "importlib", "naive"])
def test_each_configured_manager_scores_through_verls_reward_loop_as_score_sample(tokenizer_dir, tokenizer, manager):
    """The registered manager; the manager by importlib with compute_score by file path and its reward_kwargs
    (conf/task/deepscaler.yaml); verl's naive manager calling compute_score by file path (conf/task/toolrl*.yaml)."""
    config = verl_config(tokenizer_dir, toolrl_length_channel=True)
    if manager is not None:  # the length channel comes from the function's own reward_kwargs
        config = by_file(config, manager, toolrl_length_channel=True)
        config.reward.reward_kwargs = {}
    worker, outputs = run_reward_loop(config, make_batch(tokenizer, toolrl_rows()))
    ours = manager is not NAIVE_MANAGER
    assert (type(worker.reward_manager) is manager_module.DaraParallelRewardManager) == ours
    options = RewardOptions(toolrl_length_channel=True)
    for row, output in zip(toolrl_rows(), outputs, strict=True):
        expected = verl_entry.score_sample("rlla", row["text"], row["truth"], None, options)  # serial, in-process
        flags = {"reward_timeout": 0.0, "reward_error": 0.0} if ours else {}
        assert output["reward_extra_info"] == {**expected, **flags}
        assert output["reward_score"] == expected["score"]
    assert [o["reward_extra_info"]["correctness"] for o in outputs][:3] == [3.0, 0.0, -3.0]


def test_manager_passes_valid_token_counts_and_its_batch_call_agrees(tokenizer_dir, tokenizer):
    rows = [{"source": "math500", "text": "short \\boxed{\\frac{1}{2}}", "truth": "\\frac{1}{2}"},
            {"source": "math500", "text": "a much longer line of reasoning " * 2 + "\\boxed{0.5}", "truth": "0.5"},
            {"source": "minerva", "text": "\\boxed{3}", "truth": "4"}]
    data = make_batch(tokenizer, rows)
    valid = manager_module.valid_response_lengths(data)
    limit = int(valid[0])  # the first response fits, the second does not
    assert int(valid[1]) > limit
    config = verl_config(tokenizer_dir, max_response_tokens=limit)
    _, outputs = run_reward_loop(config, data)
    extras = [o["reward_extra_info"] for o in outputs]
    assert [e["correctness"] for e in extras] == [1.0, 1.0, 0.0]
    assert [e["length"] for e in extras] == [float(int(v) <= limit) for v in valid]
    assert all(e["score"] == e["correctness"] + e["length"] for e in extras)
    # the synchronous batch call agrees, puts each score on the last valid token, and reports step metrics
    result = manager_module.DaraParallelRewardManager(config, tokenizer, compute_score=None)(data, return_dict=True)
    from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase

    expected_tensor = RewardManagerBase.assemble_rm_scores(data, [o["reward_score"] for o in outputs])
    torch.testing.assert_close(result["reward_tensor"], expected_tensor)
    assert result["metrics"]["reward/correctness/mean"] == pytest.approx(2 / 3)
    assert result["metrics"]["reward/timeouts"] == 0.0


def test_manager_errors_on_bad_data_and_config_not_on_model_output(tokenizer_dir, tokenizer):
    config = verl_config(tokenizer_dir)
    manager = manager_module.DaraParallelRewardManager(config, tokenizer, compute_score=None)
    for rows, message in (([{"source": "gsm8k", "text": "\\boxed{1}", "truth": "1"}], "unknown data_source"),
                          ([{"source": "rlla", "text": "x", "truth": "<think></think>"},
                            {"source": "amc23", "text": "x", "truth": "1"}], "mixes tasks")):
        with pytest.raises(ValueError, match=message):
            manager(make_batch(tokenizer, rows))

    def other_reward(**kwargs):
        return 0.0

    # a function of another module is a reward of your own, loaded by its module's file in the pool
    with pytest.raises(ValueError, match="has no function 'other_reward'"):
        manager_module.DaraParallelRewardManager(config, tokenizer, compute_score=other_reward)
    # verl's binding of our own function with reward_kwargs that clash with the manager's (accepted: the pin test)
    from verl.trainer.ppo.reward import _call_with_kwargs

    clash = functools.partial(_call_with_kwargs, compute_score, {"timeout_s": 99.0})
    with pytest.raises(ValueError, match="differ"):
        manager_module.DaraParallelRewardManager(config, tokenizer, clash)


def test_pinned_verl_reward_api(tokenizer_dir, tokenizer):
    """verl 0.9.1 reward-loop facts the manager relies on that the tests above do not reach."""
    import verl
    from verl.trainer.ppo.reward import load_reward_manager
    from verl.workers.config.reward import RewardManagerConfig

    assert verl.__version__ == "0.9.1"
    # verl 0.9.1 keeps reward.reward_manager a DictConfig: its dataclass, whose __post_init__ would check the name
    # against the registry, cannot even be built; an upgrade that builds it fails here
    with pytest.raises(AttributeError, match="__post_init__"):
        RewardManagerConfig(source="register", name="dara_parallel")
    # verl's loader hands the manager the bound compute_score with the worker's keyword arguments
    config = by_file(verl_config(tokenizer_dir), toolrl_length_channel=True)
    manager = load_reward_manager(config, tokenizer, reward_router_address=None, reward_model_tokenizer=None)
    assert type(manager) is manager_module.DaraParallelRewardManager and manager.options.toolrl_length_channel
