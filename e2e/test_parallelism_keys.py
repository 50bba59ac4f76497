"""The keys overbrainer renders for each way a job of several processes shares the model
(DeepSpeed ZeRO-2 and ZeRO-3 with the JSON shipped in the wheel, FSDP2) pass the real
Axolotl's own validation of its config: names it knows, values it takes, a DeepSpeed file
it finds. (Training with them needs GPUs; this machine has none.)"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from e2e import build
from e2e.harness import ROOT, base_env

VALIDATE = """
import json, os, sys
from pathlib import Path

from axolotl.utils.config import validate_config
from axolotl.utils.dict import DictDefault

from overbrainer.config.model import TrainingSettings
from overbrainer.train.axolotl import deepspeed_file, deepspeed_source, render_config
from overbrainer.train.parallelism import Choice

way, model, run_dir = sys.argv[1:4]
os.chdir(run_dir)
training = TrainingSettings(target="local", base_model=model, adapter="lora")
cfg = render_config(training, has_eval=False, choice=Choice(2, way, "asked"))
if way.startswith("zero"):
    Path("deepspeed").mkdir()
    Path(deepspeed_file(way)).write_bytes(deepspeed_source(way))
cfg["datasets"] = [{"path": "data/train.jsonl", "type": "chat_template"}]
valid = validate_config(DictDefault(cfg))
print(json.dumps({k: valid.get(k) for k in ("deepspeed", "fsdp_version", "fsdp_config")}))
"""


@pytest.mark.parametrize("way", ["zero2", "zero3", "fsdp"])
def test_the_keys_of_each_parallelism_pass_axolotls_validation(way: str, tmp_path: Path) -> None:
    built = build.build()
    done = subprocess.run(
        [str(built.python), "-c", VALIDATE, way, str(built.model), str(tmp_path)],
        env={**base_env(), "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    valid = json.loads(done.stdout.splitlines()[-1])
    if way == "fsdp":
        assert valid["fsdp_version"] == 2
        assert valid["fsdp_config"]["state_dict_type"] == "FULL_STATE_DICT"
    else:
        assert valid["deepspeed"] == f"./deepspeed/{way}.json"
        stage = json.loads((tmp_path / "deepspeed" / f"{way}.json").read_text())
        assert stage["zero_optimization"]["stage"] == int(way[-1])
