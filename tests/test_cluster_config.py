"""cluster.yaml and configs/cluster-local.yaml pass the checks `ray up` runs before it touches any node.

`ray up` calls `prepare_config` (merge the provider's defaults; the local provider's own preparation) and then
`validate_config` (Ray's JSON schema plus its extra rules). AWS credentials and ssh are only needed after that.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent


def _validated(path: Path) -> tuple[dict, dict]:
    from ray.autoscaler._private.util import prepare_config, validate_config

    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    prepared = prepare_config(raw)
    validate_config(prepared)
    return raw, prepared


def _resources_flag(commands: list[str]) -> dict:
    """The JSON of `ray start ... --resources='{...}'` in a list of start commands ({} when absent)."""
    for cmd in commands:
        for tok in shlex.split(cmd.replace(";", " ")):
            m = re.match(r"--resources=(.*)", tok)
            if m:
                return json.loads(m[1])
    return {}


def _installs_fanout(cfg: dict) -> None:
    setup = "\n".join(cfg["setup_commands"])
    assert "git clone" in setup and "bash scripts/setup.sh" in setup
    assert "FANOUT_CACHE=/mnt/fanout/cache" in setup  # wheel and models built once, on the shared mount


def test_aws_cluster_yaml_validates_and_pins_models_to_model_nodes():
    raw, cfg = _validated(ROOT / "cluster.yaml")
    assert raw["provider"]["type"] == "aws"
    types = cfg["available_node_types"]
    head = types[cfg["head_node_type"]]
    model_types = [t for t in types.values() if t["resources"].get("models", 0) >= 1]
    assert model_types and "models" not in head["resources"]  # model actors can only land on model nodes
    assert head["resources"].get("CPU") == 0  # and nothing else schedules actors on the driver's node
    assert sum(t.get("min_workers", 0) for t in types.values()) <= cfg["max_workers"]
    _installs_fanout(raw)


def test_local_cluster_yaml_validates_with_head_and_worker_ips():
    raw, cfg = _validated(ROOT / "configs" / "cluster-local.yaml")
    assert raw["provider"]["type"] == "local"
    assert raw["provider"]["head_ip"] and len(raw["provider"]["worker_ips"]) >= 1
    # the local provider starts nodes with Ray's own resource detection: `models` must be on the command
    assert _resources_flag(raw["worker_start_ray_commands"]) == {"models": 1}
    assert _resources_flag(raw["head_start_ray_commands"]) == {}
    assert cfg["available_node_types"]["local.cluster.node"]["max_workers"] == len(raw["provider"]["worker_ips"])
    _installs_fanout(raw)


def test_validator_rejects_a_broken_config():
    """The check is real: an unknown top-level key fails Ray's schema."""
    import jsonschema
    from ray.autoscaler._private.util import prepare_config, validate_config

    raw = yaml.safe_load((ROOT / "configs" / "cluster-local.yaml").read_text(encoding="utf-8"))
    raw["worker_nodes_typo"] = {}
    with pytest.raises(jsonschema.ValidationError, match="worker_nodes_typo"):
        validate_config(prepare_config(raw))


def test_cluster_local_yaml_is_not_mistaken_for_a_fanout_profile():
    from fanout.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="unknown key 'cluster_name'"):
        load_config("cluster-local")
