"""plan --export's serve_config.yaml, deployed as written into a real Ray Serve on loopback:
the deployment Ray runs has the plan's batching (issue 46, item 5)."""

from __future__ import annotations

import os

import pytest
import yaml
from tests.contract import wait_for
from tests.processes import listening, on_loopback

from batchscope.cli import main
from batchscope.setting import load_setting

pytest.importorskip("ray.serve", reason="Ray Serve is not installed: pip install 'ray[serve]'")

pytestmark = pytest.mark.slow
START_S = 120.0  # a cold Ray, Serve and one replica on a busy two-core machine


def test_the_exported_ray_serve_config_deploys_with_the_plan_s_batching(tmp_path, capsys):
    from ray import serve
    from ray.serve.context import _get_global_client
    from ray.serve.schema import ServeDeploySchema

    from batchscope.engine.serving.ray_serve import _ray_processes, cluster_for, shutdown_cluster

    folder = tmp_path / "deploy"
    assert main(["plan", "--profile", "laptop-8gb", "--precision", "fp16", "--resolution",
                 "256x144", "--fps", "30", "--p99-ms", "50", "--policies", "dynamic",
                 "--duration", "5", "--seeds", "1", "--export", str(folder)]) == 0  # fmt: skip
    capsys.readouterr()
    setting = load_setting(folder / "policy.json")
    schema = ServeDeploySchema.model_validate(
        yaml.safe_load((folder / "serve_config.yaml").read_text())
    )
    cluster = cluster_for(None, lambda line: None)  # Ray and Serve on loopback, no proxy
    try:
        _get_global_client().deploy_apps(schema, _blocking=True)
        app = schema.applications[0].name
        handle = serve.get_app_handle(app)
        stats = handle.stats.remote().result(timeout_s=START_S)
        assert stats["max_batch_size"] == setting.max_batch
        assert stats["wait_s"] == pytest.approx(setting.max_delay_ms / 1000.0)
        assert stats["runner"].startswith("emulated: laptop-8gb")  # a GPU's plan: its curve
        details = _get_global_client().get_serve_details()
        (deployment,) = details["applications"][app]["deployments"].values()
        config = deployment["deployment_config"]
        assert config["max_ongoing_requests"] == setting.sessions
        assert config["num_replicas"] == 1
        assert config["user_config"]["max_batch_size"] == setting.max_batch
        assert wait_for(lambda: len(deployment["replicas"]) >= 1, 1.0)
        cluster.watch()
        ours = _ray_processes() | {os.getpid()}
        off = [(pid, addr) for pid, addr in listening(ours) if not on_loopback(addr)]
        assert off == [], f"listening off loopback: {off}"
    finally:
        shutdown_cluster()
