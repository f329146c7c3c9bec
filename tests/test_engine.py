"""The device engine: the training set on the device (seeded order and masks), the lean Trainer step, resuming.

Tiny sizes (ℓ = 2, q = 3, d = 32, 12 steps); every run is on the CPU (the CUDA-graph step needs a GPU and is refused
here with a clear error).
"""

import json
import shutil
import types

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from hf_treelang.core.masking import IGNORE_INDEX
from hf_treelang.train.arguments import TreeLangTrainingArguments
from hf_treelang.train.device_data import TrainingStream, epoch_generator
from hf_treelang.train.trainer import resolve_step_mode
from tiny_run import run_tiny, weights_close



def _leaves(members=1, n=40, length=8, q=3, seed=0):
    return np.random.default_rng(seed).integers(0, q, size=(members, n, length))


# ---------------------------------------------------------------- the stream


def test_epoch_generator_is_a_function_of_seed_and_epoch():
    def order(seed, epoch):
        return torch.randperm(50, generator=epoch_generator(seed, epoch)).tolist()

    assert order(3, 7) == order(3, 7)
    assert order(3, 7) != order(3, 8) and order(3, 7) != order(4, 7)


def test_an_epoch_serves_every_row_once_with_exactly_one_masked_leaf():
    leaves = _leaves()
    stream = TrainingStream("mlm", leaves, seeds=[5], num_symbols=3, batch_size=16)
    epoch = stream.single().epoch(0)
    assert len(stream) == 3 and epoch.inputs.shape == (40, 8)  # ceil(40 / 16) steps, the last one partial
    masked = epoch.inputs == 3
    assert masked.sum(-1).eq(1).all()
    assert torch.equal(epoch.labels != IGNORE_INDEX, masked)
    restored = torch.where(masked, epoch.labels, epoch.inputs)  # (40, 8) the unmasked rows, in the epoch's order
    assert sorted(map(tuple, restored.tolist())) == sorted(map(tuple, leaves[0].tolist()))
    assert not torch.equal(restored, torch.as_tensor(leaves[0]))  # shuffled
    batches = [stream.single().epoch(0).batch(step)["input_ids"].shape[0] for step in range(3)]
    assert batches == [16, 16, 8]


def test_the_stream_is_deterministic_and_epochs_differ():
    leaves = _leaves()
    first = TrainingStream("mlm", leaves, seeds=[1], num_symbols=3, batch_size=8).epoch(0)
    again = TrainingStream("mlm", leaves, seeds=[1], num_symbols=3, batch_size=8).epoch(0)
    other = TrainingStream("mlm", leaves, seeds=[1], num_symbols=3, batch_size=8).epoch(1)
    assert torch.equal(first.inputs, again.inputs) and torch.equal(first.labels, again.labels)
    assert not torch.equal(first.inputs, other.inputs)


def test_a_member_of_a_stacked_stream_is_served_its_single_runs_batches():
    leaves = _leaves(members=2)
    stacked = TrainingStream("mlm", leaves, seeds=[4, 9], num_symbols=3, batch_size=8).epoch(2)
    single = TrainingStream("mlm", leaves[1], seeds=[9], num_symbols=3, batch_size=8).single().epoch(2)
    assert torch.equal(stacked.inputs[1], single.inputs) and torch.equal(stacked.labels[1], single.labels)
    assert stacked.batch(1)["input_ids"].shape == (2, 8, 8)


def test_data_parallel_processes_split_every_global_batch():
    leaves = _leaves(n=36)
    whole = TrainingStream("root", leaves, np.zeros((1, 36), dtype=np.int64), seeds=[2], num_symbols=3,
                           batch_size=8, world_size=1)
    parts = [TrainingStream("root", leaves, np.zeros((1, 36), dtype=np.int64), seeds=[2], num_symbols=3,
                            batch_size=4, world_size=2, process_index=rank).single() for rank in (0, 1)]
    assert len(parts[0]) == len(parts[1]) == 5  # ceil(36 / 8), the last step filled from the start of the order
    epochs = [part.epoch(0) for part in parts]
    reference = whole.single().epoch(0).inputs  # (36, 8) the epoch's order
    for step in range(4):
        together = torch.cat([epoch.batch(step)["input_ids"] for epoch in epochs])  # (8, 8)
        assert torch.equal(together, reference[step * 8 : (step + 1) * 8])


def test_mask_rate_masks_that_fraction_and_at_least_one_leaf():
    leaves = _leaves(n=400, length=16)
    epoch = TrainingStream("mlm", leaves, seeds=[0], num_symbols=3, batch_size=32, mask_rate=0.25).single().epoch(0)
    masked = epoch.inputs == 3
    assert masked.sum(-1).min() >= 1
    assert abs(masked.float().mean().item() - 0.25) < 0.03
    assert torch.equal(epoch.labels != IGNORE_INDEX, masked)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"leaves": np.full((1, 10, 8), 3)}, "leaves"),
        ({"leaves": np.zeros((1, 10, 6), dtype=np.int64)}, "2\\*\\*depth"),
        ({"batch_size": 0}, "batch_size"),
        ({"seeds": [-1]}, "seed"),
        ({"mask_rate": 1.5}, "mask_rate"),
        ({"task": "root"}, "roots"),
    ],
)
def test_bad_training_data_is_refused_with_the_parameter_named(kwargs, message):
    arguments = {"task": "mlm", "leaves": _leaves(n=10), "seeds": [0], "num_symbols": 3, "batch_size": 4, **kwargs}
    task, leaves = arguments.pop("task"), arguments.pop("leaves")
    with pytest.raises(ValueError, match=message):
        TrainingStream(task, leaves, **arguments)


# ---------------------------------------------------------------- the Trainer


def test_step_mode_cuda_graph_is_refused_without_a_gpu_and_auto_is_eager():
    args = TreeLangTrainingArguments(output_dir="unused", use_cpu=True)
    assert resolve_step_mode("auto", args) == "eager"
    with pytest.raises(ValueError, match="step_mode.*cuda_graph.*not on a CUDA GPU"):
        resolve_step_mode("cuda_graph", args)
    with pytest.raises(ValueError, match="step_mode"):
        resolve_step_mode("fast", args)


def test_gradient_accumulation_is_refused_by_the_device_engine(tmp_path):
    with pytest.raises(ValueError, match="gradient_accumulation_steps"):
        run_tiny("root", tmp_path / "never", "--gradient_accumulation_steps", "2")
    assert not (tmp_path / "never").exists()


def test_the_device_engine_writes_what_the_dataloader_engine_writes(tmp_path):
    device = run_tiny("mlm", tmp_path / "device")
    loader = run_tiny("mlm", tmp_path / "loader", "--train_engine", "dataloader")
    assert device.global_step == loader.global_step == 12
    assert [e["step"] for e in device.history] == [e["step"] for e in loader.history] == [0, 1, 3, 12]
    assert set(device.final_metrics) == set(loader.final_metrics)
    files = {p.relative_to(tmp_path / "device").as_posix() for p in (tmp_path / "device").rglob("*") if p.is_file()}
    other = {p.relative_to(tmp_path / "loader").as_posix() for p in (tmp_path / "loader").rglob("*") if p.is_file()}
    assert files == other
    state = json.loads((tmp_path / "device" / "trainer_state.json").read_text())
    assert state["log_history"][-1]["train_loss"] > 0


def test_resuming_gives_byte_identical_weights_with_dropout(tmp_path):
    full = run_tiny("mlm", tmp_path / "full", "--hidden_dropout_prob", "0.1", "--attention_probs_dropout_prob", "0.1")
    resumed_dir = tmp_path / "resumed"
    resumed_dir.mkdir()
    shutil.copytree(tmp_path / "full" / "checkpoint-3", resumed_dir / "checkpoint-3")
    resumed = run_tiny("mlm", resumed_dir, "--hidden_dropout_prob", "0.1", "--attention_probs_dropout_prob", "0.1",
                   "--resume_from_checkpoint", str(resumed_dir / "checkpoint-3"))
    assert resumed.global_step == full.global_step == 12
    first = load_file(tmp_path / "full" / "model.safetensors")
    second = load_file(resumed_dir / "model.safetensors")
    assert all(torch.equal(first[key], second[key]) for key in first)  # the data, masks and dropout all restored


def test_the_overridden_epoch_loop_matches_this_transformers_release_or_fails_loudly():
    import transformers
    from transformers import Trainer

    from hf_treelang.train.trainer import check_epoch_loop_contract

    check_epoch_loop_contract()  # the installed release: the override's contract holds

    class Renamed(Trainer):
        def _run_epoch(self, model, epoch, train_dataloader, steps_in_epoch, num_update_steps_per_epoch, trial,
                       ignore_keys_for_eval, start_time, resume_from_checkpoint, epochs_trained, steps_skipped):
            pass

    with pytest.raises(ImportError, match=rf"Trainer\._run_epoch.*transformers {transformers.__version__}"):
        check_epoch_loop_contract(Renamed)

    class Gone(Trainer):
        _run_epoch = None

    with pytest.raises(ImportError, match=r"overrides Trainer\._run_epoch, which transformers .* does not have"):
        check_epoch_loop_contract(Gone)


def test_every_cuda_graph_obstacle_is_named_and_schedules_are_not_obstacles(monkeypatch):
    def obstacles(**values):
        return TreeLangTrainingArguments(output_dir="unused", use_cpu=True, **values).cuda_graph_obstacles()

    assert obstacles() == ["the model runs on 'cpu', not on a CUDA GPU"]
    for schedule in ("cosine", "linear", "constant_with_warmup"):
        assert obstacles(lr_scheduler_type=schedule, warmup_steps=3) == obstacles()  # the rate is a device tensor
    assert any("optim 'adafactor'" in o for o in obstacles(optim="adafactor"))
    assert any("gradient checkpointing" in o for o in obstacles(gradient_checkpointing=True))
    assert any("gradient_accumulation_steps 2" in o for o in obstacles(gradient_accumulation_steps=2))
    assert any("torch_compile" in o for o in obstacles(torch_compile=True))  # auto: eager
    compiled = TreeLangTrainingArguments(output_dir="unused", use_cpu=True, torch_compile=True)
    assert compiled.cuda_graph_obstacles(requested=True) == obstacles()  # asked for: the compiled step is captured
    own_graphs = TreeLangTrainingArguments(output_dir="unused", use_cpu=True, torch_compile_mode="reduce-overhead")
    assert any("'reduce-overhead' (inductor's own CUDA graphs" in o
               for o in own_graphs.cuda_graph_obstacles(requested=True))
    backend = TreeLangTrainingArguments(output_dir="unused", use_cpu=True, torch_compile_backend="cudagraphs")
    assert any("backend 'cudagraphs'" in o for o in backend.cuda_graph_obstacles(requested=True))
    monkeypatch.setenv("ACCELERATE_DYNAMO_MODE", "max-autotune")  # what accelerate uses when no mode is given
    assert any("'max-autotune'" in o for o in compiled.cuda_graph_obstacles(requested=True))
    monkeypatch.setattr(TreeLangTrainingArguments, "n_gpu", property(lambda self: 2))
    assert any("2 GPUs in one process" in o for o in obstacles())


def test_step_mode_cuda_graph_with_an_obstacle_is_refused_before_any_data(tmp_path, monkeypatch):
    import hf_treelang.train.trainer as trainer

    monkeypatch.setattr(trainer, "load_run_data", lambda *a, **k: pytest.fail("the data were built"))
    with pytest.raises(ValueError, match="step_mode.*cuda_graph.*not possible here.*not on a CUDA GPU"):
        run_tiny("mlm", tmp_path / "never", "--step_mode", "cuda_graph")
    assert not (tmp_path / "never").exists()


def test_an_optimizer_follows_the_step_mode_both_ways_as_on_a_resume_across_modes():
    """A checkpoint of either mode resumes in the other: eager Adam keeps its step counter on the CPU and a float
    rate, capturable Adam both as tensors on the parameters' device (a graph reads them, the scheduler fills the
    rate); the values are kept."""
    from hf_treelang.train.trainer import align_optimizer

    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    model(torch.randn(4, 3)).sum().backward()
    optimizer.step()
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.5)
    eager_state = optimizer.state_dict()
    align_optimizer(optimizer, capturable=True)
    group = optimizer.param_groups[0]
    assert group["capturable"] and torch.is_tensor(group["lr"]) and group["lr"].dtype == torch.float32
    for param in group["params"]:
        step = optimizer.state[param]["step"]
        assert step.device == param.device and step.dtype == torch.float32 and float(step) == 1.0
    lr = group["lr"]
    scheduler.step()  # writes into the tensor, not a new float
    assert group["lr"] is lr and float(lr) == pytest.approx(0.5e-3)
    align_optimizer(optimizer, capturable=False)
    assert not group["capturable"] and isinstance(group["lr"], float) and group["lr"] == pytest.approx(0.5e-3)
    assert all(optimizer.state[p]["step"].device.type == "cpu" for p in group["params"])
    optimizer.load_state_dict(eager_state)  # an eager checkpoint, loaded, then made capturable: as above
    align_optimizer(optimizer, capturable=True)
    assert optimizer.param_groups[0]["capturable"] and torch.is_tensor(optimizer.param_groups[0]["lr"])


def test_a_fused_adam_keeps_its_counters_on_the_device_and_the_implementation_its_run_asks_for():
    """A fused group's kernel reads its step counters on the parameters' device in both step modes; and a loaded
    checkpoint's groups, which carry the implementation they were saved with, step with the run's own."""
    from hf_treelang.train.trainer import align_optimizer

    model = torch.nn.Linear(3, 2)
    foreach = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    model(torch.randn(4, 3)).sum().backward()
    foreach.step()
    fused = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0, fused=True)
    fused.load_state_dict(foreach.state_dict())
    assert not fused.param_groups[0]["fused"]  # the checkpoint's flag, not the optimizer's
    for capturable in (False, True, False):
        align_optimizer(fused, capturable=capturable, fused=True)
        group = fused.param_groups[0]
        assert group["fused"] and group["capturable"] == capturable
        for param in group["params"]:
            step = fused.state[param]["step"]
            assert step.device == param.device and step.dtype == torch.float32
        fused.step()
    assert float(fused.state[model.weight]["step"]) == 4.0
    align_optimizer(fused, capturable=False, fused=False)
    assert not fused.param_groups[0]["fused"]
    assert all(fused.state[p]["step"].device.type == "cpu" for p in model.parameters())
    # the device is kept, not assumed to be the CPU's: parameters off the CPU (here on "meta", whose values cannot
    # be copied to the CPU at all) keep a fused group's counters beside them in eager mode
    weight = torch.nn.Parameter(torch.empty(2, device="meta"))
    group = {"params": [weight], "capturable": False, "fused": True, "foreach": None, "lr": 1e-3}
    on_meta = types.SimpleNamespace(param_groups=[group], state={weight: {"step": torch.zeros((), device="meta")}})
    align_optimizer(on_meta, capturable=False, fused=True)
    assert on_meta.state[weight]["step"].device.type == "meta"


def test_a_resumed_run_steps_with_the_adam_it_asks_for_not_the_checkpoints(tmp_path):
    """A checkpoint's optimizer groups carry the implementation they were saved with; the resumed run's own
    ``--optim`` decides (fused from a foreach checkpoint, and foreach from a fused one)."""
    from transformers import TrainerCallback

    from hf_treelang.train.loop import train
    from tiny_run import tiny_run

    class FusedFlag(TrainerCallback):
        flags = []

        def on_step_end(self, args, state, control, optimizer=None, **kwargs):
            self.flags.append(bool(getattr(optimizer, "optimizer", optimizer).param_groups[0]["fused"]))

    for saved, resumed in (("adamw_torch", "adamw_torch_fused"), ("adamw_torch_fused", "adamw_torch")):
        first = tmp_path / f"first-{saved}"
        run_tiny("mlm", first, "--optim", saved)
        target = tmp_path / f"{saved}-to-{resumed}"
        target.mkdir()
        shutil.copytree(first / "checkpoint-3", target / "checkpoint-3")
        FusedFlag.flags = []
        train(tiny_run("mlm", target, "--optim", resumed, "--resume_from_checkpoint", str(target / "checkpoint-3")),
              callbacks=[FusedFlag()])
        assert len(FusedFlag.flags) == 9 and set(FusedFlag.flags) == {resumed == "adamw_torch_fused"}


def test_a_fused_adam_run_trains_as_the_foreach_one_and_resumes_byte_identically(tmp_path):
    """``--optim adamw_torch_fused`` (a graph-capturable optimizer, one kernel for every tensor) follows
    ``adamw_torch`` to float rounding, and resumes like it."""
    dropout = ("--hidden_dropout_prob", "0.1", "--attention_probs_dropout_prob", "0.1")
    plain = run_tiny("mlm", tmp_path / "plain", *dropout)
    full = run_tiny("mlm", tmp_path / "full", *dropout, "--optim", "adamw_torch_fused")
    losses = [[e["eval_loss"] for e in run.history if "eval_loss" in e] for run in (plain, full)]
    assert len(losses[0]) == len(losses[1]) == 4 and np.allclose(losses[0], losses[1], rtol=0, atol=1e-5)
    weights = [load_file(tmp_path / name / "model.safetensors") for name in ("plain", "full")]
    assert weights_close(*weights)
    resumed_dir = tmp_path / "resumed"
    resumed_dir.mkdir()
    shutil.copytree(tmp_path / "full" / "checkpoint-3", resumed_dir / "checkpoint-3")
    resumed = run_tiny("mlm", resumed_dir, *dropout, "--optim", "adamw_torch_fused",
                       "--resume_from_checkpoint", str(resumed_dir / "checkpoint-3"))
    assert resumed.global_step == full.global_step == 12
    first = load_file(tmp_path / "full" / "model.safetensors")
    second = load_file(resumed_dir / "model.safetensors")
    assert all(torch.equal(first[key], second[key]) for key in first)
