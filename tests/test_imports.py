"""What importing the package and running ``hf-treelang --help`` cost: which heavy modules they load.

``import hf_treelang`` registers the Auto classes and ``load_dataset("treelang")`` (torch, transformers, datasets) and
nothing more; the ``hf-treelang`` console script answers ``--help``, ``--version`` and every ``COMMAND --help``
without importing torch at all. Each check runs in a fresh interpreter, since this test process has long imported
everything.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hf_treelang import cli
from hf_treelang.version import __version__

# never loaded by `import hf_treelang`: they load on first use of the names that need them
LAZY_MODULES = ("evaluate", "scipy", "matplotlib", "tensorboard", "transformers.pipelines")
# never loaded by the command line's help and version
HEAVY_MODULES = ("torch", "transformers", "datasets", "evaluate", "scipy", "matplotlib", "tensorboard")
HELP_ARGVS = [["--help"], ["--version"], [], *([name, "--help"] for name in cli.COMMANDS)]


def python(code: str) -> str:
    """Run ``code`` in a fresh interpreter (offline, from a neutral folder); return its stdout."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env,
                          cwd=Path(__file__).parent)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_import_registers_and_leaves_the_heavy_extras_unloaded():
    code = f"""
import json, sys, traceback

class ScipyImporter:
    \"\"\"Notes the file whose import statement first loads scipy (a finder that finds nothing; find_spec probes,
    as transformers' is_scipy_available, do not count).\"\"\"

    file = None

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name == "scipy" and cls.file is None:
            frames = traceback.extract_stack()[:-1]
            caller = max(i for i, f in enumerate(frames) if "importlib" not in f.filename)
            if frames[caller + 1].name == "_find_and_load":  # an import statement, not importlib.util.find_spec
                cls.file = frames[caller].filename
        return None

sys.meta_path.insert(0, ScipyImporter)
import hf_treelang
loaded = [m for m in {LAZY_MODULES!r} if m in sys.modules]
from transformers import AutoConfig, AutoModel
config = AutoConfig.for_model("treelang", hidden_size=8, num_hidden_layers=1, num_attention_heads=1,
                              intermediate_size=8)
import datasets.load
print(json.dumps({{"loaded": loaded, "scipy_importer": ScipyImporter.file,
                  "model": type(AutoModel.from_config(config)).__name__,
                  "hook": getattr(datasets.load.dataset_module_factory, "_hf_treelang_hook", False)}}))
"""
    result = json.loads(python(code))
    assert result["model"] == "TreeLangModel" and result["hook"] is True
    unexpected = [m for m in result["loaded"] if m != "scipy"]
    assert not unexpected, f"import hf_treelang loaded {unexpected}"
    if "scipy" in result["loaded"]:
        # The one exception: transformers.modeling_utils, the base of the model classes that the Auto registration
        # needs, imports transformers.loss, whose object-detection loss imports scipy.optimize when scipy is
        # installed. Nothing of ours may import it.
        importer = Path(result["scipy_importer"]).as_posix()
        assert importer.endswith("transformers/loss/loss_for_object_detection.py"), importer


def test_help_and_version_of_the_console_script_do_not_import_torch():
    # As the console script does: argv[0] is hf-treelang before hf_treelang is imported.
    code = f"""
import contextlib, io, json, sys
sys.argv[0] = "hf-treelang"
from hf_treelang.cli import main
results = []
for argv in {HELP_ARGVS!r}:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            code = main(argv)
        except SystemExit as exit:
            code = exit.code
    results.append({{"argv": argv, "code": code, "out": out.getvalue(),
                    "heavy": [m for m in {HEAVY_MODULES!r} if m in sys.modules]}})
print(json.dumps(results))
"""
    results = json.loads(python(code))
    for result in results:
        assert result["code"] in (0, None) and result["out"], result
        assert not result["heavy"], f"hf-treelang {' '.join(result['argv'])} imported {result['heavy']}"
    version = next(r for r in results if r["argv"] == ["--version"])
    assert version["out"].strip() == f"hf-treelang {__version__}"
    assert all(name in results[0]["out"] for name in cli.COMMANDS)


def test_the_installed_console_script_answers_help_without_torch():
    script = Path(sys.executable).parent / "hf-treelang"
    if not script.is_file():
        pytest.skip("the hf-treelang console script is not installed next to this interpreter")
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}  # every import, on stderr
    for argv in (["--help"], ["reproduce", "--help"]):
        done = subprocess.run([sys.executable, str(script), *argv], capture_output=True, text=True, timeout=60, env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time")}
        assert "hf_treelang.cli" in imported and "torch" not in imported, argv


def test_the_console_script_registers_before_running_a_command(tmp_path):
    code = f"""
import sys
sys.argv[0] = "hf-treelang"
import hf_treelang.cli
assert "transformers" not in sys.modules
try:
    hf_treelang.cli.main(["convert", {str(tmp_path / "missing.pt")!r}, {str(tmp_path / "out")!r}, "--task", "mlm",
                          "--depth", "2"])
except FileNotFoundError:
    pass
from transformers import AutoConfig
print(type(AutoConfig.for_model("treelang")).__name__)
"""
    assert python(code).strip() == "TreeLangConfig"


def option_entries(help_text: str) -> list:
    """The entries of the options section: each option's invocation and help, joined across wrapped lines."""
    entries = []
    for line in help_text.splitlines():
        if line.startswith("  -"):
            entries.append(line.strip())
        elif entries and line.startswith("   "):
            entries[-1] += " " + line.strip()
    return entries


@pytest.mark.parametrize("name", list(cli.COMMANDS))
def test_every_option_shows_its_default(name, monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")  # one-line usage
    text = cli.command_parser(name).format_help()
    usage = text.split("\n\n")[0]
    entries = option_entries(text)
    assert entries
    for entry in entries:
        words = entry.replace(",", " ").split()
        option = words[0]
        takes_value = len(words) > 1 and (words[1].isupper() or words[1].startswith("{"))
        required = f"[{option}" not in usage
        if takes_value and not required:
            assert "(default: " in entry, f"hf-treelang {name} {option}: no default in its help: {entry!r}"


def test_the_choices_of_the_command_line_are_those_of_the_library():
    from hf_treelang.analysis.probing import POSITION_MODES
    from hf_treelang.analysis.sample_complexity import ARMS
    from hf_treelang.core.oracle import TASKS
    from hf_treelang.core.resources import DEFAULT_MAX_HOURS
    from hf_treelang.models.convert import TASKS as CONVERT_TASKS
    from hf_treelang.reproduce import PRESETS, steps_of

    assert cli.CONVERT_TASKS == CONVERT_TASKS
    assert set(cli.CALIBRATION_TASKS) == set(TASKS)
    assert cli.PROBE_POSITIONS == POSITION_MODES
    assert cli.SAMPLE_COMPLEXITY_ARMS == ARMS
    assert cli.PROBE_MAX_HOURS == DEFAULT_MAX_HOURS
    help_text = " ".join(cli.command_parser("reproduce").format_help().split())
    for preset in PRESETS.values():
        for step, _ in steps_of(preset):
            generic = "train_mlm_k<k>" if step.startswith("train_mlm_k") else step
            assert generic in help_text, step


def test_a_changed_datasets_release_degrades_to_one_warning():
    # Simulate a datasets release whose dataset_module_factory takes another first argument: the hook cannot be
    # installed, yet the grammar, BP and the model import and work, with one warning naming the version and the route.
    code = """
import json, warnings
import datasets, datasets.load
original = datasets.load.dataset_module_factory
def dataset_module_factory(name, *args, **kwargs):  # the changed internals
    return original(name, *args, **kwargs)
datasets.load.dataset_module_factory = dataset_module_factory
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import hf_treelang
    from hf_treelang import BeliefPropagation, Grammar, TreeLangConfig, TreeLangForMaskedLM
    hf_treelang.register()  # the command line registers again: no second warning
bp = BeliefPropagation(Grammar.random(4, 1.0, 0), depth=2)
model = TreeLangForMaskedLM(TreeLangConfig(depth=2, hidden_size=8, num_hidden_layers=1, intermediate_size=8))
print(json.dumps({"warnings": [str(w.message) for w in caught if "treelang" in str(w.message)],
                  "version": datasets.__version__,
                  "hook": datasets.load.dataset_module_factory is dataset_module_factory,
                  "root": bp.root_marginals(__import__("torch").tensor([[0, 1, 2, 3]])).shape[1],
                  "logits": list(model(__import__("torch").tensor([[0, 1, 4, 3]])).logits.shape)}))
"""
    result = json.loads(python(code))
    assert len(result["warnings"]) == 1, result["warnings"]
    message = result["warnings"][0]
    assert f"datasets {result['version']}" in message and "first parameter" in message
    assert "hf-treelang publish-dataset" in message and "load_dataset(OUT, 'k2')" in message
    assert result["hook"] is True  # left as it was
    assert result["root"] == 4 and result["logits"] == [1, 4, 6]  # the q symbols, then [MASK] and [PAD]


def test_the_import_pauses_the_collector_then_freezes_what_it_loaded():
    # the collector is on after the import, and the modules' objects sit in the permanent generation
    out = json.loads(python("""
import gc, json
before = gc.get_freeze_count()
import hf_treelang
print(json.dumps({"enabled": gc.isenabled(), "frozen_before": before, "frozen": gc.get_freeze_count()}))
"""))
    assert out["enabled"] is True
    assert out["frozen_before"] == 0 and out["frozen"] > 100_000


def test_heavy_imports_restores_the_collector_as_it_found_it(monkeypatch):
    import gc

    from hf_treelang.lazy import heavy_imports

    frozen = []
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(True))  # this process's objects stay collectable
    was_enabled = gc.isenabled()
    try:
        gc.enable()
        with heavy_imports():
            assert not gc.isenabled()
        assert gc.isenabled() and frozen == [True]
        with pytest.raises(ImportError, match="no such module"):
            with heavy_imports():
                raise ImportError("no such module")
        assert gc.isenabled()  # an error inside the block does not leave the collector off
        gc.disable()
        with heavy_imports():
            pass
        assert not gc.isenabled()  # off before: stays off
    finally:
        (gc.enable if was_enabled else gc.disable)()
