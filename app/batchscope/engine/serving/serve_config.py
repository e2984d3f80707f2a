"""``plan --export``'s Ray Serve config: ``DIR/serve_config.yaml``, Ray's ``ServeDeploySchema``.

``serve run DIR/serve_config.yaml`` (or ``serve deploy`` on a cluster) deploys one
application, ``blurball``: BatchScope's own replica (``replica.py``, the deployment
``--backend ray`` runs) built by :data:`IMPORT_PATH` from the setting in ``args``. The
recommended setting's batching is the deployment's ``user_config``
(``max_batch_size``, ``batch_wait_timeout_s``: the replica's ``reconfigure`` hands them to
``@serve.batch``'s setters, so ``serve deploy`` with new values changes them live), beside
``max_ongoing_requests``, ``num_replicas`` and the replica's resources
(``ray_actor_options``).

What a replica runs follows the profile the plan was made on, as the Triton export does:
a profile measured on this kind of device by ``sweep`` (``device_id`` cpu or cuda:N) runs
the real model there with the setting's runtime (one GPU per replica: ``cuda``); any other
profile (a built-in one) replays its curve. The deployment answers Python handle calls
(``serve.get_app_handle("blurball")``) with one window (``engine.session.Window``) per
call, as BatchScope's client sends them, so no HTTP proxy is started (``proxy_location:
Disabled``).
"""

from __future__ import annotations

from typing import Any

from batchscope.config import RunConfig
from batchscope.engine.policies import make_policy
from batchscope.engine.serving.ray_serve import OWN_GPU, batching_of
from batchscope.policy_kinds import KINDS
from batchscope.profiles.profile import DeviceProfile
from batchscope.setting import setting_json

SERVE_CONFIG_FILE = "serve_config.yaml"
APP_NAME = "blurball"
DEPLOYMENT = "BatchScopeReplica"
#: The application builder ``serve run`` imports (a function of the config's ``args``).
IMPORT_PATH = "batchscope.engine.serving.replica:app_from_args"


def ray_batching(config: RunConfig, settled_cap: int | None = None) -> tuple[int, float]:
    """``(max_batch_size, batch_wait_timeout_s)`` for ``config``'s policy, as BatchScope's
    Ray runs set them (``ray_serve.batching_of``), except that a deployment has no client
    to move an AIMD cap: ``adaptive`` gets the cap it settled at in the plan, and a policy
    without a cap the session count (one request in flight per session)."""
    policy = make_policy(config)
    max_batch, wait_s = batching_of(policy)
    if KINDS[config.policy].learns_cap:
        max_batch = settled_cap or config.max_batch or config.sessions
    elif policy.cap is None:
        max_batch = config.sessions
    return max_batch, wait_s


def replica_device(profile: DeviceProfile) -> str | None:
    """Where a replica runs the real model for a plan on ``profile``: the CPU or a GPU of
    its own for a profile ``sweep`` measured on one; None (replay the curve) otherwise."""
    measured = profile.meta.get("device_id")
    if measured == "cpu":
        return "cpu"
    if isinstance(measured, str) and measured.startswith("cuda"):
        return OWN_GPU
    return None


def serve_config(
    config: RunConfig, profile: DeviceProfile, settled_cap: int | None = None
) -> dict[str, Any]:
    """The Ray Serve config (a ``ServeDeploySchema`` as a dict) for ``config``, planned on
    ``profile`` (see the module doc)."""
    max_batch, wait_s = ray_batching(config, settled_cap)
    device = replica_device(profile)
    if device is None:
        resources: dict[str, float] = {"num_cpus": 0}  # a timed wait: no core held
    elif device == OWN_GPU:
        resources = {"num_cpus": 1, "num_gpus": 1}
    else:  # the cores its curve was measured with
        threads = profile.meta.get("threads")
        resources = {"num_cpus": threads if isinstance(threads, int) and threads > 0 else 1}
    setting = setting_json(config)
    return {
        "proxy_location": "Disabled",
        "applications": [
            {
                "name": APP_NAME,
                "route_prefix": None,
                "import_path": IMPORT_PATH,
                "args": {"setting": setting, "device": device, "grpc_on_loopback": True},
                "deployments": [
                    {
                        "name": DEPLOYMENT,
                        "num_replicas": config.devices,
                        # every session has at most one request in flight, and a batch
                        # can only fill from the requests a replica holds
                        "max_ongoing_requests": max(config.sessions, max_batch),
                        "user_config": {
                            "max_batch_size": max_batch,
                            "batch_wait_timeout_s": wait_s,
                        },
                        "ray_actor_options": resources,
                    }
                ],
            }
        ],
    }


def serve_config_yaml(
    config: RunConfig, profile: DeviceProfile, settled_cap: int | None = None
) -> str:
    """:func:`serve_config` as the YAML file, with what it deploys in comments."""
    import yaml

    data = serve_config(config, profile, settled_cap)
    app = data["applications"][0]
    runs = (
        f"the real model on {app['args']['device']} ({config.runtime})"
        if app["args"]["device"]
        else f"the curve of {profile.name} replayed (no model runs)"
    )
    head = [
        "# Ray Serve config for BlurBall, made by `batchscope plan --export`:",
        f"# {config.policy_label()} for {config.sessions} sessions at {config.fps:g} fps,",
        f"# planned on {profile.name}; each replica runs {runs}.",
        "# Deploy: serve run serve_config.yaml (or serve deploy on a running cluster).",
        "# Call it through a handle: serve.get_app_handle('blurball').remote(window), one",
        "# window per call, at most one in flight per session (latest-only, as BatchScope's",
        "# sessions send); user_config holds @serve.batch's knobs (live on serve deploy).",
        "# grpc_on_loopback keeps each replica's gRPC server on 127.0.0.1 (one machine);",
        "# set it to false on a cluster of several machines.",
    ]
    return "\n".join(head) + "\n" + yaml.safe_dump(data, sort_keys=False)
